import { assert, describe, it } from "@effect/vitest"
import { messageHash, messagesHash } from "../src/Llm.js"
import type { AssistantMessage, ResponseEvent, ToolCall, ToolResultMessage } from "../src/Llm.js"
import { CANCELED_RESULT, CUT_OFF_RESULT, initialRuntime, Input, makeTransition, SUPERSEDED_REASON, SUPERSEDED_RESULT } from "../src/Loop.js"
import type { Command, RuntimeState, Transition, TurnSettings } from "../src/Loop.js"
import { testPolicy, testTools } from "./support/LoopScenario.js"

const transition = makeTransition(testPolicy)
const settings: TurnSettings = { model: "fake-model", mode: "agent" }
const user = (text: string) => ({ role: "user" as const, content: [{ type: "text" as const, text }] })
const call = (id: string, name = "read", args = `{"path":"a.ts"}`): ToolCall => ({ type: "toolCall", id, name, arguments: args })
const answer = (content: AssistantMessage["content"], stopReason: AssistantMessage["stopReason"] = "stop"): AssistantMessage => ({
  role: "assistant",
  content,
  api: "test",
  provider: "fake",
  model: "fake-model",
  usage: { input: 3, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  stopReason
})
const result = (id: string, text = `result ${id}`, name = "read"): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: id,
  toolName: name,
  content: [{ type: "text", text }],
  isError: false
})

/** Feeds inputs in order; returns every transition. */
const run = (state: RuntimeState, ...inputs: ReadonlyArray<Input>): Array<Transition> => {
  const out: Array<Transition> = []
  for (const input of inputs) {
    const t = transition(state, input)
    out.push(t)
    state = t.state
  }
  return out
}
const last = (ts: ReadonlyArray<Transition>): Transition => ts[ts.length - 1]!
const expectTag = <T extends Command["_tag"]>(command: Command, tag: T): Extract<Command, { _tag: T }> => {
  assert.strictEqual(command._tag, tag)
  return command as Extract<Command, { _tag: T }>
}
const started = (text = "list the files"): Transition => transition(initialRuntime("c"), Input.Start({ message: user(text), context: [], settings }))
const ev = (event: ResponseEvent) => Input.LlmEvent({ callId: "c/t1/c0", event })

describe("Loop: start of a turn", () => {
  it("Start appends the user message and asks the model with a freshly built request", () => {
    const t = started()
    const command = expectTag(t.command, "CallLlm")
    assert.strictEqual(command.callId, "c/t1/c0")
    assert.strictEqual(command.model, "fake-model")
    assert.deepStrictEqual(command.request.messages, [user("list the files")])
    assert.deepStrictEqual(command.request.tools, testTools)
    assert.strictEqual(command.request.systemPrompt, "You are a coding agent. Model: fake-model. Turn: c/t1.")
    assert.strictEqual(command.messagesHash, messagesHash(command.request.messages))
    assert.strictEqual(t.state.committed.status, "waitingLlm")
    assert.deepStrictEqual(t.emit, [])
  })

  it("context supplements become a new message appended before the user's, never an edit", () => {
    const t = transition(initialRuntime("c"), Input.Start({
      message: user("fix it"),
      context: [{ type: "text", text: "<open_file>a.ts</open_file>" }],
      settings
    }))
    const command = expectTag(t.command, "CallLlm")
    assert.deepStrictEqual(command.request.messages, [
      { role: "user", content: [{ type: "text", text: "<open_file>a.ts</open_file>" }] },
      user("fix it")
    ])
  })

  it("a user message between turns starts the next turn with the previous settings", () => {
    const ended = last(run(started().state, ev({ _tag: "Start" }), ev({ _tag: "Done", reason: "stop", message: answer([{ type: "text", text: "hi" }]) })))
    const next = transition(ended.state, Input.UserMessage({ message: user("and now?") }))
    const command = expectTag(next.command, "CallLlm")
    assert.strictEqual(command.callId, "c/t2/c0")
    assert.strictEqual(command.model, settings.model)
    assert.deepStrictEqual(command.request.messages.map((m) => m.role), ["user", "assistant", "user"])
  })

  it("a user message before any turn is ignored (there is no model to ask)", () => {
    const state = initialRuntime("c")
    const t = transition(state, Input.UserMessage({ message: user("hello") }))
    assert.strictEqual(t.state, state)
    expectTag(t.command, "WaitInput")
  })
})

