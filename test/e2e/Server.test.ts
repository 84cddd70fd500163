/**
 * End to end, over loopback, with the REAL server (`Server.layerApp`: SQLite file, model router,
 * adapters, retries, runner, transport), a fake provider server speaking the providers' wire
 * formats, and the reference Cursor client. Only the provider and the editor are fakes.
 *
 * No test asserts a duration; every wait is bounded (client turn timeouts, `waitFor` timeouts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { create, toBinary } from "@bufbuild/protobuf"
import * as Dialect from "../../src/Dialect.js"
import { RequestContextMcpsPartSchema, RequestContextRulesPartSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { Message } from "../../src/Llm.js"
import * as Prompt from "../../src/Prompt.js"
import * as AppHarness from "../support/AppHarness.js"
import * as ChildServer from "../support/ChildServer.js"
import { CursorClient, LocalWorkspace, scriptedWorkspace } from "../support/CursorClient.js"
import { assertCleanOk, clientFor as scopedClient, endCode, completedTool, shape, tempDirectory, toolCallOf } from "../support/Transcripts.js"
import type { CursorClientOptions, Delivery, ExecAnswer, FrameEvent, Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"

const clientFor = (app: AppHarness.AppHarness, options: Omit<CursorClientOptions, "baseUrl"> = {}) =>
  scopedClient(app, { turnTimeoutMs: 15_000, ...options })

const { chunk } = FakeProvider.openAiChat
const DONE = "data: [DONE]\n\n"

// -----------------------------------------------------------------------------
// Helpers
// -----------------------------------------------------------------------------

interface ChatBody {
  readonly model: string
  readonly stream: boolean
  readonly messages: ReadonlyArray<Record<string, unknown>>
  readonly tools?: ReadonlyArray<unknown>
  readonly [key: string]: unknown
}

const bodyOf = (app: AppHarness.AppHarness, index: number): ChatBody => {
  const request = app.provider.requests[index]
  assert.isDefined(request, `the provider saw no request #${index}`)
  return JSON.parse(request!.body) as ChatBody
}

/**
 * History is append-only on the wire: request `a`'s messages, each re-serialized, equal the
 * first elements of request `b`'s, and `b` has more. Also on the raw bytes: request `a`'s body
 * up to the end of its messages array is a byte prefix of request `b`'s body.
 */
const assertMessagesExtend = (app: AppHarness.AppHarness, a: number, b: number) => {
  const first = bodyOf(app, a).messages
  const second = bodyOf(app, b).messages
  assert.isAbove(second.length, first.length, `request ${b} does not extend request ${a}`)
  first.forEach((message, i) => assert.strictEqual(JSON.stringify(second[i]), JSON.stringify(message), `message ${i} of request ${a} changed in request ${b}`))
  const rawA = app.provider.requests[a]!.body
  const rawB = app.provider.requests[b]!.body
  assert.isTrue(rawA.endsWith("]}"), "the messages array is not last in the body")
  assert.isTrue(rawB.startsWith(rawA.slice(0, -2)), `request ${a}'s body (up to its messages' end) is not a byte prefix of request ${b}'s`)
}

/** An OpenAI Chat answer with tool calls, each opened in its own chunk, arguments in two pieces. */
const chatToolCalls = (calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly args: string }>): Array<string> => [
  chunk({ role: "assistant", content: null }),
  ...calls.flatMap((call, index) => {
    const half = Math.floor(call.args.length / 2)
    return [
      chunk({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }] }),
      chunk({ tool_calls: [{ index, function: { arguments: call.args.slice(0, half) } }] }),
      chunk({ tool_calls: [{ index, function: { arguments: call.args.slice(half) } }] })
    ]
  }),
  chunk({}, "tool_calls"),
  FakeProvider.event({ id: "chatcmpl-fake", model: "fake-model", choices: [], usage: { prompt_tokens: 20, completion_tokens: 8 } }),
  DONE
]

/** Every assistant message with tool calls is followed by exactly its results, in call order. */
const assertValidHistory = (messages: ReadonlyArray<Message>) => {
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role !== "assistant") continue
    const calls = message.content.flatMap((block) => (block.type === "toolCall" ? [block.id] : []))
    const results = messages.slice(i + 1, i + 1 + calls.length).map((m) => (m.role === "toolResult" ? m.toolCallId : `(${m.role})`))
    assert.deepStrictEqual(results, calls, `assistant message ${i}'s tool calls are not followed by their results`)
  }
}

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

// -----------------------------------------------------------------------------
// Tests
// -----------------------------------------------------------------------------

