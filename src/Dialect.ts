/**
 * The Cursor dialect: Cursor's agent protocol (protobuf `agent.v1` / `aiserver.v1`) on one side,
 * the loop's neutral types (`Input`, `ResponseEvent`, `Command`) and the tool machines' exec
 * requests on the other.
 *
 * Decoding turns a BidiAppend body into an envelope `{ requestId, appendSeqno, message }`;
 * it never throws: bad bytes give a typed `DialectError`, and a oneof case from a newer client
 * gives `ClientMessage.Unknown` (log and drop). Encoding returns protobuf message objects
 * (`AgentServerMessage`); `toFrame` gives their bytes for the transport's Connect envelope.
 * The per-turn protocol correlation (exec ids, KV ids, tool call ids of the current model call,
 * summed usage) is an immutable `TurnCorrelation` value that the caller threads through the
 * encoders: no hidden state here.
 *
 * Also here, because they are protocol shapes: the end-stream JSON payload (`{}` or an error
 * with `aiserver.v1.ErrorDetails`), and the projection of a turn's committed messages into
 * the blobs and `ConversationStateStructure` checkpoint Cursor keeps (blob id = SHA-256).
 *
 * Pure: no I/O, no clock (times are arguments), no randomness.
 */
import { clone, create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf"
import type { JsonValue, MessageInitShape } from "@bufbuild/protobuf"
import { ValueSchema } from "@bufbuild/protobuf/wkt"
import { Data, Either, Schema } from "effect"
import {
  AgentClientMessageSchema,
  AgentRunRequestSchema,
  AgentConversationTurnStructureSchema,
  AgentMode,
  AgentServerMessageSchema,
  ConversationStateStructureSchema,
  ConversationStepSchema,
  ConversationTokenDetailsSchema,
  ConversationTurnStructureSchema,
  InteractionUpdateSchema,
  RequestContextMcpsPartSchema,
  RequestContextRulesPartSchema,
  RequestContextSchema,
  ThinkingStyle,
  TodoItemSchema,
  ToolCallSchema,
  UserMessageSchema
} from "./gen/agent/v1/agent_pb.js"
import type {
  PrewarmRequest,
  AgentClientMessage,
  AgentRunRequest,
  AgentServerMessage,
  ConversationAction,
  ConversationStateStructure,
  ExecClientControlMessage,
  ExecClientMessage,
  ExecServerMessage,
  KvClientMessage,
  McpToolDefinition,
  RequestContext,
  RequestContextPartReferences,
  TodoItem,
  ToolCallDelta,
  UserMessage as CursorUserMessage
} from "./gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiRequestIdSchema, ErrorDetails_Error, ErrorDetailsSchema } from "./gen/aiserver/v1/aiserver_pb.js"
import type { BidiAppendRequest } from "./gen/aiserver/v1/aiserver_pb.js"
import { sha256Bytes } from "./internal/Sha256.js"
import { addUsage, emptyUsage } from "./Llm.js"
import type { Message, ResponseEvent, ToolCall, Usage, UserContent, UserMessage } from "./Llm.js"
import { Input } from "./Loop.js"
import type { TurnSettings, TurnWorkspace } from "./Loop.js"
import { partialCursorToolCall } from "./Tools.js"
import type { CursorMode, CursorToolCall, ExecReply, ExecRequest, McpToolDescriptor } from "./Tools.js"

// =============================================================================
// Errors
// =============================================================================

export const DialectErrorReason = Schema.Literal("badHex", "badProtobuf", "badJson", "missingField", "unknownCase")
export type DialectErrorReason = typeof DialectErrorReason.Type

/** Bytes from the client that are not a message we can act on. Never a crash, never a state change. */
export class DialectError extends Schema.TaggedError<DialectError>("cursor-byok/DialectError")("DialectError", {
  reason: DialectErrorReason,
  message: Schema.String
}) {}

const fail = (reason: DialectErrorReason, message: string) => Either.left(new DialectError({ reason, message }))

// =============================================================================
// Decoded client messages
// =============================================================================

/** Where the client runs: what the prompt builder may tell the model about the machine (the turn settings' `workspace`). */
export type WorkspaceInfo = TurnWorkspace

/** The loop's `Input.Start` fields, ready for `Input.Start(start)`. */
export interface StartInput {
  readonly message: UserMessage
  readonly context: ReadonlyArray<UserContent>
  readonly settings: TurnSettings
}

/** What a run request asks for. */
export type RunAction = Data.TaggedEnum<{
  /** A new user turn (`user_message_action`). */
  StartTurn: { readonly start: StartInput; readonly userMessageId: string; readonly userMessage: CursorUserMessage }
  /** Continue the conversation from the checkpoint without a new message (`resume_action`, CLI reconnects). */
  Resume: { readonly settings: TurnSettings }
  /** An action we do not serve (summarize, plans, shell command...): `field` is its tag number. */
  Unsupported: { readonly field: number }
}>
export const RunAction = Data.taggedEnum<RunAction>()

export interface RunRequest {
  readonly conversationId: string | undefined
  readonly action: RunAction
  readonly model: string
  readonly mode: CursorMode
  readonly mcpTools: ReadonlyArray<McpToolDescriptor>
  readonly workspace: WorkspaceInfo
  /** The last checkpoint the client holds (empty for a new chat): the previous turns' blob ids live here. */
  readonly conversationState: ConversationStateStructure | undefined
  /** In `ref_only` context transport the rules / skills / subagents / MCP parts are blobs to fetch with get_blob. */
  readonly requestContextParts: RequestContextPartReferences | undefined
  /**
   * What to read back from the client's blob store before the turn starts: the parts of the
   * request context (`ref_only` context transport: the run request names them instead of
   * carrying them; without them the rules and MCP tools would be missing) and attached images
   * named only by blob id. Empty when everything came inline. Give what was read to
   * `withContextParts`.
   */
  readonly contextToFetch: ReadonlyArray<ContextPartRef>
  /** The whole request, for fields this module does not lift out. */
  readonly raw: AgentRunRequest
}

/** A blob the client keeps that a turn needs: its id (SHA-256 of the bytes) and length (0: not given). */
export interface ContextPartRef {
  readonly part: "rules" | "mcps" | "image"
  readonly blobId: Uint8Array
  readonly byteLength: number
}

export type ClientMessage = Data.TaggedEnum<{
  RunRequest: RunRequest
  /** A follow-up `conversation_action.user_message_action` on a live request. */
  UserMessage: { readonly message: UserMessage; readonly messageId: string; readonly userMessage: CursorUserMessage }
  /** `conversation_action.cancel_action`: decided by its presence, the reason may be empty. */
  Cancel: { readonly reason: string }
  /** A final exec result; correlate with `resolveExec(correlation, id, execId)`. */
  ExecResult: { readonly id: number; readonly execId: string | undefined; readonly reply: ExecReply }
  /** One shell stream event (start, stdout, stderr, exit...); `terminal` when no more events follow. */
  ExecStream: { readonly id: number; readonly execId: string | undefined; readonly reply: Extract<ExecReply, { case: "shellStream" }>; readonly terminal: boolean }
  /** The client closed an exec's stream. Never a result: it may arrive before the result. */
  ExecStreamClose: { readonly id: number }
  /** The client failed to run an exec. */
  ExecThrow: { readonly id: number; readonly error: string; readonly errorCode: string | undefined }
  ExecHeartbeat: { readonly id: number }
  /** A KV answer: a blob read back (`getBlob`) or a write acknowledged (`setBlob`, empty error = success). */
  KvResult: { readonly id: number; readonly kind: "getBlob" | "setBlob"; readonly data: Uint8Array | undefined; readonly error: string | undefined }
  /** We send no interaction queries in v1; `field` is the response case's tag number (cases are not declared). */
  InteractionResponse: { readonly id: number; readonly field: number | undefined }
  /** `client_heartbeat`: liveness only. */
  Heartbeat: {}
  /** `prewarm_request`: the settings of a turn whose user message follows on the same request. */
  Prewarm: { readonly prewarm: PrewarmRequest }
  /** A oneof case this server does not know (a newer client): log `where` and drop. */
  Unknown: { readonly where: string; readonly fields: ReadonlyArray<number> }
}>
export const ClientMessage = Data.taggedEnum<ClientMessage>()

export interface BidiEnvelope {
  readonly requestId: string
  /** Exact int64: seq 0 (the run request) is absent on the wire and decodes as 0n. */
  readonly appendSeqno: bigint
  readonly message: ClientMessage
}

// =============================================================================
// Decoding
// =============================================================================

const HEX = /^[0-9a-fA-F]*$/

/** Strict hex: an odd length or a non-hex character is an error, never a silent truncation. */
export const hexToBytes = (hex: string): Either.Either<Uint8Array, DialectError> => {
  if (hex.length % 2 !== 0) return fail("badHex", `hex data has odd length ${hex.length}`)
  if (!HEX.test(hex)) return fail("badHex", "hex data contains a non-hex character")
  const bytes = new Uint8Array(hex.length / 2)
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16)
  return Either.right(bytes)
}

