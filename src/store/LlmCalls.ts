/**
 * The model calls: each planned with its exact request (system prompt and tool list stored
 * once as content-addressed request parts, the messages as a prefix of the history's segment,
 * or whole as a part of their own for a summary call), marked as it streams and settles, and
 * loaded back as the exact request after a restart; and the raw stream diagnostics kept
 * beside them.
 */
import { Clock, Effect, Either, Option, Schema } from "effect"
import { canonicalJson, Message, messagesHash, requestHash } from "../Llm.js"
import type { RequestMessages } from "../Llm.js"
import type { ConversationState } from "../Loop.js"
import { storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"
import { CorruptRow, InvalidCommit, NotFound, RequestHashMismatch } from "./Model.js"
import type {
  CallTiming,
  ConversationCosts,
  LlmCallDetails,
  LlmCallStatus,
  LlmCallUpdate,
  LoadedLlmCall,
  PlannedLlmCall,
  StoreError
} from "./Model.js"
import { fail, q } from "./Program.js"
import type { Program } from "./Program.js"
import { decodeHistory, decodeJson, decodeTools, toCallRecord } from "./Rows.js"

const decodeMessages = Schema.decodeUnknownEither(Schema.Array(Message))
import type { LlmCallRow, MessageRow } from "./Rows.js"

/** What is wrong with a planned call, checked against the state it is committed with before any write; undefined when nothing. */
export const checkLlmCall = (conversationId: string, next: ConversationState, call: PlannedLlmCall): InvalidCommit | undefined => {
  const invalid = (reason: string) => new InvalidCommit({ conversationId, reason })
  if (call.conversationId !== conversationId) return invalid(`model call ${call.callId} belongs to ${call.conversationId}`)
  const count = call.request.messages.length
  if (call.detached) {
    // Not a prefix of the history (a summary call): its messages prove their hash themselves.
    if (messagesHash(call.request.messages) !== call.messagesHash) return invalid(`model call ${call.callId}: messagesHash does not match its messages`)
    const expected = requestHash(call.model, call.request, call.messagesHash, count)
    return expected === call.requestHash ? undefined : invalid(`model call ${call.callId}: requestHash does not match its request`)
  }
  if (call.segmentStart !== next.segment.start) {
    return invalid(`model call ${call.callId} names segment ${call.segmentStart}; the state's starts at ${next.segment.start}`)
  }
  if (count > next.messages.length) {
    return invalid(`model call ${call.callId} sends ${count} messages; the state holds ${next.messages.length}`)
  }
  // The usual case (the call asks about the state being committed) costs nothing; an older prefix is re-hashed.
  const prefixHash = count === next.messages.length ? next.messagesHash : messagesHash(call.request.messages)
  if (prefixHash !== call.messagesHash) return invalid(`model call ${call.callId}: messagesHash does not match its messages`)
  const expected = requestHash(call.model, call.request, call.messagesHash, count)
  if (expected !== call.requestHash) return invalid(`model call ${call.callId}: requestHash does not match its request`)
  return undefined
}

export const insertPart = function*(hash: string, body: string): Program<void> {
  yield* q`INSERT INTO request_parts (hash, body) VALUES (${hash}, ${body}) ON CONFLICT (hash) DO NOTHING`
}

/** The stored text of the named request parts (those stored; a missing one is the caller's to report). */
export const readParts = function*(names: ReadonlyArray<string>): Program<Array<{ readonly hash: string; readonly body: string }>> {
  const parts: Array<{ readonly hash: string; readonly body: string }> = []
  for (const name of names) {
    const rows = yield* q<{ hash: string; body: string }>`SELECT hash, body FROM request_parts WHERE hash = ${name}`
    if (rows[0] !== undefined) parts.push(rows[0])
  }
  return parts
}

/** Inserts a planned call; the same call id planned again must name the same request. Returns the parts it wrote. */
export const insertLlmCall = function*(env: StoreEnv, call: PlannedLlmCall, now: number): Program<Array<string>, InvalidCommit> {
  const { partHashes, storedParts } = env
  const promptHash = partHashes.prompt(call.request.systemPrompt)
  const listHash = partHashes.tools(call.request.tools)
  if (!storedParts.has(promptHash)) yield* insertPart(promptHash, canonicalJson(call.request.systemPrompt))
  if (!storedParts.has(listHash)) yield* insertPart(listHash, canonicalJson(call.request.tools))
  const written = [promptHash, listHash]
  let messagesPart: string | null = null
  if (call.detached) {
    // Content-addressed by the messages' own hash chain (already checked against them).
    messagesPart = `messages:${call.messagesHash}`
    if (!storedParts.has(messagesPart)) yield* insertPart(messagesPart, canonicalJson(call.request.messages))
    written.push(messagesPart)
  }
  const inserted = yield* q<{ call_id: string }>`
    INSERT INTO llm_calls (call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash,
      message_count, messages_hash, request_hash, status, created_at_ms, updated_at_ms, segment_start, messages_part_hash)
    VALUES (${call.callId}, ${call.conversationId}, ${call.turnId}, ${call.model}, ${promptHash}, ${listHash},
      ${call.request.messages.length}, ${call.messagesHash}, ${call.requestHash}, 'planned', ${now}, ${now},
      ${call.segmentStart}, ${messagesPart})
    ON CONFLICT (call_id) DO NOTHING
    RETURNING call_id`
  if (inserted.length > 0) return written
  const existing = yield* q<{ request_hash: string }>`SELECT request_hash FROM llm_calls WHERE call_id = ${call.callId}`
  if (existing[0]?.request_hash !== call.requestHash) {
    return yield* fail(new InvalidCommit({
      conversationId: call.conversationId,
      reason: `model call ${call.callId} was saved before with another request`
    }))
  }
  return written
}

/** Marks `parts` as stored: call it once their transaction has committed. */
export const rememberParts = ({ storedParts }: StoreEnv, parts: ReadonlyArray<string>): void => {
  if (storedParts.size >= 4096) storedParts.clear()
  for (const part of parts) storedParts.add(part)
}

export const updateLlmCall = function*(update: LlmCallUpdate, now: number): Program<ReadonlyArray<{ call_id: string }>> {
  return yield* q<{ call_id: string }>`
    UPDATE llm_calls SET
      status = ${update.status},
      assistant_hash = COALESCE(${update.assistantHash ?? null}, assistant_hash),
      usage_json = COALESCE(${update.usage === undefined ? null : canonicalJson(update.usage)}, usage_json),
      cost_usd = COALESCE(${update.costUsd ?? null}, cost_usd),
      error = COALESCE(${update.error ?? null}, error),
      target = COALESCE(${update.target ?? null}, target),
      updated_at_ms = ${now}
    WHERE call_id = ${update.callId}
    RETURNING call_id`
}

export const saveLlmCall = (env: StoreEnv) => Effect.fn("Store.saveLlmCall")(function*(call: PlannedLlmCall) {
  const invalid = (reason: string) => new InvalidCommit({ conversationId: call.conversationId, reason })
  const expected = requestHash(call.model, call.request, call.messagesHash, call.request.messages.length)
  if (expected !== call.requestHash) return yield* invalid(`model call ${call.callId}: requestHash does not match its request`)
  const now = yield* Clock.currentTimeMillis
  const statements = function*(): Program<Array<string>, InvalidCommit> {
    const rows = yield* q<{ message_count: number }>`
      SELECT message_count FROM conversations WHERE conversation_id = ${call.conversationId}`
    const stored = rows[0]
    if (stored === undefined) return yield* fail(invalid(`conversation ${call.conversationId} does not exist`))
    if (!call.detached && stored.message_count < call.segmentStart + call.request.messages.length) {
      return yield* fail(invalid(`model call ${call.callId} sends messages that are not stored`))
    }
    return yield* insertLlmCall(env, call, now)
  }
  const parts = yield* env.run("saveLlmCall", statements, true)
  rememberParts(env, parts)
})

const markStatements = function*(callId: string, status: LlmCallStatus, details: LlmCallDetails | undefined, now: number): Program<void, NotFound> {
  const updated = yield* updateLlmCall({ ...details, callId, status }, now)
  if (updated.length === 0) return yield* fail(new NotFound({ entity: "llmCall", id: callId }))
}

export const markLlmCall = (env: StoreEnv) => (callId: string, status: LlmCallStatus, details?: LlmCallDetails): Effect.Effect<void, NotFound | StoreError> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => env.run("markLlmCall", () => markStatements(callId, status, details, now), false))