describe("Loop: stream events", () => {
  const streamedKinds: ReadonlyArray<ResponseEvent> = [
    { _tag: "TextStart", index: 0 },
    { _tag: "TextDelta", index: 0, delta: "Hel" },
    { _tag: "TextEnd", index: 0 },
    { _tag: "ThinkingStart", index: 1 },
    { _tag: "ThinkingDelta", index: 1, delta: "hmm" },
    { _tag: "ThinkingEnd", index: 1, signature: "sig" },
    { _tag: "ToolCallStart", index: 2, id: "t1", name: "read" },
    { _tag: "ToolCallDelta", index: 2, delta: "{\"pa" },
    { _tag: "ToolCallEnd", index: 2, toolCall: call("t1") }
  ]
  for (const event of streamedKinds) {
    it(`${event._tag} is emitted as it is, kept in the pending response only, and the stream continues`, () => {
      const [begun, t] = run(started().state, ev({ _tag: "Start" }), ev(event))
      expectTag(t!.command, "ContinueLlm")
      assert.deepStrictEqual(t!.emit, [event])
      assert.strictEqual(t!.state.committed, begun!.state.committed, "the committed state is untouched")
      assert.strictEqual(t!.state.pending?.deltaCount, 1)
    })
  }

  it("deltas accumulate in the pending response, per block", () => {
    const ts = run(started().state,
      ev({ _tag: "Start" }),
      ev({ _tag: "TextStart", index: 0 }),
      ev({ _tag: "TextDelta", index: 0, delta: "Hel" }),
      ev({ _tag: "TextDelta", index: 0, delta: "lo" }),
      ev({ _tag: "ToolCallStart", index: 1, id: "t1", name: "read" }),
      ev({ _tag: "ToolCallDelta", index: 1, delta: "{}" }))
    const pending = last(ts).state.pending!
    assert.strictEqual(pending.blocks[0]?.text, "Hello")
    assert.deepStrictEqual(pending.blocks[1], { kind: "toolCall", text: "{}", id: "t1", name: "read", open: true })
  })

  it("a restarted stream (a second Start) discards what the first attempt streamed", () => {
    const ts = run(started().state, ev({ _tag: "Start" }), ev({ _tag: "TextDelta", index: 0, delta: "partial" }), ev({ _tag: "Start" }))
    assert.deepStrictEqual(last(ts).state.pending?.blocks, [])
  })

  it("an event for another call id is ignored", () => {
    const state = started().state
    const t = transition(state, Input.LlmEvent({ callId: "c/t0/c9", event: { _tag: "TextDelta", index: 0, delta: "x" } }))
    assert.strictEqual(t.state, state)
    assert.deepStrictEqual(t.emit, [])
  })
})

