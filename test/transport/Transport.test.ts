/**
 * End to end over loopback: the reference Cursor client against the real transport, runner
 * and store, with only the model faked. Every wait is bounded by the client's turn timeout.
 */
import { create, toBinary } from "@bufbuild/protobuf"
import { Code, ConnectError, createClient } from "@connectrpc/connect"
import { createConnectTransport } from "@connectrpc/connect-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Dialect from "../../src/Dialect.js"
import { RequestContextRulesPartSchema } from "../../src/gen/agent/v1/agent_pb.js"
import { AgentClientMessageSchema, AgentService } from "../../src/gen/agent/v1/agent_pb.js"
import type { AgentServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import { BidiService, ErrorDetails_Error } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import type { ResponseEvent, Usage } from "../../src/Llm.js"
import { frameEvent, LocalWorkspace, runRequestMessage, runSseBody, scriptedWorkspace, toHex } from "../support/CursorClient.js"
import { assertCleanOk, clientFor, completedTool, shape, tempDirectory, toolCallOf } from "../support/Transcripts.js"
import type { Delivery, ExecAnswer, FrameEvent, Transcript } from "../support/CursorClient.js"
import { answerEvents, assistant, call, providerDown, text, toolCalls, usage } from "../support/FakeRuntime.js"
import type { Script } from "../support/FakeRuntime.js"
import * as ServerHarness from "../support/ServerHarness.js"
import { connectShimTransport } from "../support/OfficialClients.js"

// -----------------------------------------------------------------------------
// Helpers
// -----------------------------------------------------------------------------

/** A text answer streamed in several deltas. */
const chunkedText = (chunks: ReadonlyArray<string>, used: Usage = usage(10, 5)): Script => {
  const message = assistant([{ type: "text", text: chunks.join("") }], "stop", used)
  const events: Array<ResponseEvent> = [
    { _tag: "Start" },
    { _tag: "TextStart", index: 0 },
    ...chunks.map((delta): ResponseEvent => ({ _tag: "TextDelta", index: 0, delta })),
    { _tag: "TextEnd", index: 0 },
    { _tag: "Done", reason: "stop", message }
  ]
  return { _tag: "Events", events }
}

const toolResultTexts = (calls: ReadonlyArray<{ readonly request: { readonly messages: ReadonlyArray<unknown> } }>, index: number): ReadonlyArray<string> =>
  (calls[index]?.request.messages ?? []).flatMap((message) => {
    const m = message as { role: string; content: ReadonlyArray<{ type: string; text?: string }> }
    return m.role === "toolResult" ? m.content.flatMap((c) => (c.type === "text" ? [c.text ?? ""] : [])) : []
  })

/** Reads a whole RunSSE stream (one that ends promptly) without sending anything. */
const readRunSse = async (baseUrl: string, requestId: string): Promise<{ events: ReadonlyArray<FrameEvent>; end: Dialect.EndStream | undefined }> => {
  const response = await fetch(`${baseUrl}/agent.v1.AgentService/RunSSE`, {
    method: "POST",
    headers: { "content-type": "application/connect+proto", "connect-protocol-version": "1", "x-request-id": requestId },
    body: runSseBody(requestId),
    signal: AbortSignal.timeout(10_000)
  })
  const body = Buffer.from(await response.arrayBuffer())
  const events: Array<FrameEvent> = []
  let end: Dialect.EndStream | undefined
  for (let offset = 0; offset + 5 <= body.length;) {
    const length = body.readUInt32BE(offset + 1)
    const payload = body.subarray(offset + 5, offset + 5 + length)
    if ((body[offset]! & 0x02) !== 0) {
      const decoded = Dialect.decodeEndStream(payload)
      end = decoded._tag === "Right" ? decoded.right : undefined
    } else {
      const decoded = Dialect.fromFrame(payload)
      if (decoded._tag === "Right") events.push(frameEvent(decoded.right))
    }
    offset += 5 + length
  }
  return { events, end }
}

// -----------------------------------------------------------------------------
// Turns
// -----------------------------------------------------------------------------

describe("Transport end to end", () => {
  it.scopedLive("a text turn: deltas in order, blobs acknowledged, turn_ended with usage, checkpoint, end-stream {}", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [chunkedText(["Hel", "lo, ", "wor", "ld"], usage(7, 3))] })
      const client = yield* clientFor(harness)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-text", text: "hi" }))
      assertCleanOk(transcript)
      assert.strictEqual(transcript.text, "Hello, world")
      // The fake model hands the four deltas over together (one chunk, like one network read):
      // they leave as one text_delta carrying their text in order.
      assert.deepStrictEqual(transcript.events.filter((e) => e.kind === "text_delta"), [{ kind: "text_delta", text: "Hello, world" }])
      assert.deepStrictEqual(shape(transcript), ["text_delta", "kv_set", "turn_ended", "checkpoint"])
      assert.deepStrictEqual(transcript.usage, { input: 7, output: 3, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
      assert.strictEqual(transcript.responseHeaders["content-type"], "text/event-stream")
      // The checkpoint names only blobs the client acknowledged before it arrived.
      const checkpointIndex = transcript.events.findIndex((e) => e.kind === "checkpoint")
      const lastSet = transcript.events.map((e) => e.kind).lastIndexOf("kv_set")
      assert.isTrue(lastSet < checkpointIndex)
      const checkpoint = transcript.checkpoints[0]!
      assert.isAtLeast(checkpoint.turns.length, 1)
      for (const id of [...checkpoint.turns, ...checkpoint.rootPromptMessagesJson]) {
        assert.isTrue(client.blobs.has(toHex(id)), `checkpoint names blob ${toHex(id)} the client never stored`)
      }
      const acks = transcript.appends.filter((a) => a.what === "kvClientMessage.setBlobResult")
      assert.strictEqual(acks.length, transcript.events.filter((e) => e.kind === "kv_set").length)
      // Frames arrive in time order.
      transcript.frames.forEach((f, i) => i > 0 && assert.isTrue(f.at >= transcript.frames[i - 1]!.at))
      const stored = yield* harness.store.load("conv-text")
      assert.deepStrictEqual(Option.getOrThrow(stored).state.messages.map((m) => m.role), ["user", "assistant"])
    }))

  it.scopedLive("thinking streams as thinking_delta then thinking_completed, before the text", () =>
    Effect.gen(function*() {
      const thinking: Script = {
        _tag: "Events",
        events: answerEvents(assistant([{ type: "thinking", thinking: "Let me see." }, { type: "text", text: "Seen." }], "stop", usage(4, 6)))
      }
      const harness = yield* ServerHarness.make({ scripts: [thinking] })
      const client = yield* clientFor(harness)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-think", text: "think" }))
      assertCleanOk(transcript)
      assert.strictEqual(transcript.thinking, "Let me see.")
      assert.strictEqual(transcript.text, "Seen.")
      assert.deepStrictEqual(shape(transcript), ["thinking_delta", "thinking_completed", "text_delta", "kv_set", "turn_ended", "checkpoint"])
    }))

  it.scopedLive("a second turn on the same conversation carries the first: history in the model request, both turns in the checkpoint", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [text("first answer", usage(1, 1)), text("second answer", usage(2, 2))] })
      const client = yield* clientFor(harness)
      const first = yield* Effect.promise(() => client.run({ conversationId: "conv-two", text: "first question" }))
      assertCleanOk(first)
      const checkpoint = first.checkpoints[first.checkpoints.length - 1]!
      const second = yield* Effect.promise(() => client.run({ conversationId: "conv-two", text: "second question", conversationState: checkpoint }))
      assertCleanOk(second)
      assert.strictEqual(second.text, "second answer")
      // turn_ended sums only this turn's calls.
      assert.deepStrictEqual(second.usage, { input: 2, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
      const calls = yield* harness.llmCalls
      assert.deepStrictEqual(calls[1]!.request.messages.map((m) => m.role), ["user", "assistant", "user"])
      const last = second.checkpoints[second.checkpoints.length - 1]!
      assert.strictEqual(last.turns.length, 2)
      for (const id of last.turns) assert.isTrue(client.blobs.has(toHex(id)))
    }))

  it.scopedLive("RunSSE and the run_request may reach the server in either order", () =>
    Effect.gen(function*() {
      // RunSSE's response headers go out with its first frame: a short heartbeat makes "RunSSE first" observable.
      const harness = yield* ServerHarness.make({
        scripts: [text("first", usage(1, 1)), text("second", usage(1, 1)), text("third", usage(1, 1))],
        transport: { heartbeatMs: 50 }
      })
      const client = yield* clientFor(harness)
      const sseFirst = yield* Effect.promise(() => client.run({ conversationId: "conv-a", text: "hi", order: "runSseFirst" }))
      const runFirst = yield* Effect.promise(() => client.run({ conversationId: "conv-b", text: "hi", order: "runRequestFirst" }))
      const together = yield* Effect.promise(() => client.run({ conversationId: "conv-c", text: "hi", order: "concurrent" }))
      for (const [transcript, expected] of [[sseFirst, "first"], [runFirst, "second"], [together, "third"]] as const) {
        assertCleanOk(transcript)
        assert.strictEqual(transcript.text, expected)
        assert.deepStrictEqual(shape(transcript), ["text_delta", "kv_set", "turn_ended", "checkpoint"])
      }
    }))

  it.scopedLive("a read tool round trip against a real workspace: started, exec, completed with a typed result, result in the next request", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-ws-")
      writeFileSync(join(dir, "a.ts"), "export const a = 1\nexport const b = 2\n")
      const harness = yield* ServerHarness.make({
        scripts: [toolCalls(call("call-read", "Read", `{"path":"a.ts"}`)), text("a is 1")]
      })
      const client = yield* clientFor(harness, { workspace: new LocalWorkspace(dir) })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-read", text: "what is a?" }))
      assertCleanOk(transcript)
      assert.deepStrictEqual(shape(transcript), [
        "partial_tool_call",
        "tool_call_started",
        "exec",
        "tool_call_completed",
        "text_delta",
        "kv_set",
        "turn_ended",
        "checkpoint"
      ])
      const partials = transcript.events.filter((e): e is Extract<FrameEvent, { kind: "partial_tool_call" }> => e.kind === "partial_tool_call")
      assert.strictEqual(partials[0]!.tool, "readToolCall")
      assert.strictEqual(partials.map((p) => p.argsTextDelta).join(""), `{"path":"a.ts"}`)
      const exec = transcript.events.find((e) => e.kind === "exec")
      assert.deepStrictEqual(exec, { kind: "exec", id: 1, execId: Dialect.execIdOf(1, "call-read"), exec: "readArgs" })
      const tool = toolCallOf(completedTool(transcript, "call-read"))
      assert.strictEqual(tool.case, "readToolCall")
      if (tool.case === "readToolCall") {
        const result = tool.value.result!.result
        assert.strictEqual(result.case, "success")
        if (result.case === "success") {
          assert.deepStrictEqual(result.value.output, { case: "content", value: "export const a = 1\nexport const b = 2\n" })
          assert.strictEqual(result.value.totalLines, 2)
        }
      }
      const calls = yield* harness.llmCalls
      assert.strictEqual(calls.length, 2)
      assert.include(toolResultTexts(calls, 1).join("\n"), "export const a = 1")
      // The client answered with a result, then closed the exec's stream.
      assert.deepStrictEqual(
        transcript.appends.filter((a) => a.what.startsWith("exec")).map((a) => a.what),
        ["execClientMessage.readResult", "execClientControlMessage.streamClose"]
      )
    }))

  it.scopedLive("an edit (StrReplace): read, write, EditSuccess with a diff, the file on disk changed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-ws-")
      writeFileSync(join(dir, "b.ts"), "const greeting = \"hello\"\nconsole.log(greeting)\n")
      const harness = yield* ServerHarness.make({
        scripts: [
          toolCalls(call("call-edit", "StrReplace", JSON.stringify({ path: "b.ts", old_string: "\"hello\"", new_string: "\"goodbye\"" }))),
          text("changed")
        ]
      })
      const client = yield* clientFor(harness, { workspace: new LocalWorkspace(dir) })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-edit", text: "say goodbye" }))
      assertCleanOk(transcript)
      assert.deepStrictEqual(
        transcript.events.flatMap((e) => (e.kind === "exec" ? [e.exec] : [])),
        ["readArgs", "writeArgs"]
      )
      assert.strictEqual(readFileSync(join(dir, "b.ts"), "utf8"), "const greeting = \"goodbye\"\nconsole.log(greeting)\n")
      const tool = toolCallOf(completedTool(transcript, "call-edit"))
      assert.strictEqual(tool.case, "editToolCall")
      if (tool.case === "editToolCall") {
        const result = tool.value.result!.result
        assert.strictEqual(result.case, "success")
        if (result.case === "success") {
          assert.strictEqual(result.value.linesAdded, 1)
          assert.strictEqual(result.value.linesRemoved, 1)
          assert.include(result.value.diffString, "-const greeting = \"hello\"")
          assert.include(result.value.diffString, "+const greeting = \"goodbye\"")
        }
      }
      const calls = yield* harness.llmCalls
      assert.include(toolResultTexts(calls, 1).join("\n"), "Edited b.ts")
    }))

  it.scopedLive("a batch of workspace tools (Write, Ls, Glob, Grep content, Delete) all complete with typed results against the temp directory", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-ws-")
      mkdirSync(join(dir, "src"))
      writeFileSync(join(dir, "src", "main.ts"), "export const main = () => 42\n")
      writeFileSync(join(dir, "old.txt"), "bye\n")
      const harness = yield* ServerHarness.make({
        scripts: [
          toolCalls(
            call("c-write", "Write", JSON.stringify({ path: "src/new.ts", contents: "export const fresh = true\n" })),
            call("c-ls", "Ls", JSON.stringify({ path: "." })),
            call("c-glob", "Glob", JSON.stringify({ glob_pattern: "**/*.ts" })),
            call("c-grep", "Grep", JSON.stringify({ pattern: "main" })),
            call("c-delete", "Delete", JSON.stringify({ path: "old.txt" }))
          ),
          text("all done")
        ]
      })
      const client = yield* clientFor(harness, { workspace: new LocalWorkspace(dir) })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-batch", text: "do it all" }))
      assertCleanOk(transcript)
      const results = Object.fromEntries(["c-write", "c-ls", "c-glob", "c-grep", "c-delete"].map((id) => {
        const tool = toolCallOf(completedTool(transcript, id))
        const result = (tool.value as { result?: { result?: { case?: string } } } | undefined)?.result?.result?.case
        return [id, `${tool.case}:${result}`]
      }))
      assert.deepStrictEqual(results, {
        "c-write": "editToolCall:success",
        "c-ls": "lsToolCall:success",
        "c-glob": "globToolCall:success",
        "c-grep": "grepToolCall:success",
        "c-delete": "deleteToolCall:success"
      })
      assert.strictEqual(readFileSync(join(dir, "src", "new.ts"), "utf8"), "export const fresh = true\n")
      assert.isFalse(existsSync(join(dir, "old.txt")))
      const texts = toolResultTexts(yield* harness.llmCalls, 1).join("\n")
      assert.include(texts, "src/main.ts")
      assert.include(texts, "export const main = () => 42")
    }))

  it.scopedLive("an MCP tool from the run request: offered to the model, run on the client with mcp_args, its text back to the model", () =>
    Effect.gen(function*() {
      const seen: Array<{ name: string; args: unknown }> = []
      const workspace = scriptedWorkspace((exec): ReadonlyArray<ExecAnswer> => {
        if (exec.message.case !== "mcpArgs") return [{ case: "throw", error: `unexpected ${exec.message.case}` }]
        seen.push({ name: exec.message.value.name, args: Object.keys(exec.message.value.args) })
        return [{ case: "mcpResult", value: { result: { case: "success", value: { content: [{ content: { case: "text", value: { text: "sunny, 21 C" } } }] } } } }]
      })
      const mcpTools = [{
        name: "get_weather",
        providerIdentifier: "weather",
        toolName: "get_weather",
        description: "Weather for a city",
        inputSchemaJson: JSON.stringify({ type: "object", properties: { city: { type: "string" } }, required: ["city"] })
      }]
      const harness = yield* ServerHarness.make({
        scripts: [toolCalls(call("c-mcp", "mcp_weather_get_weather", JSON.stringify({ city: "Paris" }))), text("It is sunny.")]
      })
      const client = yield* clientFor(harness, { workspace })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-mcp", text: "weather?", mcpTools }))
      assertCleanOk(transcript)
      assert.deepStrictEqual(seen, [{ name: "get_weather", args: ["city"] }])
      const tool = toolCallOf(completedTool(transcript, "c-mcp"))
      assert.strictEqual(tool.case, "mcpToolCall")
      const calls = yield* harness.llmCalls
      assert.isTrue(calls[0]!.request.tools.some((t) => t.name === "mcp_weather_get_weather"), "the MCP tool was not offered")
      assert.include(toolResultTexts(calls, 1).join("\n"), "sunny, 21 C")
    }))

  it.scopedLive("a shell command streams: tool_call_delta with stdout, ShellResult success with the exit code", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-ws-")
      const harness = yield* ServerHarness.make({
        scripts: [toolCalls(call("call-shell", "Shell", JSON.stringify({ command: "printf 'hello from shell\\n'; printf 'oops\\n' 1>&2; exit 3" }))), text("ran")]
      })
      const client = yield* clientFor(harness, { workspace: new LocalWorkspace(dir) })
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-shell", text: "run it" }))
      assertCleanOk(transcript)
      const deltas = transcript.events.filter((e): e is Extract<FrameEvent, { kind: "tool_call_delta" }> => e.kind === "tool_call_delta")
      assert.strictEqual(deltas.filter((d) => d.stream === "stdout").map((d) => d.content).join(""), "hello from shell\n")
      assert.strictEqual(deltas.filter((d) => d.stream === "stderr").map((d) => d.content).join(""), "oops\n")
      const exec = transcript.events.find((e) => e.kind === "exec")
      assert.strictEqual(exec?.kind === "exec" ? exec.exec : undefined, "shellStreamArgs")
      const tool = toolCallOf(completedTool(transcript, "call-shell"))
      assert.strictEqual(tool.case, "shellToolCall")
      if (tool.case === "shellToolCall") {
        const result = tool.value.result!.result
        assert.strictEqual(result.case, "failure")
        if (result.case === "failure") {
          assert.strictEqual(result.value.exitCode, 3)
          assert.strictEqual(result.value.stdout, "hello from shell\n")
        }
      }
      // start, stdout, stderr, exit as separate appends, then stream_close.
      const execAppends = transcript.appends.filter((a) => a.what.startsWith("exec")).map((a) => a.what)
      assert.strictEqual(execAppends[0], "execClientMessage.shellStream")
      assert.strictEqual(execAppends[execAppends.length - 1], "execClientControlMessage.streamClose")
      assert.isAtLeast(execAppends.length, 5)
      const calls = yield* harness.llmCalls
      assert.include(toolResultTexts(calls, 1).join("\n"), "Exit code: 3")
    }))

  it.scopedLive("cancel mid-stream stops the model and ends the stream with code canceled", () =>
    Effect.gen(function*() {
      const stall: Script = { _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "Let me think" }] }
      const harness = yield* ServerHarness.make({ scripts: [stall] })
      const client = yield* clientFor(harness)
      const turn = client.turn({ conversationId: "conv-cancel", text: "think forever" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta"))
      yield* Effect.promise(() => turn.cancel("user_stopped_generation"))
      const transcript = yield* Effect.promise(() => turn.done)
      assert.deepStrictEqual(transcript.problems, [])
      assert.strictEqual(transcript.end?._tag, "Error")
      if (transcript.end?._tag === "Error") assert.strictEqual(transcript.end.code, "canceled")
      assert.isFalse(transcript.events.some((e) => e.kind === "turn_ended"))
      assert.strictEqual(yield* harness.llmInterrupted, 1)
    }))

  it.scopedLive("a RunSSE reconnect with the same request id receives the whole backlog, then the rest of the turn", () =>
    Effect.gen(function*() {
      let release: () => void = () => undefined
      const gate = new Promise<void>((r) => (release = r))
      const workspace = scriptedWorkspace(async (exec): Promise<ReadonlyArray<ExecAnswer>> => {
        await gate
        const path = exec.message.case === "readArgs" ? exec.message.value.path : ""
        return [{ case: "readResult", value: { result: { case: "success", value: { path, totalLines: 1, output: { case: "content", value: "x = 1\n" } } } } }]
      })
      const harness = yield* ServerHarness.make({ scripts: [toolCalls(call("call-r", "Read", `{"path":"x.py"}`)), text("x is 1")] })
      const client = yield* clientFor(harness, { workspace })
      const turn = client.turn({ conversationId: "conv-reconnect", text: "what is x?" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "exec"))
      const before = turn.frames.map((f) => f.event).filter((e) => e.kind !== "heartbeat")
      yield* Effect.promise(() => turn.reconnect())
      release()
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)
      assert.strictEqual(transcript.connections.length, 2)
      assert.deepStrictEqual(transcript.events.slice(0, before.length), before)
      assert.deepStrictEqual(shape(transcript), [
        "partial_tool_call",
        "tool_call_started",
        "exec",
        "tool_call_completed",
        "text_delta",
        "kv_set",
        "turn_ended",
        "checkpoint"
      ])
      // The replayed exec was not run twice.
      assert.strictEqual(transcript.appends.filter((a) => a.what === "execClientMessage.readResult").length, 1)
      assert.strictEqual(transcript.text, "x is 1")
    }))

  it.scopedLive("a follow-up user message during a tool call is queued and reaches the next model request", () =>
    Effect.gen(function*() {
      let release: () => void = () => undefined
      const gate = new Promise<void>((r) => (release = r))
      const workspace = scriptedWorkspace(async (): Promise<ReadonlyArray<ExecAnswer>> => {
        await gate
        return [{ case: "readResult", value: { result: { case: "success", value: { path: "f", totalLines: 1, output: { case: "content", value: "f\n" } } } } }]
      })
      const harness = yield* ServerHarness.make({ scripts: [toolCalls(call("c-f", "Read", `{"path":"f"}`)), text("answered both")] })
      const client = yield* clientFor(harness, { workspace })
      const turn = client.turn({ conversationId: "conv-follow", text: "read f" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "exec"))
      assert.strictEqual(yield* Effect.promise(() => turn.sendUserMessage("and also say hi")), 200)
      release()
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)
      const calls = yield* harness.llmCalls
      assert.include(JSON.stringify(calls[1]?.request.messages), "and also say hi")
    }))

  it.scopedLive("cancel during a running shell command aborts its exec; the stream ends canceled", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-ws-")
      const harness = yield* ServerHarness.make({ scripts: [toolCalls(call("c-sleep", "Shell", JSON.stringify({ command: "printf 'started\\n'; sleep 30" })))] })
      const client = yield* clientFor(harness, { workspace: new LocalWorkspace(dir) })
      const turn = client.turn({ conversationId: "conv-cancel-shell", text: "sleep" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "tool_call_delta"))
      yield* Effect.promise(() => turn.cancel())
      const transcript = yield* Effect.promise(() => turn.done)
      assert.deepStrictEqual(transcript.problems, [])
      assert.isTrue(transcript.events.some((e) => e.kind === "exec_abort" && e.id === 1), "no abort for the running exec")
      assert.strictEqual(transcript.end?._tag === "Error" ? transcript.end.code : undefined, "canceled")
    }))

  it.scopedLive("a provider failure ends the stream unavailable with PROVIDER_ERROR details, not retryable, and no turn_ended", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [{ _tag: "Fail", error: providerDown }] })
      const client = yield* clientFor(harness)
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-fail", text: "hi" }))
      assert.deepStrictEqual(transcript.problems, [])
      assert.isFalse(transcript.events.some((e) => e.kind === "turn_ended" || e.kind === "text_delta"))
      const end = transcript.end
      assert.strictEqual(end?._tag, "Error")
      if (end?._tag === "Error") {
        assert.strictEqual(end.code, "unavailable")
        assert.strictEqual(end.detail?.error, ErrorDetails_Error.PROVIDER_ERROR)
        assert.strictEqual(end.detail?.isRetryable, false)
      }
    }))

  it.scopedLive("a turn runs without any RunSSE; a RunSSE opened later gets the whole turn from its start to its end", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [chunkedText(["re", "play"], usage(1, 1))] })
      const client = yield* clientFor(harness)
      const requestId = "req-late"
      assert.strictEqual((yield* Effect.promise(() => client.append(requestId, 0, runRequestMessage({ conversationId: "conv-late", text: "hi" })))).status, 200)
      yield* harness.runner.awaitIdle("conv-late").pipe(Effect.timeout("10 seconds"), Effect.orDie)
      // Nobody acknowledges the blobs: the turn ends after the (test) blob-ack timeout, without a checkpoint.
      const late = yield* Effect.promise(() => readRunSse(harness.baseUrl, requestId))
      const events = late.events.filter((e) => e.kind !== "heartbeat")
      assert.deepStrictEqual(events.filter((e) => e.kind === "text_delta"), [{ kind: "text_delta", text: "replay" }])
      assert.isTrue(events.some((e) => e.kind === "turn_ended"))
      assert.deepStrictEqual(late.end, Dialect.EndStream.Ok())
    }))

  it.scopedLive("exec answers: a client throw becomes an error result; a stream_close before the result is not a result; exec_id echoed is accepted", () =>
    Effect.gen(function*() {
      let mode: "throw" | "closeFirst" = "throw"
      const workspace = scriptedWorkspace((): ReadonlyArray<ExecAnswer> => (mode === "throw" ? [{ case: "throw", error: "disk on fire" }] : []))
      const harness = yield* ServerHarness.make({
        scripts: [toolCalls(call("c-throw", "Read", `{"path":"t"}`)), text("saw the error"), toolCalls(call("c-close", "Read", `{"path":"u"}`)), text("saw u")]
      })
      const client = yield* clientFor(harness, { workspace, echoExecId: true })
      const thrown = yield* Effect.promise(() => client.run({ conversationId: "conv-throw", text: "read t" }))
      assertCleanOk(thrown)
      const tool = toolCallOf(completedTool(thrown, "c-throw"))
      assert.strictEqual(tool.case === "readToolCall" ? tool.value.result?.result.case : undefined, "error")
      const calls = yield* harness.llmCalls
      assert.include(toolResultTexts(calls, 1).join("\n"), "disk on fire")
      // The workspace answers nothing: the client's stream_close goes first, the result later by hand.
      mode = "closeFirst"
      const turn = client.turn({ conversationId: "conv-close", text: "read u" })
      const exec = yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "exec"))
      yield* Effect.promise(() => turn.waitForAppend((a) => a.what === "execClientControlMessage.streamClose"))
      assert.strictEqual(exec.event.kind === "exec" ? exec.event.id : -1, 1)
      assert.strictEqual(yield* Effect.promise(() => turn.send({
        message: {
          case: "execClientMessage",
          value: { id: 1, message: { case: "readResult", value: { result: { case: "success", value: { path: "u", totalLines: 1, output: { case: "content", value: "u\n" } } } } } }
        }
      })), 200)
      const closed = yield* Effect.promise(() => turn.done)
      assertCleanOk(closed)
      assert.strictEqual(closed.text, "saw u")
    }))

  it.scopedLive("the end of a turn in the real server's order: set_blob and turn_ended at once, the checkpoint only after every blob is acknowledged, then the end-stream", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [chunkedText(["held ", "acks"], usage(1, 1))], transport: { blobAckTimeoutMs: 20_000 } })
      const client = yield* clientFor(harness, { kvAnswers: "held" })
      const turn = client.turn({ conversationId: "conv-held-acks", text: "go" })
      // turn_ended arrives while no blob is acknowledged yet: Cursor shows the turn done at once.
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "turn_ended"))
      const before = turn.transcript()
      assert.isTrue(before.events.some((e) => e.kind === "kv_set"))
      assert.isFalse(before.events.some((e) => e.kind === "checkpoint"))
      assert.isUndefined(before.end)
      const held = turn.releaseKvAnswers()
      assert.strictEqual(held, before.events.filter((e) => e.kind === "kv_set").length)
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)
      assert.deepStrictEqual(shape(transcript), ["text_delta", "kv_set", "turn_ended", "checkpoint"])
      // every blob the checkpoint names was sent before it
      const sent = new Set(transcript.events.flatMap((e) => (e.kind === "kv_set" ? [e.blobId] : [])))
      const checkpoint = transcript.checkpoints[0]!
      for (const id of [...checkpoint.rootPromptMessagesJson, ...checkpoint.turns]) assert.isTrue(sent.has(toHex(id)))
    }))

  it.scopedLive("no checkpoint while a blob is unacknowledged, none when the client could not store one, none for acknowledgements that come after the timeout", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({
        scripts: [chunkedText(["one"], usage(1, 1)), chunkedText(["two"], usage(1, 1))],
        transport: { blobAckTimeoutMs: 400, queuedMessageGraceMs: 0 }
      })
      const client = yield* clientFor(harness, { kvAnswers: "held" })
      const setBlobResult = (id: number, error?: string) =>
        ({ message: { case: "kvClientMessage" as const, value: { id, message: { case: "setBlobResult" as const, value: error === undefined ? {} : { error: { message: error } } } } } })
      const kvSets = (t: Transcript) => t.events.flatMap((e) => (e.kind === "kv_set" ? [e.id] : []))

      // All but one acknowledged, then the last one fails: the turn ends, without a checkpoint.
      const failing = client.turn({ conversationId: "conv-ack-error", text: "go" })
      yield* Effect.promise(() => failing.waitFor((f) => f.event.kind === "turn_ended"))
      const ids = kvSets(failing.transcript())
      assert.isAbove(ids.length, 1)
      for (const id of ids.slice(0, -1)) assert.strictEqual(yield* Effect.promise(() => failing.send(setBlobResult(id))), 200)
      yield* Effect.sleep("150 millis")
      assert.isFalse(failing.transcript().events.some((e) => e.kind === "checkpoint"), "a checkpoint before its last blob was stored")
      yield* Effect.promise(() => failing.send(setBlobResult(ids.at(-1)!, "disk full")))
      const failed = yield* Effect.promise(() => failing.done)
      assert.strictEqual(failed.end?._tag, "Ok")
      assert.deepStrictEqual(shape(failed), ["text_delta", "kv_set", "turn_ended"])

      // Nothing acknowledged within the timeout; the acknowledgements that come later publish nothing.
      const late = client.turn({ conversationId: "conv-ack-late", text: "go" })
      yield* Effect.promise(() => late.waitFor((f) => f.event.kind === "turn_ended"))
      yield* Effect.sleep("600 millis")
      for (const id of kvSets(late.transcript())) yield* Effect.promise(() => late.send(setBlobResult(id)))
      const lateDone = yield* Effect.promise(() => late.done)
      assert.strictEqual(lateDone.end?._tag, "Ok")
      assert.deepStrictEqual(shape(lateDone), ["text_delta", "kv_set", "turn_ended"])
    }))

  it.scopedLive("ref_only context: a cancel sent while the run request's context is read back applies after the turn starts; the turn ends canceled with nothing answered", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [{ _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "never" }] }] })
      const client = yield* clientFor(harness, { kvAnswers: "held" })
      const rules = toBinary(RequestContextRulesPartSchema, create(RequestContextRulesPartSchema, { rules: [{ fullPath: "/w/r.mdc", content: "rule" }] }))
      const turn = client.turn({ conversationId: "conv-ref-cancel", text: "go", refOnlyContext: { rules } })
      // The get_blob is out and unanswered: the turn has not started.
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "kv_get"))
      assert.strictEqual((yield* harness.llmCalls).length, 0)
      // The cancel is numbered before the get_blob result (seqno 1, then 2), so the server hands
      // it on first; its acknowledgement waits for the start.
      const canceled = turn.cancel("user_stopped_generation")
      assert.strictEqual(turn.releaseKvAnswers(), 1)
      assert.strictEqual(yield* Effect.promise(() => canceled), 200)
      const transcript = yield* Effect.promise(() => turn.done)
      assert.deepStrictEqual(transcript.problems, [])
      assert.strictEqual(transcript.end?._tag === "Error" ? transcript.end.code : transcript.end?._tag, "canceled")
      // The start went in first (with the rules read back), then the cancel.
      const loaded = Option.getOrThrow(yield* harness.store.load("conv-ref-cancel"))
      assert.deepStrictEqual(loaded.state.messages.map((m) => m.role), ["user"])
      assert.deepStrictEqual(loaded.state.settings?.rules, [{ path: "/w/r.mdc", content: "rule" }])
    }))

  it.scopedLive("twenty turns at once on twenty conversations all end cleanly", () =>
    Effect.gen(function*() {
      // A generous blob-ack timeout: on a loaded 2-core machine 20 turns' acks can take seconds.
      const harness = yield* ServerHarness.make({
        scripts: Array.from({ length: 20 }, (_, i) => chunkedText([`answer `, `${i}`], usage(1, 1))),
        transport: { blobAckTimeoutMs: 20_000 }
      })
      const client = yield* clientFor(harness)
      const transcripts = yield* Effect.promise(() =>
        Promise.all(Array.from({ length: 20 }, (_, i) => client.run({ conversationId: `conv-many-${i}`, text: `question ${i}` })))
      )
      for (const transcript of transcripts) {
        assertCleanOk(transcript)
        assert.match(transcript.text, /^answer \d+$/)
        assert.deepStrictEqual(shape(transcript), ["text_delta", "kv_set", "turn_ended", "checkpoint"], JSON.stringify([shape(transcript), transcript.problems]))
      }
      assert.strictEqual(new Set(transcripts.map((t) => t.text)).size, 20)
    }))

  // Duplicate and shuffled appends must not change what the turn does.
  const deliveryRun = (dir: string, delivery: Delivery) =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({
        scripts: [
          toolCalls(
            call("call-1", "Read", `{"path":"a.ts"}`),
            call("call-2", "Shell", JSON.stringify({ command: "printf 'one\\n'" })),
            call("call-3", "Grep", JSON.stringify({ pattern: "const", output_mode: "files_with_matches" }))
          ),
          chunkedText(["all ", "done"], usage(3, 2))
        ]
      })
      const client = yield* clientFor(harness, { workspace: new LocalWorkspace(dir), delivery })
      const transcript = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-delivery", requestId: "req-delivery", messageId: "msg-1", text: "go" })
      )
      const calls = yield* harness.llmCalls
      return { transcript, calls }
    })

  it.scopedLive("duplicated and shuffled BidiAppends give the same transcript as in-order delivery", () =>
    Effect.gen(function*() {
      // One directory for every run: paths (shell cwd, grep root) end up in the blobs.
      const dir = yield* tempDirectory("cursor-byok-ws-")
      writeFileSync(join(dir, "a.ts"), "export const a = 1\n")
      const inOrder = yield* deliveryRun(dir, { _tag: "sequential" })
      assertCleanOk(inOrder.transcript)
      for (const seed of [1, 2, 3]) {
        const shuffled = yield* deliveryRun(dir, { _tag: "shuffled", seed, duplicateRate: 0.3 })
        assertCleanOk(shuffled.transcript)
        // The run really was out of order and duplicated (appends are recorded in sending order).
        const sent = shuffled.transcript.appends.slice().sort((a, b) => a.sentAt - b.sentAt).map((a) => a.seqno)
        assert.isTrue(sent.some((seqno, i) => i > 0 && seqno < sent[i - 1]!), "nothing was sent out of order")
        assert.isAbove(sent.length, new Set(sent).size, "nothing was sent twice")
        assert.deepStrictEqual(shuffled.transcript.events, inOrder.transcript.events)
        assert.deepStrictEqual(shuffled.calls.map((c) => c.request.messages), inOrder.calls.map((c) => c.request.messages))
      }
    }))

  it.scopedLive("heartbeats both ways while a tool runs: the server's keep the stream alive, the client's are acknowledged and change nothing", () =>
    Effect.gen(function*() {
      let release: () => void = () => undefined
      const gate = new Promise<void>((r) => (release = r))
      const workspace = scriptedWorkspace(async (): Promise<ReadonlyArray<ExecAnswer>> => {
        await gate
        return [{ case: "readResult", value: { result: { case: "success", value: { path: "x", totalLines: 1, output: { case: "content", value: "x\n" } } } } }]
      })
      const harness = yield* ServerHarness.make({ scripts: [toolCalls(call("c-hb", "Read", `{"path":"x"}`)), text("ok")], transport: { heartbeatMs: 20 } })
      const client = yield* clientFor(harness, { workspace, heartbeatMs: 5 })
      const turn = client.turn({ conversationId: "conv-hb", text: "read x" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "exec"))
      // The server keeps the stream alive while the turn waits on the client.
      let serverHeartbeats = 0
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "heartbeat" && ++serverHeartbeats >= 2))
      // A few client heartbeats acknowledged, then let the tool finish.
      let clientHeartbeats = 0
      yield* Effect.promise(() => turn.waitForAppend((a) => a.what === "clientHeartbeat" && a.status === 200 && ++clientHeartbeats >= 3))
      release()
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)
      assert.strictEqual(transcript.text, "ok")
    }))
})

