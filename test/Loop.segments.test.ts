/**
 * History as segments in the loop: compaction (the user's summarize, automatic before a call
 * past the threshold, once after a context overflow) and rewind (the client kept a prefix).
 */
import { assert, describe, it } from "@effect/vitest"
import { messageHash, serializeMessage } from "../src/Llm.js"
import type { AssistantMessage, Message, ResponseEvent, ToolCall, ToolResultMessage } from "../src/Llm.js"
import {
  contextTokensOf,
  initialRuntime,
  Input,
  makeTransition,
  summaryOfMessage,
  SUMMARY_OPEN
} from "../src/Loop.js"
import type { Command, CompactionPolicy, Policy, RuntimeState, Transition, TurnSettings } from "../src/Loop.js"
import { buildPrompt, buildTools } from "../src/Prompt.js"
import { testPolicy } from "./support/LoopScenario.js"

const knobs = (window: number | undefined, overrides: Partial<CompactionPolicy> = {}): CompactionPolicy => ({
  contextWindowOf: () => window,
  auto: true,
  threshold: 0.8,
  tailShare: 0.3,
  summaryMaxTokens: 500,
  elideToolResultChars: 40,
  ...overrides
})
const policyWith = (compaction: CompactionPolicy): Policy => ({
  ...testPolicy,
  compaction,
  promptIdOf: (message) => messageHash(message)
})
const settings: TurnSettings = { model: "fake-model", mode: "agent" }
const user = (text: string): Message & { role: "user" } => ({ role: "user", content: [{ type: "text", text }] })
const answer = (content: AssistantMessage["content"], input = 10, stopReason: AssistantMessage["stopReason"] = "stop"): AssistantMessage => ({
  role: "assistant",
  content,
  api: "test",
  provider: "fake",
  model: "fake-model",
  usage: { input, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  stopReason
})
const text = (value: string) => ({ type: "text" as const, text: value })
const call = (id: string): ToolCall => ({ type: "toolCall", id, name: "read", arguments: `{"path":"${id}.ts"}` })
const result = (id: string, body = `contents of ${id}`): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: id,
  toolName: "read",
  content: [text(body)],
  isError: false
})

const expectTag = <T extends Command["_tag"]>(command: Command, tag: T): Extract<Command, { _tag: T }> => {
  assert.strictEqual(command._tag, tag, `expected ${tag}, got ${command._tag}`)
  return command as Extract<Command, { _tag: T }>
}

/** A driver: feeds inputs, keeps the state, answers the active call. */
const driver = (policy: Policy) => {
  const transition = makeTransition(policy)
  let state: RuntimeState = initialRuntime("c")
  const feed = (input: Input): Transition => {
    const t = transition(state, input)
    state = t.state
    return t
  }
  const done = (message: AssistantMessage): Transition => {
    const callId = state.committed.activeCallId!
    return feed(Input.LlmEvent({ callId, event: { _tag: "Done", reason: message.stopReason, message } }))
  }
  const fail = (event: Omit<Extract<ResponseEvent, { _tag: "Error" }>, "_tag">): Transition =>
    feed(Input.LlmEvent({ callId: state.committed.activeCallId!, event: { _tag: "Error", ...event } }))
  /** A turn answered in one call with `reply`. */
  const turn = (prompt: string, reply: string, inputTokens = 10): Transition => {
    expectTag(feed(Input.Start({ message: user(prompt), context: [], settings })).command, "CallLlm")
    return done(answer([text(reply)], inputTokens))
  }
  return { feed, done, fail, turn, get state() { return state } }
}

const bytesOf = (messages: ReadonlyArray<Message>) => messages.map(serializeMessage).join("\n")