const timingStatements = function*(callId: string, timing: CallTiming): Program<void> {
  yield* q`
    UPDATE llm_calls SET first_delta_ms = ${timing.firstDeltaMs}, attempts = ${timing.attempts}
    WHERE call_id = ${callId}`
}

/**
 * What the console reads about a call's stream (time to its first delta, attempts), recorded
 * when the first delta arrives. Never touches the status, so it cannot undo a commit or a cancel
 * that raced it; like the stream diagnostics it is not a commit point.
 */
export const recordCallTiming = (env: StoreEnv) => (callId: string, timing: CallTiming): Effect.Effect<void, StoreError> =>
  env.run("recordCallTiming", () => timingStatements(callId, timing), false)

export const costs = ({ sql }: StoreEnv) => Effect.fn("Store.costs")(function*(conversationId: string) {
  const rows = yield* sql<{ turn_id: string; usd: number | null; calls: number; priced: number }>`
    SELECT turn_id, SUM(cost_usd) AS usd, COUNT(*) AS calls, COUNT(cost_usd) AS priced
    FROM llm_calls WHERE conversation_id = ${conversationId} AND status = 'committed'
    GROUP BY turn_id ORDER BY MIN(created_at_ms), turn_id`.pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("costs")(e)))
  )
  const turns = rows.map((row) => ({ turnId: row.turn_id, usd: row.usd ?? 0, calls: Number(row.calls) }))
  const result: ConversationCosts = {
    conversationId,
    usd: turns.reduce((sum, turn) => sum + turn.usd, 0),
    calls: turns.reduce((sum, turn) => sum + turn.calls, 0),
    pricedCalls: rows.reduce((sum, row) => sum + Number(row.priced), 0),
    turns
  }
  return result
})