describe("Loop: end of a model call", () => {
  it("Done(stop) appends exactly the Done message and ends the turn", () => {
    const message = answer([{ type: "text", text: "Hello" }])
    const [, , t] = run(started().state, ev({ _tag: "Start" }), ev({ _tag: "TextDelta", index: 0, delta: "Hel" }), ev({ _tag: "Done", reason: "stop", message }))
    const final = expectTag(t!.command, "Final")
    assert.strictEqual(final.reason, "stop")
    assert.deepStrictEqual(t!.state.committed.messages[1], message)
    assert.strictEqual(t!.state.committed.status, "final")
    assert.isNull(t!.state.pending)
  })

  it("a repeated Done changes nothing", () => {
    const done = ev({ _tag: "Done", reason: "stop", message: answer([{ type: "text", text: "Hello" }]) })
    const [, first, second] = run(started().state, ev({ _tag: "Start" }), done, done)
    assert.strictEqual(second!.state, first!.state)
    expectTag(second!.command, "WaitInput")
  })

  it("Done(toolUse) runs the tool calls one at a time, in content order, then asks again", () => {
    const message = answer([{ type: "text", text: "Reading" }, call("a"), call("b", "shell", `{"command":"ls"}`)], "toolUse")
    const [, done, first, second] = run(started().state,
      ev({ _tag: "Start" }),
      ev({ _tag: "Done", reason: "toolUse", message }),
      Input.ToolResult({ message: result("a") }),
      Input.ToolResult({ message: result("b", "x", "shell") }))
    const dispatchA = expectTag(done!.command, "CallClient")
    assert.strictEqual(dispatchA.toolCall.id, "a")
    assert.strictEqual(dispatchA.operationId, "c/t1/c0/0:a")
    assert.strictEqual(done!.state.committed.status, "waitingClient")
    const dispatchB = expectTag(first!.command, "CallClient")
    assert.strictEqual(dispatchB.operationId, "c/t1/c0/1:b")
    const next = expectTag(second!.command, "CallLlm")
    assert.strictEqual(next.callId, "c/t1/c1")
    assert.deepStrictEqual(next.request.messages.map((m) => m.role), ["user", "assistant", "toolResult", "toolResult"])
  })

  it("tool calls reported with a stop reason of stop are still run", () => {
    const [, t] = run(started().state, ev({ _tag: "Start" }), ev({ _tag: "Done", reason: "stop", message: answer([call("a")]) }))
    assert.strictEqual(expectTag(t!.command, "CallClient").toolCall.id, "a")
  })

  it("Done(length) never runs its tool calls: each gets a result saying it was cut off", () => {
    const message = answer([{ type: "text", text: "Let me" }, call("a", "shell", `{"comm`)], "length")
    const [, t] = run(started().state, ev({ _tag: "Start" }), ev({ _tag: "Done", reason: "length", message }))
    const final = expectTag(t!.command, "Final")
    assert.strictEqual(final.reason, "length")
    const appended = t!.state.committed.messages[2]!
    assert.deepStrictEqual(appended, { role: "toolResult", toolCallId: "a", toolName: "shell", content: [{ type: "text", text: CUT_OFF_RESULT }], isError: true })
  })

  it("an Error drops the pending response and fails the turn with nothing appended", () => {
    const [, , t] = run(started().state, ev({ _tag: "Start" }), ev({ _tag: "TextDelta", index: 0, delta: "half" }), ev({ _tag: "Error", reason: "error", message: "upstream 502", retryable: true }))
    const failed = expectTag(t!.command, "Failed")
    assert.deepStrictEqual(failed, { _tag: "Failed", error: "upstream 502", retryable: true })
    assert.strictEqual(t!.state.committed.messages.length, 1)
    assert.strictEqual(t!.state.committed.status, "failed")
    assert.isNull(t!.state.pending)
  })

  it("an aborted stream cancels the turn with nothing appended", () => {
    const [, t] = run(started().state, ev({ _tag: "Start" }), ev({ _tag: "Error", reason: "aborted", message: "client went away", retryable: false }))
    expectTag(t!.command, "Canceled")
    assert.strictEqual(t!.state.committed.messages.length, 1)
  })

  it("a turn that reaches the model-call limit fails instead of calling again", () => {
    let state = started().state
    for (let step = 0; step < testPolicy.maxLlmCallsPerTurn; step++) {
      const callId = `c/t1/c${step}`
      const ts = run(state,
        Input.LlmEvent({ callId, event: { _tag: "Done", reason: "toolUse", message: answer([call(`s${step}`)], "toolUse") } }),
        Input.ToolResult({ message: result(`s${step}`) }))
      state = last(ts).state
      if (step === testPolicy.maxLlmCallsPerTurn - 1) {
        const failed = expectTag(last(ts).command, "Failed")
        assert.include(failed.error, "8 model calls")
      }
    }
  })
})