// -----------------------------------------------------------------------------
// The official Connect client
// -----------------------------------------------------------------------------

describe("Connect framing against the official @connectrpc/connect-node client", () => {
  it.scopedLive("the official client posts BidiAppends, reads the RunSSE stream to its end-stream {}, and gets unary errors", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [chunkedText(["official ", "client"], usage(2, 2))] })
      const bidi = createClient(BidiService, createConnectTransport({ baseUrl: harness.baseUrl, httpVersion: "1.1" }))
      const agent = createClient(AgentService, connectShimTransport(harness.baseUrl))
      const requestId = "req-official"
      const run = runRequestMessage({ conversationId: "conv-official", text: "hello", messageId: "m1" })
      const appended = yield* Effect.promise(() =>
        bidi.bidiAppend({ requestId: { requestId }, appendSeqno: 0n, data: toHex(toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, run))) })
      )
      assert.deepStrictEqual(toBinary(BidiService.method.bidiAppend.output, appended), new Uint8Array())
      // The official client does not store blobs: acknowledge them as they come, with our own appends.
      const client = yield* clientFor(harness)
      let seqno = 1
      const messages: Array<AgentServerMessage> = []
      yield* Effect.promise(async () => {
        for await (const message of agent.runSSE({ requestId }, { timeoutMs: 10_000 })) {
          messages.push(message)
          if (message.message.case === "kvServerMessage") {
            await client.append(requestId, seqno++, {
              message: { case: "kvClientMessage", value: { id: message.message.value.id, message: { case: "setBlobResult", value: {} } } }
            })
          }
        }
      })
      const texts = messages.flatMap((m) =>
        m.message.case === "interactionUpdate" && m.message.value.message.case === "textDelta" ? [m.message.value.message.value.text] : []
      )
      assert.deepStrictEqual(texts, ["official client"])
      assert.isTrue(messages.some((m) => m.message.case === "conversationCheckpointUpdate"))
      // A unary error: HTTP status and JSON {code, message}, as the official client reads them.
      const refused = yield* Effect.promise(() => bidi.bidiAppend({ appendSeqno: 0n, data: "00" }).then(() => undefined, (error: unknown) => error))
      assert.instanceOf(refused, ConnectError)
      assert.strictEqual((refused as ConnectError).code, Code.InvalidArgument)
    }))

  it.scopedLive("the official client reads a canceled turn's end-stream error as ConnectError canceled", () =>
    Effect.gen(function*() {
      const stall: Script = { _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "…" }] }
      const harness = yield* ServerHarness.make({ scripts: [stall] })
      const agent = createClient(AgentService, connectShimTransport(harness.baseUrl))
      const client = yield* clientFor(harness)
      const requestId = "req-official-cancel"
      yield* Effect.promise(() => client.append(requestId, 0, runRequestMessage({ conversationId: "conv-official-cancel", text: "hi" })))
      const outcome = yield* Effect.promise(async () => {
        try {
          for await (const message of agent.runSSE({ requestId }, { timeoutMs: 10_000 })) {
            if (message.message.case === "interactionUpdate" && message.message.value.message.case === "textDelta") {
              await client.append(requestId, 1, { message: { case: "conversationAction", value: { action: { case: "cancelAction", value: { reason: "user_stopped_generation" } } } } })
            }
          }
          return "ended without error"
        } catch (error) {
          return error
        }
      })
      assert.instanceOf(outcome, ConnectError)
      assert.strictEqual((outcome as ConnectError).code, Code.Canceled)
    }))

  it.scopedLive("without the content-type shim the official client refuses RunSSE's text/event-stream (by design: Cursor expects it)", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [text("x")], transport: { heartbeatMs: 50 } })
      const agent = createClient(AgentService, createConnectTransport({ baseUrl: harness.baseUrl, httpVersion: "1.1" }))
      const outcome = yield* Effect.promise(async () => {
        try {
          for await (const _ of agent.runSSE({ requestId: "req-no-shim" }, { timeoutMs: 10_000 })) break
          return "read"
        } catch (error) {
          return error
        }
      })
      assert.instanceOf(outcome, ConnectError)
    }))
})

