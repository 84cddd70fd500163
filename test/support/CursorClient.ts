/**
 * A reference Cursor client in its HTTP/1.1 mode, for tests and benchmarks: one `RunSSE` per
 * turn (an enveloped `BidiRequestId` in, Connect envelopes out, read incrementally with each
 * frame's arrival time) plus one `BidiAppend` POST per client message (hex `data`, increasing
 * `append_seqno`, sent concurrently). It answers every exec from a `Workspace` (scripted, or a
 * real temp directory), acknowledges every `set_blob` (keeping the blob after checking its id
 * is the SHA-256 of the data), can send heartbeats, follow-ups, a cancel, shuffled or
 * duplicated appends, and can reconnect RunSSE with the same request id.
 *
 * With `wire: "run"` the same `Turn` speaks Cursor's HTTP/2 mode instead: one
 * `agent.v1.AgentService/Run` bidi call per turn, every client message on its request stream
 * (`test/support/RunWire.ts`); frames, waiters, exec answers and blob handling are the same.
 *
 * Plain Promises on `node:http`, no test framework: a benchmark can drive it as well as a test.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { Either } from "effect"
import { spawn } from "node:child_process"
import { createHash, randomUUID } from "node:crypto"
import { mkdir, readdir, readFile, stat, unlink, writeFile } from "node:fs/promises"
import * as http from "node:http"
import * as https from "node:https"
import { dirname, isAbsolute, join, relative, resolve } from "node:path"
import { performance } from "node:perf_hooks"
import { gunzipSync } from "node:zlib"
import * as Dialect from "../../src/Dialect.js"
import {
  AgentRunRequestSchema,
  AgentClientMessageSchema,
  AgentMode,
  AgentServerMessageSchema,
  ConversationActionSchema,
  CustomModeIntentSchema,
  DiagnosticSchema,
  ExecClientMessageSchema,
  GrepUnionResultSchema,
  InteractionResponseSchema,
  LsDirectoryTreeNodeSchema,
  McpToolDefinitionSchema,
  RequestContextEnvSchema,
  RequestContextSchema,
  SelectedContextSchema,
  ShellStreamSchema
} from "../../src/gen/agent/v1/agent_pb.js"
import type {
  AgentServerMessage,
  ConversationStateStructure,
  ExecServerMessage,
  InteractionQuery,
  LsDirectoryTreeNode,
  McpToolDefinition
} from "../../src/gen/agent/v1/agent_pb.js"

type LsNodeInit = MessageInitShape<typeof LsDirectoryTreeNodeSchema>
type GrepUnionInit = MessageInitShape<typeof GrepUnionResultSchema>
type ShellEventInit = NonNullable<MessageInitShape<typeof ShellStreamSchema>["event"]>
/** One editor problem, as a test gives it to a `LocalWorkspace` (positions 0-based, as the IDE's). */
export type DiagnosticInit = MessageInitShape<typeof DiagnosticSchema>
import { BidiAppendRequestSchema, BidiRequestIdSchema } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { RunConnection, RunWire } from "./RunWire.js"

export { openRawRun } from "./RunWire.js"

// =============================================================================
// Framing (the client's own, deliberately independent of src/transport/Connect.ts)
// =============================================================================

export const FLAG_COMPRESSED = 0x01
export const FLAG_END_STREAM = 0x02

/** One Connect envelope: flags, 4-byte big-endian length, payload. */
export const envelope = (flags: number, payload: Uint8Array): Uint8Array => {
  const out = new Uint8Array(5 + payload.length)
  out[0] = flags
  new DataView(out.buffer).setUint32(1, payload.length)
  out.set(payload, 5)
  return out
}

/** Lowercase hex, as Cursor writes `BidiAppendRequest.data`. */
export const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex")

export const sha256Hex = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex")

/** A blob id as Cursor sends it: the raw 32-byte SHA-256 of the data. */
export const blobIdBytes = (data: Uint8Array): Uint8Array => new Uint8Array(createHash("sha256").update(data).digest())

export type AgentClientMessageInit = MessageInitShape<typeof AgentClientMessageSchema>

/** http.request, or https.request for an https URL (a client through the proxy). */
const requestOf = (url: URL): typeof http.request => url.protocol === "https:" ? https.request : http.request

/** The HTTP request of a RunSSE: the route, Connect's headers and the request id. */
const runSseRequestOptions = (url: URL, requestId: string, body: Uint8Array, agent: http.Agent | false, headers: Readonly<Record<string, string>> = {}): http.RequestOptions => ({
  host: url.hostname,
  port: url.port,
  path: "/agent.v1.AgentService/RunSSE",
  method: "POST",
  agent,
  headers: {
    "content-type": "application/connect+proto",
    "connect-protocol-version": "1",
    "x-request-id": requestId,
    ...headers,
    "content-length": String(body.length)
  }
})

export interface RawRunSseHandlers {
  /** The response status, once the head arrived. */
  readonly onStatus?: (status: number) => void
  readonly onMessage: (message: AgentServerMessage) => void
  /** A frame that is not an `AgentServerMessage`. */
  readonly onUndecodable: (error: Error) => void
  /** The end-stream frame, decoded (the request is destroyed right after). */
  readonly onEnd: (end: Either.Either<Dialect.EndStream, { readonly message: string }>) => void
  /** The stream stopped without an end-stream frame: the response `ended`, `broke` (error or close), or the request `failed`. */
  readonly onBroken: (how: "ended" | "broke" | "failed", error?: Error) => void
}

/**
 * One RunSSE opened by hand, outside a `Turn` (crash and reattach drivers): its own connection,
 * Connect envelopes read as they arrive (gzip-compressed ones inflated), each handler called at
 * most until the stream is over. Destroy the returned request to stop reading.
 */
export const openRawRunSse = (baseUrl: string, requestId: string, handlers: RawRunSseHandlers): http.ClientRequest => {
  const url = new URL(baseUrl)
  const body = runSseBody(requestId)
  let over = false
  const broken = (how: "ended" | "broke" | "failed", error?: Error) => {
    if (over) return
    over = true
    handlers.onBroken(how, error)
  }
  const request = http.request(runSseRequestOptions(url, requestId, body, false), (response) => {
    handlers.onStatus?.(response.statusCode ?? 0)
    let buffer: Buffer = Buffer.alloc(0)
    response.on("data", (chunk: Buffer) => {
      if (over) return
      buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk])
      while (buffer.length >= 5 && !over) {
        const length = buffer.readUInt32BE(1)
        if (buffer.length < 5 + length) break
        const flags = buffer[0]!
        let payload = new Uint8Array(buffer.subarray(5, 5 + length))
        buffer = buffer.subarray(5 + length)
        if ((flags & FLAG_COMPRESSED) !== 0) payload = new Uint8Array(gunzipSync(payload))
        if ((flags & FLAG_END_STREAM) !== 0) {
          over = true
          handlers.onEnd(Dialect.decodeEndStream(payload))
          request.destroy()
          return
        }
        let message: AgentServerMessage
        try {
          message = fromBinary(AgentServerMessageSchema, payload)
        } catch (error) {
          handlers.onUndecodable(error as Error)
          continue
        }
        handlers.onMessage(message)
      }
    })
    response.on("end", () => broken("ended"))
    response.on("error", () => broken("broke"))
    response.on("close", () => broken("broke"))
  })
  request.on("error", (error) => broken("failed", error))
  request.end(body)
  return request
}

/** The body of a RunSSE request: one enveloped `BidiRequestId`. */
export const runSseBody = (requestId: string): Uint8Array =>
  envelope(0, toBinary(BidiRequestIdSchema, create(BidiRequestIdSchema, { requestId })))

/** The body of a BidiAppend: a `BidiAppendRequest` with the hex of the client message. */
export const bidiAppendBody = (requestId: string, appendSeqno: number | bigint, message: AgentClientMessageInit): Uint8Array =>
  toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, {
    data: toHex(toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, message))),
    requestId: { requestId },
    appendSeqno: BigInt(appendSeqno)
  }))

