/**
 * The Cursor dialect: every client message case we decode and every server message case we
 * encode survives a trip through protobuf bytes with its ids, seqnos, arguments, error codes
 * and stop reasons intact; bad bytes give typed errors and never throw.
 */
import { mcpToolsOf } from "../src/Loop.js"
import { createHash } from "node:crypto"
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc } from "effect"
import {
  AgentClientMessageSchema,
  AgentMode,
  ConversationStateStructureSchema,
  ConversationStepSchema,
  ConversationTurnStructureSchema,
  ReadResultSchema,
  ShellStreamSchema,
  TodoItemSchema,
  TodoStatus,
  ToolCallDeltaSchema,
  ToolCallSchema,
  UserMessageSchema
} from "../src/gen/agent/v1/agent_pb.js"
import { RequestContextMcpsPartSchema, RequestContextRulesPartSchema } from "../src/gen/agent/v1/agent_pb.js"
import type { AgentServerMessage } from "../src/gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiRequestIdSchema, ErrorDetails_Error } from "../src/gen/aiserver/v1/aiserver_pb.js"
import {
  blobIdOf,
  bytesToHex,
  carriedCheckpointOf,
  canceled,
  completeExec,
  decodeBidiAppend,
  decodeEndStream,
  decodeRunSseRequest,
  DialectError,
  encodeAbortAll,
  encodeCheckpoint,
  encodeEndStream,
  encodeExec,
  encodeGetBlob,
  encodeHeartbeat,
  encodeResponseEvent,
  encodeSetBlob,
  encodeToolCompleted,
  encodeToolDelta,
  encodeToolStarted,
  encodeTurnEnd,
  EndStream,
  fromFrame,
  initialCorrelation,
  LENGTH_NOTICE,
  projectCheckpoint,
  providerFailure,
  requestIdOfSettings,
  resolveExec,
  resolveKv,
  toFrame,
  todosOf,
  turnInputOf,
  turnUserMessageOf,
  withContextParts,
  withRequestId,
  workspacePathsOf
} from "../src/Dialect.js"
import type { BidiEnvelope, ClientMessage, TurnCorrelation } from "../src/Dialect.js"
import type { AssistantMessage, Message, ResponseEvent, Usage } from "../src/Llm.js"
import { startTool } from "../src/Tools.js"

// =============================================================================
// Helpers
// =============================================================================

/** A blob id computed independently of the code under test. */
const sha256Of = (data: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(data).digest())

type ClientInit = NonNullable<MessageInitShape<typeof AgentClientMessageSchema>["message"]>

const appendBody = (message: ClientInit, options: { requestId?: string; seqno?: bigint; binary?: boolean } = {}): Uint8Array => {
  const bytes = toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, { message }))
  return toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, {
    requestId: { requestId: options.requestId ?? "req-1" },
    appendSeqno: options.seqno ?? 0n,
    ...(options.binary === true ? { dataBinary: bytes } : { data: bytesToHex(bytes) })
  }))
}

const decodeOk = (body: Uint8Array): BidiEnvelope => {
  const decoded = decodeBidiAppend(body)
  if (Either.isLeft(decoded)) return assert.fail(`expected an envelope, got ${decoded.left.reason}: ${decoded.left.message}`)
  return decoded.right
}

const decodeMessage = <Tag extends ClientMessage["_tag"]>(tag: Tag, message: ClientInit): Extract<ClientMessage, { _tag: Tag }> => {
  const envelope = decodeOk(appendBody(message))
  assert.strictEqual(envelope.message._tag, tag)
  return envelope.message as Extract<ClientMessage, { _tag: Tag }>
}

const decodeError = (body: Uint8Array): DialectError => {
  const decoded = decodeBidiAppend(body)
  if (Either.isRight(decoded)) return assert.fail(`expected an error, got ${decoded.right.message._tag}`)
  assert.instanceOf(decoded.left, DialectError)
  return decoded.left
}

/** Encodes to bytes and back: what the client will actually see. */
const wire = (message: AgentServerMessage): AgentServerMessage => {
  const decoded = fromFrame(toFrame(message))
  if (Either.isLeft(decoded)) return assert.fail(decoded.left.message)
  return decoded.right
}

const updateOf = (message: AgentServerMessage) => {
  const m = wire(message).message
  if (m.case !== "interactionUpdate") return assert.fail(`expected interaction_update, got ${m.case}`)
  return m.value.message
}

const usage = (input: number, output: number, cacheRead = 0, cacheWrite = 0, reasoning = 0): Usage => ({ input, output, cacheRead, cacheWrite, reasoning })

const assistant = (content: AssistantMessage["content"], u: Usage, stopReason: AssistantMessage["stopReason"] = "stop"): AssistantMessage => ({
  role: "assistant",
  content,
  api: "test",
  provider: "fake",
  model: "m",
  usage: u,
  stopReason
})

// =============================================================================
// Decoding
// =============================================================================