export const bytesToHex = (bytes: Uint8Array): string => {
  let out = ""
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0")
  return out
}

const parse = <A>(what: string, decode: () => A): Either.Either<A, DialectError> => {
  try {
    return Either.right(decode())
  } catch (error) {
    return fail("badProtobuf", `${what} is not valid protobuf: ${error instanceof Error ? error.message : String(error)}`)
  }
}

/** Decodes a BidiAppend request body (already gunzipped by the transport). */
export const decodeBidiAppend = (body: Uint8Array): Either.Either<BidiEnvelope, DialectError> =>
  Either.flatMap(parse("BidiAppendRequest", () => fromBinary(BidiAppendRequestSchema, body)), decodeBidiAppendRequest)

/** Decodes an already parsed `BidiAppendRequest` (`data` hex, or `data_binary` raw bytes). */
export const decodeBidiAppendRequest = (request: BidiAppendRequest): Either.Either<BidiEnvelope, DialectError> => {
  const requestId = request.requestId?.requestId ?? ""
  if (requestId === "") return fail("missingField", "BidiAppendRequest.request_id is missing")
  if (request.appendSeqno < 0n) return fail("missingField", `BidiAppendRequest.append_seqno is negative (${request.appendSeqno})`)
  let bytes: Either.Either<Uint8Array, DialectError>
  if (request.data !== "") bytes = hexToBytes(request.data)
  else if (request.dataBinary.length > 0) bytes = Either.right(request.dataBinary)
  else return fail("missingField", "BidiAppendRequest carries neither data nor data_binary")
  return bytes.pipe(
    Either.flatMap(decodeClientMessage),
    Either.map((message): BidiEnvelope => ({ requestId, appendSeqno: request.appendSeqno, message }))
  )
}

/** Decodes the RunSSE request payload (one `BidiRequestId`) to its request id. */
export const decodeRunSseRequest = (payload: Uint8Array): Either.Either<string, DialectError> =>
  Either.flatMap(parse("BidiRequestId", () => fromBinary(BidiRequestIdSchema, payload)), ({ requestId }) =>
    requestId === "" ? fail("missingField", "BidiRequestId.request_id is missing") : Either.right(requestId))

/** Decodes the bytes of one `AgentClientMessage`. */
export const decodeClientMessage = (bytes: Uint8Array): Either.Either<ClientMessage, DialectError> =>
  Either.flatMap(parse("AgentClientMessage", () => fromBinary(AgentClientMessageSchema, bytes)), fromClientMessage)

const unknownFields = (message: { readonly $unknown?: ReadonlyArray<{ readonly no: number }> | undefined }): Array<number> =>
  (message.$unknown ?? []).map((field) => field.no)

const unknownCase = (where: string, message: { readonly $unknown?: ReadonlyArray<{ readonly no: number }> | undefined }) => {
  const fields = unknownFields(message)
  return fields.length > 0
    ? Either.right(ClientMessage.Unknown({ where, fields }))
    : fail("missingField", `${where} has no case set`)
}

type Decoded = Either.Either<ClientMessage, DialectError>

/** Maps a parsed `AgentClientMessage` to what the transport and runner act on. */
export const fromClientMessage = (message: AgentClientMessage): Decoded => {
  const m = message.message
  switch (m.case) {
    case "runRequest":
      return Either.right(ClientMessage.RunRequest(decodeRunRequest(m.value)))
    case "conversationAction":
      return decodeConversationAction(m.value)
    case "execClientMessage":
      return decodeExecClientMessage(m.value)
    case "execClientControlMessage":
      return decodeExecControl(m.value)
    case "kvClientMessage":
      return decodeKv(m.value)
    case "interactionResponse":
      return Either.right(ClientMessage.InteractionResponse({ id: m.value.id, field: unknownFields(m.value)[0] }))
    case "clientHeartbeat":
      return Either.right(ClientMessage.Heartbeat())
    case "prewarmRequest":
      return Either.right(ClientMessage.Prewarm({ prewarm: m.value }))
    case undefined:
      return unknownCase("AgentClientMessage", message)
  }
}

const decodeConversationAction = (value: ConversationAction): Decoded => {
  const action = value.action
  switch (action.case) {
    case "userMessageAction": {
      const userMessage = action.value.userMessage
      if (userMessage === undefined) return fail("missingField", "user_message_action.user_message is missing")
      return Either.right(ClientMessage.UserMessage({ message: toLlmUserMessage(userMessage), messageId: userMessage.messageId, userMessage }))
    }
    case "cancelAction":
      return Either.right(ClientMessage.Cancel({ reason: action.value.reason }))
    case "resumeAction":
    case "startPlanAction":
      // These only mean something inside a run_request; on a live request we do not act on them.
      return Either.right(ClientMessage.Unknown({ where: `ConversationAction.${action.case}`, fields: [action.case === "resumeAction" ? 2 : 6] }))
    case undefined:
      return unknownCase("ConversationAction", value)
  }
}

/** Shell stream events after which the client sends no more for that exec. */
const TERMINAL_SHELL_EVENTS: ReadonlyArray<string> = ["exit", "backgrounded", "rejected", "permissionDenied", "sandboxUnsupported"]

const decodeExecClientMessage = (exec: ExecClientMessage): Decoded => {
  const execId = exec.execId === "" ? undefined : exec.execId
  const reply = exec.message
  if (reply.case === undefined) return unknownCase("ExecClientMessage", exec)
  if (reply.case !== "shellStream") return Either.right(ClientMessage.ExecResult({ id: exec.id, execId, reply }))
  const event = reply.value.event
  if (event.case === undefined) return unknownCase("ShellStream", reply.value)
  return Either.right(ClientMessage.ExecStream({ id: exec.id, execId, reply, terminal: TERMINAL_SHELL_EVENTS.includes(event.case) }))
}

const decodeExecControl = (value: ExecClientControlMessage): Decoded => {
  const control = value.message
  switch (control.case) {
    case "streamClose":
      return Either.right(ClientMessage.ExecStreamClose({ id: control.value.id }))
    case "throw":
      return Either.right(ClientMessage.ExecThrow({ id: control.value.id, error: control.value.error, errorCode: control.value.errorCode }))
    case "heartbeat":
      return Either.right(ClientMessage.ExecHeartbeat({ id: control.value.id }))
    case undefined:
      return unknownCase("ExecClientControlMessage", value)
  }
}

const decodeKv = (value: KvClientMessage): Decoded => {
  const kv = value.message
  switch (kv.case) {
    case "getBlobResult":
      return Either.right(ClientMessage.KvResult({ id: value.id, kind: "getBlob", data: kv.value.blobData, error: kv.value.error?.message }))
    case "setBlobResult":
      return Either.right(ClientMessage.KvResult({ id: value.id, kind: "setBlob", data: undefined, error: kv.value.error?.message }))
    case undefined:
      return unknownCase("KvClientMessage", value)
  }
}

