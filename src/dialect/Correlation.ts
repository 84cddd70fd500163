/**
 * The per-turn protocol correlation (exec ids, KV ids, tool call ids of the current model call,
 * summed usage): an immutable `TurnCorrelation` value that the caller threads through the
 * encoders. Also the server message and its frame bytes.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import type { Either } from "effect"
import { AgentServerMessageSchema, InteractionUpdateSchema } from "../gen/agent/v1/agent_pb.js"
import type { AgentServerMessage } from "../gen/agent/v1/agent_pb.js"
import { emptyUsage } from "../Llm.js"
import type { Usage } from "../Llm.js"
import { parse } from "./Bytes.js"
import type { DialectError } from "./Bytes.js"

/** An exec sent to the client and not yet finished. */
export interface RunningExec {
  readonly id: number
  readonly execId: string
  readonly operationId: string
  readonly toolCallId: string
}

/** A question sent to the client (`InteractionQuery`) and not yet answered. */
export interface PendingQuery {
  readonly id: number
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
  /** Interaction query ids start at 1 per request, as exec ids do. */
  readonly nextQueryId: number
  readonly queries: ReadonlyArray<PendingQuery>
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
  nextQueryId: 1,
  queries: [],
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

export const server = (init: UpdateInit): AgentServerMessage => create(AgentServerMessageSchema, init)

export const update = (message: NonNullable<MessageInitShape<typeof InteractionUpdateSchema>["message"]>): AgentServerMessage =>
  server({ message: { case: "interactionUpdate", value: { message } } })

/** The bytes of a server message, for the transport's Connect envelope. */
export const toFrame = (message: AgentServerMessage): Uint8Array => toBinary(AgentServerMessageSchema, message)

/** Parses a server message (the reference client and tests). */
export const fromFrame = (bytes: Uint8Array): Either.Either<AgentServerMessage, DialectError> =>
  parse("AgentServerMessage", () => fromBinary(AgentServerMessageSchema, bytes))