describe("decodeBidiAppend", () => {
  it("keeps the request id and an exact int64 seqno, from hex data or data_binary", () => {
    const big = 9_007_199_254_740_993n // 2^53 + 1: not representable as a JS number
    const hex = decodeOk(appendBody({ case: "clientHeartbeat", value: {} }, { requestId: "r-42", seqno: big }))
    assert.strictEqual(hex.requestId, "r-42")
    assert.strictEqual(hex.appendSeqno, big)
    assert.strictEqual(hex.message._tag, "Heartbeat")
    const binary = decodeOk(appendBody({ case: "clientHeartbeat", value: {} }, { seqno: 3n, binary: true }))
    assert.strictEqual(binary.appendSeqno, 3n)
    assert.strictEqual(binary.message._tag, "Heartbeat")
    // seq 0 is the proto3 default and absent on the wire
    assert.strictEqual(decodeOk(appendBody({ case: "clientHeartbeat", value: {} })).appendSeqno, 0n)
  })

  it("the real heartbeat bytes 3a00 decode", () => {
    const body = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId: "r" }, appendSeqno: 5n, data: "3a00" }))
    assert.strictEqual(decodeOk(body).message._tag, "Heartbeat")
  })

  it("a run request becomes the loop's Start input plus the turn's protocol facts", () => {
    const state = create(ConversationStateStructureSchema, { turns: [new Uint8Array([1, 2])], mode: AgentMode.AGENT })
    const run = decodeMessage("RunRequest", {
      case: "runRequest",
      value: {
        conversationId: "conv-9",
        conversationState: state,
        modelDetails: { modelId: "fallback-model" },
        requestedModel: { modelId: "claude-x", maxMode: true, parameters: [{ id: "thinking_effort", value: "high" }] },
        mcpTools: {
          mcpTools: [{ name: "gh", description: "GitHub", providerIdentifier: "github", toolName: "search", inputSchemaJson: "{\"type\":\"object\"}" }]
        },
        customSystemPrompt: "be brief",
        action: {
          requestContextParts: { mcpsBlobId: new Uint8Array([9]) },
          action: {
            case: "userMessageAction",
            value: {
              userMessage: { text: "fix the bug", messageId: "msg-1", mode: AgentMode.ASK },
              requestContext: {
                env: { workspacePaths: ["/w"], projectFolder: "/w", osVersion: "linux", shell: "bash", timeZone: "UTC", terminalsFolder: "/t" },
                rules: [{ fullPath: ".cursor/rules/a.mdc", content: "use tabs" }],
                fileContents: { "/w/b.ts": "b", "/w/a.ts": "a" }
              }
            }
          }
        }
      }
    })
    assert.strictEqual(run.conversationId, "conv-9")
    assert.strictEqual(run.model, "claude-x")
    assert.strictEqual(run.mode, "ask")
    assert.deepStrictEqual(run.workspace.workspacePaths, ["/w"])
    assert.deepStrictEqual(run.mcpTools.map((tool) => [tool.name, tool.providerIdentifier, tool.toolName]), [["gh", "github", "search"]])
    assert.deepStrictEqual(run.mcpTools[0]?.inputSchema, { type: "object" })
    assert.deepStrictEqual(Array.from(run.conversationState?.turns[0] ?? []), [1, 2])
    assert.deepStrictEqual(Array.from(run.requestContextParts?.mcpsBlobId ?? []), [9])
    if (run.action._tag !== "StartTurn") return assert.fail("expected StartTurn")
    const { start } = run.action
    assert.strictEqual(run.action.userMessageId, "msg-1")
    assert.deepStrictEqual(start.message, { role: "user", content: [{ type: "text", text: "fix the bug" }] })
    assert.deepStrictEqual(start.context.map((block) => (block.type === "text" ? block.text.split("\n")[0] : "")), [
      "<attached_file path=\"/w/a.ts\">",
      "<attached_file path=\"/w/b.ts\">"
    ])
    assert.strictEqual(start.settings.model, "claude-x")
    assert.strictEqual(start.settings.mode, "ask")
    assert.strictEqual(start.settings.customSystemPrompt, "be brief")
    assert.deepStrictEqual(start.settings.rules, [{ path: ".cursor/rules/a.mdc", content: "use tabs" }])
    assert.deepStrictEqual(start.settings.modelParameters, { thinking_effort: "high" })
    assert.deepStrictEqual(mcpToolsOf(start.settings).map((tool) => tool.name), ["gh"])
    // settings must be plain JSON: the store persists them
    assert.deepStrictEqual(JSON.parse(JSON.stringify(start.settings)), start.settings)
  })

  it("a run request's checkpoint, as bytes: absent names no history (the store's continues); present, the ids of its root prompt messages, none included", () => {
    const runWith = (conversationState?: MessageInitShape<typeof ConversationStateStructureSchema>) =>
      decodeMessage("RunRequest", {
        case: "runRequest",
        value: {
          conversationId: "c",
          ...(conversationState !== undefined ? { conversationState } : {}),
          action: { action: { case: "userMessageAction", value: { userMessage: { text: "hi", messageId: "m" } } } }
        }
      })
    const historyOf = (run: ReturnType<typeof runWith>) => {
      const input = turnInputOf(run, "req")
      if (input?._tag !== "Start") return assert.fail(`expected Start, got ${input?._tag}`)
      return input.clientHistory
    }
    // protobuf-es decodes an absent message field as undefined, and a present empty one (0a00) as a message.
    const absent = runWith()
    assert.isUndefined(absent.conversationState)
    assert.isUndefined(historyOf(absent))
    const empty = runWith({})
    assert.isDefined(empty.conversationState)
    assert.deepStrictEqual(historyOf(empty), { promptIds: [] })
    assert.deepStrictEqual(historyOf(runWith({ rootPromptMessagesJson: [new Uint8Array([0xab, 0x01])], turns: [new Uint8Array([1])] })), { promptIds: ["ab01"] })
  })

  it("a resume run request carries no user message", () => {
    const run = decodeMessage("RunRequest", { case: "runRequest", value: { conversationId: "c", action: { action: { case: "resumeAction", value: {} } } } })
    assert.strictEqual(run.action._tag, "Resume")
  })

  it("a start-plan run request is a user turn in plan mode", () => {
    const run = decodeMessage("RunRequest", {
      case: "runRequest",
      value: { action: { action: { case: "startPlanAction", value: { userMessage: { text: "plan it", messageId: "p1", mode: AgentMode.AGENT } } } } }
    })
    assert.strictEqual(run.mode, "plan")
    if (run.action._tag !== "StartTurn") return assert.fail("expected StartTurn")
    assert.strictEqual(run.action.start.settings.mode, "plan")
    assert.strictEqual(run.action.userMessageId, "p1")
  })

  it("conversation actions: a follow-up user message and a cancel (even with an empty reason)", () => {
    const follow = decodeMessage("UserMessage", {
      case: "conversationAction",
      value: { action: { case: "userMessageAction", value: { userMessage: { text: "and tests too", messageId: "m2" } } } }
    })
    assert.strictEqual(follow.messageId, "m2")
    assert.deepStrictEqual(follow.message.content, [{ type: "text", text: "and tests too" }])
    assert.strictEqual(decodeMessage("Cancel", { case: "conversationAction", value: { action: { case: "cancelAction", value: { reason: "user_stopped_generation" } } } }).reason, "user_stopped_generation")
    assert.strictEqual(decodeMessage("Cancel", { case: "conversationAction", value: { action: { case: "cancelAction", value: {} } } }).reason, "")
  })

  it("exec results keep id, exec_id and the typed result; shell stream events are chunks with a terminal flag", () => {
    const read = decodeMessage("ExecResult", {
      case: "execClientMessage",
      value: { id: 7, execId: "exec-7-call", message: { case: "readResult", value: create(ReadResultSchema, { result: { case: "success", value: { path: "/a", output: { case: "content", value: "hi" } } } }) } }
    })
    assert.strictEqual(read.id, 7)
    assert.strictEqual(read.execId, "exec-7-call")
    assert.strictEqual(read.reply.case, "readResult")
    // the IDE sends no exec_id: it decodes as undefined, not ""
    const noExecId = decodeMessage("ExecResult", { case: "execClientMessage", value: { id: 8, message: { case: "writeResult", value: {} } } })
    assert.isUndefined(noExecId.execId)
    for (const [event, terminal] of [
      [{ case: "start", value: {} }, false],
      [{ case: "stdout", value: { data: "out" } }, false],
      [{ case: "stderr", value: { data: "err" } }, false],
      [{ case: "exit", value: { code: 3, cwd: "/w" } }, true],
      [{ case: "backgrounded", value: { shellId: 2 } }, true]
    ] as const) {
      const chunk = decodeMessage("ExecStream", { case: "execClientMessage", value: { id: 2, message: { case: "shellStream", value: create(ShellStreamSchema, { event }) } } })
      assert.strictEqual(chunk.id, 2)
      assert.strictEqual(chunk.reply.value.event.case, event.case)
      assert.strictEqual(chunk.terminal, terminal)
    }
    for (const kind of ["deleteResult", "grepResult", "lsResult", "mcpResult", "shellResult"] as const) {
      assert.strictEqual(decodeMessage("ExecResult", { case: "execClientMessage", value: { id: 1, message: { case: kind, value: {} } } as never }).reply.case, kind)
    }
  })

  it("exec control: stream_close is its own message (never a result), throw keeps its error code", () => {
    assert.strictEqual(decodeMessage("ExecStreamClose", { case: "execClientControlMessage", value: { message: { case: "streamClose", value: { id: 4 } } } }).id, 4)
    const thrown = decodeMessage("ExecThrow", { case: "execClientControlMessage", value: { message: { case: "throw", value: { id: 5, error: "EACCES", errorCode: "E_PERM" } } } })
    assert.deepStrictEqual([thrown.id, thrown.error, thrown.errorCode], [5, "EACCES", "E_PERM"])
    assert.strictEqual(decodeMessage("ExecHeartbeat", { case: "execClientControlMessage", value: { message: { case: "heartbeat", value: { id: 6 } } } }).id, 6)
  })

  it("KV results: blob data read back, set acknowledgements and their errors", () => {
    const got = decodeMessage("KvResult", { case: "kvClientMessage", value: { id: 3, message: { case: "getBlobResult", value: { blobData: new Uint8Array([1, 2, 3]) } } } })
    assert.deepStrictEqual([got.id, got.kind, Array.from(got.data ?? [])], [3, "getBlob", [1, 2, 3]])
    const set = decodeMessage("KvResult", { case: "kvClientMessage", value: { id: 0, message: { case: "setBlobResult", value: {} } } })
    assert.deepStrictEqual([set.id, set.kind, set.error], [0, "setBlob", undefined])
    const failed = decodeMessage("KvResult", { case: "kvClientMessage", value: { id: 1, message: { case: "setBlobResult", value: { error: { message: "disk full" } } } } })
    assert.strictEqual(failed.error, "disk full")
  })

  it("interaction responses keep their id", () => {
    assert.strictEqual(decodeMessage("InteractionResponse", { case: "interactionResponse", value: { id: 11 } }).id, 11)
  })

  it("a oneof case from a newer client is Unknown with its field number, not an error", () => {
    // AgentClientMessage field 9 is not in our schema (8, prewarm_request, now is): length-delimited, empty.
    const bytes = new Uint8Array([0x4a, 0x00])
    const body = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId: "r" }, data: bytesToHex(bytes) }))
    const message = decodeOk(body).message
    assert.deepStrictEqual(message, { _tag: "Unknown", where: "AgentClientMessage", fields: [9] } as never)
    // a shell stream event from a newer client (hook_context, 8) is not a chunk we can use
    const stream = new Uint8Array([0x08, 0x02, 0x72, 0x02, 0x42, 0x00])
    const streamBody = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId: "r" }, data: bytesToHex(new Uint8Array([0x12, stream.length, ...stream])) }))
    assert.deepStrictEqual(decodeOk(streamBody).message, { _tag: "Unknown", where: "ShellStream", fields: [8] } as never)
    // conversation_action.summarize_action (4) likewise
    const action = new Uint8Array([0x22, 0x02, 0x22, 0x00])
    const actionBody = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId: "r" }, data: bytesToHex(action) }))
    const unknown = decodeOk(actionBody).message
    assert.strictEqual(unknown._tag, "Unknown")
    if (unknown._tag === "Unknown") assert.deepStrictEqual(unknown.fields, [4])
  })

  it("bad input gives a typed error with a reason", () => {
    const withData = (data: string, requestId = "r") =>
      toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId }, data }))
    assert.strictEqual(decodeError(withData("3a0")).reason, "badHex")
    assert.strictEqual(decodeError(withData("zz00")).reason, "badHex")
    // "foo" as a run request: the invalid append seen in real traffic
    assert.strictEqual(decodeError(withData("0a03666f6f")).reason, "badProtobuf")
    assert.strictEqual(decodeError(withData("3a00", "")).reason, "missingField")
    assert.strictEqual(decodeError(withData("")).reason, "missingField")
    assert.strictEqual(decodeError(new Uint8Array([0xff, 0xff, 0xff])).reason, "badProtobuf")
    // a heartbeat-free empty AgentClientMessage has no case at all
    assert.strictEqual(decodeError(toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId: "r" }, dataBinary: new Uint8Array([0x08, 0x01]) }))).reason, "badProtobuf")
  })

  const arbitraryBytes = fc.uint8Array({ maxLength: 256 })
  it.prop("never throws on random bytes: a typed error or a valid envelope", [arbitraryBytes], ([bytes]) => {
    const decoded = decodeBidiAppend(bytes)
    if (Either.isLeft(decoded)) assert.instanceOf(decoded.left, DialectError)
    else assert.isTrue(decoded.right.requestId !== "" && decoded.right.appendSeqno >= 0n)
  }, { fastCheck: { numRuns: 2000 } })

  const seeds: ReadonlyArray<Uint8Array> = [
    appendBody({ case: "clientHeartbeat", value: {} }, { seqno: 9n }),
    appendBody({ case: "runRequest", value: { conversationId: "c", action: { action: { case: "userMessageAction", value: { userMessage: { text: "hello", messageId: "m" } } } } } }),
    appendBody({ case: "execClientMessage", value: { id: 3, message: { case: "shellStream", value: create(ShellStreamSchema, { event: { case: "stdout", value: { data: "x" } } }) } } }, { binary: true })
  ]
  it.prop(
    "never throws on mutated valid appends",
    [fc.integer({ min: 0, max: seeds.length - 1 }), fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 6 }), fc.nat()],
    ([seed, edits, cut]) => {
      const bytes = Uint8Array.from(seeds[seed]!)
      for (const [position, value] of edits) bytes[position % bytes.length] = value
      const mutated = bytes.slice(0, bytes.length - (cut % 4))
      const decoded = decodeBidiAppend(mutated)
      if (Either.isLeft(decoded)) assert.instanceOf(decoded.left, DialectError)
      else assert.isString(decoded.right.message._tag)
    },
    { fastCheck: { numRuns: 2000 } }
  )
})