const MODES: Record<number, CursorMode> = { [AgentMode.AGENT]: "agent", [AgentMode.ASK]: "ask", [AgentMode.PLAN]: "plan" }

/** The Cursor mode of a user message (debug, triage... run as agent). */
export const cursorModeOf = (mode: AgentMode): CursorMode => MODES[mode] ?? "agent"

export const agentModeOf = (mode: CursorMode): AgentMode =>
  mode === "ask" ? AgentMode.ASK : mode === "plan" ? AgentMode.PLAN : AgentMode.AGENT

/** The text the user typed, as a neutral user message. */
/** An image the user attached: its bytes when at hand (inline, or among `blobs` by id), else the blob id to read back. */
interface AttachedImage {
  readonly data: Uint8Array | undefined
  readonly blobId: Uint8Array | undefined
  readonly path: string
  readonly mimeType: string
}

const attachedImagesOf = (message: CursorUserMessage, blobs: ReadonlyMap<string, Uint8Array>): ReadonlyArray<AttachedImage> =>
  (message.selectedContext?.selectedImages ?? []).flatMap((image): ReadonlyArray<AttachedImage> => {
    const source = image.dataOrBlobId
    const inline = source.case === "data" ? source.value : source.case === "blobIdWithData" && source.value.data.length > 0 ? source.value.data : undefined
    const blobId = source.case === "blobId" ? source.value : source.case === "blobIdWithData" ? source.value.blobId : undefined
    if (inline === undefined && (blobId === undefined || blobId.length === 0)) return []
    const data = inline !== undefined && inline.length > 0 ? inline : blobId !== undefined ? blobs.get(bytesToHex(blobId)) : undefined
    return [{ data, blobId: blobId !== undefined && blobId.length > 0 ? blobId : undefined, path: image.path, mimeType: image.mimeType }]
  })

/** The image type from the first bytes, when the client did not say. */
const sniffImageType = (data: Uint8Array): string => {
  if (data[0] === 0x89 && data[1] === 0x50 && data[2] === 0x4e && data[3] === 0x47) return "image/png"
  if (data[0] === 0xff && data[1] === 0xd8 && data[2] === 0xff) return "image/jpeg"
  if (data[0] === 0x47 && data[1] === 0x49 && data[2] === 0x46) return "image/gif"
  if (data[0] === 0x52 && data[1] === 0x49 && data[2] === 0x46 && data[3] === 0x46 && data[8] === 0x57 && data[9] === 0x45 && data[10] === 0x42 && data[11] === 0x50) return "image/webp"
  return "image/png"
}

/**
 * What the user selected to go with the message, as text blocks: files (unless the request
 * context carries the same path, `alreadyAttached`), code and terminal selections, terminals,
 * and extra context.
 */
const selectionsOf = (message: CursorUserMessage, alreadyAttached: ReadonlySet<string>): Array<UserContent> => {
  const selected = message.selectedContext
  if (selected === undefined) return []
  const text = (value: string): UserContent => ({ type: "text", text: value })
  const where = (item: { readonly path: string; readonly relativePath?: string | undefined }) =>
    item.relativePath !== undefined && item.relativePath !== "" ? item.relativePath : item.path
  const titled = (item: { readonly title?: string | undefined }) => (item.title !== undefined && item.title !== "" ? ` title="${item.title}"` : "")
  return [
    ...selected.files.filter((file) => file.content !== "" && !alreadyAttached.has(file.path))
      .map((file) => text(`<attached_file path="${where(file)}">\n${file.content}\n</attached_file>`)),
    ...selected.codeSelections.filter((selection) => selection.content !== "")
      .map((selection) => text(`<code_selection path="${where(selection)}">\n${selection.content}\n</code_selection>`)),
    ...selected.terminals.filter((terminal) => terminal.content !== "")
      .map((terminal) => text(`<terminal${titled(terminal)}>\n${terminal.content}\n</terminal>`)),
    ...selected.terminalSelections.filter((selection) => selection.content !== "")
      .map((selection) => text(`<terminal_selection${titled(selection)}>\n${selection.content}\n</terminal_selection>`)),
    ...selected.extraContext.filter((extra) => extra !== "").map(text)
  ]
}

/**
 * The model's user message: the attached images (those at hand: inline, sent along or read back
 * by id, `blobs`), what the user selected to go with it (files, code and terminal selections),
 * then the typed text. An image that could not be had is a line of text saying so, never
 * silently dropped.
 */
export const toLlmUserMessage = (
  message: CursorUserMessage,
  blobs: ReadonlyMap<string, Uint8Array> = new Map(),
  alreadyAttached: ReadonlySet<string> = new Set()
): UserMessage => {
  const images = attachedImagesOf(message, blobs).map((image): UserContent =>
    image.data !== undefined
      ? { type: "image", data: Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength).toString("base64"), mimeType: image.mimeType !== "" ? image.mimeType : sniffImageType(image.data) }
      : { type: "text", text: `[An attached image${image.path !== "" ? ` (${image.path})` : ""} could not be read from the editor.]` }
  )
  const before = [...images, ...selectionsOf(message, alreadyAttached)]
  // No empty text block after the rest (some APIs refuse one).
  return { role: "user", content: message.text === "" && before.length > 0 ? before : [...before, { type: "text", text: message.text }] }
}

const mcpDescriptor = (tool: McpToolDefinition): McpToolDescriptor => {
  let inputSchema: unknown = undefined
  if (tool.inputSchemaJson !== undefined && tool.inputSchemaJson !== "") {
    try {
      inputSchema = JSON.parse(tool.inputSchemaJson)
    } catch {
      inputSchema = undefined
    }
  }
  if (inputSchema === undefined && tool.inputSchema !== undefined) inputSchema = toJson(ValueSchema, tool.inputSchema)
  return {
    name: tool.name,
    description: tool.description,
    providerIdentifier: tool.providerIdentifier,
    toolName: tool.toolName,
    inputSchema: inputSchema ?? { type: "object", properties: {} }
  }
}

const workspaceOf = (context: RequestContext | undefined): WorkspaceInfo => {
  const env = context?.env
  return {
    workspacePaths: env?.workspacePaths ?? [],
    projectFolder: env?.projectFolder ?? "",
    osVersion: env?.osVersion ?? "",
    shell: env?.shell ?? "",
    timeZone: env?.timeZone ?? "",
    terminalsFolder: env?.terminalsFolder ?? ""
  }
}

/**
 * What the model should see besides the typed text: file contents the client attached. Rules go
 * to `settings.rules` instead, because they belong in the system prompt, not history.
 */
const contextOf = (context: RequestContext | undefined): Array<UserContent> =>
  Object.entries(context?.fileContents ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([path, content]) => ({ type: "text" as const, text: `<attached_file path="${path}">\n${content}\n</attached_file>` }))

/**
 * The request context a run request carries: inline (legacy and dual transport), else the
 * `dynamic_context` of its part references (ref_only, where rules, skills, subagents and MCP
 * definitions are blobs the client holds), with the parts read back so far (`fetched`).
 */
const requestContextOf = (request: AgentRunRequest): RequestContext | undefined =>
  inlineRequestContextOf(request) ?? request.action?.requestContextParts?.dynamicContext

/** The request context the run request's action carries itself (legacy and dual transport). */
const inlineRequestContextOf = (request: AgentRunRequest): RequestContext | undefined => {
  const action = request.action?.action
  return action?.case === "userMessageAction" || action?.case === "resumeAction" || action?.case === "startPlanAction"
    ? action.value.requestContext
    : undefined
}

/** The run request's user message (a new turn's or a plan's), if it has one. */
const runUserMessageOf = (request: AgentRunRequest): CursorUserMessage | undefined => {
  const action = request.action?.action
  return action?.case === "userMessageAction" || action?.case === "startPlanAction" ? action.value.userMessage : undefined
}