describe("Loop: tool results", () => {
  const waitingFor = (...ids: Array<string>): RuntimeState =>
    last(run(started().state, ev({ _tag: "Start" }), ev({ _tag: "Done", reason: "toolUse", message: answer(ids.map((id) => call(id)), "toolUse") }))).state

  it("a result that arrives early is held, then appended in call order", () => {
    const ts = run(waitingFor("a", "b", "c"),
      Input.ToolResult({ message: result("c") }),
      Input.ToolResult({ message: result("a") }),
      Input.ToolResult({ message: result("b") }))
    expectTag(ts[0]!.command, "WaitInput")
    assert.strictEqual(ts[0]!.state.committed.messages.length, 2)
    assert.strictEqual(expectTag(ts[1]!.command, "CallClient").toolCall.id, "b")
    const next = expectTag(ts[2]!.command, "CallLlm")
    assert.deepStrictEqual(next.request.messages.slice(2).map((m) => m.role === "toolResult" ? m.toolCallId : m.role), ["a", "b", "c"])
  })

  it("results for unknown or already answered ids change nothing", () => {
    const [first] = run(waitingFor("a", "b"), Input.ToolResult({ message: result("a") }))
    for (const stray of [result("a"), result("zzz")]) {
      const t = transition(first!.state, Input.ToolResult({ message: stray }))
      assert.strictEqual(t.state, first!.state)
      expectTag(t.command, "WaitInput")
    }
  })

  it("calls that share an id (a provider bug) are answered in order", () => {
    const ts = run(waitingFor("dup", "dup"), Input.ToolResult({ message: result("dup", "one") }), Input.ToolResult({ message: result("dup", "two") }))
    const next = expectTag(last(ts).command, "CallLlm")
    assert.deepStrictEqual(next.request.messages.slice(2).map((m) => m.role === "toolResult" ? m.content : null), [
      [{ type: "text", text: "one" }],
      [{ type: "text", text: "two" }]
    ])
  })

  it("a tool result while no tool runs is ignored", () => {
    const state = started().state
    assert.strictEqual(transition(state, Input.ToolResult({ message: result("a") })).state, state)
  })
})