describe("Loop: the user's summarize", () => {
  it("sends the last request's prompt, tools and messages plus one instruction, so the provider's prefix cache serves it", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    const last = expectTag(d.feed(Input.Start({ message: user("second question"), context: [], settings })).command, "CallLlm")
    d.done(answer([text("second answer")]))
    const summary = expectTag(d.feed(Input.Summarize({ instructions: "keep the file names", settings })).command, "CallLlm")
    assert.strictEqual(summary.purpose, "summary")
    assert.strictEqual(summary.maxOutputTokens, 500)
    assert.deepStrictEqual(summary.request.tools, last.request.tools)
    const history = d.state.committed.messages
    assert.strictEqual(summary.request.messages.length, history.length + 1)
    assert.isTrue(bytesOf(summary.request.messages).startsWith(bytesOf(last.request.messages)))
    assert.isTrue(bytesOf(summary.request.messages).startsWith(bytesOf(history)))
    const instruction = summary.request.messages[history.length]!
    assert.strictEqual(instruction.role, "user")
    assert.include(JSON.stringify(instruction), "keep the file names")
  })

  it("a summarize whose request carries less than the conversation's settings (no workspace, rules or MCP tools, another mode) sends the last call's system prompt and tools", () => {
    const d = driver({ ...policyWith(knobs(undefined)), buildPrompt, buildTools })
    const conversation: TurnSettings = {
      model: "fake-model",
      mode: "ask",
      workspace: { workspacePaths: ["/w"], projectFolder: "/w", osVersion: "linux", shell: "bash", timeZone: "UTC", terminalsFolder: "" },
      rules: [{ path: "/w/AGENTS.md", content: "Answer briefly." }],
      mcpTools: [{ name: "gh_search", description: "Search GitHub", providerIdentifier: "gh", toolName: "search", inputSchema: { type: "object" } }],
      requestId: "req-2",
      userMessageId: "m-2"
    }
    const start = (prompt: string) => d.feed(Input.Start({ message: user(prompt), context: [], settings: conversation }))
    start("first question")
    d.done(answer([text("first answer")]))
    const last = expectTag(start("second question").command, "CallLlm").request
    d.done(answer([text("second answer")]))
    assert.include(last.systemPrompt, "<environment>")
    assert.include(last.systemPrompt, "Answer briefly.")

    const bare: TurnSettings = { model: "fake-model", mode: "agent", requestId: "req-3" }
    const summary = expectTag(d.feed(Input.Summarize({ instructions: "", settings: bare })).command, "CallLlm")
    assert.strictEqual(summary.purpose, "summary")
    assert.strictEqual(summary.request.systemPrompt, last.systemPrompt)
    assert.strictEqual(JSON.stringify(summary.request.tools), JSON.stringify(last.tools))
    assert.isTrue(bytesOf(summary.request.messages).startsWith(bytesOf(last.messages)))
    // The turn answers the summarize request, in the conversation's own settings.
    const turn = d.state.committed.settings!
    assert.strictEqual(turn.requestId, "req-3")
    assert.isUndefined(turn.userMessageId)
    assert.strictEqual(turn.mode, "ask")
    assert.deepStrictEqual(turn.workspace, conversation.workspace)
  })

  it("a summary opens a new segment [summary, verbatim tail] at the end of the journal and ends the turn with no answer", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    const before = d.state.committed
    d.feed(Input.Summarize({ instructions: "", settings }))
    const run = d.state.committed.compaction!
    const t = d.done(answer([{ type: "thinking", thinking: "let me think" }, text("  The user asked two questions.  ")]))
    const final = expectTag(t.command, "Final")
    assert.isNull(final.message)
    const after = d.state.committed
    assert.strictEqual(after.status, "final")
    assert.strictEqual(after.segment.kind, "compaction")
    assert.strictEqual(after.segment.start, before.messages.length)
    assert.strictEqual(after.segment.replaced, run.cut)
    assert.strictEqual(after.segment.kept, before.messages.length - run.cut)
    assert.strictEqual(after.segment.summaryCallId, run.callId)
    assert.strictEqual(summaryOfMessage(after.messages[0]), "The user asked two questions.")
    assert.deepStrictEqual(after.messages.slice(1).map(serializeMessage), before.messages.slice(run.cut).map(serializeMessage))
    assert.strictEqual(after.summaries, 1)
    assert.strictEqual(after.checkpointed, after.messages.length)
    // The next turn's request starts with the summary and keeps the tail.
    const next = expectTag(d.feed(Input.Start({ message: user("third question"), context: [], settings })).command, "CallLlm")
    assert.deepStrictEqual(next.request.messages.map(serializeMessage), [...after.messages, user("third question")].map(serializeMessage))
  })

  it("everything fits the tail: the last exchange is kept and the rest summarized", () => {
    const d = driver(policyWith(knobs(100_000)))
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    d.feed(Input.Summarize({ instructions: "", settings }))
    assert.strictEqual(d.state.committed.compaction!.cut, 2)
    d.done(answer([text("summary")]))
    assert.deepStrictEqual(d.state.committed.messages.slice(1), [user("second question"), answer([text("second answer")])])
  })

  it("nothing to summarize (an empty or one-message conversation): the turn ends at once and nothing changes", () => {
    const d = driver(policyWith(knobs(undefined)))
    const t = d.feed(Input.Summarize({ instructions: "", settings }))
    assert.isNull(expectTag(t.command, "Final").message)
    assert.strictEqual(d.state.committed.segment.kind, "origin")
    assert.deepStrictEqual(d.state.committed.messages, [])
    assert.strictEqual(d.state.committed.status, "final")
  })

  it("a failed summary fails the turn with a readable error and leaves the history exactly as it was", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    const before = d.state.committed
    d.feed(Input.Summarize({ instructions: "", settings }))
    const t = d.fail({ reason: "error", message: "upstream 500", retryable: true })
    assert.include(expectTag(t.command, "Failed").error, "could not be summarized: upstream 500")
    assert.strictEqual(d.state.committed.messagesHash, before.messagesHash)
    assert.strictEqual(d.state.committed.segment, before.segment)
    assert.isNull(d.state.committed.compaction)
  })

  it("an answer without text is no summary: the turn fails and nothing changes", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    const before = d.state.committed
    d.feed(Input.Summarize({ instructions: "", settings }))
    const t = d.done(answer([call("x")], 10, "toolUse"))
    assert.include(expectTag(t.command, "Failed").error, "without a summary")
    assert.strictEqual(d.state.committed.messagesHash, before.messagesHash)
  })

  it("the summary call's stream is not shown as an answer: its deltas emit nothing", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    d.feed(Input.Summarize({ instructions: "", settings }))
    const callId = d.state.committed.activeCallId!
    const t = d.feed(Input.LlmEvent({ callId, event: { _tag: "TextDelta", index: 0, delta: "partial summary" } }))
    assert.deepStrictEqual(t.emit, [])
    assert.strictEqual(t.command._tag, "ContinueLlm")
    assert.strictEqual(t.state.committed, d.state.committed)
  })

  it("a cancel while the summary runs ends the turn and keeps the history", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    const before = d.state.committed
    d.feed(Input.Summarize({ instructions: "", settings }))
    expectTag(d.feed(Input.Cancel({ reason: "stop" })).command, "Canceled")
    assert.strictEqual(d.state.committed.messagesHash, before.messagesHash)
    assert.isNull(d.state.committed.compaction)
  })
})