/**
 * What to read back: the request-context parts in ref_only transport (no inline context), only
 * those this server uses (rules, MCP tools); and attached images named only by blob id that did
 * not come along in `pre_fetched_blobs`.
 */
const contextToFetchOf = (request: AgentRunRequest): ReadonlyArray<ContextPartRef> => {
  const parts = request.action?.requestContextParts
  const refs: Array<ContextPartRef> = []
  if (parts !== undefined && inlineRequestContextOf(request) === undefined) {
    if (parts.rulesBlobId.length > 0) refs.push({ part: "rules", blobId: parts.rulesBlobId, byteLength: parts.rulesByteLength })
    if (parts.mcpsBlobId.length > 0) refs.push({ part: "mcps", blobId: parts.mcpsBlobId, byteLength: parts.mcpsByteLength })
  }
  const sentAlong = sentAlongOf(request)
  const userMessage = runUserMessageOf(request)
  for (const image of userMessage === undefined ? [] : attachedImagesOf(userMessage, sentAlong)) {
    if (image.data === undefined && image.blobId !== undefined && !refs.some((ref) => sameBytes(ref.blobId, image.blobId!))) {
      refs.push({ part: "image", blobId: image.blobId, byteLength: 0 })
    }
  }
  return refs
}

/** The blobs a run request brought along (`pre_fetched_blobs`), by hex id. */
const sentAlongOf = (request: AgentRunRequest): ReadonlyMap<string, Uint8Array> =>
  new Map(request.preFetchedBlobs.map((blob) => [bytesToHex(blob.id), blob.value]))

/**
 * The run request with what was read back from the client (by hex blob id) merged in, as if it
 * had come inline: the request-context parts (rules and MCP tools) and the attached images. A
 * blob that is missing, does not match its id or length, or does not decode is left out and
 * says so in `problems`: the turn goes on without it rather than failing (an image that could
 * not be read becomes a line of text saying so).
 */
export const withContextParts = (
  run: RunRequest,
  fetched: ReadonlyMap<string, Uint8Array>
): { readonly run: RunRequest; readonly problems: ReadonlyArray<string> } => {
  const problems: Array<string> = []
  const context = clone(RequestContextSchema, requestContextOf(run.raw) ?? create(RequestContextSchema))
  const images = new Map<string, Uint8Array>()
  for (const ref of run.contextToFetch) {
    const what = ref.part === "image" ? "an attached image" : `the ${ref.part} part of the request context`
    const data = fetched.get(bytesToHex(ref.blobId))
    if (data === undefined) {
      problems.push(`${what} was not read back`)
      continue
    }
    if (sha256Bytes(data) !== bytesToHex(ref.blobId) || (ref.byteLength > 0 && data.length !== ref.byteLength)) {
      problems.push(`${what} does not match its id or length`)
      continue
    }
    try {
      if (ref.part === "rules") {
        const part = fromBinary(RequestContextRulesPartSchema, data)
        context.rules = part.rules
        context.nonFileRules = part.nonFileRules
        if (part.cloudRule !== undefined) context.cloudRule = part.cloudRule
      } else if (ref.part === "mcps") {
        context.tools = fromBinary(RequestContextMcpsPartSchema, data).tools
      } else {
        images.set(bytesToHex(ref.blobId), data)
      }
    } catch (cause) {
      problems.push(`${what} does not decode: ${String(cause)}`)
    }
  }
  return { run: { ...decodeRunRequestIn(run.raw, context, images), contextToFetch: [] }, problems }
}

const decodeRunRequest = (request: AgentRunRequest): RunRequest => decodeRunRequestIn(request, requestContextOf(request), new Map())

const decodeRunRequestIn = (request: AgentRunRequest, requestContext: RequestContext | undefined, readBack: ReadonlyMap<string, Uint8Array>): RunRequest => {
  const action = request.action?.action
  const userMessage = runUserMessageOf(request)
  // Start-plan is a user turn in plan mode, whatever mode the message itself says.
  const mode = action?.case === "startPlanAction"
    ? "plan"
    : userMessage !== undefined
    ? cursorModeOf(userMessage.mode)
    : request.conversationState?.mode !== undefined
    ? cursorModeOf(request.conversationState.mode)
    : "agent"
  const model = request.requestedModel?.modelId || request.modelDetails?.modelId || ""
  // MCP tools come on the run request and again in the request context; keep the first of each.
  const mcpTools: Array<McpToolDescriptor> = []
  for (const tool of [...(request.mcpTools?.mcpTools ?? []), ...(requestContext?.tools ?? [])]) {
    const descriptor = mcpDescriptor(tool)
    if (!mcpTools.some((known) => known.providerIdentifier === descriptor.providerIdentifier && known.toolName === descriptor.toolName && known.name === descriptor.name)) {
      mcpTools.push(descriptor)
    }
  }
  const workspace = workspaceOf(requestContext)
  const parameters = Object.fromEntries((request.requestedModel?.parameters ?? []).map((p) => [p.id, p.value]))
  const settings: TurnSettings = {
    model,
    mode,
    workspace,
    mcpTools,
    // The workspace's rule files, then the rules that are not files (the user's and the team's).
    rules: [...(requestContext?.rules ?? []), ...(requestContext?.nonFileRules ?? [])].map((rule) => ({ path: rule.fullPath, content: rule.content })),
    modelParameters: parameters,
    maxMode: request.requestedModel?.maxMode ?? request.modelDetails?.maxMode ?? false,
    ...(request.customSystemPrompt !== undefined ? { customSystemPrompt: request.customSystemPrompt } : {}),
    // Not for the prompt: what the turn's checkpoint needs when a later process ends it (see `turnUserMessageOf`).
    userMessageId: userMessage?.messageId ?? "",
    ...(request.conversationState !== undefined ? { carriedCheckpoint: carriedCheckpointOption(request.conversationState) } : {})
  }
  let runAction: RunAction
  switch (action?.case) {
    case "userMessageAction":
    case "startPlanAction":
      runAction = userMessage === undefined
        ? RunAction.Unsupported({ field: action.case === "userMessageAction" ? 1 : 6 })
        : RunAction.StartTurn({
          start: {
            message: toLlmUserMessage(userMessage, new Map([...sentAlongOf(request), ...readBack]), new Set(Object.keys(requestContext?.fileContents ?? {}))),
            context: contextOf(requestContext),
            settings
          },
          userMessageId: userMessage.messageId,
          userMessage
        })
      break
    case "resumeAction":
      runAction = RunAction.Resume({ settings })
      break
    case "cancelAction":
      runAction = RunAction.Unsupported({ field: 3 })
      break
    case undefined:
      runAction = RunAction.Unsupported({ field: request.action === undefined ? 0 : unknownFields(request.action)[0] ?? 0 })
      break
  }
  return {
    conversationId: request.conversationId,
    action: runAction,
    model,
    mode,
    mcpTools,
    workspace,
    conversationState: request.conversationState,
    requestContextParts: request.action?.requestContextParts,
    contextToFetch: contextToFetchOf(request),
    raw: request
  }
}

/**
 * Of the client's checkpoint, what the turn's own checkpoint carries over and a process without
 * the run request (one that recovers or replays the turn after a restart) could not know
 * otherwise: the earlier turns' blob ids and the todos, as base64 protobuf. Small on purpose:
 * settings are rewritten with the state at every commit. Summaries, plans, file states and the
 * other fields the client keeps are not carried, so a checkpoint projected without the run
 * request lacks them.
 */
const carriedCheckpointOption = (checkpoint: ConversationStateStructure): string =>
  Buffer.from(toBinary(
    ConversationStateStructureSchema,
    create(ConversationStateStructureSchema, { turns: checkpoint.turns, todos: checkpoint.todos })
  )).toString("base64")

