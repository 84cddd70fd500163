/**
 * The Store's rows as SQL returns them, and their decoding into records: every stored message
 * is checked against its bytes and hash, every JSON column against its schema, and a row that
 * fails is a `CorruptRow`, never a guess.
 */
import { Either, ParseResult, Schema } from "effect"
import { createHash } from "node:crypto"
import { canonicalJson, emptyMessagesHash, extendMessagesHash, Message, serializeMessage, ToolDefinition, Usage } from "../Llm.js"
import { ConversationStatus, WaitingClient } from "../Loop.js"
import { CorruptRow, LlmCallStatus, OperationStatus } from "./Model.js"
import type { LlmCallRecord, OperationRecord } from "./Model.js"

/**
 * A stored message row's hash: `Llm.messageHash` of the message, computed here with node's
 * native SHA-256 (the same digest as the pure implementation, ~15x faster on large rows such as
 * messages with images; the store is not bound to the pure modules' imports).
 */
export const rowHash = (json: string): string => createHash("sha256").update(json, "utf8").digest("hex")

export interface ConversationRow {
  readonly version: number
  readonly status: string
  readonly turn_id: string
  readonly message_count: number
  readonly messages_hash: string
  readonly waiting_json: string | null
  readonly state_json: string
  readonly segment_start: number
}

export interface MessageRow {
  readonly seq: number
  readonly message_json: string
  readonly hash: string
}

export interface LlmCallRow {
  readonly call_id: string
  readonly conversation_id: string
  readonly turn_id: string
  readonly model: string
  readonly system_prompt_hash: string
  readonly tools_hash: string
  readonly message_count: number
  readonly messages_hash: string
  readonly request_hash: string
  readonly status: string
  readonly assistant_hash: string | null
  readonly usage_json: string | null
  readonly error: string | null
}

export interface OperationRow {
  readonly operation_id: string
  readonly conversation_id: string
  readonly turn_id: string
  readonly tool_call_id: string
  readonly tool_index: number
  readonly kind: string
  readonly idempotent: number | boolean
  readonly request_json: string
  readonly result_json: string | null
  readonly status: string
}

export const decodeMessage = Schema.decodeUnknownEither(Message)
export const decodeStatus = Schema.decodeUnknownEither(ConversationStatus)
export const decodeWaiting = Schema.decodeUnknownEither(WaitingClient)
export const decodeTools = Schema.decodeUnknownEither(Schema.Array(ToolDefinition))
export const decodeUsage = Schema.decodeUnknownEither(Usage)
const decodeCallStatus = Schema.decodeUnknownEither(LlmCallStatus)
const decodeOperationStatus = Schema.decodeUnknownEither(OperationStatus)

export const parseJson = (text: string): Either.Either<unknown, string> => {
  try {
    return Either.right(JSON.parse(text))
  } catch (error) {
    return Either.left(`invalid JSON: ${error instanceof Error ? error.message : String(error)}`)
  }
}

export interface TurnStartRow {
  readonly conversation_id: string
  readonly turn_id: string
  readonly input_id: string
  readonly started_version: number
  readonly started_at_ms: number
}

/**
 * The least string above every string that starts with `prefix`, in code point order (which is
 * UTF-8 byte order, SQLite's BINARY collation): the prefix with its last code point raised by
 * one. Undefined when no code point can be raised (a prefix of U+10FFFF only).
 */
export const prefixUpperBound = (prefix: string): string | undefined => {
  const points = Array.from(prefix)
  while (points.length > 0) {
    let next = points.pop()!.codePointAt(0)! + 1
    if (next >= 0xd800 && next <= 0xdfff) next = 0xe000
    if (next <= 0x10ffff) return points.join("") + String.fromCodePoint(next)
  }
  return undefined
}

const formatIssue = (error: ParseResult.ParseError): string => ParseResult.TreeFormatter.formatErrorSync(error)

/** JSON text, then a schema: the first failure as a readable reason. */
export const decodeJson = <A>(text: string, decode: (u: unknown) => Either.Either<A, ParseResult.ParseError>) =>
  Either.flatMap(parseJson(text), (value) => Either.mapLeft(decode(value), formatIssue))