/**
 * Cursor reuses request ids. A finished request id that starts a new turn in the same
 * conversation must run that turn (its Start input must not look already applied), whichever
 * of RunSSE and the run request comes first.
 */
describe("Request id reuse", () => {
  it.scopedLive("a request id reused for a new turn, RunSSE first (after the old end was delivered): the new RunSSE gets the new turn, not the old replay", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [text("old turn", usage(1, 1)), text("new turn", usage(1, 1))], transport: { heartbeatMs: 50 } })
      const client = yield* clientFor(harness)
      const first = yield* Effect.promise(() => client.run({ conversationId: "conv-reuse", requestId: "req-reuse", text: "one" }))
      assertCleanOk(first)
      assert.strictEqual(first.text, "old turn")
      const second = yield* Effect.promise(() => client.run({ conversationId: "conv-reuse", requestId: "req-reuse", text: "two", order: "runSseFirst" }))
      assertCleanOk(second)
      assert.strictEqual(second.text, "new turn")
    }))

  it.scopedLive("a request id reused for a new turn, run request first: the new turn streams", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [text("old turn", usage(1, 1)), text("new turn", usage(1, 1))] })
      const client = yield* clientFor(harness, { turnTimeoutMs: 3_000 })
      const first = yield* Effect.promise(() => client.run({ conversationId: "conv-reuse2", requestId: "req-reuse2", text: "one" }))
      assertCleanOk(first)
      const second = yield* Effect.promise(() => client.run({ conversationId: "conv-reuse2", requestId: "req-reuse2", text: "two", order: "runRequestFirst" }))
      assertCleanOk(second)
      assert.strictEqual(second.text, "new turn")
    }))
})

/**
 * RunSSE's response headers leave with its first frame; a heartbeat goes out at once so that a
 * client that awaits the response (fetch resolves on headers) before posting its run request
 * is not held up for `heartbeatMs` (5 s) per turn.
 */
describe("RunSSE responsiveness", () => {
  it.scopedLive("RunSSE answers its headers at once, before the turn has anything to say", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ scripts: [text("x")] })
      const status = yield* Effect.promise(() =>
        fetch(`${harness.baseUrl}/agent.v1.AgentService/RunSSE`, {
          method: "POST",
          headers: { "content-type": "application/connect+proto", "connect-protocol-version": "1" },
          body: runSseBody("req-headers"),
          // Well under the 5 s heartbeat: the headers should not wait for it.
          signal: AbortSignal.timeout(2_000)
        }).then((response) => {
          void response.body?.cancel()
          return response.status
        }, (error: Error) => error.name)
      )
      assert.strictEqual(status, 200)
    }))
})