/** The client's checkpoint as far as the turn's settings carry it (its earlier turns and todos), if the run request had one. */
export const carriedCheckpointOf = (settings: TurnSettings): ConversationStateStructure | undefined => {
  const carried = settings.carriedCheckpoint
  if (carried === undefined) return undefined
  try {
    return fromBinary(ConversationStateStructureSchema, Buffer.from(carried, "base64"))
  } catch {
    return undefined
  }
}

/** The workspace folders the run request named. */
export const workspacePathsOf = (settings: TurnSettings): ReadonlyArray<string> => settings.workspace?.workspacePaths ?? []

/**
 * The Cursor user message that started a turn, for its checkpoint, when the run request is not
 * at hand (a turn recovered or replayed after a restart): its id from the settings, its text
 * from the committed history (the last of the turn's leading user messages: attached context
 * comes first, the typed message last), the mode from the settings.
 */
export const turnUserMessageOf = (
  settings: TurnSettings,
  turnMessages: ReadonlyArray<Message>
): { readonly text: string; readonly messageId: string; readonly mode: CursorMode } => {
  let typed: UserMessage | undefined
  for (const message of turnMessages) {
    if (message.role !== "user") break
    typed = message
  }
  return {
    text: (typed?.content ?? []).flatMap((block) => (block.type === "text" ? [block.text] : [])).join(""),
    messageId: userMessageIdOf(settings),
    mode: modeOfSettings(settings)
  }
}

/** The id of the Cursor user message whose run request started the turn (`""` when it had none), from the settings. */
export const userMessageIdOf = (settings: TurnSettings): string => settings.userMessageId ?? ""

/** The MCP tools a run request offered. */
export const mcpToolsOf = (settings: TurnSettings): ReadonlyArray<McpToolDescriptor> => settings.mcpTools ?? []

/** The Cursor mode of the turn; `agent` (Cursor's default) when the settings name none. */
export const modeOfSettings = (settings: TurnSettings): CursorMode => settings.mode ?? "agent"

/** The Cursor request (RunSSE request id) the turn answers, if the settings name one. */
export const requestIdOfSettings = (settings: TurnSettings): string | undefined => settings.requestId

/** The settings with the Cursor request the turn answers. */
export const withRequestId = (settings: TurnSettings, requestId: string): TurnSettings => ({ ...settings, requestId })

// =============================================================================
// Per-turn correlation
// =============================================================================

/** An exec sent to the client and not yet finished. */
export interface RunningExec {
  readonly id: number
  readonly execId: string
  readonly operationId: string
  readonly toolCallId: string
}

/** A KV request sent to the client and not yet answered. */
export interface PendingKv {
  readonly id: number
  readonly kind: "getBlob" | "setBlob"
  /** Hex of the blob id. */
  readonly blobId: string
}

/** A tool call being streamed by the current model call, by content index. */
export interface StreamingToolCall {
  readonly index: number
  readonly callId: string
  readonly name: string
}

/**
 * The protocol state of one request id (one RunSSE stream). Immutable: each encoder returns
 * the next value. Exec ids start at 1 and KV ids at 0 per request, as Cursor expects.
 */
export interface TurnCorrelation {
  readonly requestId: string
  readonly nextExecId: number
  readonly nextKvId: number
  readonly execs: ReadonlyArray<RunningExec>
  readonly kvs: ReadonlyArray<PendingKv>
  /** The model call whose events are being encoded (`model_call_id`), and its streaming tool calls. */
  readonly modelCallId: string
  readonly toolCalls: ReadonlyArray<StreamingToolCall>
  readonly thinkingStartedAtMs: number | undefined
  /** Usage summed over every model call of the request, for `turn_ended`. */
  readonly usage: Usage
  /** The stop reason of the last finished model call. */
  readonly lastStopReason: "stop" | "length" | "toolUse" | undefined
}

export const initialCorrelation = (requestId: string): TurnCorrelation => ({
  requestId,
  nextExecId: 1,
  nextKvId: 0,
  execs: [],
  kvs: [],
  modelCallId: "",
  toolCalls: [],
  thinkingStartedAtMs: undefined,
  usage: emptyUsage,
  lastStopReason: undefined
})

export interface Encoded {
  readonly correlation: TurnCorrelation
  readonly messages: ReadonlyArray<AgentServerMessage>
}

type UpdateInit = NonNullable<Parameters<typeof create<typeof AgentServerMessageSchema>>[1]>

const server = (init: UpdateInit): AgentServerMessage => create(AgentServerMessageSchema, init)

const update = (message: NonNullable<MessageInitShape<typeof InteractionUpdateSchema>["message"]>): AgentServerMessage =>
  server({ message: { case: "interactionUpdate", value: { message } } })

/** The bytes of a server message, for the transport's Connect envelope. */
export const toFrame = (message: AgentServerMessage): Uint8Array => toBinary(AgentServerMessageSchema, message)

/** Parses a server message (the reference client and tests). */
export const fromFrame = (bytes: Uint8Array): Either.Either<AgentServerMessage, DialectError> =>
  parse("AgentServerMessage", () => fromBinary(AgentServerMessageSchema, bytes))

// =============================================================================
// Encoding model events
// =============================================================================

/**
 * Encodes one model stream event of call `callId`. Text and thinking deltas stream as is; a
 * tool call streams as `partial_tool_call` (the empty typed case first, then the argument
 * text deltas); `tool_call_started` comes later, when the tool actually runs
 * (`encodeToolStarted`). `Done` only adds its usage to the sum; `Error` writes nothing (the
 * turn's end-stream reports it).
 */
export const encodeResponseEvent = (
  correlation: TurnCorrelation,
  callId: string,
  event: ResponseEvent,
  options: { readonly nowMs: number; readonly mcpTools: ReadonlyArray<McpToolDescriptor> }
): Encoded => {
  const current = correlation.modelCallId === callId ? correlation : { ...correlation, modelCallId: callId, toolCalls: [] }
  const none: Encoded = { correlation: current, messages: [] }
  switch (event._tag) {
    case "Start":
    case "TextStart":
    case "TextEnd":
    case "ToolCallEnd":
    case "Error":
      return none
    case "TextDelta":
      return event.delta === "" ? none : { correlation: current, messages: [update({ case: "textDelta", value: { text: event.delta } })] }
    case "ThinkingStart":
      return { correlation: { ...current, thinkingStartedAtMs: options.nowMs }, messages: [] }
    case "ThinkingDelta":
      return event.delta === ""
        ? none
        : { correlation: current, messages: [update({ case: "thinkingDelta", value: { text: event.delta, thinkingStyle: ThinkingStyle.DEFAULT } })] }
    case "ThinkingEnd": {
      const started = current.thinkingStartedAtMs ?? options.nowMs
      return {
        correlation: { ...current, thinkingStartedAtMs: undefined },
        messages: [update({ case: "thinkingCompleted", value: { thinkingDurationMs: Math.max(0, Math.round(options.nowMs - started)) } })]
      }
    }
    case "ToolCallStart": {
      const toolCalls = [...current.toolCalls.filter((call) => call.index !== event.index), { index: event.index, callId: event.id, name: event.name }]
      return {
        correlation: { ...current, toolCalls },
        messages: [update({
          case: "partialToolCall",
          value: { callId: event.id, toolCall: partialCursorToolCall(event.name, options.mcpTools), modelCallId: callId }
        })]
      }
    }
    case "ToolCallDelta": {
      const call = current.toolCalls.find((known) => known.index === event.index)
      if (call === undefined || event.delta === "") return none
      return {
        correlation: current,
        messages: [update({
          case: "partialToolCall",
          value: { callId: call.callId, toolCall: partialCursorToolCall(call.name, options.mcpTools), argsTextDelta: event.delta, modelCallId: callId }
        })]
      }
    }
    case "Done":
      return { correlation: { ...current, usage: addUsage(current.usage, event.message.usage), lastStopReason: event.reason, toolCalls: [] }, messages: [] }
  }
}

// =============================================================================
// Encoding tool calls and execs
// =============================================================================