/** A `result: unknown` as stored: canonical JSON, so equal results are equal bytes. */
export const resultJson = (result: unknown): string => canonicalJson(result)

interface DecodedHistory {
  readonly messages: ReadonlyArray<Message>
  readonly chain: string
}

/**
 * Decodes history rows and checks each one: contiguous seq, valid JSON, a valid `Message`
 * that re-serializes to the stored bytes, and bytes that hash to the stored `hash`. Returns
 * the hash chain over them, equal to `Llm.messagesHash(messages)` once every row checks.
 */
export const decodeHistory = (
  conversationId: string,
  rows: ReadonlyArray<MessageRow>,
  expectedCount: number,
  firstSeq = 0
): Either.Either<DecodedHistory, CorruptRow> => {
  const corrupt = (seq: number | null, reason: string) =>
    Either.left(new CorruptRow({ conversationId, table: "messages", seq, key: null, reason }))
  const messages: Array<Message> = []
  let chain = emptyMessagesHash
  for (let index = 0; index < rows.length; index++) {
    const row = rows[index]!
    const seq = firstSeq + index
    if (row.seq !== seq) return corrupt(seq, `expected seq ${seq}, found seq ${row.seq}`)
    if (typeof row.message_json !== "string") return corrupt(seq, "message_json is not text")
    const decoded = decodeJson(row.message_json, decodeMessage)
    if (Either.isLeft(decoded)) return corrupt(seq, decoded.left)
    if (serializeMessage(decoded.right) !== row.message_json) {
      return corrupt(seq, "the decoded message does not serialize to the stored bytes")
    }
    if (rowHash(row.message_json) !== row.hash) return corrupt(seq, "the stored bytes do not match the stored hash")
    messages.push(decoded.right)
    chain = extendMessagesHash(chain, row.hash)
  }
  if (rows.length !== expectedCount) return corrupt(firstSeq + rows.length, `expected ${expectedCount} messages, found ${rows.length}`)
  return Either.right({ messages, chain })
}

export const toCallRecord = (row: LlmCallRow): Either.Either<LlmCallRecord, CorruptRow> => {
  const corrupt = (reason: string) =>
    new CorruptRow({ conversationId: row.conversation_id, table: "llm_calls", seq: null, key: row.call_id, reason })
  const status = decodeCallStatus(row.status)
  if (Either.isLeft(status)) return Either.left(corrupt(`unknown status ${row.status}`))
  let usage: Usage | null = null
  if (row.usage_json !== null) {
    const decoded = decodeJson(row.usage_json, decodeUsage)
    if (Either.isLeft(decoded)) return Either.left(corrupt(`usage: ${decoded.left}`))
    usage = decoded.right
  }
  return Either.right({
    callId: row.call_id,
    conversationId: row.conversation_id,
    turnId: row.turn_id,
    model: row.model,
    status: status.right,
    messageCount: row.message_count,
    messagesHash: row.messages_hash,
    requestHash: row.request_hash,
    assistantHash: row.assistant_hash,
    usage,
    error: row.error
  })
}

export const toOperationRecord = (row: OperationRow): Either.Either<OperationRecord, CorruptRow> => {
  const corrupt = (reason: string) =>
    new CorruptRow({
      conversationId: row.conversation_id,
      table: "client_operations",
      seq: null,
      key: row.operation_id,
      reason
    })
  const status = decodeOperationStatus(row.status)
  if (Either.isLeft(status)) return Either.left(corrupt(`unknown status ${row.status}`))
  const request = parseJson(row.request_json)
  if (Either.isLeft(request)) return Either.left(corrupt(`request: ${request.left}`))
  let result: unknown = null
  if (row.result_json !== null) {
    const parsed = parseJson(row.result_json)
    if (Either.isLeft(parsed)) return Either.left(corrupt(`result: ${parsed.left}`))
    result = parsed.right
  }
  return Either.right({
    operationId: row.operation_id,
    conversationId: row.conversation_id,
    turnId: row.turn_id,
    toolCallId: row.tool_call_id,
    toolIndex: row.tool_index,
    kind: row.kind,
    idempotent: row.idempotent === 1 || row.idempotent === true,
    status: status.right,
    request: request.right,
    result
  })
}