describe("Server end to end (real provider path)", () => {
  it.scopedLive("a text turn: frames in order, turn_ended with the provider's usage, checkpoint, end-stream {}; the provider saw exactly the expected request", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(FakeProvider.sse([
        chunk({ role: "assistant", content: "" }),
        chunk({ content: "Hel" }),
        chunk({ content: "lo, " }),
        chunk({ content: "world" }),
        chunk({}, "stop"),
        FakeProvider.event({ id: "chatcmpl-fake", model: "fake-model", choices: [], usage: { prompt_tokens: 17, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 5 } } }),
        DONE
      ]))
      const client = yield* clientFor(app)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-text", text: "hi there", model: "fake-model" }))
      assertCleanOk(transcript)
      assert.deepStrictEqual(
        transcript.events.filter((e) => e.kind === "text_delta"),
        ["Hel", "lo, ", "world"].map((text) => ({ kind: "text_delta", text }))
      )
      assert.deepStrictEqual(shape(transcript), ["text_delta", "kv_set", "turn_ended", "checkpoint"])
      // OpenAI counts cached tokens inside prompt_tokens: 17 = 12 fresh + 5 cache reads.
      assert.deepStrictEqual(transcript.usage, { input: 12, output: 3, cacheRead: 5, cacheWrite: 0, reasoning: 0 })
      transcript.frames.forEach((f, i) => i > 0 && assert.isTrue(f.at >= transcript.frames[i - 1]!.at))
      // The provider request.
      assert.strictEqual(app.provider.requests.length, 1)
      const request = app.provider.requests[0]!
      assert.strictEqual(request.path, "/v1/chat/completions")
      assert.strictEqual(request.headers["authorization"], `Bearer ${AppHarness.API_KEY}`)
      const body = bodyOf(app, 0)
      assert.strictEqual(body.model, "fake-upstream")
      assert.strictEqual(body.stream, true)
      const systemPrompt = Prompt.buildPrompt({ conversationId: "conv-text", turnId: "", settings: { model: "fake-model", workspace: { workspacePaths: [], projectFolder: "", osVersion: "", shell: "", timeZone: "", terminalsFolder: "" } } })
      assert.deepStrictEqual(body.messages, [{ content: systemPrompt, role: "system" }, { content: "hi there", role: "user" }])
      assert.deepStrictEqual((body.tools ?? []).map((t) => (t as { function: { name: string } }).function.name), [
        "Shell", "Read", "Write", "StrReplace", "Delete", "Grep", "Glob", "Ls", "ReadLints", "TodoWrite", "AskQuestion", "SwitchMode", "WriteShellStdin", "AwaitShell", "WebFetch", "Task"
      ])
      // Committed: the user message and exactly one assistant message.
      const messages = yield* AppHarness.messagesOf(app, "conv-text")
      assert.deepStrictEqual(messages.map((m) => m.role), ["user", "assistant"])
    }))

  it.scopedLive("ref_only request context: the rules and MCP tools the run request names by blob id are read back with get_blob and reach the model", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const rules = toBinary(RequestContextRulesPartSchema, create(RequestContextRulesPartSchema, {
        rules: [{ fullPath: "/w/.cursor/rules/style.mdc", content: "Always answer in haiku." }],
        nonFileRules: [{ fullPath: "", content: "The user's name is Ada." }]
      }))
      const mcps = toBinary(RequestContextMcpsPartSchema, create(RequestContextMcpsPartSchema, {
        tools: [{
          name: "get_weather",
          providerIdentifier: "weather",
          toolName: "get_weather",
          description: "Weather for a city",
          inputSchemaJson: JSON.stringify({ type: "object", properties: { city: { type: "string" } } })
        }]
      }))
      const answer = () => FakeProvider.sse([chunk({ role: "assistant", content: "" }), chunk({ content: "ok" }), chunk({}, "stop"), DONE])
      app.provider.enqueue(answer(), answer())
      const client = yield* clientFor(app)
      const transcript = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-ref-only", text: "hi", model: "fake-model", workspacePaths: ["/w"], refOnlyContext: { rules, mcps } })
      )
      assertCleanOk(transcript)
      // Two reads, answered from the client's blob store, before the model was called.
      const reads = transcript.appends.filter((a) => a.what === "kvClientMessage.getBlobResult")
      assert.strictEqual(reads.length, 2)
      const body = bodyOf(app, 0)
      const system = String((body.messages[0] as { content: unknown }).content)
      assert.include(system, "Always answer in haiku.")
      assert.include(system, "The user's name is Ada.")
      assert.include(system, "/w")
      assert.include((body.tools ?? []).map((t) => (t as { function: { name: string } }).function.name), "mcp_weather_get_weather")
      // A part the client cannot give back (not in its store): the turn goes on without it.
      const lost = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-ref-only-lost", text: "hi", model: "fake-model", refOnlyContext: { rules: new TextEncoder().encode("not stored"), missingFromStore: true } })
      )
      assertCleanOk(lost)
      assert.strictEqual(lost.appends.filter((a) => a.what === "kvClientMessage.getBlobResult").length, 1)
      assert.notInclude(String((bodyOf(app, 1).messages[0] as { content: unknown }).content), "haiku")
    }))

  it.scopedLive("attached images: one named only by blob id is read back with get_blob; a model that takes images gets them, one that takes none a line of text in their place", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({
        config: {
          models: [
            { id: "fake-model", provider: "fake-openai", upstreamModel: "fake-upstream", contextWindow: 100000 },
            { id: "fake-vision", provider: "fake-openai", upstreamModel: "vision-upstream", contextWindow: 100000, supportsImages: true }
          ]
        }
      })
      const answer = () => FakeProvider.sse([chunk({ role: "assistant", content: "" }), chunk({ content: "a cat" }), chunk({}, "stop"), DONE])
      app.provider.enqueue(answer(), answer())
      const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13])
      const client = yield* clientFor(app)
      const vision = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-image", text: "what is this?", model: "fake-vision", images: [{ data: png, how: "blobId", path: "/w/cat.png" }] })
      )
      assertCleanOk(vision)
      assert.strictEqual(vision.appends.filter((a) => a.what === "kvClientMessage.getBlobResult").length, 1)
      assert.deepStrictEqual(bodyOf(app, 0).messages[1], {
        role: "user",
        content: [
          { type: "image_url", image_url: { url: `data:image/png;base64,${Buffer.from(png).toString("base64")}` } },
          { type: "text", text: "what is this?" }
        ]
      })
      // The history keeps the image; a model without image input is told one was there.
      const blind = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-image-blind", text: "what is this?", model: "fake-model", images: [{ data: png, how: "data" }] })
      )
      assertCleanOk(blind)
      assert.deepStrictEqual(bodyOf(app, 1).messages[1], {
        role: "user",
        content: "[An image was attached here; the model fake-model does not accept images.]\nwhat is this?"
      })
      const stored = yield* AppHarness.messagesOf(app, "conv-image-blind")
      assert.strictEqual(stored[0]?.role === "user" ? stored[0].content[0]?.type : undefined, "image")
    }))

  it.scopedLive("a thinking model: reasoning_content deltas become thinking_delta then thinking_completed, before the text", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(FakeProvider.sse([
        chunk({ role: "assistant", content: "", reasoning_content: "Let me " }),
        chunk({ reasoning_content: "see." }),
        chunk({ content: "Seen" }),
        chunk({ content: "." }),
        chunk({}, "stop", { usage: { prompt_tokens: 4, completion_tokens: 6, completion_tokens_details: { reasoning_tokens: 2 } } }),
        DONE
      ]))
      const client = yield* clientFor(app)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-think", text: "think", model: "fake-model" }))
      assertCleanOk(transcript)
      assert.strictEqual(transcript.thinking, "Let me see.")
      assert.strictEqual(transcript.text, "Seen.")
      assert.deepStrictEqual(shape(transcript), ["thinking_delta", "thinking_completed", "text_delta", "kv_set", "turn_ended", "checkpoint"])
      const messages = yield* AppHarness.messagesOf(app, "conv-think")
      const answer = messages[1]
      assert.strictEqual(answer?.role, "assistant")
      if (answer?.role === "assistant") assert.deepStrictEqual(answer.content.map((b) => b.type), ["thinking", "text"])
    }))

  it.scopedLive("an Anthropic thinking stream through the anthropic adapter: thinking (with its signature kept), then text", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const e = FakeProvider.event
      app.provider.enqueue(FakeProvider.sse([
        FakeProvider.anthropic.start(),
        e({ type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "" } }, "content_block_start"),
        e({ type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "Weighing " } }, "content_block_delta"),
        e({ type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "options." } }, "content_block_delta"),
        e({ type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "sig-abc" } }, "content_block_delta"),
        e({ type: "content_block_stop", index: 0 }, "content_block_stop"),
        e({ type: "content_block_start", index: 1, content_block: { type: "text", text: "" } }, "content_block_start"),
        e({ type: "content_block_delta", index: 1, delta: { type: "text_delta", text: "Option B." } }, "content_block_delta"),
        e({ type: "content_block_stop", index: 1 }, "content_block_stop"),
        e({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 9 } }, "message_delta"),
        e({ type: "message_stop" }, "message_stop")
      ]))
      const client = yield* clientFor(app)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-claude", text: "choose", model: "fake-claude" }))
      assertCleanOk(transcript)
      assert.strictEqual(transcript.thinking, "Weighing options.")
      assert.strictEqual(transcript.text, "Option B.")
      assert.deepStrictEqual(shape(transcript), ["thinking_delta", "thinking_completed", "text_delta", "kv_set", "turn_ended", "checkpoint"])
      assert.deepStrictEqual(transcript.usage, { input: 10, output: 9, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
      const request = app.provider.requests[0]!
      assert.strictEqual(request.path, "/v1/messages")
      const body = JSON.parse(request.body) as { model: string; thinking?: { type: string; budget_tokens: number }; messages: Array<unknown> }
      assert.strictEqual(body.model, "claude-fake")
      assert.deepStrictEqual(body.thinking, { type: "enabled", budget_tokens: 1024 })
      const messages = yield* AppHarness.messagesOf(app, "conv-claude")
      const answer = messages[1]
      assert.strictEqual(answer?.role, "assistant")
      if (answer?.role === "assistant") {
        const thinking = answer.content[0]
        assert.strictEqual(thinking?.type, "thinking")
        if (thinking?.type === "thinking") assert.strictEqual(thinking.signature, "sig-abc")
      }
    }))

  it.scopedLive("a read_file tool round trip against a real temp-dir workspace: exec, typed result, the file's text in the next request", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-e2e-ws-")
      writeFileSync(join(dir, "a.ts"), "export const a = 1\nexport const b = 2\n")
      const app = yield* AppHarness.make()
      app.provider.enqueue(
        FakeProvider.sse(chatToolCalls([{ id: "call-read", name: "Read", args: `{"path":"a.ts"}` }])),
        FakeProvider.sse(FakeProvider.openAiChat.text("a is 1"))
      )
      const client = yield* clientFor(app, { workspace: new LocalWorkspace(dir) })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-read", text: "what is a?" }))
      assertCleanOk(transcript)
      assert.deepStrictEqual(shape(transcript), [
        "partial_tool_call", "tool_call_started", "exec", "tool_call_completed", "text_delta", "kv_set", "turn_ended", "checkpoint"
      ])
      assert.deepStrictEqual(transcript.events.find((e) => e.kind === "exec"), { kind: "exec", id: 1, execId: Dialect.execIdOf(1, "call-read"), exec: "readArgs" })
      const tool = toolCallOf(completedTool(transcript, "call-read"))
      assert.strictEqual(tool.case, "readToolCall")
      if (tool.case === "readToolCall") {
        const result = tool.value.result!.result
        assert.strictEqual(result.case, "success")
        if (result.case === "success") assert.deepStrictEqual(result.value.output, { case: "content", value: "export const a = 1\nexport const b = 2\n" })
      }
      assert.strictEqual(transcript.text, "a is 1")
      // Two model calls; the second carries the assistant tool call and its result, appended.
      assert.strictEqual(app.provider.requests.length, 2)
      assertMessagesExtend(app, 0, 1)
      const added = bodyOf(app, 1).messages.slice(bodyOf(app, 0).messages.length)
      assert.deepStrictEqual(added.map((m) => m["role"]), ["assistant", "tool"])
      assert.strictEqual(added[1]!["tool_call_id"], "call-read")
      assert.include(String(added[1]!["content"]), "export const a = 1")
      // 10 + 20 input tokens over the two calls.
      assert.strictEqual(transcript.usage?.input, 30)
      assertValidHistory(yield* AppHarness.messagesOf(app, "conv-read"))
    }))

  it.scopedLive("two parallel tool calls, the first answered late: run one at a time, results appended in call order, the second request extends the first byte for byte", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-e2e-ws-")
      writeFileSync(join(dir, "first.txt"), "one\n")
      writeFileSync(join(dir, "second.txt"), "two\n")
      const local = new LocalWorkspace(dir)
      const execOrder: Array<string> = []
      // The first exec is answered late; the second at once.
      const workspace = scriptedWorkspace(async (exec, signal): Promise<ReadonlyArray<ExecAnswer>> => {
        const path = exec.message.case === "readArgs" ? exec.message.value.path : ""
        execOrder.push(path)
        if (path === "first.txt") await new Promise((r) => setTimeout(r, 150))
        const answers: Array<ExecAnswer> = []
        for await (const answer of local.answer(exec, signal)) answers.push(answer)
        return answers
      })
      const app = yield* AppHarness.make()
      app.provider.enqueue(
        FakeProvider.sse(chatToolCalls([
          { id: "call-1", name: "Read", args: `{"path":"first.txt"}` },
          { id: "call-2", name: "Read", args: `{"path":"second.txt"}` }
        ])),
        FakeProvider.sse(FakeProvider.openAiChat.text("one and two"))
      )
      const client = yield* clientFor(app, { workspace })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-parallel", text: "read both" }))
      assertCleanOk(transcript)
      // Dispatched one at a time in call order: the second exec goes out only after the first result.
      assert.deepStrictEqual(execOrder, ["first.txt", "second.txt"])
      const execFrames = transcript.events.filter((e): e is Extract<FrameEvent, { kind: "exec" }> => e.kind === "exec")
      assert.deepStrictEqual(execFrames.map((e) => e.execId), [Dialect.execIdOf(1, "call-1"), Dialect.execIdOf(2, "call-2")])
      assert.deepStrictEqual(
        transcript.events.flatMap((e) => (e.kind === "tool_call_completed" ? [e.callId] : [])),
        ["call-1", "call-2"]
      )
      assert.strictEqual(app.provider.requests.length, 2)
      assertMessagesExtend(app, 0, 1)
      const added = bodyOf(app, 1).messages.slice(bodyOf(app, 0).messages.length)
      assert.deepStrictEqual(added.map((m) => m["role"]), ["assistant", "tool", "tool"])
      assert.deepStrictEqual(added.slice(1).map((m) => m["tool_call_id"]), ["call-1", "call-2"])
      assert.include(String(added[1]!["content"]), "one")
      assert.include(String(added[2]!["content"]), "two")
      const toolCalls = (added[0]!["tool_calls"] as Array<{ id: string }>).map((c) => c.id)
      assert.deepStrictEqual(toolCalls, ["call-1", "call-2"])
      assertValidHistory(yield* AppHarness.messagesOf(app, "conv-parallel"))
    }))

  it.scopedLive("an Edit (StrReplace): read, apply, write on disk, a typed EditResult with the diff", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-e2e-ws-")
      writeFileSync(join(dir, "b.ts"), "const greeting = \"hello\"\nconsole.log(greeting)\n")
      const app = yield* AppHarness.make()
      app.provider.enqueue(
        FakeProvider.sse(chatToolCalls([{ id: "call-edit", name: "StrReplace", args: JSON.stringify({ path: "b.ts", old_string: "\"hello\"", new_string: "\"goodbye\"" }) }])),
        FakeProvider.sse(FakeProvider.openAiChat.text("changed"))
      )
      const client = yield* clientFor(app, { workspace: new LocalWorkspace(dir) })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-edit", text: "say goodbye" }))
      assertCleanOk(transcript)
      assert.deepStrictEqual(transcript.events.flatMap((e) => (e.kind === "exec" ? [e.exec] : [])), ["readArgs", "writeArgs"])
      assert.strictEqual(readFileSync(join(dir, "b.ts"), "utf8"), "const greeting = \"goodbye\"\nconsole.log(greeting)\n")
      const tool = toolCallOf(completedTool(transcript, "call-edit"))
      assert.strictEqual(tool.case, "editToolCall")
      if (tool.case === "editToolCall") {
        const result = tool.value.result!.result
        assert.strictEqual(result.case, "success")
        if (result.case === "success") {
          assert.strictEqual(result.value.linesAdded, 1)
          assert.strictEqual(result.value.linesRemoved, 1)
          assert.include(result.value.diffString, "+const greeting = \"goodbye\"")
        }
      }
      assertMessagesExtend(app, 0, 1)
      const added = bodyOf(app, 1).messages.slice(bodyOf(app, 0).messages.length)
      assert.include(String(added[1]!["content"]), "Edited b.ts")
    }))

  it.scopedLive("cancel mid-stream: the provider sees its connection close, the stream ends canceled, nothing of the answer is committed", () =>
    Effect.gen(function*() {
      // A provider of our own here: the fake provider does not report connection closes.
      let requests = 0
      let closedBeforeEnd = false
      const server = Http.createServer((request, response) => {
        requests++
        request.resume()
        response.writeHead(200, { "content-type": "text/event-stream" })
        response.write(chunk({ role: "assistant", content: "" }))
        response.write(chunk({ content: "Let me think" }))
        // ...and never finish.
        response.on("close", () => {
          if (!response.writableEnded) closedBeforeEnd = true
        })
      })
      yield* Effect.acquireRelease(
        Effect.promise(() => new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))),
        () => Effect.promise(() => new Promise<void>((r) => {
          server.closeAllConnections()
          server.close(() => r())
        }))
      )
      const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
      const app = yield* AppHarness.make({
        config: { providers: [{ id: "fake-openai", api: "openai-chat", baseUrl, apiKeyEnv: AppHarness.API_KEY_ENV }], retry: { ...AppHarness.testRetry, idleTimeoutMs: 30_000 } }
      })
      const client = yield* clientFor(app)
      const turn = client.turn({ conversationId: "conv-cancel", text: "think forever" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta"))
      yield* Effect.promise(() => turn.cancel("user_stopped_generation"))
      const transcript = yield* Effect.promise(() => turn.done)
      assert.deepStrictEqual(transcript.problems, [])
      assert.strictEqual(endCode(transcript), "canceled")
      assert.isFalse(transcript.events.some((e) => e.kind === "turn_ended"))
      // The provider's connection was closed by the server (bounded wait: it may trail the end-stream).
      for (let i = 0; i < 200 && !closedBeforeEnd; i++) yield* Effect.sleep("10 millis")
      assert.isTrue(closedBeforeEnd, "the provider stream was not aborted")
      assert.strictEqual(requests, 1)
      assert.deepStrictEqual((yield* AppHarness.messagesOf(app, "conv-cancel")).map((m) => m.role), ["user"])
    }))

  it.scopedLive("cancel while a tool runs on the client: its exec is aborted, the stream ends canceled", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-e2e-ws-")
      const app = yield* AppHarness.make()
      app.provider.enqueue(FakeProvider.sse(chatToolCalls([{ id: "c-sleep", name: "Shell", args: JSON.stringify({ command: "printf 'started\\n'; sleep 30" }) }])))
      const client = yield* clientFor(app, { workspace: new LocalWorkspace(dir) })
      const turn = client.turn({ conversationId: "conv-cancel-shell", text: "sleep" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "tool_call_delta"))
      yield* Effect.promise(() => turn.cancel())
      const transcript = yield* Effect.promise(() => turn.done)
      assert.deepStrictEqual(transcript.problems, [])
      assert.isTrue(transcript.events.some((e) => e.kind === "exec_abort" && e.id === 1), "no abort for the running exec")
      assert.strictEqual(endCode(transcript), "canceled")
      assert.strictEqual(app.provider.requests.length, 1)
    }))

  it.scopedLive("a provider 500 before the first byte is retried with the same bytes: one answer, exactly one assistant message committed", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(
        FakeProvider.status(500, { error: { message: "internal error", type: "server_error" } }),
        FakeProvider.sse(FakeProvider.openAiChat.text("recovered answer"))
      )
      const client = yield* clientFor(app)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-500", text: "hi" }))
      assertCleanOk(transcript)
      assert.strictEqual(transcript.text, "recovered answer")
      assert.strictEqual(app.provider.requests.length, 2)
      assert.strictEqual(app.provider.requests[1]!.body, app.provider.requests[0]!.body)
      const messages = yield* AppHarness.messagesOf(app, "conv-500")
      assert.deepStrictEqual(messages.map((m) => m.role), ["user", "assistant"])
    }))

  it.scopedLive("a provider connection dropped after the first bytes: a clean unavailable end-stream, no retry, nothing half-received committed", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(FakeProvider.sse([chunk({ role: "assistant", content: "" }), chunk({ content: "Half an ans" })], { end: "drop" }))
      const client = yield* clientFor(app)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-drop", text: "hi" }))
      assert.deepStrictEqual(transcript.problems, [])
      assert.strictEqual(transcript.text, "Half an ans")
      assert.strictEqual(endCode(transcript), "unavailable")
      assert.isFalse(transcript.events.some((e) => e.kind === "turn_ended"))
      // Content reached the client: never retried (it would replay what the user saw).
      assert.strictEqual(app.provider.requests.length, 1)
      assert.deepStrictEqual((yield* AppHarness.messagesOf(app, "conv-drop")).map((m) => m.role), ["user"])
      // The next turn on the conversation starts from the committed history: no trace of the half answer.
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("whole answer")))
      const again = yield* Effect.promise(() => client.run({ conversationId: "conv-drop", text: "again" }))
      assertCleanOk(again)
      assertMessagesExtend(app, 0, 1)
      assert.notInclude(app.provider.requests[1]!.body, "Half an ans")
      assert.deepStrictEqual((yield* AppHarness.messagesOf(app, "conv-drop")).map((m) => m.role), ["user", "user", "assistant"])
    }))

  it.scopedLive("two turns on one conversation sent at once: serialized (the later Start supersedes the running turn), never interleaved", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      // Both answers are slow enough that the second Start lands while the first streams.
      app.provider.setFallback((request) => {
        const which = request.body.includes("\"turn A\"") && !request.body.includes("\"turn B\"") ? "A" : "B"
        return FakeProvider.sse(FakeProvider.openAiChat.pacedText([`answer `, `${which} `, `done`], 60))
      })
      const client = yield* clientFor(app)
      const a = client.turn({ conversationId: "conv-race", text: "turn A" })
      const b = client.turn({ conversationId: "conv-race", text: "turn B" })
      const [ta, tb] = yield* Effect.promise(() => Promise.all([a.done, b.done]))
      assert.deepStrictEqual([...ta.problems, ...tb.problems], [])
      const outcomes = [endCode(ta), endCode(tb)].sort()
      // One turn ran to its end; the other was superseded (canceled) or ran after it.
      assert.isTrue(
        JSON.stringify(outcomes) === JSON.stringify(["Ok", "canceled"]) || JSON.stringify(outcomes) === JSON.stringify(["Ok", "Ok"]),
        `unexpected outcomes ${JSON.stringify(outcomes)}`
      )
      const winner = endCode(ta) === "Ok" && endCode(tb) !== "Ok" ? ta : tb
      const requests = app.provider.requests.length
      assert.isAtLeast(requests, 2)
      // Each provider request's history extends the previous one: nothing interleaved or rewritten.
      for (let i = 1; i < requests; i++) assertMessagesExtend(app, i - 1, i)
      const messages = yield* AppHarness.messagesOf(app, "conv-race")
      assertValidHistory(messages)
      // Exactly one assistant message per finished model call, and a superseded one's only when
      // it had streamed text: that text, as its partial answer (what its client saw).
      const assistants = messages.filter((m) => m.role === "assistant")
      const oks = [ta, tb].filter((t) => endCode(t) === "Ok").length
      const superseded = [ta, tb].find((t) => endCode(t) === "canceled")
      const partials = superseded !== undefined && superseded.text !== "" ? 1 : 0
      assert.strictEqual(assistants.length, oks + partials)
      if (partials === 1) {
        const partial = assistants[0]!
        assert.strictEqual(partial.role === "assistant" ? partial.content.map((block) => (block.type === "text" ? block.text : "")).join("") : "", superseded!.text)
      }
      assert.deepStrictEqual(messages.filter((m) => m.role === "user").length, 2)
      assert.strictEqual(messages[messages.length - 1]!.role, "assistant")
      assert.include(winner.text, "done")
    }))

  // Duplicate and shuffled appends must not change what the turn does.
  const deliveryRun = (dir: string, delivery: Delivery) =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(
        FakeProvider.sse(chatToolCalls([
          { id: "call-1", name: "Read", args: `{"path":"a.ts"}` },
          { id: "call-2", name: "Shell", args: JSON.stringify({ command: "printf 'one\\n'; printf 'two\\n'" }) },
          { id: "call-3", name: "Grep", args: JSON.stringify({ pattern: "const", output_mode: "files_with_matches" }) }
        ])),
        FakeProvider.sse(FakeProvider.openAiChat.text("all done"))
      )
      const client = yield* clientFor(app, { workspace: new LocalWorkspace(dir), delivery })
      const transcript = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-delivery", requestId: "req-delivery", messageId: "msg-1", text: "go" })
      )
      return { transcript, bodies: app.provider.requests.map((r) => r.body) }
    })

  /** The real shell's output reaches the client in as many pipe reads as the OS makes: compare it joined. */
  const joinShellChunks = (events: ReadonlyArray<FrameEvent>): ReadonlyArray<FrameEvent> =>
    events.reduce<Array<FrameEvent>>((out, event) => {
      const previous = out[out.length - 1]
      if (previous?.kind === "tool_call_delta" && event.kind === "tool_call_delta" && previous.callId === event.callId && previous.stream === event.stream) {
        out[out.length - 1] = { ...previous, content: previous.content + event.content }
      } else {
        out.push(event)
      }
      return out
    }, [])

  it.scopedLive("duplicated and shuffled BidiAppends give the same transcript and the same provider requests as in-order delivery", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-e2e-ws-")
      writeFileSync(join(dir, "a.ts"), "export const a = 1\n")
      const inOrder = yield* deliveryRun(dir, { _tag: "sequential" })
      assertCleanOk(inOrder.transcript)
      for (const seed of [7, 11]) {
        const shuffled = yield* deliveryRun(dir, { _tag: "shuffled", seed, duplicateRate: 0.3 })
        assertCleanOk(shuffled.transcript)
        const sent = shuffled.transcript.appends.slice().sort((x, y) => x.sentAt - y.sentAt).map((a) => a.seqno)
        assert.isTrue(sent.some((seqno, i) => i > 0 && seqno < sent[i - 1]!), "nothing was sent out of order")
        assert.isAbove(sent.length, new Set(sent).size, "nothing was sent twice")
        assert.deepStrictEqual(joinShellChunks(shuffled.transcript.events), joinShellChunks(inOrder.transcript.events))
        assert.deepStrictEqual(shuffled.bodies, inOrder.bodies)
      }
    }))

  /** Counter `name` by its `path` label, read from the server's `/metrics` now. */
  const counters = (baseUrl: string, name: string) =>
    Effect.promise(async () => {
      const text = await (await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text()
      return (path: string) => Number(new RegExp(`^${name}\\{path="${path}"\\} (\\S+)$`, "m").exec(text)?.[1] ?? 0)
    })

  it.scopedLive("an answer streamed from a real provider connection takes the fast path from its first content on; only what commits goes through the actor", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app)
      const scrape = () => Effect.map(counters(app.baseUrl, "byok_stream_events_total"), (value) => ({ fast: value("fast"), actor: value("actor") }))
      const before = yield* scrape()
      const words = Array.from({ length: 10 }, (_, k) => `w${k} `)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(words, 20)))
      const t = yield* Effect.promise(() => client.run({ conversationId: "conv-fast-path", text: "hi" }))
      assertCleanOk(t)
      assert.strictEqual(t.events.filter((e) => e.kind === "text_delta").map((e) => (e.kind === "text_delta" ? e.text : "")).join(""), words.join(""))
      const after = yield* scrape()
      // Start, the text block's start and its ten deltas at least, each in its own read (20 ms apart).
      assert.isAtLeast(after.fast - before.fast, 12)
      // The answer's end (it commits), and at most the block's end read with it.
      assert.isAtMost(after.actor - before.actor, 2)
    }))

  it.scopedLive("a turn's blob acknowledgements are taken in one step each; its run request goes the general way, acknowledged once committed", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app)
      const scrape = () => Effect.map(counters(app.baseUrl, "byok_appends_total"), (value) => ({ atOnce: value("at_once"), general: value("general") }))
      const before = yield* scrape()
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(["one ", "two"], 5)))
      const t = yield* Effect.promise(() => client.run({ conversationId: "conv-appends-at-once", text: "hi" }))
      assertCleanOk(t)
      const blobs = t.events.filter((e) => e.kind === "kv_set").length
      assert.isAbove(blobs, 0)
      assert.strictEqual(t.checkpoints.length, 1)
      const after = yield* scrape()
      assert.strictEqual(after.general - before.general, 1, "the run request")
      assert.strictEqual(after.atOnce - before.atOnce, blobs)
    }))

  it.scopedLive("measured (printed, not asserted): time to first delta and per-turn overhead", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app)
      const firstDelta = (t: Transcript) => t.frames.find((f) => f.event.kind === "text_delta")!.at - t.startedAt
      // Warm-up (connections, JIT), then turns whose provider answers at once: time to first delta.
      const ttfd: Array<number> = []
      // The server's own histogram (model call opened -> first delta), read before and after the measured turns.
      const scrape = () =>
        Effect.promise(async () => {
          const text = await (await fetch(`${app.baseUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text()
          const value = (name: string) => Number(/^(\S+) (\S+)$/m.exec(text.split("\n").filter((l) => l.startsWith(name)).join("\n"))?.[2] ?? Number.NaN)
          return { sum: value("byok_time_to_first_delta_seconds_sum"), count: value("byok_time_to_first_delta_seconds_count") }
        })
      let before = { sum: 0, count: 0 }
      for (let i = 0; i < 6; i++) {
        if (i === 1) before = yield* scrape()
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("quick answer", 3)))
        const t = yield* Effect.promise(() => client.run({ conversationId: `conv-measure-${i}`, text: "hi" }))
        assertCleanOk(t)
        if (i > 0) ttfd.push(firstDelta(t))
      }
      const after = yield* scrape()
      // Paced turns: the provider itself takes 10 x 20 ms = 200 ms; the rest is the server's (and the client's) overhead.
      const providerMs = 10 * 20
      const overhead: Array<number> = []
      for (let i = 0; i < 3; i++) {
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 10 }, (_, k) => `w${k} `), 20)))
        const t = yield* Effect.promise(() => client.run({ conversationId: `conv-paced-${i}`, text: "hi" }))
        assertCleanOk(t)
        overhead.push(t.endAt! - t.startedAt - providerMs)
      }
      console.log(
        `[e2e measure] time to first delta (client sends RunSSE+run_request -> first text_delta frame; provider answers at once): ` +
          `median ${median(ttfd).toFixed(2)} ms over ${ttfd.length} turns (min ${Math.min(...ttfd).toFixed(2)}, max ${Math.max(...ttfd).toFixed(2)})`
      )
      console.log(
        `[e2e measure] server-side time to first delta (byok_time_to_first_delta_seconds: model call opened -> first delta): ` +
          `mean ${(((after.sum - before.sum) / (after.count - before.count)) * 1000).toFixed(2)} ms over ${after.count - before.count} calls`
      )
      console.log(
        `[e2e measure] per-turn overhead (turn wall time to end-stream minus the provider's own ${providerMs} ms of streaming; ` +
          `includes set_blob round trips and the checkpoint): median ${median(overhead).toFixed(2)} ms over ${overhead.length} turns ` +
          `(${overhead.map((o) => o.toFixed(1)).join(", ")})`
      )
    }))
})