describe("Loop: automatic compaction", () => {
  // A window of 1,000 tokens: compaction passes 800.
  const auto = policyWith(knobs(1_000, { tailShare: 0.1 }))

  it("a call whose estimated prompt passes the threshold is compacted first, then asked on the new segment, once", () => {
    const d = driver(auto)
    d.turn("first question", "first answer", 500)
    d.turn("second question", "second answer", 700)
    // The last answer counted 705 tokens; a 400-character message brings it past 800.
    const t = d.feed(Input.Start({ message: user("x".repeat(400)), context: [], settings }))
    const summary = expectTag(t.command, "CallLlm")
    assert.strictEqual(summary.purpose, "summary")
    assert.strictEqual(d.state.committed.compaction!.trigger, "auto")
    const resumed = expectTag(d.done(answer([text("what happened so far")], 750)).command, "CallLlm")
    assert.strictEqual(resumed.purpose, "answer")
    assert.strictEqual(d.state.committed.segment.kind, "compaction")
    assert.strictEqual(summaryOfMessage(resumed.request.messages[0]), "what happened so far")
    // The turn's own message did not fit the tail: the summary message carries it word for word.
    assert.strictEqual(resumed.request.messages.length, 1)
    assert.include(JSON.stringify(resumed.request.messages[0]), `as I wrote it:\\n\\n${"x".repeat(400)}`)
    assert.strictEqual(d.state.committed.turnStart, 1)
  })

  it("without an answer in between, it never compacts twice (even if the new segment is still large)", () => {
    const d = driver(policyWith(knobs(1_000, { tailShare: 0.9 })))
    // The tail (the long answer) alone is past the threshold.
    d.turn("q".repeat(1_200), "a".repeat(3_200), 900)
    expectTag(d.feed(Input.Start({ message: user("again"), context: [], settings })).command, "CallLlm")
    assert.strictEqual(d.state.committed.compaction?.trigger, "auto")
    assert.strictEqual(d.state.committed.compaction?.cut, 1)
    const t = d.done(answer([text("summary")], 900))
    assert.strictEqual(expectTag(t.command, "CallLlm").purpose, "answer")
    assert.strictEqual(d.state.committed.segment.kind, "compaction")
  })

  it("an automatic summary that fails goes on with the whole history (the user is told by the runner)", () => {
    const d = driver(auto)
    d.turn("first question", "first answer", 500)
    d.turn("second question", "second answer", 700)
    d.feed(Input.Start({ message: user("x".repeat(400)), context: [], settings }))
    const before = d.state.committed
    const t = d.fail({ reason: "error", message: "rate limited", retryable: true })
    const resumed = expectTag(t.command, "CallLlm")
    assert.strictEqual(resumed.purpose, "answer")
    assert.strictEqual(resumed.request.messages, before.messages)
    assert.strictEqual(d.state.committed.segment.kind, "origin")
  })

  it("no compaction without a context window, or with auto off", () => {
    for (const policy of [policyWith(knobs(undefined)), policyWith(knobs(1_000, { auto: false })), testPolicy]) {
      const d = driver(policy)
      d.turn("first question", "first answer", 5_000)
      const t = d.feed(Input.Start({ message: user("x".repeat(4_000)), context: [], settings }))
      assert.strictEqual(expectTag(t.command, "CallLlm").purpose, "answer")
    }
  })

  it("the tail never begins with a tool result: a call and its result stay together", () => {
    const d = driver(policyWith(knobs(2_000, { tailShare: 0.02 })))
    expectTag(d.feed(Input.Start({ message: user("read both"), context: [], settings })).command, "CallLlm")
    d.done(answer([call("a"), call("b")], 100, "toolUse"))
    d.feed(Input.ToolResult({ message: result("a", "x".repeat(100)) }))
    // The second result pushes the estimate past the threshold (1,600).
    const t = d.feed(Input.ToolResult({ message: result("b", "y".repeat(6_400)) }))
    expectTag(t.command, "CallLlm")
    const run = d.state.committed.compaction!
    const messages = d.state.committed.messages
    assert.notStrictEqual(messages[run.cut]?.role, "toolResult")
    d.done(answer([text("summary")]))
    const segment = d.state.committed.messages
    assert.notStrictEqual(segment[1]?.role, "toolResult")
  })
})