export interface RunRequestSpec {
  readonly conversationId: string
  readonly text: string
  readonly model?: string
  readonly mode?: "agent" | "ask" | "plan" | "debug" | "triage" | "project" | "multitask" | "custom"
  readonly messageId?: string
  /** Another conversation action in place of the user message (e.g. `executePlanAction`); the inline request context goes with it when it has one. */
  readonly action?: NonNullable<MessageInitShape<typeof ConversationActionSchema>["action"]>
  /** More of the inline request context (web flags, agent skills...), beside the environment. */
  readonly requestContext?: MessageInitShape<typeof RequestContextSchema>
  /** A subagent's child run: the run request's `subagent_type_name` (Cursor sets it on the runs it opens for a Task). */
  readonly subagentTypeName?: string
  /** The user message's `custom_mode_intent` (a custom mode entered). */
  readonly customModeIntent?: MessageInitShape<typeof CustomModeIntentSchema>
  /** The last checkpoint the client holds (empty for a new chat). */
  readonly conversationState?: ConversationStateStructure
  readonly workspacePaths?: ReadonlyArray<string>
  /** Where the editor keeps background shells' output (`RequestContextEnv.terminals_folder`). */
  readonly terminalsFolder?: string
  readonly mcpTools?: ReadonlyArray<MessageInitShape<typeof McpToolDefinitionSchema>>
  /**
   * Cursor's ref_only context transport: no inline request context; the run request names these
   * serialized parts (RequestContextRulesPart, RequestContextMcpsPart) by blob id, with the
   * environment in `dynamic_context`. The client keeps the bytes in its blob store (`Turn`
   * puts them there before sending) and answers the server's get_blob with them.
   */
  readonly refOnlyContext?: { readonly rules?: Uint8Array; readonly mcps?: Uint8Array; readonly missingFromStore?: boolean }
  /**
   * Images attached to the user message: inline bytes (`data`), named by blob id with the bytes
   * sent along in `pre_fetched_blobs` (`preFetched`), or named by blob id only (`blobId`: the
   * client keeps the bytes in its blob store and answers the server's get_blob).
   */
  readonly images?: ReadonlyArray<{ readonly data: Uint8Array; readonly mimeType?: string; readonly path?: string; readonly how: "data" | "preFetched" | "blobId" }>
  /**
   * A resume, as the CLI sends on a new request after its stream broke: the action is
   * `resume_action` (with an empty RequestContext) instead of the user message (`text`,
   * `images` and `refOnlyContext` are then not sent); give the last checkpoint in `conversationState`.
   */
  readonly resume?: boolean
  /** The user's summarize: the action is `summarize_action` (no message; `text` is not sent). */
  readonly summarize?: boolean
  /**
   * With `summarize`: no request context at all, neither `request_context_parts` nor anything
   * else (Cursor's schema gives `summarize_action` no request context of its own).
   */
  readonly withoutContext?: boolean
  /** Slash commands picked with the message (`selected_context.cursor_commands`), e.g. `glass-action-summarize`. */
  readonly cursorCommands?: ReadonlyArray<{ readonly name: string; readonly content?: string }>
  /**
   * Anything else attached to the user message (`selected_context`): merged with `images` and
   * `cursorCommands`, whose entries come first. An attachment named only by blob id is read
   * back from `CursorClient.blobs`: put its bytes there before the turn.
   */
  readonly selectedContext?: MessageInitShape<typeof SelectedContextSchema>
  /** The run request's `custom_system_prompt` (appended to the system prompt). */
  readonly customSystemPrompt?: string
  /** More run request fields, as newer clients send them (`agent_session_id`, capability flags, `system_prompt_spec`). */
  readonly runRequestExtras?: Omit<MessageInitShape<typeof AgentRunRequestSchema>, "$typeName">
}

const agentMode = (mode: RunRequestSpec["mode"]): AgentMode => Dialect.agentModeOf(mode ?? "agent")

/** Seq 0 of a turn: the `run_request` with conversation id, requested model and the user message. */
export const runRequestMessage = (spec: RunRequestSpec): AgentClientMessageInit => {
  const env = { workspacePaths: [...(spec.workspacePaths ?? [])], ...(spec.terminalsFolder !== undefined ? { terminalsFolder: spec.terminalsFolder } : {}) }
  const selectedImages = (spec.images ?? []).map((image) => ({
    dataOrBlobId: image.how === "data" ? { case: "data" as const, value: image.data } : { case: "blobId" as const, value: blobIdBytes(image.data) },
    path: image.path ?? "",
    mimeType: image.mimeType ?? ""
  }))
  // The spec's images and commands first, then whatever else `selectedContext` attaches.
  const selectedContext = create(SelectedContextSchema, spec.selectedContext)
  const given = create(SelectedContextSchema, {
    selectedImages,
    cursorCommands: (spec.cursorCommands ?? []).map((command) => ({ name: command.name, content: command.content ?? "" }))
  })
  selectedContext.selectedImages = [...given.selectedImages, ...selectedContext.selectedImages]
  selectedContext.cursorCommands = [...given.cursorCommands, ...selectedContext.cursorCommands]
  const userMessage = {
    text: spec.text,
    messageId: spec.messageId ?? randomUUID(),
    mode: agentMode(spec.mode),
    ...(spec.customModeIntent !== undefined ? { customModeIntent: spec.customModeIntent } : {}),
    ...(selectedImages.length > 0 || spec.cursorCommands !== undefined || spec.selectedContext !== undefined
      ? { selectedContext }
      : {})
  }
  const preFetchedBlobs = (spec.images ?? []).filter((image) => image.how === "preFetched").map((image) => ({ id: blobIdBytes(image.data), value: image.data }))
  const refOnly = spec.refOnlyContext
  const requestContext = create(RequestContextSchema, spec.requestContext ?? {})
  requestContext.env = create(RequestContextEnvSchema, env)
  const other = spec.action
  return {
    message: {
      case: "runRequest",
      value: {
        conversationId: spec.conversationId,
        requestedModel: { modelId: spec.model ?? "fake-model" },
        ...(spec.customSystemPrompt !== undefined ? { customSystemPrompt: spec.customSystemPrompt } : {}),
        ...spec.runRequestExtras,
        ...(spec.subagentTypeName !== undefined ? { subagentTypeName: spec.subagentTypeName } : {}),
        ...(spec.conversationState !== undefined ? { conversationState: spec.conversationState } : {}),
        ...(spec.mcpTools !== undefined ? { mcpTools: { mcpTools: spec.mcpTools as Array<McpToolDefinition> } } : {}),
        ...(preFetchedBlobs.length > 0 ? { preFetchedBlobs } : {}),
        action: other !== undefined
          ? { action: other.value !== undefined && "requestContext" in other.value ? { ...other, value: { requestContext, ...other.value } } as typeof other : other }
          : spec.resume === true
          ? { action: { case: "resumeAction", value: {} } }
          : spec.summarize === true
          ? { action: { case: "summarizeAction", value: {} }, ...(spec.withoutContext === true ? {} : { requestContextParts: { dynamicContext: { env } } }) }
          : refOnly === undefined
          ? { action: { case: "userMessageAction", value: { userMessage, requestContext } } }
          : {
            action: { case: "userMessageAction", value: { userMessage } },
            requestContextParts: {
              ...(refOnly.rules !== undefined ? { rulesBlobId: blobIdBytes(refOnly.rules), rulesByteLength: refOnly.rules.length } : {}),
              ...(refOnly.mcps !== undefined ? { mcpsBlobId: blobIdBytes(refOnly.mcps), mcpsByteLength: refOnly.mcps.length } : {}),
              dynamicContext: { env }
            }
          }
      }
    }
  }
}

export const userMessageAction = (text: string, mode: RunRequestSpec["mode"] = "agent", messageId: string = randomUUID()): AgentClientMessageInit => ({
  message: {
    case: "conversationAction",
    value: { action: { case: "userMessageAction", value: { userMessage: { text, messageId, mode: agentMode(mode) } } } }
  }
})

export const cancelAction = (reason = "user_stopped_generation"): AgentClientMessageInit => ({
  message: { case: "conversationAction", value: { action: { case: "cancelAction", value: { reason } } } }
})

export const clientHeartbeat = (): AgentClientMessageInit => ({ message: { case: "clientHeartbeat", value: {} } })

// =============================================================================
// Transcript
// =============================================================================

export interface UsageNumbers {
  readonly input: number
  readonly output: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly reasoning: number
}

/** A server message reduced to what a test compares: plain data, no times. */
export type FrameEvent =
  | { readonly kind: "text_delta"; readonly text: string }
  | { readonly kind: "thinking_delta"; readonly text: string }
  | { readonly kind: "thinking_completed" }
  | { readonly kind: "partial_tool_call"; readonly callId: string; readonly tool: string | undefined; readonly argsTextDelta: string }
  | { readonly kind: "tool_call_started"; readonly callId: string; readonly tool: string | undefined }
  | { readonly kind: "tool_call_delta"; readonly callId: string; readonly stream: string | undefined; readonly content: string }
  | { readonly kind: "tool_call_completed"; readonly callId: string; readonly tool: string | undefined; readonly result: string | undefined }
  | { readonly kind: "exec"; readonly id: number; readonly execId: string; readonly exec: string | undefined }
  | { readonly kind: "exec_abort"; readonly id: number }
  | { readonly kind: "kv_set"; readonly id: number; readonly blobId: string }
  | { readonly kind: "kv_get"; readonly id: number; readonly blobId: string }
  | { readonly kind: "checkpoint"; readonly turns: number }
  | { readonly kind: "turn_ended"; readonly usage: UsageNumbers }
  | { readonly kind: "user_message_appended"; readonly text: string }
  | { readonly kind: "heartbeat" }
  | { readonly kind: "step_started" }
  | { readonly kind: "step_completed" }
  | { readonly kind: "interaction_query"; readonly id: number }
  | { readonly kind: "summary_started" }
  | { readonly kind: "summary"; readonly text: string }
  | { readonly kind: "summary_completed" }
  | { readonly kind: "other"; readonly what: string }

