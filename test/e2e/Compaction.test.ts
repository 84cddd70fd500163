/**
 * Long sessions end to end (real server, SQLite file, fake provider, reference client):
 * the user's summarize (`summarize_action`, `/summarize`, Cursor's summarize command), an
 * automatic compaction before a call past the threshold, one compaction after a provider's
 * context-overflow error, a rewind when the client's checkpoint names fewer messages, and the
 * context meter. What the provider received is read back byte for byte: the summary call must
 * extend the conversation's last request (the provider's prefix cache serves it).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Dialect from "../../src/Dialect.js"
import {
  ConversationSummaryArchiveSchema,
  ConversationStateStructureSchema,
  ConversationSummarySchema,
  NotifyConversationCloneRequestSchema
} from "../../src/gen/agent/v1/agent_pb.js"
import type { ConversationStateStructure } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import { LocalWorkspace, toHex } from "../support/CursorClient.js"
import type { CursorClient, Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, endCode, kinds, tempDirectory } from "../support/Transcripts.js"

const { chunk } = FakeProvider.openAiChat
const DONE = "data: [DONE]\n\n"

/** An OpenAI Chat text answer whose usage says the prompt took `prompt` tokens. */
const answer = (text: string, prompt = 10, completion = 5) =>
  FakeProvider.sse([
    chunk({ role: "assistant", content: "" }),
    chunk({ content: text }),
    chunk({}, "stop"),
    FakeProvider.event({ id: "chatcmpl-fake", model: "fake-model", choices: [], usage: { prompt_tokens: prompt, completion_tokens: completion } }),
    DONE
  ])

const readCall = (path: string, prompt: number) =>
  FakeProvider.sse([
    chunk({ role: "assistant", content: null }),
    chunk({ tool_calls: [{ index: 0, id: "call-read", type: "function", function: { name: "Read", arguments: JSON.stringify({ path }) } }] }),
    chunk({}, "tool_calls"),
    FakeProvider.event({ id: "chatcmpl-fake", model: "fake-model", choices: [], usage: { prompt_tokens: prompt, completion_tokens: 7 } }),
    DONE
  ])

interface ChatBody {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>
  readonly [key: string]: unknown
}
const bodyOf = (app: AppHarness.AppHarness, index: number): ChatBody => JSON.parse(app.provider.requests[index]!.body) as ChatBody
const textOf = (message: { readonly content: unknown } | undefined): string =>
  typeof message?.content === "string" ? message.content : JSON.stringify(message?.content ?? "")

/**
 * Request `a`'s body up to the end of its messages array is a byte prefix of request `b`'s body,
 * leaving out `b`'s output limit (a summary call is bounded; the limit is not part of the
 * prompt that providers cache by prefix).
 */