export interface ToolCallIds {
  /** The model's tool call id (Cursor's `call_id`). */
  readonly toolCallId: string
  /** The model call that produced it (Cursor's `model_call_id`). */
  readonly modelCallId: string
}

/** `tool_call_started` with the typed args (from `Tools.startTool`). */
export const encodeToolStarted = (ids: ToolCallIds, started: CursorToolCall, startedAtMs: number): AgentServerMessage =>
  update({
    case: "toolCallStarted",
    value: {
      callId: ids.toolCallId,
      toolCall: create(ToolCallSchema, { ...started, toolCallId: ids.toolCallId, startedAtMs: BigInt(Math.max(0, Math.floor(startedAtMs))) }),
      modelCallId: ids.modelCallId
    }
  })

/** `tool_call_delta` (shell output, edit streaming) from a `ToolStep.Continue`. */
export const encodeToolDelta = (ids: ToolCallIds, delta: ToolCallDelta): AgentServerMessage =>
  update({ case: "toolCallDelta", value: { callId: ids.toolCallId, toolCallDelta: delta, modelCallId: ids.modelCallId } })

/** `tool_call_completed` with args, the typed result and both times (without them the card keeps spinning). */
export const encodeToolCompleted = (
  ids: ToolCallIds,
  cursor: CursorToolCall,
  times: { readonly startedAtMs: number; readonly completedAtMs: number }
): AgentServerMessage =>
  update({
    case: "toolCallCompleted",
    value: {
      callId: ids.toolCallId,
      toolCall: create(ToolCallSchema, {
        ...cursor,
        toolCallId: ids.toolCallId,
        startedAtMs: BigInt(Math.max(0, Math.floor(times.startedAtMs))),
        completedAtMs: BigInt(Math.max(0, Math.floor(times.completedAtMs)))
      }),
      modelCallId: ids.modelCallId
    }
  })

/** The exec id string sent beside the numeric id: unique per request, derived from it. */
export const execIdOf = (id: number, toolCallId: string): string => `exec-${id}-${toolCallId}`

/** Allocates the next exec id and encodes the `exec_server_message` for a tool machine's request. */
export const encodeExec = (
  correlation: TurnCorrelation,
  request: { readonly operationId: string; readonly toolCallId: string; readonly exec: ExecRequest }
): { readonly correlation: TurnCorrelation; readonly exec: RunningExec; readonly message: AgentServerMessage } => {
  const id = correlation.nextExecId
  const exec: RunningExec = { id, execId: execIdOf(id, request.toolCallId), operationId: request.operationId, toolCallId: request.toolCallId }
  const value: ExecServerMessage["message"] = request.exec
  return {
    correlation: { ...correlation, nextExecId: id + 1, execs: [...correlation.execs, exec] },
    exec,
    message: server({ message: { case: "execServerMessage", value: { id, execId: exec.execId, message: value } } })
  }
}

/**
 * The running exec a client message belongs to: by numeric `id` (the IDE never echoes
 * `exec_id`), or by `exec_id` when only that is set. Undefined for an unknown exec: drop it.
 */
export const resolveExec = (correlation: TurnCorrelation, id: number, execId: string | undefined): RunningExec | undefined => {
  if (id !== 0) {
    const byId = correlation.execs.find((exec) => exec.id === id)
    if (byId !== undefined && (execId === undefined || execId === byId.execId)) return byId
    if (byId !== undefined) return undefined
  }
  return execId === undefined ? undefined : correlation.execs.find((exec) => exec.execId === execId)
}

/** Forgets a finished exec (its result was taken, or it was aborted). */
export const completeExec = (correlation: TurnCorrelation, id: number): TurnCorrelation => ({
  ...correlation,
  execs: correlation.execs.filter((exec) => exec.id !== id)
})

/** `exec_server_control_message.abort` for every running exec (cancel), and forgets them. */
export const encodeAbortAll = (correlation: TurnCorrelation): Encoded => ({
  correlation: { ...correlation, execs: [] },
  messages: correlation.execs.map((exec) => server({ message: { case: "execServerControlMessage", value: { message: { case: "abort", value: { id: exec.id } } } } }))
})

// =============================================================================
// Heartbeat, notices, turn end
// =============================================================================

/** `interaction_update.heartbeat`: the transport sends one every 5 s while the stream is open. */
export const encodeHeartbeat = (): AgentServerMessage => update({ case: "heartbeat", value: {} })

/** A visible notice from the server (never used for errors: those end the stream). */
export const encodeServerNotice = (text: string): AgentServerMessage =>
  update({ case: "textDelta", value: { text, isServerNotice: true } })

/** `turn_ended` with the usage summed over every model call of the request. */
export const encodeTurnEnded = (usage: Usage): AgentServerMessage =>
  update({
    case: "turnEnded",
    value: {
      inputTokens: BigInt(usage.input),
      outputTokens: BigInt(usage.output),
      cacheReadTokens: BigInt(usage.cacheRead),
      cacheWriteTokens: BigInt(usage.cacheWrite),
      reasoningTokens: BigInt(usage.reasoning)
    }
  })

/** `user_message_appended`: shows a follow-up user message that joined the running turn. */
export const encodeUserMessageAppended = (userMessage: CursorUserMessage): AgentServerMessage =>
  update({ case: "userMessageAppended", value: { userMessage } })

/** `step_started` / `step_completed`: optional step markers (the real server sends step_completed before the final blobs). */
export const encodeStepStarted = (stepId: number): AgentServerMessage =>
  update({ case: "stepStarted", value: { stepId: BigInt(stepId) } })

export const encodeStepCompleted = (stepId: number, durationMs: number): AgentServerMessage =>
  update({ case: "stepCompleted", value: { stepId: BigInt(stepId), stepDurationMs: BigInt(Math.max(0, Math.round(durationMs))) } })

export const LENGTH_NOTICE = "\n\n(The answer was cut off at the model's output token limit.)"

/**
 * How a turn ends on the wire, from the loop's final command. `messages` go out first; the
 * transport then publishes the final checkpoint (after its blobs are acknowledged) and
 * finally the end-stream frame `end`. A cancel aborts the running execs and sends neither
 * `turn_ended` nor a checkpoint; a failure sends no `turn_ended`.
 */
export const encodeTurnEnd = (
  correlation: TurnCorrelation,
  command:
    | { readonly _tag: "Final"; readonly reason: "stop" | "length" }
    | { readonly _tag: "Failed"; readonly error: string; readonly retryable: boolean }
    | { readonly _tag: "Canceled"; readonly reason: string }
): Encoded & { readonly end: EndStream } => {
  switch (command._tag) {
    case "Final": {
      const notice = command.reason === "length" ? [encodeServerNotice(LENGTH_NOTICE)] : []
      return { correlation, messages: [...notice, encodeTurnEnded(correlation.usage)], end: EndStream.Ok() }
    }
    case "Failed":
      return { correlation, messages: [], end: providerFailure(command.error) }
    case "Canceled": {
      const aborted = encodeAbortAll(correlation)
      return { ...aborted, end: canceled(command.reason) }
    }
  }
}

// =============================================================================
// KV: the client is the blob store
// =============================================================================

export interface Blob {
  /** The raw 32-byte SHA-256 of `data`. */
  readonly id: Uint8Array
  readonly data: Uint8Array
}

export const blobIdOf = (data: Uint8Array): Uint8Array => {
  const hex = sha256Bytes(data)
  const id = new Uint8Array(32)
  for (let i = 0; i < 32; i++) id[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16)
  return id
}

export const blobOf = (data: Uint8Array): Blob => ({ id: blobIdOf(data), data })

/** `kv_server_message.set_blob_args`: the checkpoint naming this blob must wait for its `set_blob_result`. */
export const encodeSetBlob = (correlation: TurnCorrelation, blob: Blob): { readonly correlation: TurnCorrelation; readonly kvId: number; readonly message: AgentServerMessage } => {
  const id = correlation.nextKvId
  return {
    correlation: { ...correlation, nextKvId: id + 1, kvs: [...correlation.kvs, { id, kind: "setBlob", blobId: bytesToHex(blob.id) }] },
    kvId: id,
    message: server({ message: { case: "kvServerMessage", value: { id, message: { case: "setBlobArgs", value: { blobId: blob.id, blobData: blob.data } } } } })
  }
}