/** A saved call's row, the parts it names and, unless its messages are a part, the messages it sent. */
const loadCallStatements = function*(callId: string) {
  const rows = yield* q<LlmCallRow & { readonly segment_start: number; readonly messages_part_hash: string | null }>`
    SELECT call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash, message_count,
      messages_hash, request_hash, status, assistant_hash, usage_json, error, segment_start, messages_part_hash
    FROM llm_calls WHERE call_id = ${callId}`
  const row = rows[0]
  if (row === undefined) return Option.none()
  const partNames = [row.system_prompt_hash, row.tools_hash, ...(row.messages_part_hash === null ? [] : [row.messages_part_hash])]
  const parts = yield* readParts(partNames)
  const messageRows = row.messages_part_hash !== null ? [] : yield* q<MessageRow>`
    SELECT seq, message_json, hash FROM messages
    WHERE conversation_id = ${row.conversation_id} AND seq >= ${row.segment_start}
      AND seq < ${row.segment_start + row.message_count} ORDER BY seq`
  return Option.some({ row, parts, messageRows })
}

export const loadLlmCall = (env: StoreEnv) => Effect.fn("Store.loadLlmCall")(function*(callId: string) {
  const found = yield* env.run("loadLlmCall", () => loadCallStatements(callId), true)
  if (Option.isNone(found)) return Option.none<LoadedLlmCall>()
  const { messageRows, parts, row } = found.value
  const corrupt = (key: string, reason: string) =>
    new CorruptRow({ conversationId: row.conversation_id, table: "request_parts", seq: null, key, reason })

  const record = toCallRecord(row)
  if (Either.isLeft(record)) return yield* record.left
  const promptBody = parts.find((part) => part.hash === row.system_prompt_hash)?.body
  const toolsBody = parts.find((part) => part.hash === row.tools_hash)?.body
  if (promptBody === undefined) return yield* corrupt(row.system_prompt_hash, "the system prompt is missing")
  if (toolsBody === undefined) return yield* corrupt(row.tools_hash, "the tool list is missing")
  const systemPrompt = decodeJson(promptBody, Schema.decodeUnknownEither(Schema.String))
  if (Either.isLeft(systemPrompt)) return yield* corrupt(row.system_prompt_hash, systemPrompt.left)
  const tools = decodeJson(toolsBody, decodeTools)
  if (Either.isLeft(tools)) return yield* corrupt(row.tools_hash, tools.left)
  let history: Either.Either<{ readonly messages: ReadonlyArray<Message>; readonly chain: string }, CorruptRow>
  if (row.messages_part_hash === null) {
    history = decodeHistory(row.conversation_id, messageRows, row.message_count, row.segment_start)
  } else {
    const body = parts.find((part) => part.hash === row.messages_part_hash)?.body
    if (body === undefined) return yield* corrupt(row.messages_part_hash, "the messages are missing")
    const messages = decodeJson(body, decodeMessages)
    if (Either.isLeft(messages)) return yield* corrupt(row.messages_part_hash, messages.left)
    history = Either.right({ messages: messages.right, chain: messagesHash(messages.right) })
  }
  if (Either.isLeft(history)) return yield* history.left

  const request: RequestMessages = {
    systemPrompt: systemPrompt.right,
    messages: history.right.messages,
    tools: tools.right
  }
  // Recomputed from the rebuilt request, not from stored hashes: this is the proof it is the exact request.
  const actual = requestHash(row.model, request, history.right.chain, request.messages.length)
  if (actual !== row.request_hash) {
    return yield* new RequestHashMismatch({
      callId,
      conversationId: row.conversation_id,
      expected: row.request_hash,
      actual
    })
  }
  return Option.some<LoadedLlmCall>({ ...record.right, request })
})

export const appendDiagnostic = ({ sql }: StoreEnv) => Effect.fn("Store.appendDiagnostic")(
  function*(callId: string, eventIndex: number, event: unknown) {
    yield* sql`
      INSERT INTO stream_diagnostics (call_id, event_index, event_json)
      VALUES (${callId}, ${eventIndex}, ${canonicalJson(event)})
      ON CONFLICT (call_id, event_index) DO NOTHING`.pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("appendDiagnostic")(e)))
    )
  }
)