const assertBodyExtends = (app: AppHarness.AppHarness, a: number, b: number) => {
  const rawA = app.provider.requests[a]!.body
  const rawB = app.provider.requests[b]!.body.replace(/^\{"max_completion_tokens":\d+,/, "{")
  assert.isTrue(rawA.endsWith("]}"), "the messages array is not last in the body")
  assert.isTrue(rawB.startsWith(rawA.slice(0, -2)), `request ${a}'s body is not a byte prefix of request ${b}'s`)
  assert.isAbove(bodyOf(app, b).messages.length, bodyOf(app, a).messages.length)
}

const lastCheckpoint = (transcript: Transcript): ConversationStateStructure => {
  const checkpoint = transcript.checkpoints[transcript.checkpoints.length - 1]
  assert.isDefined(checkpoint, "the turn published no checkpoint")
  return checkpoint!
}

const summaryEvents = (transcript: Transcript) =>
  transcript.events.filter((e) => e.kind === "summary_started" || e.kind === "summary" || e.kind === "summary_completed")

/** Two answered turns on a fresh conversation; the second's transcript. */
const twoTurns = (client: CursorClient, app: AppHarness.AppHarness, conversationId: string) =>
  Effect.gen(function*() {
    app.provider.enqueue(answer("The build uses esbuild."), answer("Tests run with vitest."))
    const one = yield* Effect.promise(() => client.run({ conversationId, text: "how is it built?" }))
    assertCleanOk(one)
    const two = yield* Effect.promise(() => client.run({ conversationId, text: "and the tests?", conversationState: lastCheckpoint(one) }))
    assertCleanOk(two)
    return { one, two }
  })

describe("Compaction end to end", () => {
  it.scoped("summarize_action: one summary call extending the last request, summary_started / summary / summary_completed, a checkpoint naming the summary blobs, and the next turn sees [summary, tail]", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { compaction: { tailShare: 0.0001 } } })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const { two } = yield* twoTurns(client, app, "conv-sum")
      const before = lastCheckpoint(two)
      app.provider.enqueue(answer("SUMMARY: esbuild builds; vitest tests."))
      const summarized = yield* Effect.promise(() => client.run({ conversationId: "conv-sum", text: "", summarize: true, conversationState: before }))
      assertCleanOk(summarized)

      // The summary call: the same body as the last answer request, plus the instruction.
      assert.strictEqual(app.provider.requests.length, 3)
      assertBodyExtends(app, 1, 2)
      const summaryBody = bodyOf(app, 2)
      assert.strictEqual(summaryBody.messages.length, bodyOf(app, 1).messages.length + 2)
      assert.include(textOf(summaryBody.messages[summaryBody.messages.length - 1]), "write a summary of this whole conversation")
      assert.strictEqual(summaryBody["max_completion_tokens"], 4096)

      // On the wire: the summarizing display, the summary, then the end of the turn.
      assert.deepStrictEqual(summaryEvents(summarized).map((e) => e.kind), ["summary_started", "summary", "summary_completed"])
      assert.deepStrictEqual(summaryEvents(summarized)[1], { kind: "summary", text: "SUMMARY: esbuild builds; vitest tests." })
      const order = kinds(summarized)
      assert.isBelow(order.indexOf("summary_completed"), order.indexOf("turn_ended"))
      assert.isBelow(order.indexOf("turn_ended"), order.indexOf("checkpoint"))

      // The checkpoint: turns kept (a summarize adds none), the summary and its archive set, acknowledged before it.
      const after = lastCheckpoint(summarized)
      assert.deepStrictEqual(after.turns.map(toHex), before.turns.map(toHex))
      assert.strictEqual(after.selfSummaryCount, 1)
      assert.strictEqual(after.summaryArchives.length, 1)
      const summaryBlob = client.blobs.get(toHex(after.summary!))
      const archiveBlob = client.blobs.get(toHex(after.summaryArchive!))
      assert.isDefined(summaryBlob, "the ConversationSummary blob was not stored on the client")
      assert.isDefined(archiveBlob, "the archive blob was not stored on the client")
      assert.strictEqual(fromBinary(ConversationSummarySchema, summaryBlob!).summary, "SUMMARY: esbuild builds; vitest tests.")
      const archive = fromBinary(ConversationSummaryArchiveSchema, archiveBlob!)
      // With a tiny tail budget everything but the last answer is summarized: window_tail is the messages kept.
      assert.strictEqual(archive.windowTail, after.rootPromptMessagesJson.length - 1)
      assert.deepStrictEqual(archive.summarizedMessages.map(toHex), before.rootPromptMessagesJson.slice(0, before.rootPromptMessagesJson.length - archive.windowTail).map(toHex))
      assert.strictEqual(toHex(archive.summaryMessage), toHex(after.rootPromptMessagesJson[0]!))
      const setOrder = summarized.frames.map((f) => f.event).filter((e) => e.kind === "kv_set").map((e) => (e as { blobId: string }).blobId)
      assert.include(setOrder, toHex(after.summary!))
      assert.include(setOrder, toHex(after.summaryArchive!))
      // The context meter shows the new segment, far below the two turns' sum.
      assert.isAbove(after.tokenDetails!.usedTokens, 0)
      assert.isBelow(after.tokenDetails!.usedTokens, 100)

      // The store recorded the boundary; the next turn's request starts with the summary.
      const segments = yield* app.store.segments("conv-sum").pipe(Effect.orDie)
      assert.strictEqual(segments.length, 1)
      assert.strictEqual(segments[0]!.kind, "compaction")
      assert.strictEqual(segments[0]!.kept, archive.windowTail)
      app.provider.enqueue(answer("Sure."))
      const next = yield* Effect.promise(() => client.run({ conversationId: "conv-sum", text: "what next?", conversationState: after }))
      assertCleanOk(next)
      const nextBody = bodyOf(app, 3)
      const firstUser = nextBody.messages.find((m) => m.role === "user")
      assert.include(textOf(firstUser), "SUMMARY: esbuild builds; vitest tests.")
      assert.notInclude(app.provider.requests[3]!.body, "how is it built?")
      assert.include(app.provider.requests[3]!.body, "Tests run with vitest.")
      // The next turn did not rewind (its checkpoint names the compacted history).
      assert.strictEqual((yield* app.store.segments("conv-sum").pipe(Effect.orDie)).length, 1)
    }))

  it.scoped("a summarize_action without any request context: the summary call sends the last call's system prompt and tools byte for byte, its messages extending that call's", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { compaction: { tailShare: 0.0001 } } })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      // The turns carry the workspace and a rule: the system prompt has an environment and rules section.
      const context = { workspacePaths: ["/home/me/project"], requestContext: { rules: [{ fullPath: "/home/me/project/AGENTS.md", content: "Answer briefly." }] } }
      app.provider.enqueue(answer("The build uses esbuild."), answer("Tests run with vitest."))
      const one = yield* Effect.promise(() => client.run({ conversationId: "conv-sum-bare", text: "how is it built?", ...context }))
      assertCleanOk(one)
      const two = yield* Effect.promise(() => client.run({ conversationId: "conv-sum-bare", text: "and the tests?", conversationState: lastCheckpoint(one), ...context }))
      assertCleanOk(two)
      app.provider.enqueue(answer("SUMMARY: esbuild builds; vitest tests."))
      const summarized = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-sum-bare", text: "", summarize: true, withoutContext: true, conversationState: lastCheckpoint(two) })
      )
      assertCleanOk(summarized)
      assert.strictEqual(app.provider.requests.length, 3)

      const [last, summary] = [bodyOf(app, 1), bodyOf(app, 2)]
      const system = (body: ChatBody) => body.messages.filter((m) => m.role === "system").map(textOf)
      assert.include(system(last)[0], "<environment>\nWorkspace folders: /home/me/project")
      assert.include(system(last)[0], "Answer briefly.")
      assert.deepStrictEqual(system(summary), system(last))
      assert.strictEqual(JSON.stringify(summary["tools"]), JSON.stringify(last["tools"]))
      assert.deepStrictEqual(summary.messages.slice(0, last.messages.length), last.messages)
      // Serialized, the summary request is the last request's bytes plus the instruction.
      assertBodyExtends(app, 1, 2)
      assert.include(textOf(summary.messages.at(-1)), "write a summary of this whole conversation")
    }))

  it.scoped("/summarize with instructions and Cursor's summarize command: the instructions reach the summary call, the message shows as its own turn, the model never sees it", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const { two } = yield* twoTurns(client, app, "conv-slash")
      app.provider.enqueue(answer("Summary one."))
      const typed = yield* Effect.promise(() => client.run({ conversationId: "conv-slash", text: "/summarize keep the tool names", conversationState: lastCheckpoint(two) }))
      assertCleanOk(typed)
      assert.include(textOf(bodyOf(app, 2).messages.at(-1)), "The user adds these instructions for the summary: keep the tool names")
      assert.notInclude(app.provider.requests[2]!.body, "/summarize")
      assert.strictEqual(lastCheckpoint(typed).turns.length, lastCheckpoint(two).turns.length + 1)
      assert.strictEqual(lastCheckpoint(typed).selfSummaryCount, 1)

      app.provider.enqueue(answer("Summary two."))
      const picked = yield* Effect.promise(() =>
        client.run({
          conversationId: "conv-slash",
          text: "mention the config",
          cursorCommands: [{ name: "glass-action-summarize" }],
          conversationState: lastCheckpoint(typed)
        })
      )
      assertCleanOk(picked)
      assert.include(textOf(bodyOf(app, 3).messages.at(-1)), "The user adds these instructions for the summary: mention the config")
      assert.strictEqual(lastCheckpoint(picked).selfSummaryCount, 2)
      assert.strictEqual(lastCheckpoint(picked).summaryArchives.length, 2)
    }))

  it.scoped("a summarize of a conversation too short to need one changes nothing and says so; a failed summary fails the turn and keeps the history", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const nothing = yield* Effect.promise(() => client.run({ conversationId: "conv-short", text: "", summarize: true }))
      assertCleanOk(nothing)
      assert.deepStrictEqual(summaryEvents(nothing).map((e) => e.kind), ["summary_started", "summary", "summary_completed"])
      assert.strictEqual(app.provider.requests.length, 0)

      const { two } = yield* twoTurns(client, app, "conv-fail")
      const before = yield* AppHarness.messagesOf(app, "conv-fail")
      app.provider.enqueue(FakeProvider.status(400, { error: { message: "bad request", type: "invalid_request_error" } }))
      const failed = yield* Effect.promise(() => client.run({ conversationId: "conv-fail", text: "", summarize: true, conversationState: lastCheckpoint(two) }))
      assert.strictEqual(endCode(failed), "unavailable")
      assert.include(failed.end?._tag === "Error" ? failed.end.message : "", "could not be summarized")
      assert.deepStrictEqual(yield* AppHarness.messagesOf(app, "conv-fail"), before)
      assert.deepStrictEqual(yield* app.store.segments("conv-fail").pipe(Effect.orDie), [])
    }))

  it.scoped("automatic: a turn whose prompt passes the threshold is compacted first, then answered on the new segment, in one stream", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({
        config: {
          models: [{ id: "fake-model", provider: "fake-openai", upstreamModel: "fake-upstream", contextWindow: 2_000 }],
          compaction: { threshold: 0.5, tailShare: 0.05 }
        }
      })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      // Long answers: the verbatim tail (5% of the window) cannot hold them, so there is something to summarize.
      app.provider.enqueue(answer(`first answer ${"a".repeat(1_600)}`, 900, 50), answer(`second answer ${"b".repeat(1_600)}`, 950, 60))
      const one = yield* Effect.promise(() => client.run({ conversationId: "conv-auto", text: "first" }))
      const two = yield* Effect.promise(() => client.run({ conversationId: "conv-auto", text: "second", conversationState: lastCheckpoint(one) }))
      assertCleanOk(two)
      // 1,010 counted tokens > 1,000: the third turn compacts before it answers.
      app.provider.enqueue(answer("AUTO SUMMARY"), answer("third answer"))
      const three = yield* Effect.promise(() => client.run({ conversationId: "conv-auto", text: "third", conversationState: lastCheckpoint(two) }))
      assertCleanOk(three)
      assert.strictEqual(app.provider.requests.length, 4)
      assertBodyExtends(app, 1, 2)
      assert.include(textOf(bodyOf(app, 2).messages.at(-1)), "write a summary")
      assert.include(app.provider.requests[3]!.body, "AUTO SUMMARY")
      assert.notInclude(app.provider.requests[3]!.body, "first answer")
      assert.strictEqual(three.text, "third answer")
      const order = kinds(three)
      assert.isBelow(order.indexOf("summary_completed"), order.indexOf("text_delta"))
      const checkpoint = lastCheckpoint(three)
      assert.strictEqual(checkpoint.selfSummaryCount, 1)
      assert.strictEqual(checkpoint.turns.length, 3)
    }))

  it.scoped("a context overflow: compacted once with stale tool output elided, then the same question asked again and answered", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-compaction-")
      mkdirSync(join(dir, "src"), { recursive: true })
      writeFileSync(join(dir, "src", "big.txt"), "x".repeat(20_000))
      const app = yield* AppHarness.make({ config: { compaction: { tailShare: 0.001, elideToolResultChars: 1_000 } } })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000, workspace: new LocalWorkspace(dir) })
      app.provider.enqueue(readCall("src/big.txt", 20), answer("It is full of x.", 30))
      const one = yield* Effect.promise(() => client.run({ conversationId: "conv-over", text: "read src/big.txt", workspacePaths: [dir] }))
      assertCleanOk(one)
      app.provider.enqueue(
        FakeProvider.status(400, { error: { message: "This model's maximum context length is 8192 tokens", type: "invalid_request_error", code: "context_length_exceeded" } }),
        answer("SHORTER"),
        answer("Nothing else to say.")
      )
      const two = yield* Effect.promise(() => client.run({ conversationId: "conv-over", text: "anything else?", conversationState: lastCheckpoint(one), workspacePaths: [dir] }))
      assertCleanOk(two)
      assert.strictEqual(two.text, "Nothing else to say.")
      const summaryRequest = app.provider.requests[3]!.body
      assert.include(summaryRequest, "characters of tool output elided to fit the context window")
      assert.notInclude(summaryRequest, "x".repeat(2_000))
      assert.include(app.provider.requests[4]!.body, "SHORTER")
      assert.include(app.provider.requests[4]!.body, "anything else?")
    }))

  it.scoped("a second overflow right after a compaction fails the turn with the provider's error (never loops)", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const { two } = yield* twoTurns(client, app, "conv-loop")
      const overflow = FakeProvider.status(400, { error: { message: "prompt is too long", type: "invalid_request_error", code: "context_length_exceeded" } })
      app.provider.enqueue(overflow, answer("SUMMARY"), overflow)
      const three = yield* Effect.promise(() => client.run({ conversationId: "conv-loop", text: "third", conversationState: lastCheckpoint(two) }))
      assert.strictEqual(endCode(three), "unavailable")
      assert.strictEqual(app.provider.requests.length, 5)
    }))
})