describe("decodeRunSseRequest", () => {
  it("reads the request id, and rejects an empty one", () => {
    assert.deepStrictEqual(decodeRunSseRequest(toBinary(BidiRequestIdSchema, create(BidiRequestIdSchema, { requestId: "abc" }))), Either.right("abc"))
    assert.isTrue(Either.isLeft(decodeRunSseRequest(new Uint8Array())))
    assert.isTrue(Either.isLeft(decodeRunSseRequest(new Uint8Array([0x0a, 0x05, 0x61]))))
  })
})

// =============================================================================
// Encoding
// =============================================================================

describe("encodeResponseEvent", () => {
  const mcpTools = [] as const
  const run = (correlation: TurnCorrelation, callId: string, events: ReadonlyArray<ResponseEvent>, startMs = 1000) => {
    let current = correlation
    const out: Array<AgentServerMessage> = []
    events.forEach((event, i) => {
      const encoded = encodeResponseEvent(current, callId, event, { nowMs: startMs + i * 100, mcpTools })
      current = encoded.correlation
      out.push(...encoded.messages)
    })
    return { correlation: current, messages: out }
  }

  it("text, thinking and a streamed tool call map to Cursor's updates with ids and arguments intact", () => {
    const args = "{\"path\":\"src/ä.ts\",\"limit\":5}"
    const toolCall = { type: "toolCall" as const, id: "toolu_01", name: "Read", arguments: args }
    const { correlation, messages } = run(initialCorrelation("req"), "conv/t1/c1", [
      { _tag: "Start", model: "m" },
      { _tag: "ThinkingStart", index: 0 },
      { _tag: "ThinkingDelta", index: 0, delta: "hmm" },
      { _tag: "ThinkingEnd", index: 0 },
      { _tag: "TextStart", index: 1 },
      { _tag: "TextDelta", index: 1, delta: "Let me look." },
      { _tag: "TextEnd", index: 1 },
      { _tag: "ToolCallStart", index: 2, id: "toolu_01", name: "Read" },
      { _tag: "ToolCallDelta", index: 2, delta: args.slice(0, 9) },
      { _tag: "ToolCallDelta", index: 2, delta: args.slice(9) },
      { _tag: "ToolCallEnd", index: 2, toolCall },
      { _tag: "Done", reason: "toolUse", message: assistant([toolCall], usage(10, 5, 2, 1, 3), "toolUse") }
    ])
    const updates = messages.map(updateOf)
    assert.deepStrictEqual(updates.map((u) => u.case), ["thinkingDelta", "thinkingCompleted", "textDelta", "partialToolCall", "partialToolCall", "partialToolCall"])
    const [thinking, completed, text, first, ...deltas] = updates
    assert.strictEqual(thinking?.case === "thinkingDelta" ? thinking.value.text : "", "hmm")
    assert.strictEqual(completed?.case === "thinkingCompleted" ? completed.value.thinkingDurationMs : -1, 200)
    assert.strictEqual(text?.case === "textDelta" ? text.value.text : "", "Let me look.")
    if (first?.case !== "partialToolCall") return assert.fail("expected partial_tool_call")
    assert.strictEqual(first.value.callId, "toolu_01")
    assert.strictEqual(first.value.modelCallId, "conv/t1/c1")
    assert.strictEqual(first.value.argsTextDelta, "")
    assert.strictEqual(first.value.toolCall?.tool.case, "readToolCall")
    const joined = deltas.map((u) => (u.case === "partialToolCall" ? u.value.argsTextDelta : "")).join("")
    assert.strictEqual(joined, args)
    assert.deepStrictEqual(correlation.usage, usage(10, 5, 2, 1, 3))
    assert.strictEqual(correlation.lastStopReason, "toolUse")
  })

  it("turn_ended carries usage summed over every model call, and a length stop leaves a notice", () => {
    const first = run(initialCorrelation("req"), "c1", [{ _tag: "Done", reason: "toolUse", message: assistant([], usage(100, 20, 5, 1, 2), "toolUse") }])
    const second = run(first.correlation, "c2", [{ _tag: "Done", reason: "length", message: assistant([{ type: "text", text: "..." }], usage(30, 40, 7, 0, 1), "length") }])
    assert.strictEqual(second.correlation.lastStopReason, "length")
    const end = encodeTurnEnd(second.correlation, { _tag: "Final", reason: "length" })
    assert.strictEqual(end.end._tag, "Ok")
    const [notice, ended] = end.messages.map(updateOf)
    assert.deepStrictEqual(notice?.case === "textDelta" ? [notice.value.text, notice.value.isServerNotice] : [], [LENGTH_NOTICE, true])
    if (ended?.case !== "turnEnded") return assert.fail("expected turn_ended")
    assert.deepStrictEqual(
      [ended.value.inputTokens, ended.value.outputTokens, ended.value.cacheReadTokens, ended.value.cacheWriteTokens, ended.value.reasoningTokens],
      [130n, 60n, 12n, 1n, 3n]
    )
    assert.deepStrictEqual(encodeTurnEnd(second.correlation, { _tag: "Final", reason: "stop" }).messages.map((m) => updateOf(m).case), ["turnEnded"])
  })

  it("a failure ends the stream with a provider error and no turn_ended", () => {
    const end = encodeTurnEnd(initialCorrelation("r"), { _tag: "Failed", error: "429 from provider", retryable: true })
    assert.deepStrictEqual(end.messages, [])
    assert.deepStrictEqual(end.end, providerFailure("429 from provider"))
  })

  it("a heartbeat is an interaction update", () => {
    assert.strictEqual(updateOf(encodeHeartbeat()).case, "heartbeat")
  })
})