export interface Frame {
  /** `performance.now()` when the frame's last byte arrived. */
  readonly at: number
  /** Which RunSSE connection (or, on wire "run", which Run call) of the turn delivered it (1 = the first). */
  readonly connection: number
  readonly event: FrameEvent
  readonly message: AgentServerMessage
}

export interface Transcript {
  readonly requestId: string
  readonly conversationId: string
  /** Frames of the last RunSSE connection (the one that saw the end), in arrival order. */
  readonly frames: ReadonlyArray<Frame>
  /** Frames per connection, for reconnect tests. */
  readonly connections: ReadonlyArray<ReadonlyArray<Frame>>
  /** `frames` without heartbeats, as plain data. */
  readonly events: ReadonlyArray<FrameEvent>
  /** The end-stream outcome; undefined when the stream ended without one (see `problems`). */
  readonly end: Dialect.EndStream | undefined
  readonly endAt: number | undefined
  /** Concatenated `text_delta`s (server notices included). */
  readonly text: string
  readonly thinking: string
  readonly checkpoints: ReadonlyArray<ConversationStateStructure>
  readonly usage: UsageNumbers | undefined
  /** Every append sent: seqno, what it carried, the HTTP status. */
  readonly appends: ReadonlyArray<AppendRecord>
  /** Anything a real client would have choked on: a failed append, a bad blob id, a stream without end... */
  readonly problems: ReadonlyArray<string>
  /** Response headers of the last RunSSE connection (or Run call). */
  readonly responseHeaders: http.IncomingHttpHeaders
  readonly startedAt: number
  /** Wire "run" only: the request ids of the resume calls `reconnect()` opened, in order (`requestId` stays the first call's). */
  readonly resumedRequestIds?: ReadonlyArray<string>
}

/**
 * One client message the turn sent. On wire "run" there are no per-message answers: `seqno` is
 * the message's place in the turn, status 200 (attempts 1) means it was handed to the Run call's
 * request stream, status 0 (attempts 0) that no open call could carry it.
 */
export interface AppendRecord {
  readonly seqno: number
  readonly what: string
  /** The last answer's status (0: no answer). */
  readonly status: number
  /** When the first POST of it went out, and when the last was answered. */
  readonly sentAt: number
  readonly answeredAt: number
  /** POSTs it took: more than 1 when the server answered `unavailable` (retryable) and it was sent again. */
  readonly attempts: number
}

const num = (value: bigint | undefined): number => Number(value ?? 0n)

/** The comparable view of one server message. */
export const frameEvent = (message: AgentServerMessage): FrameEvent => {
  const m = message.message
  switch (m.case) {
    case "interactionUpdate": {
      const u = m.value.message
      switch (u.case) {
        case "textDelta":
          return { kind: "text_delta", text: u.value.text }
        case "thinkingDelta":
          return { kind: "thinking_delta", text: u.value.text }
        case "thinkingCompleted":
          return { kind: "thinking_completed" }
        case "partialToolCall":
          return { kind: "partial_tool_call", callId: u.value.callId, tool: u.value.toolCall?.tool.case, argsTextDelta: u.value.argsTextDelta }
        case "toolCallStarted":
          return { kind: "tool_call_started", callId: u.value.callId, tool: u.value.toolCall?.tool.case }
        case "toolCallDelta": {
          const delta = u.value.toolCallDelta?.delta
          if (delta?.case === "shellToolCallDelta") {
            const stream = delta.value.delta
            return { kind: "tool_call_delta", callId: u.value.callId, stream: stream.case, content: stream.value?.content ?? "" }
          }
          return { kind: "tool_call_delta", callId: u.value.callId, stream: delta?.case, content: "" }
        }
        case "toolCallCompleted": {
          const tool = u.value.toolCall?.tool
          const result = tool?.value !== undefined && "result" in tool.value
            ? (tool.value.result as { result?: { case?: string } } | undefined)?.result?.case
            : undefined
          return { kind: "tool_call_completed", callId: u.value.callId, tool: tool?.case, result }
        }
        case "turnEnded":
          return {
            kind: "turn_ended",
            usage: {
              input: num(u.value.inputTokens),
              output: num(u.value.outputTokens),
              cacheRead: num(u.value.cacheReadTokens),
              cacheWrite: num(u.value.cacheWriteTokens),
              reasoning: num(u.value.reasoningTokens)
            }
          }
        case "userMessageAppended":
          return { kind: "user_message_appended", text: u.value.userMessage?.text ?? "" }
        case "heartbeat":
          return { kind: "heartbeat" }
        case "stepStarted":
          return { kind: "step_started" }
        case "stepCompleted":
          return { kind: "step_completed" }
        case "summaryStarted":
          return { kind: "summary_started" }
        case "summary":
          return { kind: "summary", text: u.value.summary }
        case "summaryCompleted":
          return { kind: "summary_completed" }
        default:
          return { kind: "other", what: `interactionUpdate.${u.case}` }
      }
    }
    case "execServerMessage":
      return { kind: "exec", id: m.value.id, execId: m.value.execId, exec: m.value.message.case }
    case "execServerControlMessage":
      return m.value.message.case === "abort" ? { kind: "exec_abort", id: m.value.message.value.id } : { kind: "other", what: "execServerControlMessage" }
    case "kvServerMessage": {
      const kv = m.value.message
      if (kv.case === "setBlobArgs") return { kind: "kv_set", id: m.value.id, blobId: toHex(kv.value.blobId) }
      if (kv.case === "getBlobArgs") return { kind: "kv_get", id: m.value.id, blobId: toHex(kv.value.blobId) }
      return { kind: "other", what: "kvServerMessage" }
    }
    case "conversationCheckpointUpdate":
      return { kind: "checkpoint", turns: m.value.turns.length }
    case "interactionQuery":
      return { kind: "interaction_query", id: m.value.id }
    case undefined:
      return { kind: "other", what: "empty" }
  }
}

// =============================================================================
// Workspaces: who answers the execs
// =============================================================================

/** One answer to an exec: an `ExecClientMessage` case (sent as its own append), or a client-side failure. */
export type ExecAnswer =
  | NonNullable<MessageInitShape<typeof ExecClientMessageSchema>["message"]>
  | { readonly case: "throw"; readonly error: string }

export interface Workspace {
  /**
   * The answers to one exec, in order (a shell stream yields start, output chunks, exit). The
   * client sends each as an append, then `exec_client_control_message.stream_close`. `signal`
   * fires when the server aborts the exec.
   */
  readonly answer: (exec: ExecServerMessage, signal: AbortSignal) => AsyncIterable<ExecAnswer>
}

/** A workspace that answers from a function (return the answers, or a promise of them). */
export const scriptedWorkspace = (
  handler: (exec: ExecServerMessage, signal: AbortSignal) => ReadonlyArray<ExecAnswer> | Promise<ReadonlyArray<ExecAnswer>>
): Workspace => ({
  answer: async function*(exec, signal) {
    yield* await handler(exec, signal)
  }
})

/** A small async queue bridging callbacks (child process events) into an async iterable. */
const asyncQueue = <A>() => {
  const items: Array<A> = []
  let ended = false
  let wake: (() => void) | undefined
  return {
    push: (item: A) => {
      items.push(item)
      wake?.()
    },
    end: () => {
      ended = true
      wake?.()
    },
    iterate: async function*(): AsyncIterable<A> {
      while (true) {
        const item = items.shift()
        if (item !== undefined) {
          yield item
          continue
        }
        if (ended) return
        await new Promise<void>((r) => (wake = r))
        wake = undefined
      }
    }
  }
}

/** Glob to RegExp: `**` any depth, `*` within a segment, `?` one character, `{a,b}` alternatives. */
export const globToRegExp = (glob: string): RegExp => {
  let source = ""
  let braces = 0
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!
    if (c === "*") {
      if (glob[i + 1] === "*") {
        source += glob[i + 2] === "/" ? "(?:.*/)?" : ".*"
        i += glob[i + 2] === "/" ? 2 : 1
      } else source += "[^/]*"
    } else if (c === "?") source += "[^/]"
    else if (c === "{") {
      braces++
      source += "(?:"
    } else if (c === "}" && braces > 0) {
      braces--
      source += ")"
    } else if (c === "," && braces > 0) source += "|"
    else source += c.replace(/[.+^$()|[\]\\{}]/g, "\\$&")
  }
  return new RegExp(`^${source}$`)
}

