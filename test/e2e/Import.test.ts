/**
 * A history only the client holds, end to end (real server, SQLite file, fake provider,
 * reference client): a checkpoint naming prompt-message blobs this server never stored is read
 * back from the client (KV get_blob), translated and continued as an `import` segment, with the
 * client's system prompt; after an abort and after a restart on the same database too; and a
 * blob the client cannot give back fails the turn readably, committing nothing.
 */
import { create } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { ConversationStateStructureSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { ConversationStateStructure } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import { blobIdBytes, sha256Hex } from "../support/CursorClient.js"
import type { CursorClient, Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, endCode } from "../support/Transcripts.js"

const CLIENT_SYSTEM = "You are the editor's own agent. Answer in one short sentence."

/** The client's history as AI-SDK prompt messages: a system prompt and a tool turn. */
const CLIENT_HISTORY: ReadonlyArray<unknown> = [
  { role: "system", content: CLIENT_SYSTEM },
  { role: "user", content: [{ type: "text", text: "which files are here?" }], providerOptions: {} },
  {
    role: "assistant",
    content: [
      { type: "reasoning", text: "I should list them." },
      { type: "text", text: "Let me look." },
      { type: "tool-call", toolCallId: "call-ls", toolName: "Ls", args: { path: "." } }
    ]
  },
  { role: "tool", content: [{ type: "tool-result", toolCallId: "call-ls", toolName: "Ls", result: "a.txt\nb.txt" }] },
  { role: "assistant", content: [{ type: "text", text: "There are two files: a.txt and b.txt." }] }
]

/** The client keeps each message as a blob; its checkpoint names them by id. */
const holdHistory = (client: CursorClient, history: ReadonlyArray<unknown> = CLIENT_HISTORY): ConversationStateStructure => {
  const blobs = history.map((message) => new TextEncoder().encode(JSON.stringify(message)))
  for (const blob of blobs) client.blobs.set(sha256Hex(blob), blob)
  return create(ConversationStateStructureSchema, { rootPromptMessagesJson: blobs.map(blobIdBytes), agentType: "ide" })
}

interface ChatMessage {
  readonly role: string
  readonly content: unknown
  readonly tool_calls?: ReadonlyArray<{ readonly id: string; readonly function: { readonly name: string; readonly arguments: string } }>
  readonly tool_call_id?: string
}
const messagesOf = (app: AppHarness.AppHarness, index: number): ReadonlyArray<ChatMessage> =>
  (JSON.parse(app.provider.requests[index]!.body) as { readonly messages: ReadonlyArray<ChatMessage> }).messages
const textOf = (message: ChatMessage): string =>
  typeof message.content === "string"
    ? message.content
    : Array.isArray(message.content)
    ? message.content.map((part: { readonly text?: string }) => part.text ?? "").join("")
    : ""

/** The provider saw the client's system prompt, then its tool turn in order, then the new message. */
const assertContinuesClientHistory = (app: AppHarness.AppHarness, index: number, newMessages: ReadonlyArray<string>, more = 0) => {
  const messages = messagesOf(app, index)
  assert.deepStrictEqual(messages.slice(0, messages.length - more).map((m) => m.role), ["system", "user", "assistant", "tool", "assistant", ...newMessages.map(() => "user")])
  assert.strictEqual(textOf(messages[0]!), CLIENT_SYSTEM)
  assert.strictEqual(textOf(messages[1]!), "which files are here?")
  assert.strictEqual(textOf(messages[2]!), "Let me look.")
  assert.deepStrictEqual(messages[2]!.tool_calls?.map((call) => [call.id, call.function.name, JSON.parse(call.function.arguments)]), [["call-ls", "Ls", { path: "." }]])
  assert.strictEqual(messages[3]!.tool_call_id, "call-ls")
  assert.strictEqual(textOf(messages[3]!), "a.txt\nb.txt")
  assert.strictEqual(textOf(messages[4]!), "There are two files: a.txt and b.txt.")
  newMessages.forEach((text, i) => assert.include(textOf(messages[5 + i]!), text))
  // Reasoning without a provider signature is not replayed.
  assert.notInclude(app.provider.requests[index]!.body, "I should list them.")
}

const lastCheckpoint = (transcript: Transcript): ConversationStateStructure => {
  const checkpoint = transcript.checkpoints[transcript.checkpoints.length - 1]
  assert.isDefined(checkpoint, "the turn published no checkpoint")
  return checkpoint!
}

const answer = (text: string) => FakeProvider.sse(FakeProvider.openAiChat.text(text))

describe("A history only the client holds", () => {
  it.scopedLive("is read back, continued as an import segment with the client's system prompt, and kept for the next turn", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const checkpoint = holdHistory(client)
      app.provider.enqueue(answer("Still two."), answer("Yes."))
      const first = yield* Effect.promise(() => client.run({ conversationId: "conv-moved", text: "how many now?", conversationState: checkpoint }))
      assertCleanOk(first)
      // The server asked for each of the client's blobs.
      const asked = first.events.flatMap((e) => (e.kind === "kv_get" ? [e.blobId] : []))
      assert.deepStrictEqual(asked, checkpoint.rootPromptMessagesJson.map((id) => Buffer.from(id).toString("hex")))
      assertContinuesClientHistory(app, 0, ["how many now?"])
      const segments = yield* app.store.segments("conv-moved").pipe(Effect.orDie)
      assert.deepStrictEqual(segments.map((s) => [s.kind, s.replaced, s.kept]), [["import", 0, 4]])
      // The turn's checkpoint names the whole history as this server's own blobs, which the client now holds.
      assert.strictEqual(lastCheckpoint(first).rootPromptMessagesJson.length, 6)
      // The next turn continues from the server's own history: no reads, the client's system prompt kept.
      const second = yield* Effect.promise(() => client.run({ conversationId: "conv-moved", text: "sure?", conversationState: lastCheckpoint(first) }))
      assertCleanOk(second)
      assert.isFalse(second.events.some((e) => e.kind === "kv_get"))
      assertContinuesClientHistory(app, 1, ["how many now?"], 2)
      assert.deepStrictEqual(messagesOf(app, 1).slice(6).map((m) => [m.role, textOf(m)]), [["assistant", "Still two."], ["user", "sure?"]])
    }))

  it.scopedLive("survives an abort of the turn, and a restart of the server on the same database (a fresh conversation id naming the client's blobs)", () =>
    Effect.gen(function*() {
      const database = `${tmpdir()}/byok-import-${process.pid}-${Date.now()}.sqlite`
      yield* Effect.addFinalizer(() => Effect.sync(() => ["", "-wal", "-shm"].forEach((suffix) => rmSync(`${database}${suffix}`, { force: true }))))
      const provider = yield* FakeProvider.make
      yield* Effect.scoped(Effect.gen(function*() {
        const app = yield* AppHarness.make({ provider, database })
        const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
        const checkpoint = holdHistory(client)
        // The first turn is aborted while the model runs.
        provider.enqueue(FakeProvider.stall)
        const aborted = client.turn({ conversationId: "conv-abort", text: "first try", conversationState: checkpoint })
        for (let i = 0; i < 500 && provider.requests.length === 0; i++) yield* Effect.sleep("10 millis")
        assertContinuesClientHistory(app, 0, ["first try"])
        yield* Effect.promise(() => aborted.cancel())
        assert.strictEqual(endCode(yield* Effect.promise(() => aborted.done)), "canceled")
        // The client still holds only its own checkpoint: the next turn keeps the imported history.
        provider.enqueue(answer("Two files."))
        const again = yield* Effect.promise(() => client.run({ conversationId: "conv-abort", text: "second try", conversationState: checkpoint }))
        assertCleanOk(again)
        assertContinuesClientHistory(app, 1, ["first try", "second try"])
      }))
      // A new process on the same database; the client starts a fresh conversation id with its own checkpoint.
      const app = yield* AppHarness.make({ provider, database })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const checkpoint = holdHistory(client)
      provider.enqueue(answer("Still two."))
      const fresh = yield* Effect.promise(() => client.run({ conversationId: "conv-after-restart", text: "after the restart", conversationState: checkpoint }))
      assertCleanOk(fresh)
      assertContinuesClientHistory(app, 2, ["after the restart"])
    }))

  it.scopedLive("a blob the client cannot give back fails the turn with a readable error; nothing is committed or sent to the model", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const checkpoint = holdHistory(client)
      // The client lost one of its blobs (the tool result).
      client.blobs.delete(Buffer.from(checkpoint.rootPromptMessagesJson[3]!).toString("hex"))
      app.provider.enqueue(answer("never"))
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-lost", text: "go on", conversationState: checkpoint }))
      assert.deepStrictEqual(turn.problems, [])
      assert.strictEqual(endCode(turn), "failed_precondition")
      const message = turn.end?._tag === "Error" ? turn.end.message : ""
      assert.include(message, "history could not be read back")
      assert.include(message, "prompt message 4 of 5")
      assert.isFalse(turn.events.some((e) => e.kind === "turn_ended"))
      assert.strictEqual(app.provider.requests.length, 0)
      assert.isTrue(Option.isNone(yield* app.store.load("conv-lost").pipe(Effect.orDie)))
      assert.deepStrictEqual(yield* app.store.segments("conv-lost").pipe(Effect.orDie), [])
      // A checkpoint naming an id the client never held fails the same way (never a silent fresh start).
      const foreign = create(ConversationStateStructureSchema, { rootPromptMessagesJson: [new Uint8Array(32).fill(7)] })
      const unknown = yield* Effect.promise(() => client.run({ conversationId: "conv-foreign", text: "hello there", conversationState: foreign }))
      assert.strictEqual(endCode(unknown), "failed_precondition")
      assert.strictEqual(app.provider.requests.length, 0)
    }))
})