describe("Server process killed mid-stream (child process)", () => {
  it.scopedLive("SIGKILL mid-stream, restart on the same database: the call is re-issued once with the same request, the conversation finishes, nothing duplicated or lost", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const child = yield* ChildServer.make({
        config: AppHarness.fileConfigJson(provider.baseUrl),
        env: { [AppHarness.API_KEY_ENV]: AppHarness.API_KEY }
      })
      // A slow answer (100 pieces, 200 ms apart): the kill lands while it streams. Then the re-issued call's answer.
      provider.enqueue(
        FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 100 }, (_, k) => `slow${k} `), 200)),
        FakeProvider.sse(FakeProvider.openAiChat.text("the complete answer", 3))
      )
      const client = yield* Effect.acquireRelease(
        Effect.sync(() => new CursorClient({ baseUrl: child.baseUrl, turnTimeoutMs: 40_000, delivery: { _tag: "sequential" } })),
        (c) => Effect.sync(() => c.close())
      )
      const turn = client.turn({ conversationId: "conv-crash", requestId: "req-crash", messageId: "msg-crash", text: "tell me everything" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta", 20_000))
      // Our side of the stream goes first so the client does not count the kill as the end of the turn.
      turn.disconnect()
      yield* Effect.promise(() => child.kill("SIGKILL"))
      assert.strictEqual(provider.requests.length, 1)
      yield* Effect.promise(() => child.restart())
      yield* Effect.promise(() => turn.reconnect())
      const transcript = yield* Effect.promise(() => turn.done)
      const diagnostics = `\nstdout:\n${child.stdout()}\nstderr:\n${child.stderr()}`
      assert.deepStrictEqual(transcript.problems, [], diagnostics)
      assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok(), diagnostics)
      assert.strictEqual(transcript.text, "the complete answer")
      assert.deepStrictEqual(shape(transcript), ["text_delta", "kv_set", "turn_ended", "checkpoint"])
      // The kill landed mid-stream: the first connection saw part of the slow answer and no end.
      const beforeKill = transcript.connections[0]!.map((f) => f.event)
      assert.isTrue(beforeKill.some((e) => e.kind === "text_delta" && e.text.startsWith("slow")))
      assert.isFalse(beforeKill.some((e) => e.kind === "turn_ended"))
      // Re-issued exactly once, with the very same request bytes.
      assert.strictEqual(provider.requests.length, 2, diagnostics)
      assert.strictEqual(provider.requests[1]!.body, provider.requests[0]!.body)
      assert.include(child.stdout(), "1 model calls re-issued")
      // The next turn's request shows the history: each message exactly once, the half-streamed answer nowhere.
      provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("and more")))
      const next = yield* Effect.promise(() => client.run({ conversationId: "conv-crash", text: "go on", conversationState: transcript.checkpoints[0]! }))
      assertCleanOk(next)
      const last = JSON.parse(provider.requests[2]!.body) as ChatBody
      assert.deepStrictEqual(last.messages.slice(1), [
        { content: "tell me everything", role: "user" },
        { content: "the complete answer", role: "assistant" },
        { content: "go on", role: "user" }
      ])
      assert.notInclude(provider.requests[2]!.body, "slow0")
      assert.strictEqual(provider.requests[2]!.body.slice(0, provider.requests[0]!.body.length - 2), provider.requests[0]!.body.slice(0, -2))
    }), { timeout: 60_000 })
})