describe("Loop: a context overflow", () => {
  it("compacts once with stale tool output elided, then asks again; a second overflow fails the turn", () => {
    const d = driver(policyWith(knobs(10_000, { tailShare: 0.01 })))
    expectTag(d.feed(Input.Start({ message: user("read it"), context: [], settings })).command, "CallLlm")
    d.done(answer([call("a")], 100, "toolUse"))
    d.feed(Input.ToolResult({ message: result("a", "z".repeat(500)) }))
    d.done(answer([text("read it")], 100))
    expectTag(d.feed(Input.Start({ message: user("and now?"), context: [], settings })).command, "CallLlm")
    const before = d.state.committed
    const t = d.fail({ reason: "error", message: "too long", retryable: false, code: "contextOverflow" })
    const summary = expectTag(t.command, "CallLlm")
    assert.strictEqual(summary.purpose, "summary")
    assert.strictEqual(d.state.committed.compaction!.trigger, "overflow")
    const elided = summary.request.messages.find((m) => m.role === "toolResult")!
    assert.include(JSON.stringify(elided), "500 characters of tool output elided")
    // The history itself is untouched: only the summary request is elided.
    assert.strictEqual(d.state.committed.messagesHash, before.messagesHash)
    const retry = expectTag(d.done(answer([text("summary of it")])).command, "CallLlm")
    assert.strictEqual(retry.purpose, "answer")
    const failed = d.fail({ reason: "error", message: "still too long", retryable: false, code: "contextOverflow" })
    assert.strictEqual(expectTag(failed.command, "Failed").error, "still too long")
  })

  it("a turn that failed after its compaction does not keep later turns from compacting", () => {
    const d = driver(policyWith(knobs(10_000)))
    d.turn("first question", "first answer")
    expectTag(d.feed(Input.Start({ message: user("second"), context: [], settings })).command, "CallLlm")
    d.fail({ reason: "error", message: "too long", retryable: false, code: "contextOverflow" })
    d.fail({ reason: "error", message: "summary refused", retryable: false })
    expectTag(d.feed(Input.Start({ message: user("third"), context: [], settings })).command, "CallLlm")
    const t = d.fail({ reason: "error", message: "too long", retryable: false, code: "contextOverflow" })
    assert.strictEqual(expectTag(t.command, "CallLlm").purpose, "summary")
  })

  it("an overflow whose summary fails says both", () => {
    const d = driver(policyWith(knobs(10_000)))
    d.turn("first question", "first answer")
    expectTag(d.feed(Input.Start({ message: user("second"), context: [], settings })).command, "CallLlm")
    d.fail({ reason: "error", message: "too long", retryable: false, code: "contextOverflow" })
    const t = d.fail({ reason: "error", message: "summary refused", retryable: false })
    assert.include(expectTag(t.command, "Failed").error, "longer than the model's context window, and summarizing it failed: summary refused")
  })
})