const SKIPPED_DIRS = new Set([".git", "node_modules"])

const lineCount = (content: string): number =>
  content === "" ? 0 : content.split("\n").length - (content.endsWith("\n") ? 1 : 0)

/** What a `LocalWorkspace` plays of the editor around the files. */
export interface LocalWorkspaceOptions {
  /** The editor's problems per file (a path relative to the root, or absolute); a file not named has none. */
  readonly diagnostics?: Readonly<Record<string, ReadonlyArray<DiagnosticInit>>>
  /** Shell ids still running in the background: typing into one succeeds (and is kept in `stdinWrites`); any other is an error. */
  readonly runningShells?: ReadonlyArray<number>
}

/**
 * A real workspace in a directory: read, write, delete, ls, grep (and glob as grep), and
 * shell commands run with `node:child_process` in the directory, streamed as Cursor does; the
 * editor's problems (diagnostics) and typing into background shells as the options say.
 */
export class LocalWorkspace implements Workspace {
  /** What was typed into background shells, in order. */
  readonly stdinWrites: Array<{ readonly shellId: number; readonly chars: string }> = []

  constructor(readonly root: string, readonly options: LocalWorkspaceOptions = {}) {}

  path(path: string): string {
    return isAbsolute(path) ? path : resolve(this.root, path)
  }

  answer(exec: ExecServerMessage, signal: AbortSignal): AsyncIterable<ExecAnswer> {
    const self = this
    const m = exec.message
    switch (m.case) {
      case "readArgs":
      case "redactedReadArgs":
        return single(self.read(m.value.path, m.value.offset, m.value.limit))
      case "writeArgs":
        return single(self.write(m.value.path, m.value.fileText, m.value.fileBytes, m.value.returnFileContentAfterWrite))
      case "deleteArgs":
        return single(self.remove(m.value.path))
      case "lsArgs":
        return single(self.ls(m.value.path, m.value.ignore))
      case "grepArgs":
        return single(self.grep(m.value))
      case "shellStreamArgs":
      case "shellArgs":
        return self.shell(m.value.command, m.value.workingDirectory, signal)
      case "diagnosticsArgs":
        return single(self.diagnostics(m.value.path))
      case "writeShellStdinArgs":
        return single(Promise.resolve(self.writeShellStdin(m.value.shellId, m.value.chars)))
      default:
        return single(Promise.resolve({ case: "throw" as const, error: `this workspace does not run ${m.case}` }))
    }
  }

  async read(path: string, offset: number | undefined, limit: number | undefined): Promise<ExecAnswer> {
    const full = this.path(path)
    try {
      const content = await readFile(full, "utf8")
      const size = (await stat(full)).size
      const total = lineCount(content)
      let output = content
      const ranged = offset !== undefined || limit !== undefined
      if (ranged) {
        const lines = content.split("\n")
        const first = Math.max(1, offset ?? 1)
        output = lines.slice(first - 1, limit !== undefined ? first - 1 + limit : undefined).join("\n")
      }
      return {
        case: "readResult",
        value: { result: { case: "success", value: { path, totalLines: total, fileSize: BigInt(size), truncated: false, rangeApplied: ranged, output: { case: "content", value: output } } } }
      }
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === "ENOENT") return { case: "readResult", value: { result: { case: "fileNotFound", value: { path } } } }
      return { case: "readResult", value: { result: { case: "error", value: { path, error: String((error as Error).message) } } } }
    }
  }

  /** As Cursor's own executor: a missing file is `file_not_found`, an unreadable one `permission_denied`. */
  async diagnostics(path: string): Promise<ExecAnswer> {
    const full = this.path(path)
    try {
      await stat(full)
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === "ENOENT") return { case: "diagnosticsResult", value: { result: { case: "fileNotFound", value: { path } } } }
      if (code === "EACCES") return { case: "diagnosticsResult", value: { result: { case: "permissionDenied", value: { path } } } }
      return { case: "diagnosticsResult", value: { result: { case: "error", value: { path, error: String((error as Error).message) } } } }
    }
    const named = Object.entries(this.options.diagnostics ?? {}).find(([key]) => this.path(key) === full)
    const diagnostics = [...(named?.[1] ?? [])]
    return { case: "diagnosticsResult", value: { result: { case: "success", value: { path, diagnostics, totalDiagnostics: diagnostics.length } } } }
  }

  writeShellStdin(shellId: number, chars: string): ExecAnswer {
    if (!(this.options.runningShells ?? []).includes(shellId)) {
      return { case: "writeShellStdinResult", value: { result: { case: "error", value: { error: `no shell ${shellId} is running` } } } }
    }
    const before = this.stdinWrites.filter((write) => write.shellId === shellId).reduce((sum, write) => sum + Buffer.byteLength(write.chars), 0)
    this.stdinWrites.push({ shellId, chars })
    return { case: "writeShellStdinResult", value: { result: { case: "success", value: { shellId, terminalFileLengthBeforeInputWritten: before } } } }
  }

  async write(path: string, text: string, bytes: Uint8Array, returnContent: boolean): Promise<ExecAnswer> {
    const full = this.path(path)
    try {
      await mkdir(dirname(full), { recursive: true })
      const data = bytes.length > 0 ? bytes : Buffer.from(text, "utf8")
      await writeFile(full, data)
      return {
        case: "writeResult",
        value: {
          result: {
            case: "success",
            value: { path, linesCreated: lineCount(text), fileSize: data.length, ...(returnContent ? { fileContentAfterWrite: text } : {}) }
          }
        }
      }
    } catch (error) {
      return { case: "writeResult", value: { result: { case: "error", value: { path, error: String((error as Error).message) } } } }
    }
  }

  async remove(path: string): Promise<ExecAnswer> {
    const full = this.path(path)
    try {
      const info = await stat(full)
      if (info.isDirectory()) return { case: "deleteResult", value: { result: { case: "notFile", value: { path, actualType: "directory" } } } }
      const prevContent = await readFile(full, "utf8")
      await unlink(full)
      return { case: "deleteResult", value: { result: { case: "success", value: { path, deletedFile: path, fileSize: BigInt(info.size), prevContent } } } }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return { case: "deleteResult", value: { result: { case: "fileNotFound", value: { path } } } }
      return { case: "deleteResult", value: { result: { case: "error", value: { path, error: String((error as Error).message) } } } }
    }
  }

  async ls(path: string, ignore: ReadonlyArray<string>): Promise<ExecAnswer> {
    const ignored = ignore.map(globToRegExp)
    const walk = async (dir: string, depth: number): Promise<LsNodeInit> => {
      const entries = (await readdir(dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1))
      const childrenDirs: Array<LsNodeInit> = []
      const childrenFiles: Array<{ name: string }> = []
      let numFiles = 0
      for (const entry of entries) {
        if (SKIPPED_DIRS.has(entry.name) || ignored.some((re) => re.test(entry.name))) continue
        if (entry.isDirectory()) {
          const child = depth < 5 ? await walk(join(dir, entry.name), depth + 1) : { absPath: join(dir, entry.name), childrenWereProcessed: false }
          numFiles += child.numFiles ?? 0
          childrenDirs.push(child)
        } else {
          childrenFiles.push({ name: entry.name })
          numFiles++
        }
      }
      return { absPath: dir, childrenDirs, childrenFiles, childrenWereProcessed: true, numFiles }
    }
    try {
      const root: LsNodeInit = await walk(this.path(path || "."), 0)
      return { case: "lsResult", value: { result: { case: "success", value: { directoryTreeRoot: root as LsDirectoryTreeNode } } } }
    } catch (error) {
      return { case: "lsResult", value: { result: { case: "error", value: { path, error: String((error as Error).message) } } } }
    }
  }

  private async files(dir: string): Promise<Array<string>> {
    const out: Array<string> = []
    const walk = async (current: string) => {
      const info = await stat(current)
      if (!info.isDirectory()) {
        out.push(current)
        return
      }
      for (const entry of (await readdir(current, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1))) {
        if (SKIPPED_DIRS.has(entry.name)) continue
        await walk(join(current, entry.name))
      }
    }
    await walk(dir)
    return out
  }

  async grep(args: { readonly pattern: string; readonly path?: string | undefined; readonly glob?: string | undefined; readonly outputMode?: string | undefined; readonly caseInsensitive?: boolean | undefined }): Promise<ExecAnswer> {
    const base = this.path(args.path || ".")
    const fail = (error: string): ExecAnswer => ({ case: "grepResult", value: { result: { case: "error", value: { error } } } })
    let regex: RegExp | undefined
    try {
      regex = args.pattern === "" ? undefined : new RegExp(args.pattern, args.caseInsensitive === true ? "i" : "")
    } catch (error) {
      return fail(`bad pattern: ${(error as Error).message}`)
    }
    const globRe = args.glob !== undefined && args.glob !== "" ? globToRegExp(args.glob) : undefined
    let all: Array<string>
    try {
      all = await this.files(base)
    } catch (error) {
      return fail(String((error as Error).message))
    }
    const shown = (file: string) => relative(this.root, file)
    const candidates = all.filter((file) => {
      if (globRe === undefined) return true
      const rel = relative(base, file)
      return globRe.test(rel) || globRe.test(rel.split("/").pop() ?? rel)
    })
    const mode = args.outputMode || "content"
    const matches: Array<{ file: string; matches: Array<{ lineNumber: number; content: string }> }> = []
    for (const file of candidates) {
      if (regex === undefined) {
        matches.push({ file: shown(file), matches: [] })
        continue
      }
      const lines = (await readFile(file, "utf8")).split("\n")
      const hits = lines.flatMap((line, i) => (regex.test(line) ? [{ lineNumber: i + 1, content: line }] : []))
      if (hits.length > 0) matches.push({ file: shown(file), matches: hits })
    }
    const union: GrepUnionInit = regex === undefined || mode === "files_with_matches"
      ? { result: { case: "files", value: { files: matches.map((m) => m.file), totalFiles: matches.length } } }
      : mode === "count"
      ? { result: { case: "count", value: { totalFiles: matches.length, totalMatches: matches.reduce((n, m) => n + m.matches.length, 0) } } }
      : {
        result: {
          case: "content",
          value: {
            matches,
            totalLines: matches.reduce((n, m) => n + m.matches.length, 0),
            totalMatchedLines: matches.reduce((n, m) => n + m.matches.length, 0)
          }
        }
      }
    return {
      case: "grepResult",
      value: { result: { case: "success", value: { pattern: args.pattern, path: args.path ?? "", outputMode: mode, workspaceResults: { [this.root]: union } } } }
    }
  }

  shell(command: string, workingDirectory: string, signal: AbortSignal): AsyncIterable<ExecAnswer> {
    const queue = asyncQueue<ExecAnswer>()
    const cwd = this.path(workingDirectory || ".")
    const stream = (event: ShellEventInit): ExecAnswer =>
      ({ case: "shellStream", value: { event } })
    const child = spawn("/bin/sh", ["-c", command], { cwd, stdio: ["ignore", "pipe", "pipe"] })
    let aborted = false
    const onAbort = () => {
      aborted = true
      child.kill("SIGKILL")
    }
    signal.addEventListener("abort", onAbort, { once: true })
    queue.push(stream({ case: "start", value: {} }))
    child.stdout.setEncoding("utf8").on("data", (data: string) => queue.push(stream({ case: "stdout", value: { data } })))
    child.stderr.setEncoding("utf8").on("data", (data: string) => queue.push(stream({ case: "stderr", value: { data } })))
    child.on("error", (error) => {
      signal.removeEventListener("abort", onAbort)
      queue.push({ case: "throw", error: String(error.message) })
      queue.end()
    })
    child.on("close", (code) => {
      signal.removeEventListener("abort", onAbort)
      queue.push(stream({ case: "exit", value: { code: code ?? (aborted ? 137 : 1), cwd, aborted } }))
      queue.end()
    })
    return queue.iterate()
  }
}