describe("tool calls and execs", () => {
  const ids = { toolCallId: "toolu_9", modelCallId: "c/1" }

  it("exec ids count from 1 per request and every exec is resolvable by id or exec_id", () => {
    let correlation = initialCorrelation("req")
    const read = startTool({ type: "toolCall", id: "toolu_9", name: "Read", arguments: "{\"path\":\"a\"}" }, { mcpTools: [], todos: [] })
    if (read.step._tag !== "Exec") return assert.fail("expected an exec")
    const first = encodeExec(correlation, { operationId: "op-1", toolCallId: "toolu_9", exec: read.step.exec })
    const second = encodeExec(first.correlation, { operationId: "op-2", toolCallId: "toolu_10", exec: read.step.exec })
    correlation = second.correlation
    assert.deepStrictEqual([first.exec.id, second.exec.id], [1, 2])
    const m = wire(first.message).message
    if (m.case !== "execServerMessage") return assert.fail("expected exec_server_message")
    assert.deepStrictEqual([m.value.id, m.value.execId, m.value.message.case], [1, first.exec.execId, "readArgs"])
    assert.strictEqual(m.value.message.case === "readArgs" ? m.value.message.value.toolCallId : "", "toolu_9")
    assert.strictEqual(resolveExec(correlation, 2, undefined)?.operationId, "op-2")
    assert.strictEqual(resolveExec(correlation, 0, first.exec.execId)?.operationId, "op-1")
    assert.isUndefined(resolveExec(correlation, 2, "someone-else"))
    assert.isUndefined(resolveExec(correlation, 99, undefined))
    correlation = completeExec(correlation, 1)
    assert.isUndefined(resolveExec(correlation, 1, undefined))
    const aborted = encodeAbortAll(correlation)
    assert.deepStrictEqual(aborted.correlation.execs, [])
    const abort = wire(aborted.messages[0]!).message
    assert.deepStrictEqual(abort.case === "execServerControlMessage" && abort.value.message.case === "abort" ? abort.value.message.value.id : -1, 2)
    // the next request starts again at 1; within one request, ids keep rising after completions
    assert.strictEqual(encodeExec(correlation, { operationId: "op-3", toolCallId: "t", exec: read.step.exec }).exec.id, 3)
  })

  it("cancel aborts every running exec and ends with code canceled", () => {
    const read = startTool({ type: "toolCall", id: "t", name: "Ls", arguments: "{\"path\":\"/\"}" }, { mcpTools: [], todos: [] })
    if (read.step._tag !== "Exec") return assert.fail("expected an exec")
    const { correlation } = encodeExec(initialCorrelation("r"), { operationId: "op", toolCallId: "t", exec: read.step.exec })
    const end = encodeTurnEnd(correlation, { _tag: "Canceled", reason: "user_stopped_generation" })
    assert.strictEqual(end.messages.length, 1)
    assert.deepStrictEqual(end.end, canceled("user_stopped_generation"))
    assert.deepStrictEqual(end.correlation.execs, [])
  })

  it("started, delta and completed carry call ids, model call id, typed args and result, and both times", () => {
    const start = startTool({ type: "toolCall", id: "toolu_9", name: "Shell", arguments: "{\"command\":\"ls\"}" }, { mcpTools: [], todos: [] })
    const started = updateOf(encodeToolStarted(ids, start.started, 1_700_000_000_123))
    if (started.case !== "toolCallStarted") return assert.fail("expected tool_call_started")
    assert.deepStrictEqual([started.value.callId, started.value.modelCallId, started.value.toolCall?.toolCallId, started.value.toolCall?.startedAtMs], ["toolu_9", "c/1", "toolu_9", 1_700_000_000_123n])
    const tool = started.value.toolCall?.tool
    assert.strictEqual(tool?.case === "shellToolCall" ? tool.value.args?.command : "", "ls")
    const delta = updateOf(encodeToolDelta(ids, create(ToolCallDeltaSchema, { delta: { case: "shellToolCallDelta", value: { delta: { case: "stdout", value: { content: "a\n" } } } } })))
    if (delta.case !== "toolCallDelta") return assert.fail("expected tool_call_delta")
    assert.deepStrictEqual([delta.value.callId, delta.value.modelCallId, delta.value.toolCallDelta?.delta.case], ["toolu_9", "c/1", "shellToolCallDelta"])
    const result = create(ToolCallSchema, { tool: { case: "readToolCall", value: { args: { path: "a" }, result: { result: { case: "success", value: { output: { case: "content", value: "x" } } } } } } })
    const completed = updateOf(encodeToolCompleted(ids, result, { startedAtMs: 5, completedAtMs: 9 }))
    if (completed.case !== "toolCallCompleted") return assert.fail("expected tool_call_completed")
    assert.deepStrictEqual([completed.value.toolCall?.startedAtMs, completed.value.toolCall?.completedAtMs], [5n, 9n])
    const typed = completed.value.toolCall?.tool
    assert.strictEqual(typed?.case === "readToolCall" ? typed.value.result?.result.case : undefined, "success")
  })
})