describe("Rewind end to end", () => {
  it.scoped("a run request whose checkpoint is an earlier turn's (an edited message, a restored checkpoint) drops the later turns from what the model sees", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const { one } = yield* twoTurns(client, app, "conv-rewind")
      app.provider.enqueue(answer("Rewound answer."))
      const edited = yield* Effect.promise(() => client.run({ conversationId: "conv-rewind", text: "and the linter?", conversationState: lastCheckpoint(one) }))
      assertCleanOk(edited)
      const body = app.provider.requests[2]!.body
      assert.include(body, "how is it built?")
      assert.notInclude(body, "and the tests?")
      assert.notInclude(body, "Tests run with vitest.")
      // Turn one's request is a byte prefix of the rewound request: the cache survives a rewind.
      assertBodyExtends(app, 0, 2)
      const segments = yield* app.store.segments("conv-rewind").pipe(Effect.orDie)
      assert.deepStrictEqual(segments.map((s) => [s.kind, s.kept, s.replaced]), [["rewind", 2, 2]])
      // The checkpoint names what the model sees now.
      assert.strictEqual(lastCheckpoint(edited).rootPromptMessagesJson.length, 4)

      // The same checkpoint again (no edit) changes nothing more.
      app.provider.enqueue(answer("Go on."))
      const next = yield* Effect.promise(() => client.run({ conversationId: "conv-rewind", text: "go on", conversationState: lastCheckpoint(edited) }))
      assertCleanOk(next)
      assert.include(app.provider.requests[3]!.body, "and the linter?")
      assert.strictEqual((yield* app.store.segments("conv-rewind").pipe(Effect.orDie)).length, 1)
    }))
})

