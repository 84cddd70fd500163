/**
 * Decoding what the client sends: a BidiAppend body to its frame `{ requestId, appendSeqno,
 * message }` (and the append's empty answer), and a RunSSE request to its request id. Never throws:
 * bad bytes give a typed `DialectError`, and a oneof case from a newer client gives
 * `ClientMessage.Unknown` (log and drop). Given an `UnknownSink`, each decoded message's unknown
 * fields, nested ones included, are told to it (`Unknowns.ts`; the transport's counts them).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { Either } from "effect"
import { AgentClientMessageSchema, AgentMode } from "../gen/agent/v1/agent_pb.js"
import type {
  AgentClientMessage,
  ConversationAction,
  ExecClientControlMessage,
  ExecClientMessage,
  KvClientMessage
} from "../gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiAppendResponseSchema, BidiRequestIdSchema } from "../gen/aiserver/v1/aiserver_pb.js"
import type { BidiAppendRequest } from "../gen/aiserver/v1/aiserver_pb.js"
import { fail, hexToBytes, parse, unknownFields } from "./Bytes.js"
import type { DialectError } from "./Bytes.js"
import { ClientMessage } from "./ClientMessage.js"
import type { BidiAppendFrame, BidiEnvelope } from "./ClientMessage.js"
import { asyncAnswersMessageOf, backgroundCompletionsMessageOf } from "./Plans.js"
import { decodeRunRequest } from "./RunRequest.js"
import { walkUnknown } from "./Unknowns.js"
import type { UnknownSink } from "./Unknowns.js"
import { toLlmUserMessage } from "./UserMessage.js"

/** Decodes a BidiAppend request body (already gunzipped by the transport): the whole of it, or the first thing wrong. */
export const decodeBidiAppend = (body: Uint8Array, found?: UnknownSink): Either.Either<BidiEnvelope, DialectError> =>
  Either.flatMap(decodeBidiAppendFrame(body, found), ({ message, ...frame }) => Either.map(message, (message): BidiEnvelope => ({ ...frame, message })))

/**
 * Decodes a BidiAppend request body to its frame: not protobuf, or no request id, is an error;
 * a message that cannot be read (bad hex, no data, an undecodable `AgentClientMessage`) is the
 * frame's `message` error, so its seqno is still taken.
 */
export const decodeBidiAppendFrame = (body: Uint8Array, found?: UnknownSink): Either.Either<BidiAppendFrame, DialectError> =>
  Either.map(parseAppend(body, found), ({ request, requestId }) => ({ requestId, appendSeqno: request.appendSeqno, message: messageOf(request, found) }))

/** A BidiAppend body's request id alone, its message left undecoded (where the call is served). */
export const decodeBidiAppendRequestId = (body: Uint8Array): Either.Either<string, DialectError> =>
  Either.map(parseAppend(body, undefined), ({ requestId }) => requestId)

const parseAppend = (body: Uint8Array, found: UnknownSink | undefined) =>
  Either.flatMap(parse("BidiAppendRequest", () => fromBinary(BidiAppendRequestSchema, body)), (request) => {
    if (found !== undefined) walkUnknown(BidiAppendRequestSchema, request, found)
    const requestId = request.requestId?.requestId ?? ""
    return requestId === "" ? fail("missingField", "BidiAppendRequest.request_id is missing") : Either.right({ request, requestId })
  })

/** The message of a parsed `BidiAppendRequest` (`data` hex, or `data_binary` raw bytes). */
const messageOf = (request: BidiAppendRequest, found: UnknownSink | undefined): Either.Either<ClientMessage, DialectError> => {
  if (request.appendSeqno < 0n) return fail("missingField", `BidiAppendRequest.append_seqno is negative (${request.appendSeqno})`)
  let bytes: Either.Either<Uint8Array, DialectError>
  if (request.data !== "") bytes = hexToBytes(request.data)
  else if (request.dataBinary.length > 0) bytes = Either.right(request.dataBinary)
  else return fail("missingField", "BidiAppendRequest carries neither data nor data_binary")
  return Either.flatMap(bytes, (bytes) => decodeClientMessage(bytes, found))
}