/** `kv_server_message.get_blob_args`: reads a blob back (ref_only request context parts, previous turns). */
export const encodeGetBlob = (correlation: TurnCorrelation, blobId: Uint8Array): { readonly correlation: TurnCorrelation; readonly kvId: number; readonly message: AgentServerMessage } => {
  const id = correlation.nextKvId
  return {
    correlation: { ...correlation, nextKvId: id + 1, kvs: [...correlation.kvs, { id, kind: "getBlob", blobId: bytesToHex(blobId) }] },
    kvId: id,
    message: server({ message: { case: "kvServerMessage", value: { id, message: { case: "getBlobArgs", value: { blobId } } } } })
  }
}

/** Takes a KV answer: the request it answers (undefined for an unknown or repeated id) and the next correlation. */
export const resolveKv = (correlation: TurnCorrelation, id: number): { readonly correlation: TurnCorrelation; readonly pending: PendingKv | undefined } => {
  const pending = correlation.kvs.find((kv) => kv.id === id)
  return pending === undefined
    ? { correlation, pending }
    : { correlation: { ...correlation, kvs: correlation.kvs.filter((kv) => kv.id !== id) }, pending }
}

/** `conversation_checkpoint_update`: publish only after every blob it names is acknowledged. */
export const encodeCheckpoint = (checkpoint: ConversationStateStructure): AgentServerMessage =>
  server({ message: { case: "conversationCheckpointUpdate", value: checkpoint } })

// =============================================================================
// Checkpoint projection
// =============================================================================

const utf8 = new TextEncoder()

/** A message as AI-SDK-style JSON, the shape Cursor keeps in `root_prompt_messages_json` blobs. */
/**
 * A transcript message's prompt-message blob, computed once per message object: the history
 * never changes, and every turn's checkpoint names all of it (a message with an image is
 * megabytes to serialize and hash).
 */
const promptBlobs = new WeakMap<Message, Blob>()
const promptBlobOf = (message: Message): Blob => {
  const known = promptBlobs.get(message)
  if (known !== undefined) return known
  const blob = blobOf(utf8.encode(promptMessageJson(message)))
  promptBlobs.set(message, blob)
  return blob
}

export const promptMessageJson = (message: Message): string => {
  switch (message.role) {
    case "user":
      return JSON.stringify({
        role: "user",
        content: message.content.map((block) =>
          block.type === "text" ? { type: "text", text: block.text } : { type: "image", image: block.data, mediaType: block.mimeType })
      })
    case "assistant":
      return JSON.stringify({
        role: "assistant",
        content: message.content.map((block) => {
          switch (block.type) {
            case "text":
              return { type: "text", text: block.text }
            case "thinking":
              return { type: "reasoning", text: block.redacted === true ? "" : block.thinking }
            case "toolCall":
              return { type: "tool-call", toolCallId: block.id, toolName: block.name, args: parseJsonOr(block.arguments) }
          }
        })
      })
    case "toolResult":
      return JSON.stringify({
        role: "tool",
        content: [{
          type: "tool-result",
          toolCallId: message.toolCallId,
          toolName: message.toolName,
          result: message.content.map((block) => (block.type === "text" ? block.text : "[image]")).join("\n"),
          isError: message.isError
        }]
      })
  }
}

const parseJsonOr = (text: string): unknown => {
  try {
    return JSON.parse(text) as JsonValue
  } catch {
    return text
  }
}

/** The JSON string Cursor expects in `pending_tool_calls` for a tool that is still running. */
export const pendingToolCallJson = (call: ToolCall): string =>
  JSON.stringify({
    id: "1",
    role: "assistant",
    content: [{ type: "tool-call", toolCallId: call.id, toolName: call.name, args: parseJsonOr(call.arguments) }]
  })

export interface CheckpointInput {
  /** The checkpoint the client sent with the run request (its `turns` are the earlier turns). */
  readonly previous: ConversationStateStructure | undefined
  readonly requestId: string
  /** The Cursor user message that started this turn (kept as its own blob). */
  readonly userMessage: { readonly text: string; readonly messageId: string; readonly mode: CursorMode }
  /** The messages committed in this turn after the user message: assistant messages and tool results. */
  readonly turnMessages: ReadonlyArray<Message>
  /** The whole model history, for `root_prompt_messages_json`. */
  readonly transcript: ReadonlyArray<Message>
  /** Typed completed tool calls by tool call id, as the UI saw them; others get an empty typed call. */
  readonly cursorToolCalls: Readonly<Record<string, CursorToolCall>>
  /** Thinking durations by assistant content position `"<message index>:<block index>"`, when known. */
  readonly thinkingDurationsMs?: Readonly<Record<string, number>>
  readonly pendingToolCalls: ReadonlyArray<ToolCall>
  readonly todos: ReadonlyArray<TodoItem>
  readonly usedTokens: number
  readonly maxTokens: number
  readonly workspaceUris: ReadonlyArray<string>
  readonly mcpTools: ReadonlyArray<McpToolDescriptor>
}

export interface Checkpoint {
  /**
   * The blobs to send before the checkpoint, children before parents: every blob it names
   * except those the client's previous checkpoint already names (the client holds those).
   */
  readonly blobs: ReadonlyArray<Blob>
  readonly checkpoint: ConversationStateStructure
}

const sameBytes = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((byte, i) => byte === b[i])

/**
 * Projects a turn into Cursor's blob structures: a UserMessage blob, one ConversationStep blob
 * per assistant block (text, thinking, typed tool call), a ConversationTurnStructure naming them,
 * the transcript's prompt-message blobs, and the checkpoint naming all of it. Deterministic:
 * equal input gives equal bytes and blob ids, so re-publishing is harmless.
 *
 * Only new blobs are sent: a prompt message or turn the previous checkpoint already names is
 * a blob the client stores, so a turn sends its own few blobs rather than the whole transcript
 * again (which grew the set_blob burst, and its acknowledgements, with every turn).
 */
