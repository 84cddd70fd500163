/**
 * One turn session, two wires: the same end-to-end scenarios, with the same assertions, over
 * Cursor's HTTP/1.1 mode (RunSSE + BidiAppend) and over HTTP/2 bidi `Run` driven by the official
 * `@connectrpc/connect-node` client (h2c). The REAL server (`Server.layerApp` plus the HTTP/2
 * listener), a fake provider, the reference client; only the provider and the editor are fakes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Dialect from "../../src/Dialect.js"
import * as AppHarness from "../support/AppHarness.js"
import * as ChildServer from "../support/ChildServer.js"
import { CursorClient, LocalWorkspace } from "../support/CursorClient.js"
import type { CursorClientOptions } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, completedTool, endCode, shape, tempDirectory, toolCallOf } from "../support/Transcripts.js"

const { chunk } = FakeProvider.openAiChat
const DONE = "data: [DONE]\n\n"

type Wire = "sse" | "run"
const WIRES: ReadonlyArray<Wire> = ["sse", "run"]

const clientOn = (wire: Wire, server: { readonly baseUrl: string; readonly h2cUrl: string | undefined }, options: Omit<CursorClientOptions, "baseUrl"> = {}) =>
  Effect.acquireRelease(
    Effect.sync(() => new CursorClient({ baseUrl: server.baseUrl, turnTimeoutMs: 15_000, ...options, wire, ...(server.h2cUrl === undefined ? {} : { runUrl: server.h2cUrl }) })),
    (client) => Effect.sync(() => client.close())
  )

const requestMessages = (app: AppHarness.AppHarness, index: number) =>
  (JSON.parse(app.provider.requests[index]!.body) as { messages: ReadonlyArray<Record<string, unknown>> }).messages

for (const wire of WIRES) {
  describe(`one turn session on the ${wire === "sse" ? "RunSSE + BidiAppend" : "HTTP/2 Run"} wire`, () => {
    it.scopedLive("a text turn: deltas, the set_blob, turn_ended with the provider's usage, the checkpoint, end-stream {}", () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make()
        app.provider.enqueue(FakeProvider.sse([
          chunk({ role: "assistant", content: "" }),
          chunk({ content: "Hel" }),
          chunk({ content: "lo" }),
          chunk({}, "stop"),
          FakeProvider.event({ id: "chatcmpl-fake", model: "fake-model", choices: [], usage: { prompt_tokens: 17, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 5 } } }),
          DONE
        ]))
        const client = yield* clientOn(wire, app)
        const transcript = yield* Effect.promise(() => client.run({ conversationId: `conv-text-${wire}`, text: "hi", model: "fake-model" }))
        assertCleanOk(transcript)
        assert.strictEqual(transcript.text, "Hello")
        assert.deepStrictEqual(shape(transcript), ["text_delta", "kv_set", "turn_ended", "checkpoint"])
        assert.deepStrictEqual(transcript.usage, { input: 12, output: 2, cacheRead: 5, cacheWrite: 0, reasoning: 0 })
        assert.strictEqual(transcript.checkpoints.length, 1)
        assert.deepStrictEqual((yield* AppHarness.messagesOf(app, `conv-text-${wire}`)).map((m) => m.role), ["user", "assistant"])
      }))

    it.scopedLive("a thinking model: thinking deltas, then thinking_completed, then the text", () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make()
        app.provider.enqueue(FakeProvider.sse([
          chunk({ role: "assistant", content: "" }),
          chunk({ reasoning_content: "Let me " }),
          chunk({ reasoning_content: "think." }),
          chunk({ content: "42" }),
          chunk({}, "stop"),
          DONE
        ]))
        const client = yield* clientOn(wire, app)
        const transcript = yield* Effect.promise(() => client.run({ conversationId: `conv-think-${wire}`, text: "why?" }))
        assertCleanOk(transcript)
        assert.strictEqual(transcript.thinking, "Let me think.")
        assert.strictEqual(transcript.text, "42")
        assert.deepStrictEqual(shape(transcript).slice(0, 3), ["thinking_delta", "thinking_completed", "text_delta"])
      }))

    it.scopedLive("a read tool round trip: the exec, the typed result, the file's text in the next request", () =>
      Effect.gen(function*() {
        const dir = yield* tempDirectory("cursor-byok-wires-")
        writeFileSync(join(dir, "a.ts"), "export const a = 1\n")
        const app = yield* AppHarness.make()
        app.provider.enqueue(
          FakeProvider.sse(FakeProvider.openAiChat.toolCall("call-read", "Read", `{"path":"a.ts"}`)),
          FakeProvider.sse(FakeProvider.openAiChat.text("a is 1"))
        )
        const client = yield* clientOn(wire, app, { workspace: new LocalWorkspace(dir) })
        const transcript = yield* Effect.promise(() => client.run({ conversationId: `conv-read-${wire}`, text: "what is a?" }))
        assertCleanOk(transcript)
        assert.deepStrictEqual(shape(transcript), [
          "partial_tool_call", "tool_call_started", "exec", "tool_call_completed", "text_delta", "kv_set", "turn_ended", "checkpoint"
        ])
        const tool = toolCallOf(completedTool(transcript, "call-read"))
        assert.strictEqual(tool.case, "readToolCall")
        const added = requestMessages(app, 1).slice(requestMessages(app, 0).length)
        assert.deepStrictEqual(added.map((m) => m["role"]), ["assistant", "tool"])
        assert.include(String(added[1]!["content"]), "export const a = 1")
      }))

    it.scopedLive("an edit (StrReplace): read, apply, write on disk, the typed result with its diff", () =>
      Effect.gen(function*() {
        const dir = yield* tempDirectory("cursor-byok-wires-")
        writeFileSync(join(dir, "b.ts"), "const greeting = \"hello\"\n")
        const app = yield* AppHarness.make()
        app.provider.enqueue(
          FakeProvider.sse(FakeProvider.openAiChat.toolCall("call-edit", "StrReplace", JSON.stringify({ path: "b.ts", old_string: "\"hello\"", new_string: "\"bye\"" }))),
          FakeProvider.sse(FakeProvider.openAiChat.text("changed"))
        )
        const client = yield* clientOn(wire, app, { workspace: new LocalWorkspace(dir) })
        const transcript = yield* Effect.promise(() => client.run({ conversationId: `conv-edit-${wire}`, text: "say bye" }))
        assertCleanOk(transcript)
        assert.deepStrictEqual(transcript.events.flatMap((e) => (e.kind === "exec" ? [e.exec] : [])), ["readArgs", "writeArgs"])
        assert.strictEqual(readFileSync(join(dir, "b.ts"), "utf8"), "const greeting = \"bye\"\n")
        const tool = toolCallOf(completedTool(transcript, "call-edit"))
        assert.strictEqual(tool.case, "editToolCall")
      }))

    it.scopedLive("a streamed shell command: its output as tool deltas, then the typed result and the output in the next request", () =>
      Effect.gen(function*() {
        const dir = yield* tempDirectory("cursor-byok-wires-")
        const app = yield* AppHarness.make()
        app.provider.enqueue(
          FakeProvider.sse(FakeProvider.openAiChat.toolCall("call-sh", "Shell", JSON.stringify({ command: "printf 'one\\n'; printf 'two\\n'" }))),
          FakeProvider.sse(FakeProvider.openAiChat.text("ran"))
        )
        const client = yield* clientOn(wire, app, { workspace: new LocalWorkspace(dir) })
        const transcript = yield* Effect.promise(() => client.run({ conversationId: `conv-shell-${wire}`, text: "run it" }))
        assertCleanOk(transcript)
        assert.isTrue(transcript.events.some((e) => e.kind === "tool_call_delta"), "no streamed shell output")
        const tool = toolCallOf(completedTool(transcript, "call-sh"))
        assert.strictEqual(tool.case, "shellToolCall")
        const added = requestMessages(app, 1).slice(requestMessages(app, 0).length)
        assert.include(String(added[1]!["content"]), "one\ntwo")
      }))

    it.scopedLive("cancel mid-stream: the stream ends canceled, nothing of the answer is committed", () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make()
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 50 }, (_, k) => `w${k} `), 100)))
        const client = yield* clientOn(wire, app)
        const turn = client.turn({ conversationId: `conv-cancel-${wire}`, text: "talk" })
        yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta"))
        yield* Effect.promise(() => turn.cancel())
        const transcript = yield* Effect.promise(() => turn.done)
        assert.deepStrictEqual(transcript.problems, [])
        assert.strictEqual(endCode(transcript), "canceled")
        assert.isFalse(transcript.events.some((e) => e.kind === "turn_ended"))
        assert.deepStrictEqual((yield* AppHarness.messagesOf(app, `conv-cancel-${wire}`)).map((m) => m.role), ["user"])
      }))

    it.scopedLive("a disconnect is not a cancel: the turn runs on, the client comes back (reconnect, or resume_action on Run) and gets the rest and the end; nothing runs twice", () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make()
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 12 }, (_, k) => `p${k} `), 60)))
        const client = yield* clientOn(wire, app)
        const turn = client.turn({ conversationId: `conv-drop-${wire}`, text: "go" })
        yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta"))
        turn.disconnect()
        yield* Effect.sleep("200 millis")
        yield* Effect.promise(() => turn.reconnect())
        const transcript = yield* Effect.promise(() => turn.done)
        assertCleanOk(transcript)
        // The second connection has the whole answer (its backlog first), then the end.
        const second = transcript.connections[1]!.map((f) => f.event)
        const text = second.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join("")
        assert.strictEqual(text, Array.from({ length: 12 }, (_, k) => `p${k} `).join(""))
        assert.isTrue(second.some((e) => e.kind === "turn_ended"))
        assert.strictEqual(app.provider.requests.length, 1, "the model was called again")
        assert.deepStrictEqual((yield* AppHarness.messagesOf(app, `conv-drop-${wire}`)).map((m) => m.role), ["user", "assistant"])
      }))

    it.scopedLive("a message queued while the agent worked, sent right after turn_ended on the same request: the next turn runs on the same stream, with its own checkpoint, then the stream ends", () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make({ config: { queuedMessageGraceMs: 1_500 } })
        app.provider.enqueue(
          FakeProvider.sse(FakeProvider.openAiChat.text("first answer")),
          FakeProvider.sse(FakeProvider.openAiChat.text("second answer"))
        )
        const client = yield* clientOn(wire, app)
        const turn = client.turn({ conversationId: `conv-queued-${wire}`, text: "first" })
        yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "turn_ended"))
        yield* Effect.promise(() => turn.sendUserMessage("second"))
        const transcript = yield* Effect.promise(() => turn.done)
        assertCleanOk(transcript)
        assert.strictEqual(transcript.text, "first answersecond answer")
        assert.strictEqual(transcript.events.filter((e) => e.kind === "turn_ended").length, 2)
        assert.strictEqual(transcript.checkpoints.length, 2)
        // The second checkpoint carries both turns.
        assert.strictEqual(transcript.checkpoints[1]!.turns.length, transcript.checkpoints[0]!.turns.length + 1)
        assert.deepStrictEqual((yield* AppHarness.messagesOf(app, `conv-queued-${wire}`)).map((m) => m.role), ["user", "assistant", "user", "assistant"])
        const second = requestMessages(app, 1).slice(1)
        assert.deepStrictEqual(second.map((m) => m["content"]), ["first", "first answer", "second"])
      }))

    it.scopedLive("an unsupported conversation action on a live request is acknowledged and changes nothing: the turn goes on", () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make()
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(["a ", "b ", "c"], 80)))
        const client = yield* clientOn(wire, app)
        const turn = client.turn({ conversationId: `conv-unsupported-${wire}`, text: "go" })
        yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta"))
        // summarize_action (4) and an empty action, neither of which this server runs yet.
        const statuses = yield* Effect.promise(() => Promise.all([
          turn.send({ message: { case: "conversationAction", value: { $unknown: [{ no: 4, wireType: 2, data: new Uint8Array([0x22, 0x00]) }] } as never } }),
          turn.send({ message: { case: "conversationAction", value: {} } })
        ]))
        assert.deepStrictEqual(statuses, [200, 200])
        const transcript = yield* Effect.promise(() => turn.done)
        assertCleanOk(transcript)
        assert.strictEqual(transcript.text, "a b c")
      }))
  })
}

describe("HTTP/2 Run: the client half-closing", () => {
  it.scopedLive("half-closing the request side is the end of the client's input, not a cancel: the turn finishes and its end arrives", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(["x ", "y ", "z"], 60)))
      const client = yield* clientOn("run", app)
      const turn = client.turn({ conversationId: "conv-halfclose", text: "go" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta"))
      turn.halfClose()
      const transcript = yield* Effect.promise(() => turn.done)
      assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok())
      assert.strictEqual(transcript.text, "x y z")
      assert.isTrue(transcript.events.some((e) => e.kind === "turn_ended"))
    }))
})

describe("restart mid-turn on either wire (child process)", () => {
  for (const wire of WIRES) {
    it.scopedLive(`${wire}: SIGKILL mid-stream, restart: the client comes back, the call is re-issued once, the turn finishes`, () =>
      Effect.gen(function*() {
        const provider = yield* FakeProvider.make
        const child = yield* ChildServer.make({
          config: AppHarness.fileConfigJson(provider.baseUrl, { http2: {} }),
          env: { [AppHarness.API_KEY_ENV]: AppHarness.API_KEY },
          h2c: true
        })
        provider.enqueue(
          FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 100 }, (_, k) => `slow${k} `), 200)),
          FakeProvider.sse(FakeProvider.openAiChat.text("the complete answer", 3))
        )
        const client = yield* Effect.acquireRelease(
          Effect.sync(() => new CursorClient({ baseUrl: child.baseUrl, wire, ...(child.h2cUrl === undefined ? {} : { runUrl: child.h2cUrl }), turnTimeoutMs: 40_000, delivery: { _tag: "sequential" } })),
          (c) => Effect.sync(() => c.close())
        )
        const turn = client.turn({ conversationId: `conv-crash-${wire}`, requestId: `req-crash-${wire}`, messageId: `msg-crash-${wire}`, text: "tell me everything" })
        yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta", 20_000))
        turn.disconnect()
        yield* Effect.promise(() => child.kill("SIGKILL"))
        yield* Effect.promise(() => child.restart())
        yield* Effect.promise(() => turn.reconnect())
        const transcript = yield* Effect.promise(() => turn.done)
        const diagnostics = `\nstdout:\n${child.stdout()}\nstderr:\n${child.stderr()}`
        assert.deepStrictEqual(transcript.problems, [], diagnostics)
        assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok(), diagnostics)
        assert.strictEqual(transcript.text, "the complete answer")
        assert.strictEqual(provider.requests.length, 2, diagnostics)
        assert.strictEqual(provider.requests[1]!.body, provider.requests[0]!.body)
      }), { timeout: 60_000 })
  }
})