describe("A run request without a checkpoint end to end", () => {
  for (const wire of ["sse", "run"] as const) {
    it.scoped(`no conversation_state at all continues the stored history: the third call sees the first two turns (${wire}); an empty checkpoint (the first message edited) rewinds to nothing`, () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make()
        const client = yield* clientFor(app, { turnTimeoutMs: 15_000, wire, runUrl: app.h2cUrl })
        app.provider.enqueue(answer("The build uses esbuild."), answer("Tests run with vitest."), answer("With eslint."))
        for (const text of ["how is it built?", "and the tests?", "and the linter?"]) {
          assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: `conv-none-${wire}`, text })))
        }
        const third = bodyOf(app, 2).messages.filter((m) => m.role !== "system")
        assert.deepStrictEqual(third.map((m) => [m.role, textOf(m)]), [
          ["user", "how is it built?"],
          ["assistant", "The build uses esbuild."],
          ["user", "and the tests?"],
          ["assistant", "Tests run with vitest."],
          ["user", "and the linter?"]
        ])
        assertBodyExtends(app, 1, 2)
        assert.deepStrictEqual(yield* app.store.segments(`conv-none-${wire}`).pipe(Effect.orDie), [])

        // A checkpoint that is there and names no message is the state before the first turn: a rewind to nothing.
        app.provider.enqueue(answer("Edited."))
        const edited = yield* Effect.promise(() =>
          client.run({ conversationId: `conv-none-${wire}`, text: "how is it deployed?", conversationState: create(ConversationStateStructureSchema) })
        )
        assertCleanOk(edited)
        assert.deepStrictEqual(bodyOf(app, 3).messages.filter((m) => m.role !== "system").map(textOf), ["how is it deployed?"])
        assert.deepStrictEqual((yield* app.store.segments(`conv-none-${wire}`).pipe(Effect.orDie)).map((s) => [s.kind, s.kept, s.replaced]), [["rewind", 0, 6]])
      }))
  }
})