const single = (answer: Promise<ExecAnswer>): AsyncIterable<ExecAnswer> => ({
  [Symbol.asyncIterator]: async function*() {
    yield await answer
  }
})

// =============================================================================
// Append delivery
// =============================================================================

/**
 * How appends reach the server. `concurrent` (Cursor): each POST as soon as the message exists,
 * up to `appendConcurrency` in flight. `sequential`: one at a time in seqno order. `shuffled`:
 * the appends produced together (one burst, e.g. a shell stream's events) go out in a seeded
 * random order, about `duplicateRate` of them twice, each POST started without waiting for the
 * one before it to be answered (at most `appendConcurrency` consecutive seqnos at a time, as a
 * client with that many in flight has): the server answers an append held behind a gap only
 * once the gap fills, so a client that waited for each answer before sending the next, out of
 * order, would wait on itself.
 */
export type Delivery =
  | { readonly _tag: "concurrent" }
  | { readonly _tag: "sequential" }
  | { readonly _tag: "shuffled"; readonly seed: number; readonly duplicateRate: number }

/** A small seeded PRNG (mulberry32): reproducible shuffles. */
export const seededRandom = (seed: number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// =============================================================================
// The client
// =============================================================================

export interface CursorClientOptions {
  /** `http://127.0.0.1:<port>` */
  readonly baseUrl: string
  /** Answers execs; without one every exec is answered with a client `throw`. */
  readonly workspace?: Workspace
  /** Sends `client_heartbeat` this often during a turn; 0 or absent: off. */
  readonly heartbeatMs?: number
  readonly delivery?: Delivery
  readonly appendConcurrency?: number
  /** A turn that has not ended after this long resolves with a problem (default 20 s). */
  readonly turnTimeoutMs?: number
  /** A unary POST (an append) not answered after this long fails (default 15 s). */
  readonly requestTimeoutMs?: number
  /** Echo `exec_id` in exec answers (the IDE does not). */
  readonly echoExecId?: boolean
  readonly extraHeaders?: Readonly<Record<string, string>>
  /** `held`: KV answers (set_blob acknowledgements, get_blob results) wait for `Turn.releaseKvAnswers()` (default: sent at once). */
  readonly kvAnswers?: "atOnce" | "held"
  /**
   * How turns reach the server: `sse` (default), Cursor's HTTP/1.1 mode (RunSSE + one BidiAppend
   * per message), or `run`, its HTTP/2 mode (one `AgentService/Run` bidi call per turn at
   * `runUrl`, all client messages on its request stream; `delivery`, `appendConcurrency` and
   * `order` do not apply).
   */
  readonly wire?: "sse" | "run"
  /** The HTTP agent for RunSSE and the unary calls (e.g. an https.Agent through the proxy, for an https baseUrl). */
  readonly agent?: http.Agent
  /** The h2c base URL of `Run` (`http://127.0.0.1:<h2port>`); required with `wire: "run"`. */
  readonly runUrl?: string
  /**
   * Answers interaction queries (the plan card, questions, mode switches, web approvals), as the
   * user would in Cursor's UI: the `InteractionResponse` result to send, or undefined to leave
   * the query waiting (a test answers it with `Turn.answerQuery`). Without it none is answered.
   */
  readonly interactions?: (query: InteractionQuery) => InteractionAnswer | undefined | Promise<InteractionAnswer | undefined>
}

/** The result of an `InteractionResponse`, as init data. */
export type InteractionAnswer = NonNullable<MessageInitShape<typeof InteractionResponseSchema>["result"]>

export interface TurnOptions extends RunRequestSpec {
  readonly requestId?: string
  /**
   * Which of RunSSE and the run_request reaches the server first: `concurrent` (Cursor: both
   * at once), `runSseFirst` (the run request after RunSSE's response headers, which the
   * server sends with its first frame, so use a short server heartbeat), or
   * `runRequestFirst` (RunSSE after the run request's append was acknowledged). Ignored on
   * wire "run", where the run_request is simply the call's first message.
   */
  readonly order?: "concurrent" | "runSseFirst" | "runRequestFirst"
}

export interface RawResponse {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: Uint8Array
}

export class CursorClient {
  readonly agent: http.Agent
  /** Every blob the server stored on this client, by hex id. */
  readonly blobs = new Map<string, Uint8Array>()
  private readonly url: URL
  /** Wire "run": the `Run` client on one HTTP/2 session shared by the turns. */
  readonly runConnection: RunConnection | undefined

  constructor(readonly options: CursorClientOptions) {
    this.url = new URL(options.baseUrl)
    this.agent = options.agent ?? new http.Agent({ keepAlive: true, maxSockets: 64 })
    if (options.wire === "run") {
      if (options.runUrl === undefined) throw new Error(`CursorClient: wire "run" needs runUrl (the h2c base URL of AgentService/Run)`)
      this.runConnection = new RunConnection(options.runUrl)
    }
  }

  /** Starts a turn: a new request id, RunSSE, and the run_request as seq 0. */
  turn(options: TurnOptions): Turn {
    return new Turn(this, options)
  }

  /** Runs a whole turn and returns its transcript. */
  run(options: TurnOptions): Promise<Transcript> {
    return this.turn(options).done
  }

  /** One unary POST (BidiAppend and the model/config RPCs). */
  post(path: string, body: Uint8Array, headers: Readonly<Record<string, string>> = {}): Promise<RawResponse> {
    return new Promise((resolvePost, reject) => {
      const request = requestOf(this.url)({
        host: this.url.hostname,
        port: this.url.port,
        path,
        method: "POST",
        agent: this.agent,
        headers: { "content-type": "application/proto", "connect-protocol-version": "1", ...this.options.extraHeaders, ...headers, "content-length": String(body.length) }
      }, (response) => {
        const chunks: Array<Buffer> = []
        response.on("data", (chunk: Buffer) => chunks.push(chunk))
        response.on("end", () => resolvePost({ status: response.statusCode ?? 0, headers: response.headers, body: new Uint8Array(Buffer.concat(chunks)) }))
        response.on("error", reject)
      })
      request.setTimeout(this.options.requestTimeoutMs ?? 15_000, () => request.destroy(new Error(`no answer to POST ${path} within the request timeout`)))
      request.on("error", reject)
      request.end(body)
    })
  }

  /** A BidiAppend of `message` with an explicit seqno (tests of ordering and bad input). */
  append(requestId: string, appendSeqno: number | bigint, message: AgentClientMessageInit): Promise<RawResponse> {
    return this.post("/aiserver.v1.BidiService/BidiAppend", bidiAppendBody(requestId, appendSeqno, message), { "x-request-id": requestId })
  }

  close(): void {
    this.agent.destroy()
    this.runConnection?.close()
  }
}

/** One RunSSE connection (or Run call) of a turn and the frames it delivered. */
export interface Connection {
  readonly number: number
  readonly frames: Array<Frame>
  request: http.ClientRequest | undefined
  /** Wire "sse": the RunSSE response, once its head arrived (`Turn.pauseReading` pauses it). */
  response?: http.IncomingMessage
  headers: http.IncomingHttpHeaders
  finished: boolean
}

type Waiter = { readonly predicate: (frame: Frame) => boolean; readonly resolve: (frame: Frame) => void }

interface BurstItem {
  readonly seqno: number
  readonly message: AgentClientMessageInit
  readonly what: string
  /** With the status of the first delivery (a duplicate resolves nothing new). */
  readonly resolve: (status: number) => void
}

/** How many times an append answered `unavailable` is sent in all. */
const APPEND_ATTEMPTS = 10

/**
 * How a turn's messages travel: the SSE wire (RunSSE connections + BidiAppend POSTs, written
 * in `Turn` itself) or the Run wire (`RunWire`: one HTTP/2 bidi call at a time).
 */
export interface TurnWire {
  /** Opens the server stream and sends the run_request (`Turn.send`) in the given order. */
  open(run: AgentClientMessageInit, order: NonNullable<TurnOptions["order"]>): Promise<void>
  /** Delivers one numbered client message; resolves with its status (and records it). */
  send(seqno: number, message: AgentClientMessageInit, what: string): Promise<number>
  /** Drops the current connection/call; the turn goes on on the server. */
  disconnect(): void
  /** Drops the current connection/call and opens a new one; resolves once its response headers arrived. */
  reconnect(): Promise<void>
  /** Ends the client's request side early (a no-op where there is none). */
  halfClose(): void
  /** The turn is over (end-stream, failure or timeout): stop what is still open. */
  close(): void
}

/** One Cursor turn: a request id, its RunSSE connection(s) and its appends. */
export class Turn {
  readonly requestId: string
  readonly conversationId: string
  readonly done: Promise<Transcript>
  readonly startedAt = performance.now()
  private resolveDone!: (transcript: Transcript) => void
  private nextSeqno = 0
  private readonly connections: Array<Connection> = []
  private readonly appends: Array<AppendRecord> = []
  private readonly problems: Array<string> = []
  private readonly answeredExecs = new Set<number>()
  private readonly answeredKv = new Set<number>()
  private readonly answeredQueries = new Set<number>()
  private readonly aborts = new Map<number, AbortController>()
  private readonly waiters: Array<Waiter> = []
  private readonly appendWaiters: Array<{ readonly predicate: (record: AppendRecord) => boolean; readonly resolve: (record: AppendRecord) => void }> = []
  private end: Dialect.EndStream | undefined
  private endAt: number | undefined
  private finished = false
  private heartbeat: ReturnType<typeof setInterval> | undefined
  private timeout: ReturnType<typeof setTimeout> | undefined
  private inFlight = 0
  private readonly queued: Array<() => void> = []
  /** Every append POST not answered yet: the transcript waits for them. */
  private readonly unanswered = new Set<Promise<number>>()
  private burst: Array<BurstItem> = []
  private burstChain: Promise<void> = Promise.resolve()
  private readonly random: () => number
  /** KV answers held back (`kvAnswers: "held"`), and whether they were released. */
  private heldKvAnswers: Array<() => void> = []
  private kvAnswersReleased = false
  private readonly wire: TurnWire
  /** Set on wire "run" (the same object as `wire`). */
  private readonly runWire: RunWire | undefined

  constructor(readonly client: CursorClient, readonly options: TurnOptions) {
    this.requestId = options.requestId ?? randomUUID()
    this.conversationId = options.conversationId
    this.done = new Promise((r) => (this.resolveDone = r))
    if (client.runConnection !== undefined) {
      this.runWire = new RunWire(client.runConnection, {
        requestId: this.requestId,
        extraHeaders: client.options.extraHeaders ?? {},
        send: (message) => this.send(message),
        newConnection: () => this.newConnection(),
        onMessage: (connection, message, at) => this.onMessage(connection, message, at),
        onEnd: (connection, end, at) => this.onEnd(connection, end, at),
        problem: (problem) => void this.problems.push(problem),
        recordAppend: (record) => this.recordAppend(record),
        resumeRequest: () => this.resumeRequest()
      })
      this.wire = this.runWire
    } else {
      this.runWire = undefined
      this.wire = this.sseWire()
    }
    const delivery = client.options.delivery
    this.random = seededRandom(delivery?._tag === "shuffled" ? delivery.seed : 1)
    this.timeout = setTimeout(() => this.finish(`the turn did not end within ${client.options.turnTimeoutMs ?? 20_000} ms`), client.options.turnTimeoutMs ?? 20_000)
    const heartbeatMs = client.options.heartbeatMs ?? 0
    if (heartbeatMs > 0) this.heartbeat = setInterval(() => void this.send(clientHeartbeat()), heartbeatMs)
    void this.begin(options.order ?? "concurrent")
  }

  /** Today's HTTP/1.1 wire, written below: RunSSE connections and BidiAppend POSTs. */
  private sseWire(): TurnWire {
    return {
      open: (run, order) => this.openSse(run, order),
      send: (seqno, message, what) => this.sendAppend(seqno, message, what),
      disconnect: () => this.disconnectRunSse(),
      reconnect: () => {
        this.disconnectRunSse()
        return this.openRunSse()
      },
      halfClose: () => undefined,
      close: () => undefined
    }
  }

  private async begin(order: NonNullable<TurnOptions["order"]>) {
    // The client is the blob store: the parts a ref_only run request names are in it.
    for (const data of [this.options.refOnlyContext?.rules, this.options.refOnlyContext?.mcps]) {
      if (data !== undefined && this.options.refOnlyContext?.missingFromStore !== true) this.client.blobs.set(sha256Hex(data), data)
    }
    for (const image of this.options.images ?? []) if (image.how === "blobId") this.client.blobs.set(sha256Hex(image.data), image.data)
    const run = runRequestMessage({ ...this.options, workspacePaths: this.workspacePaths() })
    await this.wire.open(run, order)
  }

  private workspacePaths(): ReadonlyArray<string> {
    return this.options.workspacePaths ?? (this.client.options.workspace instanceof LocalWorkspace ? [this.client.options.workspace.root] : [])
  }

  /** The first message of a resumed Run call: resume_action with the last checkpoint this turn saw. */
  private resumeRequest(): AgentClientMessageInit {
    const checkpoints = this.connections.flatMap((c) => c.frames).flatMap((f) => (f.message.message.case === "conversationCheckpointUpdate" ? [f.message.message.value] : []))
    const conversationState = checkpoints[checkpoints.length - 1] ?? this.options.conversationState
    return runRequestMessage({
      conversationId: this.conversationId,
      text: "",
      resume: true,
      ...(this.options.model !== undefined ? { model: this.options.model } : {}),
      ...(this.options.mcpTools !== undefined ? { mcpTools: this.options.mcpTools } : {}),
      ...(conversationState !== undefined ? { conversationState } : {})
    })
  }

  private async openSse(run: AgentClientMessageInit, order: NonNullable<TurnOptions["order"]>) {
    switch (order) {
      case "concurrent":
        this.openRunSse()
        void this.send(run)
        return
      case "runSseFirst":
        await this.openRunSse()
        void this.send(run)
        return
      case "runRequestFirst":
        await this.send(run)
        this.openRunSse()
        return
    }
  }

  /** Frames of the current connection so far. */
  get frames(): ReadonlyArray<Frame> {
    return this.connections[this.connections.length - 1]?.frames ?? []
  }

  /** Resolves with the first frame (already received or to come) that matches; rejects after `timeoutMs`. */
  waitFor(predicate: (frame: Frame) => boolean, timeoutMs = 10_000): Promise<Frame> {
    const seen = this.frames.find(predicate)
    if (seen !== undefined) return Promise.resolve(seen)
    return new Promise((resolveWait, reject) => {
      const timer = setTimeout(() => reject(new Error(`no matching frame within ${timeoutMs} ms`)), timeoutMs)
      this.waiters.push({ predicate, resolve: (frame) => {
        clearTimeout(timer)
        resolveWait(frame)
      } })
    })
  }

  /** Resolves with the first append (already answered or to come) that matches; rejects after `timeoutMs`. */
  waitForAppend(predicate: (record: AppendRecord) => boolean, timeoutMs = 10_000): Promise<AppendRecord> {
    const seen = this.appends.find(predicate)
    if (seen !== undefined) return Promise.resolve(seen)
    return new Promise((resolveWait, reject) => {
      const timer = setTimeout(() => reject(new Error(`no matching append within ${timeoutMs} ms`)), timeoutMs)
      this.appendWaiters.push({ predicate, resolve: (record) => {
        clearTimeout(timer)
        resolveWait(record)
      } })
    })
  }

  private recordAppend(record: AppendRecord) {
    this.appends.push(record)
    for (const waiter of this.appendWaiters.filter((w) => w.predicate(record))) {
      this.appendWaiters.splice(this.appendWaiters.indexOf(waiter), 1)
      waiter.resolve(record)
    }
  }

  /**
   * Sends a client message as the next append; resolves with the HTTP status once acknowledged.
   * On wire "run": pushes it onto the Run call's request stream, in order, and resolves with 200
   * once the call took it (0 when no open call can carry it).
   */
  send(message: AgentClientMessageInit): Promise<number> {
    return this.wire.send(this.nextSeqno++, message, describeClientMessage(message))
  }

  private sendAppend(seqno: number, message: AgentClientMessageInit, what: string): Promise<number> {
    const delivery = this.client.options.delivery ?? { _tag: "concurrent" }
    if (delivery._tag === "shuffled") {
      return new Promise((resolveSent) => {
        this.burst.push({ seqno, message, what, resolve: resolveSent })
        // Everything produced before the next macrotask is one burst.
        if (this.burst.length === 1) {
          setImmediate(() => {
            const burst = this.burst
            this.burst = []
            this.burstChain = this.burstChain.then(() => this.deliverShuffled(burst, delivery.duplicateRate))
          })
        }
      })
    }
    if (delivery._tag === "sequential") {
      const sent = this.burstChain.then(() => this.post(seqno, message, what))
      this.burstChain = sent.then(() => undefined)
      return sent
    }
    return this.limited(() => this.post(seqno, message, what))
  }

  private async deliverShuffled(burst: ReadonlyArray<BurstItem>, duplicateRate: number) {
    const inFlight = this.client.options.appendConcurrency ?? 16
    for (let from = 0; from < burst.length; from += inFlight) {
      const order = burst.slice(from, from + inFlight)
      for (let i = order.length - 1; i > 0; i--) {
        const j = Math.floor(this.random() * (i + 1))
        ;[order[i], order[j]] = [order[j]!, order[i]!]
      }
      const withDuplicates = order.flatMap((item) => (this.random() < duplicateRate ? [item, item] : [item]))
      await Promise.all(withDuplicates.map((item) => this.post(item.seqno, item.message, item.what).then(item.resolve)))
    }
  }

  private limited<A>(task: () => Promise<A>): Promise<A> {
    const limit = this.client.options.appendConcurrency ?? 16
    return new Promise<A>((resolveTask, reject) => {
      const start = () => {
        this.inFlight++
        task().then(resolveTask, reject).finally(() => {
          this.inFlight--
          this.queued.shift()?.()
        })
      }
      if (this.inFlight < limit) start()
      else this.queued.push(start)
    })
  }

  /**
   * A keep-alive socket the server closed while idle fails the next request on it with
   * ECONNRESET/EPIPE before any answer; like any HTTP client, send it again on a fresh socket.
   * Safe: the server drops a repeated seqno.
   */
  private async appendRetryingStaleSockets(seqno: number, message: AgentClientMessageInit): Promise<RawResponse> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.client.append(this.requestId, seqno, message)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code
        if (attempt >= 2 || (code !== "ECONNRESET" && code !== "EPIPE")) throw error
      }
    }
  }

  private post(seqno: number, message: AgentClientMessageInit, what: string): Promise<number> {
    const posted = this.postOnce(seqno, message, what)
    this.unanswered.add(posted)
    void posted.finally(() => this.unanswered.delete(posted))
    return posted
  }

  /**
   * One append until it is answered: an `unavailable` answer (the server could not stand behind
   * an acknowledgement yet: held behind a gap, or its input not committed) is retryable, so the
   * append is sent again, as it is, a few times; any other answer is final.
   */
  private async postOnce(seqno: number, message: AgentClientMessageInit, what: string): Promise<number> {
    const sentAt = performance.now()
    let attempts = 0
    try {
      for (;;) {
        attempts++
        const response = await this.appendRetryingStaleSockets(seqno, message)
        // Even after the stream ended: the client holds no acknowledgement for it.
        if (response.status === 503 && attempts < APPEND_ATTEMPTS) {
          await new Promise((r) => setTimeout(r, 20))
          continue
        }
        this.recordAppend({ seqno, what, status: response.status, sentAt, answeredAt: performance.now(), attempts })
        if (response.status !== 200) this.problems.push(`append ${seqno} (${what}) answered ${response.status} after ${attempts} attempt(s): ${Buffer.from(response.body).toString("utf8")}`)
        return response.status
      }
    } catch (error) {
      this.recordAppend({ seqno, what, status: 0, sentAt, answeredAt: performance.now(), attempts })
      this.problems.push(`append ${seqno} (${what}) failed: ${(error as Error).message}`)
      return 0
    }
  }

  /** Answers interaction query `id` (an `InteractionResponse`), as the user does in Cursor's UI. */
  answerQuery(id: number, result: InteractionAnswer): Promise<number> {
    return this.send({ message: { case: "interactionResponse", value: { id, result } } })
  }

  sendUserMessage(text: string, mode: RunRequestSpec["mode"] = "agent"): Promise<number> {
    return this.send(userMessageAction(text, mode))
  }

  private answerKv(answer: () => void) {
    if (this.client.options.kvAnswers === "held" && !this.kvAnswersReleased) this.heldKvAnswers.push(answer)
    else answer()
  }

  /** Sends the KV answers held so far (`kvAnswers: "held"`), and any later ones at once; how many were held. */
  releaseKvAnswers(): number {
    this.kvAnswersReleased = true
    const held = this.heldKvAnswers
    this.heldKvAnswers = []
    held.forEach((answer) => answer())
    return held.length
  }

  cancel(reason = "user_stopped_generation"): Promise<number> {
    return this.send(cancelAction(reason))
  }

  /**
   * Drops the current RunSSE connection (the turn goes on on the server). On wire "run": aborts
   * the Run call (the server sees a reset stream: a disconnect, not a cancel); messages sent
   * meanwhile wait for `reconnect()`.
   */
  disconnect(): void {
    this.wire.disconnect()
  }

  /**
   * Drops the current RunSSE connection and opens a new one with the same request id. On wire
   * "run" (an HTTP/2 stream cannot be reattached) it resumes as the CLI does: a new Run call with
   * a new request id whose first message is a run_request with `resume_action`, the same
   * conversation id and model, and the last checkpoint the turn saw; its frames go into a new
   * connection, and execs already answered are not run again.
   */
  reconnect(): Promise<void> {
    return this.wire.reconnect()
  }

  /**
   * Wire "run": ends the call's request side now (the turn goes on; nothing more can be sent, so
   * the heartbeat stops and a later `send` resolves 0 with a problem). A no-op on wire "sse",
   * whose RunSSE request is complete once sent.
   */
  halfClose(): void {
    if (this.runWire !== undefined && this.heartbeat !== undefined) {
      clearInterval(this.heartbeat)
      this.heartbeat = undefined
    }
    this.wire.halfClose()
  }

  /**
   * Wire "sse": stops reading the current RunSSE connection, which stays open (a client that
   * stopped reading a slow turn): the server's frames wait in the socket's buffers until
   * `resumeReading`.
   */
  pauseReading(): void {
    this.connections[this.connections.length - 1]?.response?.pause()
  }

  /** Wire "sse": reads the current RunSSE connection again, from what waited in its buffers. */
  resumeReading(): void {
    this.connections[this.connections.length - 1]?.response?.resume()
  }

  private disconnectRunSse(): void {
    const current = this.connections[this.connections.length - 1]
    if (current !== undefined) {
      current.finished = true
      current.request?.destroy()
    }
  }

  /** Opens a RunSSE connection; resolves once its response headers arrived. */
  private openRunSse(): Promise<void> {
    const connection = this.newConnection()
    const body = runSseBody(this.requestId)
    const url = new URL(this.client.options.baseUrl)
    return new Promise((resolveOpen) => {
      const headers = { "x-cursor-streaming": "true", ...this.client.options.extraHeaders }
      const request = requestOf(url)(runSseRequestOptions(url, this.requestId, body, this.client.agent, headers), (response) => {
        connection.headers = response.headers
        connection.response = response
        resolveOpen()
        if (response.statusCode !== 200) this.problems.push(`RunSSE answered HTTP ${response.statusCode}`)
        let buffer: Buffer = Buffer.alloc(0)
        response.on("data", (chunk: Buffer) => {
          if (connection.finished) return
          const at = performance.now()
          buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk])
          while (buffer.length >= 5) {
            const length = buffer.readUInt32BE(1)
            if (buffer.length < 5 + length) break
            const flags = buffer[0]!
            let payload = new Uint8Array(buffer.subarray(5, 5 + length))
            buffer = buffer.subarray(5 + length)
            if ((flags & FLAG_COMPRESSED) !== 0) payload = new Uint8Array(gunzipSync(payload))
            this.onFrame(connection, flags, payload, at)
          }
        })
        response.on("end", () => {
          if (connection.finished) return
          connection.finished = true
          if (buffer.length > 0) this.problems.push(`RunSSE ended inside a frame (${buffer.length} bytes left)`)
          this.finish("RunSSE ended without an end-stream frame")
        })
        response.on("error", () => undefined)
      })
      connection.request = request
      request.on("error", (error) => {
        resolveOpen()
        if (connection.finished) return
        connection.finished = true
        this.finish(`RunSSE failed: ${error.message}`)
      })
      request.end(body)
    })
  }

  private newConnection(): Connection {
    const connection: Connection = { number: this.connections.length + 1, frames: [], request: undefined, headers: {}, finished: false }
    this.connections.push(connection)
    return connection
  }

  private onFrame(connection: Connection, flags: number, payload: Uint8Array, at: number) {
    if ((flags & FLAG_END_STREAM) !== 0) {
      this.onEnd(connection, Dialect.decodeEndStream(payload), at)
      return
    }
    let message: AgentServerMessage
    try {
      message = fromBinary(AgentServerMessageSchema, payload)
    } catch (error) {
      this.problems.push(`undecodable server frame: ${(error as Error).message}`)
      return
    }
    this.onMessage(connection, message, at)
  }

  /** The end of the stream: its outcome (or why it could not be read), then the turn finishes. */
  private onEnd(connection: Connection, end: Either.Either<Dialect.EndStream, { readonly message: string }>, at: number) {
    connection.finished = true
    if (Either.isLeft(end)) this.problems.push(`bad end-stream frame: ${end.left.message}`)
    else this.end = end.right
    this.endAt = at
    connection.request?.destroy()
    this.finish(undefined)
  }

  /** One server message, from either wire: recorded, handed to waiters, reacted to. */
  private onMessage(connection: Connection, message: AgentServerMessage, at: number) {
    const frame: Frame = { at, connection: connection.number, event: frameEvent(message), message }
    connection.frames.push(frame)
    for (const waiter of this.waiters.filter((w) => w.predicate(frame))) {
      this.waiters.splice(this.waiters.indexOf(waiter), 1)
      waiter.resolve(frame)
    }
    this.react(message)
  }

  /** What Cursor does with a server message: run execs, store blobs, stop aborted execs. */
  private react(message: AgentServerMessage) {
    const m = message.message
    switch (m.case) {
      case "execServerMessage": {
        if (this.answeredExecs.has(m.value.id)) return // replayed after a reconnect
        this.answeredExecs.add(m.value.id)
        void this.runExec(m.value)
        return
      }
      case "execServerControlMessage":
        if (m.value.message.case === "abort") this.aborts.get(m.value.message.value.id)?.abort()
        return
      case "interactionQuery": {
        const query = m.value
        if (this.answeredQueries.has(query.id) || this.client.options.interactions === undefined) return // replayed after a reconnect
        this.answeredQueries.add(query.id)
        void Promise.resolve(this.client.options.interactions(query)).then((answer) => {
          if (answer !== undefined) void this.answerQuery(query.id, answer)
        })
        return
      }
      case "kvServerMessage": {
        const id = m.value.id
        const kv = m.value.message
        if (this.answeredKv.has(id)) return
        this.answeredKv.add(id)
        if (kv.case === "setBlobArgs") {
          const expected = sha256Hex(kv.value.blobData)
          if (toHex(kv.value.blobId) !== expected) this.problems.push(`blob ${toHex(kv.value.blobId)} is not the SHA-256 of its data (${expected})`)
          this.client.blobs.set(toHex(kv.value.blobId), kv.value.blobData)
          this.answerKv(() => void this.send({ message: { case: "kvClientMessage", value: { id, message: { case: "setBlobResult", value: {} } } } }))
        } else if (kv.case === "getBlobArgs") {
          const data = this.client.blobs.get(toHex(kv.value.blobId))
          this.answerKv(() =>
            void this.send({
              message: {
                case: "kvClientMessage",
                value: { id, message: { case: "getBlobResult", value: data === undefined ? { error: { message: "blob not found" } } : { blobData: data } } }
              }
            })
          )
        }
        return
      }
      default:
        return
    }
  }

  private async runExec(exec: ExecServerMessage) {
    const workspace = this.client.options.workspace
    const controller = new AbortController()
    this.aborts.set(exec.id, controller)
    const ids = { id: exec.id, ...(this.client.options.echoExecId === true ? { execId: exec.execId } : {}) }
    try {
      if (workspace === undefined) {
        void this.send({ message: { case: "execClientControlMessage", value: { message: { case: "throw", value: { id: exec.id, error: "no workspace" } } } } })
        return
      }
      for await (const answer of workspace.answer(exec, controller.signal)) {
        if (answer.case === "throw") {
          void this.send({ message: { case: "execClientControlMessage", value: { message: { case: "throw", value: { id: exec.id, error: answer.error } } } } })
        } else {
          void this.send({ message: { case: "execClientMessage", value: { ...ids, message: answer } } })
        }
      }
    } catch (error) {
      void this.send({ message: { case: "execClientControlMessage", value: { message: { case: "throw", value: { id: exec.id, error: String((error as Error).message) } } } } })
    } finally {
      this.aborts.delete(exec.id)
    }
    void this.send({ message: { case: "execClientControlMessage", value: { message: { case: "streamClose", value: { id: exec.id } } } } })
  }

  private finish(problem: string | undefined) {
    if (this.finished) return
    this.finished = true
    if (problem !== undefined) this.problems.push(problem)
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat)
    if (this.timeout !== undefined) clearTimeout(this.timeout)
    for (const controller of this.aborts.values()) controller.abort()
    for (const connection of this.connections) {
      connection.finished = true
      connection.request?.destroy()
    }
    this.wire.close()
    // Let appends already produced (acks, stream closes) go out before the transcript is read.
    void Promise.resolve().then(async () => {
      await this.burstChain
      while (this.unanswered.size > 0 || this.queued.length > 0) await Promise.allSettled([...this.unanswered])
      this.resolveDone(this.transcript())
    })
  }

  /** The transcript so far (complete once `done` resolved). */
  transcript(): Transcript {
    const frames = this.frames
    const events = frames.map((f) => f.event).filter((e) => e.kind !== "heartbeat")
    const turnEnded = [...events].reverse().find((e): e is Extract<FrameEvent, { kind: "turn_ended" }> => e.kind === "turn_ended")
    return {
      requestId: this.requestId,
      conversationId: this.conversationId,
      frames,
      connections: this.connections.map((c) => c.frames),
      events,
      end: this.end,
      endAt: this.endAt,
      text: events.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join(""),
      thinking: events.flatMap((e) => (e.kind === "thinking_delta" ? [e.text] : [])).join(""),
      checkpoints: frames.flatMap((f) => (f.message.message.case === "conversationCheckpointUpdate" ? [f.message.message.value] : [])),
      usage: turnEnded?.usage,
      appends: [...this.appends].sort((a, b) => a.seqno - b.seqno),
      problems: [...this.problems],
      responseHeaders: this.connections[this.connections.length - 1]?.headers ?? {},
      startedAt: this.startedAt,
      ...(this.runWire !== undefined ? { resumedRequestIds: [...this.runWire.resumedRequestIds] } : {})
    }
  }
}

const describeClientMessage = (message: AgentClientMessageInit): string => {
  const m = message.message
  if (m === undefined || m.case === undefined) return "empty"
  const value = m.value as { message?: { case?: string }; action?: { case?: string } }
  const inner = value.message?.case ?? value.action?.case
  return inner === undefined ? m.case : `${m.case}.${inner}`
}