describe("Loop: rewind", () => {
  const promptIds = (messages: ReadonlyArray<Message>) => ({ promptIds: messages.map((m) => messageHash(m)) })

  it("a client that kept a strict prefix of what the last turn left rewinds the history to it", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    const kept = d.state.committed.messages
    d.turn("second question", "second answer")
    const all = d.state.committed.messages
    const t = d.feed(Input.Start({ message: user("second question, edited"), context: [], settings, clientHistory: promptIds(kept) }))
    const request = expectTag(t.command, "CallLlm")
    assert.deepStrictEqual(request.request.messages.map(serializeMessage), [...kept, user("second question, edited")].map(serializeMessage))
    const segment = d.state.committed.segment
    assert.strictEqual(segment.kind, "rewind")
    assert.strictEqual(segment.start, all.length)
    assert.strictEqual(segment.kept, kept.length)
    assert.strictEqual(segment.replaced, all.length - kept.length)
    assert.strictEqual(d.state.committed.turnStart, kept.length)
  })

  it("an empty history from the client (the first message edited) rewinds to nothing", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    const t = d.feed(Input.Start({ message: user("first, edited"), context: [], settings, clientHistory: promptIds([]) }))
    assert.deepStrictEqual(expectTag(t.command, "CallLlm").request.messages, [user("first, edited")])
  })

  it("without the client's history (a run request with no checkpoint at all) the stored history continues, for a new turn and a summarize", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    const all = d.state.committed.messages
    const t = d.feed(Input.Start({ message: user("third question"), context: [], settings }))
    assert.deepStrictEqual(expectTag(t.command, "CallLlm").request.messages.map(serializeMessage), [...all, user("third question")].map(serializeMessage))
    d.done(answer([text("third answer")]))
    const history = d.state.committed.messages
    assert.strictEqual(history.length, 6)
    const summary = expectTag(d.feed(Input.Summarize({ instructions: "", settings })).command, "CallLlm")
    assert.deepStrictEqual(summary.request.messages.slice(0, history.length), history)
    assert.strictEqual(d.state.committed.segment.kind, "origin")
  })

  it("the same history, a foreign one, or one naming what a failed turn added change nothing", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer")
    const checkpointed = d.state.committed.messages
    // A failed turn adds messages the client's checkpoint never named.
    d.feed(Input.Start({ message: user("second question"), context: [], settings }))
    d.fail({ reason: "error", message: "upstream 500", retryable: false })
    const all = d.state.committed.messages
    for (const claim of [promptIds(checkpointed), promptIds(all), { promptIds: ["not-a-message-id"] }, promptIds([user("elsewhere")])]) {
      const fork = makeTransition(policyWith(knobs(undefined)))(d.state, Input.Start({ message: user("next"), context: [], settings, clientHistory: claim }))
      assert.deepStrictEqual(expectTag(fork.command, "CallLlm").request.messages.slice(0, all.length), all)
      assert.strictEqual(fork.state.committed.segment.kind, "origin")
    }
  })

  it("a rewind needs the policy's prompt ids: without them the client's history is not compared", () => {
    const d = driver(testPolicy)
    d.turn("first question", "first answer")
    d.turn("second question", "second answer")
    const all = d.state.committed.messages
    const t = d.feed(Input.Start({ message: user("x"), context: [], settings, clientHistory: promptIds(all.slice(0, 2)) }))
    assert.strictEqual(expectTag(t.command, "CallLlm").request.messages.length, all.length + 1)
  })
})