describe("Fork end to end", () => {
  it.scoped("a new conversation id arriving with an earlier checkpoint (Fork Chat) is seeded from the stored history it names; ids neither side holds fail the turn", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const { one, two } = yield* twoTurns(client, app, "conv-source")
      // Cursor announces the clone first; it is acknowledged here (nothing to copy yet).
      const notice = yield* Effect.promise(() =>
        client.post(
          "/agent.v1.AgentService/NotifyConversationClone",
          toBinary(NotifyConversationCloneRequestSchema, create(NotifyConversationCloneRequestSchema, { conversationId: "conv-fork", sourceConversationId: "conv-source" }))
        )
      )
      assert.strictEqual(notice.status, 200)
      app.provider.enqueue(answer("Forked answer."))
      const forked = yield* Effect.promise(() => client.run({ conversationId: "conv-fork", text: "fork: what about lint?", conversationState: lastCheckpoint(one) }))
      assertCleanOk(forked)
      const body = app.provider.requests[2]!.body
      assert.include(body, "how is it built?")
      assert.include(body, "The build uses esbuild.")
      assert.notInclude(body, "and the tests?")
      // The forked request starts with the source's first request byte for byte: its prefix cache serves the fork.
      assertBodyExtends(app, 0, 2)
      const segments = yield* app.store.segments("conv-fork").pipe(Effect.orDie)
      assert.deepStrictEqual(segments.map((s) => [s.kind, s.source, s.kept]), [["fork", "conv-source", 2]])
      // The source conversation is untouched.
      assert.strictEqual((yield* AppHarness.messagesOf(app, "conv-source")).length, 4)
      assert.strictEqual(lastCheckpoint(forked).rootPromptMessagesJson.length, 4)

      // A checkpoint naming messages this server never stored is read back from the client
      // (test/e2e/Import.test.ts); one the client does not hold either fails, never starts afresh.
      const foreign = create(ConversationStateStructureSchema, { ...lastCheckpoint(two), rootPromptMessagesJson: [new Uint8Array(32).fill(7)] })
      const lost = yield* Effect.promise(() => client.run({ conversationId: "conv-foreign", text: "hello there", conversationState: foreign }))
      assert.strictEqual(endCode(lost), "failed_precondition")
      assert.strictEqual(app.provider.requests.length, 3)
    }))
})