/** A BidiAppend's answer: the empty `BidiAppendResponse`. */
export const BIDI_APPEND_RESPONSE: Uint8Array = toBinary(BidiAppendResponseSchema, create(BidiAppendResponseSchema))

/** Decodes the RunSSE request payload (one `BidiRequestId`) to its request id. */
export const decodeRunSseRequest = (payload: Uint8Array, found?: UnknownSink): Either.Either<string, DialectError> =>
  Either.flatMap(parse("BidiRequestId", () => fromBinary(BidiRequestIdSchema, payload)), (request) => {
    if (found !== undefined) walkUnknown(BidiRequestIdSchema, request, found)
    return request.requestId === "" ? fail("missingField", "BidiRequestId.request_id is missing") : Either.right(request.requestId)
  })

/** Decodes the bytes of one `AgentClientMessage`. */
export const decodeClientMessage = (bytes: Uint8Array, found?: UnknownSink): Either.Either<ClientMessage, DialectError> =>
  Either.flatMap(parse("AgentClientMessage", () => fromBinary(AgentClientMessageSchema, bytes)), (message) => {
    if (found !== undefined) walkUnknown(AgentClientMessageSchema, message, found)
    return fromClientMessage(message)
  })

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
      return Either.right(ClientMessage.InteractionResponse({
        id: m.value.id,
        reply: m.value.result.case === undefined ? undefined : m.value.result,
        field: m.value.result.case === undefined ? unknownFields(m.value)[0] : undefined
      }))
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
    case "asyncAskQuestionCompletionAction":
    case "backgroundTaskCompletionAction": {
      // Late answers to an AskQuestion, or background tasks that ended, while a turn runs: a follow-up message like any other.
      const userMessage = action.case === "asyncAskQuestionCompletionAction"
        ? asyncAnswersMessageOf(action.value, AgentMode.AGENT)
        : backgroundCompletionsMessageOf(action.value, AgentMode.AGENT)
      return Either.right(ClientMessage.UserMessage({ message: toLlmUserMessage(userMessage), messageId: userMessage.messageId, userMessage }))
    }
    case "cancelSubagentAction":
      return Either.right(ClientMessage.CancelSubagent({ subagentId: action.value.subagentId }))
    case "resumeAction":
    case "startPlanAction":
    case "summarizeAction":
    case "executePlanAction":
    case "backgroundShellAction":
    case "backgroundSubagentAction":
      // These only mean something inside a run_request, or are not acted on yet: acknowledged, nothing changes.
      return Either.right(ClientMessage.Unknown({
        where: `ConversationAction.${action.case}`,
        fields: [
          ({
            resumeAction: 2,
            summarizeAction: 4,
            startPlanAction: 6,
            executePlanAction: 7,
            backgroundShellAction: 13,
            backgroundSubagentAction: 14
          } as const)[action.case]
        ]
      }))
    case undefined:
      return unknownCase("ConversationAction", value)
  }
}

/** Shell stream events after which the client sends no more for that exec. */
const TERMINAL_SHELL_EVENTS: ReadonlyArray<string> = ["exit", "backgrounded", "rejected", "permissionDenied", "sandboxUnsupported"]

const decodeExecClientMessage = (exec: ExecClientMessage): Decoded => {
  const execId = exec.execId === "" ? undefined : exec.execId
  const reply = exec.message
  if (reply.case === undefined) {
    // A result of a kind this server cannot read (a newer client's, e.g. 56 `adopt_result`) for
    // an exec it sent: the call fails as if the client had thrown, never waiting for a result.
    const field = unknownFields(exec)[0]
    return exec.id === 0
      ? unknownCase("ExecClientMessage", exec)
      : Either.right(ClientMessage.ExecThrow({
        id: exec.id,
        error: `it answered with a kind of result this server cannot read${field === undefined ? "" : ` (field ${field})`}`,
        errorCode: "unknown_result"
      }))
  }
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