export const projectCheckpoint = (input: CheckpointInput): Checkpoint => {
  // Ids the client holds or that are already queued to send (hex).
  const named = new Set([...(input.previous?.rootPromptMessagesJson ?? []), ...(input.previous?.turns ?? [])].map(bytesToHex))
  const blobs: Array<Blob> = []
  const add = (data: Uint8Array | Blob): Uint8Array => {
    const blob = data instanceof Uint8Array ? blobOf(data) : data
    const id = bytesToHex(blob.id)
    if (!named.has(id)) {
      named.add(id)
      blobs.push(blob)
    }
    return blob.id
  }
  const userMessageId = add(toBinary(UserMessageSchema, create(UserMessageSchema, {
    text: input.userMessage.text,
    messageId: input.userMessage.messageId,
    mode: agentModeOf(input.userMessage.mode)
  })))
  const steps: Array<Uint8Array> = []
  input.turnMessages.forEach((message, messageIndex) => {
    if (message.role !== "assistant") return
    message.content.forEach((block, blockIndex) => {
      let step: Parameters<typeof create<typeof ConversationStepSchema>>[1]
      switch (block.type) {
        case "text":
          if (block.text === "") return
          step = { message: { case: "assistantMessage", value: { text: block.text } } }
          break
        case "thinking":
          // Encrypted reasoning has no text to show; never invent one.
          if (block.redacted === true || block.thinking === "") return
          step = {
            message: {
              case: "thinkingMessage",
              value: { text: block.thinking, durationMs: input.thinkingDurationsMs?.[`${messageIndex}:${blockIndex}`] ?? 0 }
            }
          }
          break
        case "toolCall":
          step = {
            message: {
              case: "toolCall",
              value: input.cursorToolCalls[block.id] ??
                create(ToolCallSchema, { ...partialCursorToolCall(block.name, input.mcpTools), toolCallId: block.id })
            }
          }
          break
      }
      steps.push(add(toBinary(ConversationStepSchema, create(ConversationStepSchema, step))))
    })
  })
  const turn = create(ConversationTurnStructureSchema, {
    turn: {
      case: "agentConversationTurn",
      value: create(AgentConversationTurnStructureSchema, { userMessage: userMessageId, steps, requestId: input.requestId })
    }
  })
  const turnId = add(toBinary(ConversationTurnStructureSchema, turn))
  const roots = input.transcript.map((message) => add(promptBlobOf(message)))
  const previousTurns = (input.previous?.turns ?? []).filter((id) => !sameBytes(id, turnId))
  // Fields we do not manage (summaries, plans, file states...) carry over from the client's checkpoint.
  const checkpoint = input.previous === undefined
    ? create(ConversationStateStructureSchema)
    : clone(ConversationStateStructureSchema, input.previous)
  checkpoint.rootPromptMessagesJson = roots
  checkpoint.turns = [...previousTurns, turnId]
  checkpoint.todos = input.todos.map((todo) => toBinary(TodoItemSchema, todo))
  checkpoint.pendingToolCalls = input.pendingToolCalls.map(pendingToolCallJson)
  checkpoint.tokenDetails = create(ConversationTokenDetailsSchema, { usedTokens: input.usedTokens, maxTokens: input.maxTokens })
  checkpoint.mode = agentModeOf(input.userMessage.mode)
  checkpoint.previousWorkspaceUris = [...input.workspaceUris]
  // Cursor stops returning conversation_state unless these are set (TS++ finding).
  checkpoint.agentType = checkpoint.agentType ?? "ide"
  return { blobs, checkpoint }
}

/** Todo items kept in a checkpoint (`todos` holds serialized TodoItems); unreadable ones are skipped. */
export const todosOf = (checkpoint: ConversationStateStructure | undefined): ReadonlyArray<TodoItem> =>
  (checkpoint?.todos ?? []).flatMap((bytes) => {
    try {
      return [fromBinary(TodoItemSchema, bytes)]
    } catch {
      return []
    }
  })

// =============================================================================
// End of stream
// =============================================================================

/** Connect error codes a turn may end with. */
export const ConnectCode = Schema.Literal(
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "internal",
  "unavailable",
  "unimplemented"
)
export type ConnectCode = typeof ConnectCode.Type

/** Cursor's `aiserver.v1.ErrorDetails` as we fill it. */
export interface ErrorDetail {
  readonly error: ErrorDetails_Error
  readonly title: string
  readonly detail: string
  /** Always false for provider errors: true makes Cursor replay the request (a second provider call). */
  readonly isRetryable: boolean
}

export type EndStream = Data.TaggedEnum<{
  Ok: {}
  Error: { readonly code: ConnectCode; readonly message: string; readonly detail: ErrorDetail | undefined }
}>
export const EndStream = Data.taggedEnum<EndStream>()

/** A provider (or loop) failure as Cursor shows it: `unavailable` + PROVIDER_ERROR, not retryable. */
export const providerFailure = (message: string): EndStream =>
  EndStream.Error({
    code: "unavailable",
    message,
    detail: { error: ErrorDetails_Error.PROVIDER_ERROR, title: "Model provider error", detail: message, isRetryable: false }
  })

/** A cancel: Cursor handles `canceled` quietly. */
export const canceled = (reason: string): EndStream =>
  EndStream.Error({ code: "canceled", message: reason === "" ? "canceled" : reason, detail: undefined })

const toBase64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64").replace(/=+$/, "")

/** The end-stream payload (UTF-8 JSON) the transport frames with flag 0x02 as the last frame. */
export const encodeEndStream = (end: EndStream): Uint8Array => {
  if (end._tag === "Ok") return utf8.encode("{}")
  const details = end.detail === undefined ? [] : [{
    type: "aiserver.v1.ErrorDetails",
    value: toBase64(toBinary(ErrorDetailsSchema, create(ErrorDetailsSchema, {
      error: end.detail.error,
      details: { title: end.detail.title, detail: end.detail.detail, isRetryable: end.detail.isRetryable }
    })))
  }]
  return utf8.encode(JSON.stringify({ error: { code: end.code, message: end.message, ...(details.length > 0 ? { details } : {}) } }))
}

const EndStreamJson = Schema.Struct({
  error: Schema.optional(Schema.Struct({
    code: ConnectCode,
    message: Schema.optionalWith(Schema.String, { default: () => "" }),
    details: Schema.optional(Schema.Array(Schema.Struct({ type: Schema.String, value: Schema.String })))
  }))
})

/** Parses an end-stream payload (the reference client and tests). */
export const decodeEndStream = (payload: Uint8Array): Either.Either<EndStream, DialectError> => {
  let json: unknown
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload))
  } catch (error) {
    return fail("badJson", `end-stream payload is not JSON: ${error instanceof Error ? error.message : String(error)}`)
  }
  return Schema.decodeUnknownEither(EndStreamJson)(json).pipe(
    Either.mapLeft((error) => new DialectError({ reason: "badJson", message: `end-stream payload: ${error.message}` })),
    Either.flatMap((parsed): Either.Either<EndStream, DialectError> => {
      if (parsed.error === undefined) return Either.right(EndStream.Ok())
      const { code, details, message } = parsed.error
      const raw = details?.find((d) => d.type === "aiserver.v1.ErrorDetails")
      if (raw === undefined) return Either.right(EndStream.Error({ code, message, detail: undefined }))
      return Either.map(
        parse("ErrorDetails", () => fromBinary(ErrorDetailsSchema, Buffer.from(raw.value, "base64"))),
        (decoded) =>
          EndStream.Error({
            code,
            message,
            detail: {
              error: decoded.error,
              title: decoded.details?.title ?? "",
              detail: decoded.details?.detail ?? "",
              isRetryable: decoded.details?.isRetryable ?? false
            }
          })
      )
    })
  )
}

// =============================================================================
// The Loop's inputs from the client's messages
// =============================================================================

/** The input that starts a run request's turn, its settings naming the Cursor request it belongs to. */
export const startInputOf = (action: Extract<RunAction, { _tag: "StartTurn" }>, requestId: string): Input => {
  const { start } = action
  return Input.Start({ ...start, settings: withRequestId(start.settings, requestId) })
}

/** A follow-up message on a live request (queued by the loop while a turn runs, or the next turn between turns). */
export const followUpInputOf = (message: Extract<ClientMessage, { _tag: "UserMessage" }>): Input => Input.UserMessage({ message: message.message })

export const cancelInputOf = (message: Extract<ClientMessage, { _tag: "Cancel" }>): Input => Input.Cancel({ reason: message.reason })

/**
 * The run request a prewarmed request stands for once its user message arrives: the prewarm's
 * model, conversation, checkpoint, MCP tools and system prompt, with that message as its
 * `user_message_action`.
 */
export const runRequestOfPrewarm = (prewarm: PrewarmRequest, userMessage: CursorUserMessage): RunRequest =>
  decodeRunRequest(create(AgentRunRequestSchema, {
    ...(prewarm.modelDetails !== undefined ? { modelDetails: prewarm.modelDetails } : {}),
    ...(prewarm.requestedModel !== undefined ? { requestedModel: prewarm.requestedModel } : {}),
    ...(prewarm.conversationId !== undefined ? { conversationId: prewarm.conversationId } : {}),
    ...(prewarm.conversationState !== undefined ? { conversationState: prewarm.conversationState } : {}),
    ...(prewarm.mcpTools !== undefined ? { mcpTools: prewarm.mcpTools } : {}),
    ...(prewarm.customSystemPrompt !== undefined ? { customSystemPrompt: prewarm.customSystemPrompt } : {}),
    action: { action: { case: "userMessageAction", value: { userMessage } } }
  }))