describe("Loop: a forked chat", () => {
  const promptIds = (messages: ReadonlyArray<Message>) => messages.map((m) => messageHash(m))
  const source = [user("how is it built?"), answer([text("with esbuild")])]

  it("a new conversation's first turn is seeded with the messages found under the ids its client names, as a fork segment", () => {
    const d = driver(policyWith(knobs(undefined)))
    const t = d.feed(Input.Start({
      message: user("and lint?"),
      context: [],
      settings,
      clientHistory: { promptIds: promptIds(source), seed: { conversationId: "source", messages: source } }
    }))
    assert.deepStrictEqual(expectTag(t.command, "CallLlm").request.messages, [...source, user("and lint?")])
    assert.deepStrictEqual(d.state.committed.segment, { start: 0, kind: "fork", turnId: "c/t1", source: "source", replaced: 0, kept: 2 })
    assert.strictEqual(d.state.committed.turnStart, 2)
  })

  it("a seed that does not match the ids, or arrives for a conversation with history, is ignored", () => {
    const mismatched = driver(policyWith(knobs(undefined)))
    const t = mismatched.feed(Input.Start({
      message: user("x"),
      context: [],
      settings,
      clientHistory: { promptIds: promptIds(source).reverse(), seed: { conversationId: "source", messages: source } }
    }))
    assert.deepStrictEqual(expectTag(t.command, "CallLlm").request.messages, [user("x")])

    const later = driver(policyWith(knobs(undefined)))
    later.turn("first", "answer")
    const before = later.state.committed.messages
    const u = later.feed(Input.Start({
      message: user("y"),
      context: [],
      settings,
      clientHistory: { promptIds: promptIds(before), seed: { conversationId: "source", messages: source } }
    }))
    assert.deepStrictEqual(expectTag(u.command, "CallLlm").request.messages, [...before, user("y")])
  })
})