describe("KV and checkpoints", () => {
  it("blob ids are the raw SHA-256 of the bytes and KV ids count from 0", () => {
    const data = new TextEncoder().encode("blob body")
    assert.deepStrictEqual(Array.from(blobIdOf(data)), Array.from(createHash("sha256").update(data).digest()))
    const set = encodeSetBlob(initialCorrelation("r"), { id: blobIdOf(data), data })
    const get = encodeGetBlob(set.correlation, blobIdOf(data))
    assert.deepStrictEqual([set.kvId, get.kvId], [0, 1])
    const m = wire(set.message).message
    if (m.case !== "kvServerMessage" || m.value.message.case !== "setBlobArgs") return assert.fail("expected set_blob_args")
    assert.strictEqual(m.value.id, 0)
    assert.deepStrictEqual(Array.from(m.value.message.value.blobData), Array.from(data))
    const g = wire(get.message).message
    assert.strictEqual(g.case === "kvServerMessage" ? g.value.message.case : undefined, "getBlobArgs")
    const acked = resolveKv(get.correlation, 0)
    assert.strictEqual(acked.pending?.kind, "setBlob")
    assert.isUndefined(resolveKv(acked.correlation, 0).pending)
    assert.strictEqual(resolveKv(acked.correlation, 1).pending?.kind, "getBlob")
  })

  it("projects a turn into blobs that the checkpoint names, deterministically", () => {
    const toolCall = { type: "toolCall" as const, id: "toolu_1", name: "Read", arguments: "{\"path\":\"a\"}" }
    const user: Message = { role: "user", content: [{ type: "text", text: "hi" }] }
    const turnMessages: ReadonlyArray<Message> = [
      assistant([{ type: "thinking", thinking: "plan" }, { type: "text", text: "Reading." }, toolCall], usage(1, 1), "toolUse"),
      { role: "toolResult", toolCallId: "toolu_1", toolName: "Read", content: [{ type: "text", text: "x" }], isError: false },
      assistant([{ type: "thinking", thinking: "secret", redacted: true }, { type: "text", text: "Done." }], usage(1, 1))
    ]
    const typedRead = create(ToolCallSchema, { toolCallId: "toolu_1", tool: { case: "readToolCall", value: { args: { path: "a" } } } })
    const previous = create(ConversationStateStructureSchema, { turns: [new Uint8Array(32).fill(7)], summary: new Uint8Array([5]) })
    const input = {
      previous,
      requestId: "req-1",
      userMessage: { text: "hi", messageId: "m1", mode: "agent" as const },
      turnMessages,
      transcript: [user, ...turnMessages],
      cursorToolCalls: { toolu_1: typedRead },
      pendingToolCalls: [],
      todos: [create(TodoItemSchema, { id: "a", content: "A", status: TodoStatus.PENDING })],
      usedTokens: 1200,
      maxTokens: 200_000,
      workspaceUris: ["file:///w"],
      mcpTools: []
    }
    const { blobs, checkpoint } = projectCheckpoint(input)
    const again = projectCheckpoint(input)
    assert.deepStrictEqual(toBinary(ConversationStateStructureSchema, again.checkpoint), toBinary(ConversationStateStructureSchema, checkpoint))
    for (const blob of blobs) assert.deepStrictEqual(Array.from(blob.id), Array.from(blobIdOf(blob.data)))
    const known = new Set(blobs.map((blob) => bytesToHex(blob.id)))
    // every id the checkpoint names (except turns from earlier requests) is one of the blobs to send
    assert.strictEqual(checkpoint.turns.length, 2)
    assert.isTrue(known.has(bytesToHex(checkpoint.turns[1]!)))
    for (const id of checkpoint.rootPromptMessagesJson) assert.isTrue(known.has(bytesToHex(id)))
    assert.strictEqual(checkpoint.rootPromptMessagesJson.length, 4)
    const turnBlob = blobs.find((blob) => bytesToHex(blob.id) === bytesToHex(checkpoint.turns[1]!))!
    const turn = fromBinary(ConversationTurnStructureSchema, turnBlob.data)
    if (turn.turn.case !== "agentConversationTurn") return assert.fail("expected an agent turn")
    assert.strictEqual(turn.turn.value.requestId, "req-1")
    const steps = turn.turn.value.steps.map((id) => fromBinary(ConversationStepSchema, blobs.find((blob) => bytesToHex(blob.id) === bytesToHex(id))!.data))
    // redacted thinking is never turned into text
    assert.deepStrictEqual(steps.map((step) => step.message.case), ["thinkingMessage", "assistantMessage", "toolCall", "assistantMessage"])
    const stepTool = steps[2]?.message
    assert.strictEqual(stepTool?.case === "toolCall" ? stepTool.value.toolCallId : "", "toolu_1")
    const userBlob = blobs.find((blob) => bytesToHex(blob.id) === bytesToHex(turn.turn.case === "agentConversationTurn" ? turn.turn.value.userMessage : new Uint8Array()))!
    assert.strictEqual(fromBinary(UserMessageSchema, userBlob.data).messageId, "m1")
    assert.deepStrictEqual(Array.from(checkpoint.summary ?? []), [5])
    assert.strictEqual(checkpoint.agentType, "ide")
    assert.strictEqual(checkpoint.tokenDetails?.usedTokens, 1200)
    assert.deepStrictEqual(todosOf(checkpoint).map((todo) => todo.id), ["a"])
    const published = wire(encodeCheckpoint(checkpoint)).message
    assert.strictEqual(published.case, "conversationCheckpointUpdate")
  })

  it("a checkpoint sends only the blobs the client's previous checkpoint does not name: a later turn's set_blob burst does not grow with the transcript", () => {
    const first: Array<Message> = [{ role: "user", content: [{ type: "text", text: "hi" }] }, assistant([{ type: "text", text: "Hello." }], usage(1, 1))]
    const base = {
      requestId: "req-1",
      userMessage: { text: "hi", messageId: "m1", mode: "agent" as const },
      cursorToolCalls: {},
      pendingToolCalls: [],
      todos: [],
      usedTokens: 10,
      maxTokens: 200_000,
      workspaceUris: [],
      mcpTools: []
    }
    const turn1 = projectCheckpoint({ ...base, previous: undefined, turnMessages: first.slice(1), transcript: first })
    // user blob, one step, the turn, two prompt messages
    assert.strictEqual(turn1.blobs.length, 5)
    const second: Array<Message> = [...first, { role: "user", content: [{ type: "text", text: "again" }] }, assistant([{ type: "text", text: "Again." }], usage(1, 1))]
    const turn2 = projectCheckpoint({
      ...base,
      requestId: "req-2",
      userMessage: { text: "again", messageId: "m2", mode: "agent" as const },
      previous: turn1.checkpoint,
      turnMessages: second.slice(3),
      transcript: second
    })
    const sent = new Set(turn2.blobs.map((blob) => bytesToHex(blob.id)))
    const held = new Set([...turn1.checkpoint.rootPromptMessagesJson, ...turn1.checkpoint.turns].map(bytesToHex))
    // the same five kinds of blob, none of them one the client already holds
    assert.strictEqual(turn2.blobs.length, 5)
    for (const id of held) assert.isFalse(sent.has(id))
    // ...while the checkpoint still names the whole transcript and both turns, each held or sent
    assert.strictEqual(turn2.checkpoint.rootPromptMessagesJson.length, 4)
    assert.strictEqual(turn2.checkpoint.turns.length, 2)
    for (const id of [...turn2.checkpoint.rootPromptMessagesJson, ...turn2.checkpoint.turns].map(bytesToHex)) {
      assert.isTrue(sent.has(id) || held.has(id), `${id} neither held nor sent`)
    }
    // without the previous checkpoint (a turn recovered after a restart) everything is sent again: harmless, never missing
    const unknown = projectCheckpoint({ ...base, previous: undefined, turnMessages: second.slice(3), transcript: second })
    assert.strictEqual(unknown.blobs.length, 3 + 4)
  })

  it("ref_only context: the parts named by blob id are to be read back (only without an inline context), then merged as if inline; a part that does not match its id is left out", () => {
    const rules = toBinary(RequestContextRulesPartSchema, create(RequestContextRulesPartSchema, {
      rules: [{ fullPath: "/w/AGENTS.md", content: "be brief" }],
      nonFileRules: [{ fullPath: "", content: "user rule" }]
    }))
    const mcps = toBinary(RequestContextMcpsPartSchema, create(RequestContextMcpsPartSchema, {
      tools: [{ name: "lookup", providerIdentifier: "docs", toolName: "lookup", inputSchemaJson: "{\"type\":\"object\"}" }]
    }))
    const parts = {
      rulesBlobId: sha256Of(rules),
      rulesByteLength: rules.length,
      mcpsBlobId: sha256Of(mcps),
      mcpsByteLength: mcps.length,
      skillsBlobId: new Uint8Array(32).fill(3),
      dynamicContext: { env: { workspacePaths: ["/w"] } }
    }
    const userMessage = { text: "go", messageId: "m-1", mode: AgentMode.AGENT }
    const refOnly = decodeMessage("RunRequest", {
      case: "runRequest",
      value: { conversationId: "c", action: { action: { case: "userMessageAction", value: { userMessage } }, requestContextParts: parts } }
    })
    // Rules, MCP tools and skills (a custom mode's instructions) are read back; a skills part that is not read back is left out.
    assert.deepStrictEqual(refOnly.contextToFetch.map((ref) => ref.part), ["rules", "mcps", "skills"])
    // The environment comes from dynamic_context meanwhile.
    assert.deepStrictEqual(refOnly.workspace.workspacePaths, ["/w"])
    assert.deepStrictEqual(refOnly.mcpTools, [])
    const merged = withContextParts(refOnly, new Map([[bytesToHex(sha256Of(rules)), rules], [bytesToHex(sha256Of(mcps)), mcps]]))
    // The skills part named by an id the client did not answer: left out, and said so.
    assert.deepStrictEqual(merged.problems, ["the skills part of the request context was not read back"])
    assert.deepStrictEqual(merged.run.contextToFetch, [])
    assert.deepStrictEqual(merged.run.mcpTools.map((tool) => tool.toolName), ["lookup"])
    assert.deepStrictEqual(merged.run.workspace.workspacePaths, ["/w"])
    const start = merged.run.action
    if (start._tag !== "StartTurn") return assert.fail("expected a turn start")
    assert.deepStrictEqual(start.start.settings.rules, [{ path: "/w/AGENTS.md", content: "be brief" }, { path: "", content: "user rule" }])
    assert.deepStrictEqual(start.start.settings.mcpTools, merged.run.mcpTools)
    // Bytes that are not the named blob (or a part not read back) are left out, and said so.
    const wrong = withContextParts(refOnly, new Map([[bytesToHex(sha256Of(rules)), mcps]]))
    assert.strictEqual(wrong.problems.length, 3)
    assert.deepStrictEqual(wrong.run.mcpTools, [])
    // Dual transport (inline context and part references): nothing to read back.
    const dual = decodeMessage("RunRequest", {
      case: "runRequest",
      value: {
        conversationId: "c",
        action: { action: { case: "userMessageAction", value: { userMessage, requestContext: { env: { workspacePaths: ["/x"] } } } }, requestContextParts: parts }
      }
    })
    assert.deepStrictEqual(dual.contextToFetch, [])
    assert.deepStrictEqual(dual.workspace.workspacePaths, ["/x"])
  })

  it("attached images reach the user message: inline, by blob id sent along, by blob id read back; one that cannot be had is a line of text; the type is sniffed when not given", () => {
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3])
    const jpeg = new Uint8Array([0xff, 0xd8, 0xff, 0xe0, 9, 9])
    const gif = new Uint8Array([0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 7])
    const base64 = (data: Uint8Array) => Buffer.from(data).toString("base64")
    const run = decodeMessage("RunRequest", {
      case: "runRequest",
      value: {
        conversationId: "c",
        preFetchedBlobs: [{ id: sha256Of(jpeg), value: jpeg }],
        action: {
          action: {
            case: "userMessageAction",
            value: {
              userMessage: {
                text: "what is in these?",
                messageId: "m-1",
                selectedContext: {
                  selectedImages: [
                    { dataOrBlobId: { case: "data", value: png }, path: "/w/a.png" },
                    { dataOrBlobId: { case: "blobId", value: sha256Of(jpeg) }, mimeType: "image/jpeg" },
                    { dataOrBlobId: { case: "blobId", value: sha256Of(gif) }, path: "/w/c.gif" }
                  ]
                }
              },
              requestContext: {}
            }
          }
        }
      }
    })
    // Only the image neither inline nor sent along is to be read back.
    assert.deepStrictEqual(run.contextToFetch.map((ref) => [ref.part, bytesToHex(ref.blobId)]), [["image", bytesToHex(sha256Of(gif))]])
    const contentOf = (r: Pick<typeof run, "action">) => r.action._tag === "StartTurn" ? r.action.start.message.content : []
    assert.deepStrictEqual(contentOf(run), [
      { type: "image", data: base64(png), mimeType: "image/png" },
      { type: "image", data: base64(jpeg), mimeType: "image/jpeg" },
      { type: "text", text: "[An attached image (/w/c.gif) could not be read from the editor.]" },
      { type: "text", text: "what is in these?" }
    ])
    const read = withContextParts(run, new Map([[bytesToHex(sha256Of(gif)), gif]]))
    assert.deepStrictEqual(read.problems, [])
    assert.deepStrictEqual(contentOf(read.run)[2], { type: "image", data: base64(gif), mimeType: "image/gif" })
    // Bytes that are not the named image are not used.
    const wrong = withContextParts(run, new Map([[bytesToHex(sha256Of(gif)), png]]))
    assert.strictEqual(wrong.problems.length, 1)
    assert.strictEqual(contentOf(wrong.run)[2]?.type, "text")
  })

  it("what the user selected goes with the message: files (not twice when the request context carries them), code and terminal selections, terminals, extra context; then the typed text", () => {
    const run = decodeMessage("RunRequest", {
      case: "runRequest",
      value: {
        conversationId: "c",
        action: {
          action: {
            case: "userMessageAction",
            value: {
              userMessage: {
                text: "why does this fail?",
                messageId: "m-1",
                selectedContext: {
                  files: [
                    { path: "/w/src/a.ts", relativePath: "src/a.ts", content: "export const a = 1\n" },
                    { path: "/w/src/b.ts", content: "export const b = 2\n" },
                    { path: "/w/src/empty.ts", content: "" }
                  ],
                  codeSelections: [{ path: "/w/src/c.ts", relativePath: "src/c.ts", content: "c()" }],
                  terminals: [{ title: "zsh", content: "$ npm test\nFAIL" }],
                  terminalSelections: [{ content: "TypeError: x is undefined" }],
                  extraContext: ["The CI log says it started yesterday."]
                }
              },
              requestContext: { fileContents: { "/w/src/b.ts": "export const b = 2\n" } }
            }
          }
        }
      }
    })
    if (run.action._tag !== "StartTurn") return assert.fail("expected a turn start")
    assert.deepStrictEqual(run.action.start.message.content.map((block) => (block.type === "text" ? block.text : block.type)), [
      "<attached_file path=\"src/a.ts\">\nexport const a = 1\n\n</attached_file>",
      "<code_selection path=\"src/c.ts\">\nc()\n</code_selection>",
      "<terminal title=\"zsh\">\n$ npm test\nFAIL\n</terminal>",
      "<terminal_selection>\nTypeError: x is undefined\n</terminal_selection>",
      "The CI log says it started yesterday.",
      "why does this fail?"
    ])
    // b.ts came in the request context's file contents: it is there once.
    assert.deepStrictEqual(run.action.start.context.map((block) => (block.type === "text" ? block.text.split("\n")[0] : block.type)), ["<attached_file path=\"/w/src/b.ts\">"])
  })

  it("a run request's settings keep what a later process needs for the turn's checkpoint: the user message id, the earlier turns and todos (not the client's other, larger fields)", () => {
    const earlier = [new Uint8Array(32).fill(7), new Uint8Array(32).fill(8)]
    const todo = create(TodoItemSchema, { id: "t1", content: "write tests", status: TodoStatus.PENDING })
    const run = decodeMessage("RunRequest", {
      case: "runRequest",
      value: {
        conversationId: "conv-1",
        conversationState: create(ConversationStateStructureSchema, {
          turns: earlier,
          todos: [toBinary(TodoItemSchema, todo)],
          rootPromptMessagesJson: [new Uint8Array(32).fill(1)],
          summary: new Uint8Array(4096)
        }),
        action: {
          action: {
            case: "userMessageAction",
            value: {
              userMessage: { text: "fix it", messageId: "msg-7", mode: AgentMode.ASK },
              requestContext: { env: { workspacePaths: ["/w"] }, fileContents: { "/w/a.ts": "a" } }
            }
          }
        }
      }
    })
    if (run.action._tag !== "StartTurn") return assert.fail("expected StartTurn")
    const { settings } = run.action.start
    assert.deepStrictEqual(JSON.parse(JSON.stringify(settings)), settings)
    const carried = carriedCheckpointOf(settings)!
    assert.deepStrictEqual(carried.turns.map((id) => bytesToHex(id)), earlier.map((id) => bytesToHex(id)))
    assert.deepStrictEqual(todosOf(carried).map((item) => item.content), ["write tests"])
    assert.deepStrictEqual([carried.rootPromptMessagesJson.length, carried.summary], [0, undefined])
    assert.deepStrictEqual(workspacePathsOf(settings), ["/w"])
    // The turn as committed: the attached file first, the typed message last, then the answer.
    const turnMessages: ReadonlyArray<Message> = [
      { role: "user", content: run.action.start.context },
      run.action.start.message,
      assistant([{ type: "text", text: "Fixed." }], usage(1, 1))
    ]
    assert.deepStrictEqual(turnUserMessageOf(settings, turnMessages), { text: "fix it", messageId: "msg-7", mode: "ask" })
    // A new chat carries no checkpoint.
    const fresh = decodeMessage("RunRequest", {
      case: "runRequest",
      value: { action: { action: { case: "userMessageAction", value: { userMessage: { text: "hi", messageId: "m" } } } } }
    })
    if (fresh.action._tag !== "StartTurn") return assert.fail("expected StartTurn")
    assert.isUndefined(carriedCheckpointOf(fresh.action.start.settings))
  })

  it("the request a turn answers is set in its settings by the transport, and nothing else changes", () => {
    const run = decodeMessage("RunRequest", {
      case: "runRequest",
      value: { action: { action: { case: "userMessageAction", value: { userMessage: { text: "hi", messageId: "m", mode: AgentMode.PLAN } } } } }
    })
    if (run.action._tag !== "StartTurn") return assert.fail("expected StartTurn")
    const { settings } = run.action.start
    assert.isUndefined(requestIdOfSettings(settings))
    const answered = withRequestId(settings, "req-1")
    assert.strictEqual(requestIdOfSettings(answered), "req-1")
    assert.deepStrictEqual(answered, { ...settings, requestId: "req-1" })
    assert.strictEqual(requestIdOfSettings(withRequestId(answered, "req-2")), "req-2")
  })
})