describe("Loop: cancel, follow-ups and superseding turns", () => {
  it("Cancel while tools run closes every open call with a result, then cancels", () => {
    const state = last(run(started().state, ev({ _tag: "Start" }), ev({ _tag: "Done", reason: "toolUse", message: answer([call("a"), call("b")], "toolUse") }))).state
    const t = transition(state, Input.Cancel({ reason: "stop" }))
    expectTag(t.command, "Canceled")
    assert.deepStrictEqual(t.state.committed.messages.slice(2).map((m) => m.role === "toolResult" ? [m.toolCallId, m.isError, m.content[0]] : m.role), [
      ["a", true, { type: "text", text: CANCELED_RESULT }],
      ["b", true, { type: "text", text: CANCELED_RESULT }]
    ])
    assert.strictEqual(t.state.committed.status, "canceled")
  })

  it("Cancel while the model streams drops the pending response; late events are ignored", () => {
    const [, , canceled, late] = run(started().state,
      ev({ _tag: "Start" }),
      ev({ _tag: "TextDelta", index: 0, delta: "x" }),
      Input.Cancel({ reason: "stop" }),
      ev({ _tag: "Done", reason: "stop", message: answer([{ type: "text", text: "x" }]) }))
    expectTag(canceled!.command, "Canceled")
    assert.isNull(canceled!.state.pending)
    assert.strictEqual(late!.state, canceled!.state)
  })

  it("Cancel between turns changes nothing", () => {
    const state = initialRuntime("c")
    assert.strictEqual(transition(state, Input.Cancel({ reason: "stop" })).state, state)
  })

  it("a follow-up during a step is queued, then appended and answered instead of ending the turn", () => {
    const [, queued, done] = run(started().state,
      ev({ _tag: "Start" }),
      Input.UserMessage({ message: user("also the tests") }),
      ev({ _tag: "Done", reason: "stop", message: answer([{ type: "text", text: "files" }]) }))
    expectTag(queued!.command, "WaitInput")
    assert.strictEqual(queued!.state.committed.queued.length, 1)
    const next = expectTag(done!.command, "CallLlm")
    assert.deepStrictEqual(next.request.messages.map((m) => m.role), ["user", "assistant", "user"])
    assert.strictEqual(done!.emit[0]?._tag, "Done")
  })

  it("a new turn while tools run supersedes it: open calls are closed first", () => {
    const state = last(run(started().state, ev({ _tag: "Start" }), ev({ _tag: "Done", reason: "toolUse", message: answer([call("a")], "toolUse") }))).state
    const t = transition(state, Input.Start({ message: user("never mind"), context: [], settings }))
    const next = expectTag(t.command, "CallLlm")
    assert.strictEqual(next.callId, "c/t2/c0")
    const closing = next.request.messages[2]!
    assert.deepStrictEqual(closing.role === "toolResult" ? closing.content : null, [{ type: "text", text: SUPERSEDED_RESULT }])
  })

  it("a new turn while the model streams keeps the streamed text as the partial answer, before the queued and the new message; thinking and tool calls are dropped", () => {
    const streaming = last(run(started().state,
      ev({ _tag: "Start" }),
      ev({ _tag: "ThinkingDelta", index: 0, delta: "hmm" }),
      ev({ _tag: "TextDelta", index: 1, delta: "Here are " }),
      Input.UserMessage({ message: user("and the tests") }),
      ev({ _tag: "TextDelta", index: 1, delta: "the files" }),
      ev({ _tag: "ToolCallStart", index: 2, id: "t1", name: "read" }),
      ev({ _tag: "ToolCallDelta", index: 2, delta: "{\"pa" }))).state
    const t = transition(streaming, Input.Start({ message: user("never mind"), context: [], settings }))
    const next = expectTag(t.command, "CallLlm")
    assert.strictEqual(next.callId, "c/t2/c0")
    assert.deepStrictEqual(t.settles.modelCall, { callId: "c/t1/c0", status: "canceled", error: SUPERSEDED_REASON })
    assert.deepStrictEqual(next.request.messages.map((m) => m.role === "assistant" ? m.content : m.role), [
      "user",
      [{ type: "text", text: "Here are the files" }],
      "user",
      "user"
    ])
    assert.deepStrictEqual(next.request.messages.slice(2), [user("and the tests"), user("never mind")])
    assert.strictEqual(t.state.committed.turnStart, 3)
    assert.isNull(t.state.pending)
    // Late events of the superseded call change nothing.
    const late = transition(t.state, ev({ _tag: "Done", reason: "stop", message: answer([{ type: "text", text: "Here are the files" }]) }))
    assert.strictEqual(late.state, t.state)
  })

  it("a new turn that rewinds while the model streams opens its segment where the journal ends: the partial answer is past the prefix it keeps", () => {
    const rewinding = makeTransition({ ...testPolicy, promptIdOf: (message) => messageHash(message) })
    let state = rewinding(initialRuntime("c"), Input.Start({ message: user("one"), context: [], settings })).state
    state = rewinding(state, ev({ _tag: "Done", reason: "stop", message: answer([{ type: "text", text: "first answer" }]) })).state
    state = rewinding(state, Input.Start({ message: user("two"), context: [], settings })).state
    state = rewinding(state, Input.LlmEvent({ callId: "c/t2/c0", event: { _tag: "TextDelta", index: 0, delta: "half" } })).state
    const stored = state.committed.messages.length
    const t = rewinding(state, Input.Start({ message: user("one, edited"), context: [], settings, clientHistory: { promptIds: [] } }))
    const segment = t.state.committed.segment
    assert.deepStrictEqual([segment.kind, segment.start, segment.kept], ["rewind", stored, 0])
    assert.deepStrictEqual(expectTag(t.command, "CallLlm").request.messages, [user("one, edited")])
  })

  it("a new turn before the model streamed any text leaves no partial answer", () => {
    const streaming = last(run(started().state, ev({ _tag: "Start" }), ev({ _tag: "ThinkingDelta", index: 0, delta: "hmm" }))).state
    const t = transition(streaming, Input.Start({ message: user("never mind"), context: [], settings }))
    assert.deepStrictEqual(expectTag(t.command, "CallLlm").request.messages, [user("list the files"), user("never mind")])
  })
})