describe("Loop: a history imported from the client", () => {
  const imported = [user("which files?"), answer([text("Let me look."), call("ls")], 10, "toolUse"), result("ls"), answer([text("two files")])]

  it("a new conversation's first turn continues from it as an import segment, its system prompt replacing the built one for good", () => {
    const d = driver(policyWith(knobs(undefined)))
    const t = d.feed(Input.Start({
      message: user("and now?"),
      context: [],
      settings,
      clientHistory: { promptIds: ["s", "a", "b", "c", "d"], imported: { messages: imported, systemPrompt: "the client's own prompt" } }
    }))
    const request = expectTag(t.command, "CallLlm").request
    assert.deepStrictEqual(request.messages, [...imported, user("and now?")])
    assert.strictEqual(request.systemPrompt, "the client's own prompt")
    assert.deepStrictEqual(d.state.committed.segment, { start: 0, kind: "import", turnId: "c/t1", replaced: 0, kept: 4 })
    assert.strictEqual(d.state.committed.turnStart, 4)
    d.done(answer([text("still two")]))
    // The next turn (the client now names the server's own ids) keeps the history and the prompt.
    const u = d.feed(Input.Start({ message: user("sure?"), context: [], settings, clientHistory: { promptIds: d.state.committed.messages.map((m) => messageHash(m)) } }))
    const next = expectTag(u.command, "CallLlm").request
    assert.strictEqual(next.systemPrompt, "the client's own prompt")
    assert.deepStrictEqual(next.messages.slice(0, 4), imported)
    d.done(answer([text("yes")]))
    // A turn whose request carries a system_prompt_spec of its own follows it instead.
    const spec = { ...settings, systemPromptSpec: { mode: "replace" as const, text: "a newer prompt" } }
    const v = d.feed(Input.Start({ message: user("again"), context: [], settings: spec, clientHistory: { promptIds: d.state.committed.messages.map((m) => messageHash(m)) } }))
    const third = expectTag(v.command, "CallLlm").request
    assert.strictEqual(third.systemPrompt, testPolicy.buildPrompt({ conversationId: "c", turnId: d.state.committed.turnId, settings: spec }))
    assert.notStrictEqual(third.systemPrompt, "the client's own prompt")
  })

  it("without a system message the built prompt stays; a conversation with history of its own ignores an import", () => {
    const d = driver(policyWith(knobs(undefined)))
    const t = d.feed(Input.Start({ message: user("x"), context: [], settings, clientHistory: { promptIds: ["a"], imported: { messages: imported } } }))
    assert.strictEqual(expectTag(t.command, "CallLlm").request.systemPrompt, testPolicy.buildPrompt({ conversationId: "c", turnId: "c/t1", settings }))

    const later = driver(policyWith(knobs(undefined)))
    later.turn("first", "answer")
    const before = later.state.committed.messages
    const u = later.feed(Input.Start({ message: user("y"), context: [], settings, clientHistory: { promptIds: ["a"], imported: { messages: imported, systemPrompt: "p" } } }))
    const request = expectTag(u.command, "CallLlm").request
    assert.deepStrictEqual(request.messages, [...before, user("y")])
    assert.notStrictEqual(request.systemPrompt, "p")
  })
})

describe("Loop: the context meter", () => {
  it("shows the last request and its answer as the provider counted them, not the sum over the turn's calls", () => {
    const d = driver(policyWith(knobs(undefined)))
    expectTag(d.feed(Input.Start({ message: user("read"), context: [], settings })).command, "CallLlm")
    d.done(answer([call("a")], 1_000, "toolUse"))
    d.feed(Input.ToolResult({ message: result("a") }))
    d.done(answer([text("done")], 1_200))
    assert.strictEqual(contextTokensOf(d.state.committed), 1_205)
  })

  it("after a compaction, an estimate of the new segment", () => {
    const d = driver(policyWith(knobs(undefined)))
    d.turn("first question", "first answer", 50_000)
    d.turn("second question", "second answer", 60_000)
    d.feed(Input.Summarize({ instructions: "", settings }))
    d.done(answer([text("short")]))
    const size = contextTokensOf(d.state.committed)
    assert.isAbove(size, 0)
    assert.isBelow(size, 200)
    assert.isTrue(d.state.committed.messages[0]!.role === "user" && JSON.stringify(d.state.committed.messages[0]).includes(SUMMARY_OPEN))
  })
})