describe("end-stream payload", () => {
  it("is {} on success", () => {
    assert.strictEqual(new TextDecoder().decode(encodeEndStream(EndStream.Ok())), "{}")
    assert.deepStrictEqual(decodeEndStream(encodeEndStream(EndStream.Ok())), Either.right(EndStream.Ok()))
  })

  it("a provider error keeps code, message and ErrorDetails with is_retryable=false, base64 without padding", () => {
    const end = providerFailure("upstream said 500")
    const payload = encodeEndStream(end)
    const json = JSON.parse(new TextDecoder().decode(payload)) as { error: { code: string; message: string; details: Array<{ type: string; value: string }> } }
    assert.strictEqual(json.error.code, "unavailable")
    assert.strictEqual(json.error.message, "upstream said 500")
    assert.strictEqual(json.error.details[0]?.type, "aiserver.v1.ErrorDetails")
    assert.notInclude(json.error.details[0]?.value ?? "=", "=")
    const decoded = decodeEndStream(payload)
    if (Either.isLeft(decoded)) return assert.fail(decoded.left.message)
    assert.deepStrictEqual(decoded.right, end)
    if (decoded.right._tag !== "Error") return
    assert.strictEqual(decoded.right.detail?.error, ErrorDetails_Error.PROVIDER_ERROR)
    assert.isFalse(decoded.right.detail?.isRetryable)
  })

  it("a cancel is code canceled", () => {
    assert.deepStrictEqual(decodeEndStream(encodeEndStream(canceled("new_message_submitted"))), Either.right(canceled("new_message_submitted")))
  })

  it("a payload that is not JSON is a typed error", () => {
    const decoded = decodeEndStream(new Uint8Array([0x7b]))
    assert.isTrue(Either.isLeft(decoded) && decoded.left.reason === "badJson")
  })
})