describe("The context meter", () => {
  it.scoped("shows the last request and its answer, not the sum of the turn's model calls", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-meter-")
      writeFileSync(join(dir, "a.txt"), "alpha")
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000, workspace: new LocalWorkspace(dir) })
      app.provider.enqueue(readCall("a.txt", 3_000), answer("It says alpha.", 3_100, 40))
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-meter", text: "read a.txt", workspacePaths: [dir] }))
      assertCleanOk(turn)
      assert.strictEqual(lastCheckpoint(turn).tokenDetails!.usedTokens, 3_140)
      assert.strictEqual(turn.usage?.input, 6_100)
      assert.deepStrictEqual(Dialect.EndStream.Ok(), turn.end)
    }))

  it.scoped("over a five-round turn: the fifth request and its answer, not five windows", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-meter5-")
      writeFileSync(join(dir, "a.txt"), "alpha")
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000, workspace: new LocalWorkspace(dir) })
      // Four tool rounds whose prompts grow, then the answer: 1,000 + 2,000 + ... + 5,000 input tokens in all.
      app.provider.enqueue(readCall("a.txt", 1_000), readCall("a.txt", 2_000), readCall("a.txt", 3_000), readCall("a.txt", 4_000), answer("Done reading.", 5_000, 25))
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-meter-5", text: "read a.txt a few times", workspacePaths: [dir] }))
      assertCleanOk(turn)
      assert.strictEqual(app.provider.requests.length, 5)
      assert.strictEqual(turn.usage?.input, 15_000)
      assert.strictEqual(lastCheckpoint(turn).tokenDetails!.usedTokens, 5_025)
    }))
})
