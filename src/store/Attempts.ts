/**
 * What an operator reads about failures and single calls: the attempts of model calls that
 * failed before answering (one row each in `llm_call_attempts`, written as they fail; an attempt
 * that answers writes nothing), the call log across conversations (filtered, paged), one call
 * with its request size, and the answer a committed call added to the journal. Read-only but
 * for `recordAttempt`, which is no commit point (like the call's timing, it never touches a
 * status).
 *
 * Portable SQL (SQLite and PostgreSQL), as `Insights.ts`.
 */
import { Effect, Either, Option } from "effect"
import type { FailedAttempt, Message } from "../Llm.js"
import { storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"
import { toInsight } from "./Insights.js"
import type { CallRow } from "./Insights.js"
import type { AttemptRecord, CallLogPage, CallLogQuery, RecentAttempt, RecentCall } from "./Model.js"
import { q } from "./Program.js"
import type { Program } from "./Program.js"
import { decodeJson, decodeMessage } from "./Rows.js"

interface AttemptRow {
  readonly call_id: string
  readonly seq: number
  readonly provider: string
  readonly upstream_model: string
  readonly attempt: number
  readonly http_status: number | null
  readonly reason: string
  readonly error: string
  readonly started_at_ms: number
  readonly failed_at_ms: number
}

const toAttempt = (row: AttemptRow): AttemptRecord => ({
  callId: row.call_id,
  seq: Number(row.seq),
  provider: row.provider,
  upstreamModel: row.upstream_model,
  attempt: Number(row.attempt),
  status: row.http_status === null ? null : Number(row.http_status),
  reason: row.reason,
  error: row.error,
  startedAtMs: Number(row.started_at_ms),
  failedAtMs: Number(row.failed_at_ms)
})

const attemptStatements = function*(callId: string, attempt: FailedAttempt): Program<void> {
  // The next seq of the call (a call resumed after a restart goes on counting).
  yield* q`
    INSERT INTO llm_call_attempts (call_id, seq, provider, upstream_model, attempt, http_status, reason, error, started_at_ms, failed_at_ms)
    SELECT ${callId}, COALESCE(MAX(seq), -1) + 1, ${attempt.provider}, ${attempt.upstreamModel}, ${attempt.attempt},
      ${attempt.status ?? null}, ${attempt.reason}, ${attempt.message}, ${attempt.startedAtMs}, ${attempt.failedAtMs}
    FROM llm_call_attempts WHERE call_id = ${callId}`
}

/** One row per attempt that failed before answering: rare, and never on the success path. */
export const recordAttempt = (env: StoreEnv) => (callId: string, attempt: FailedAttempt) =>
  env.run("recordAttempt", () => attemptStatements(callId, attempt), false)

const ATTEMPT_COLUMNS = "a.call_id, a.seq, a.provider, a.upstream_model, a.attempt, a.http_status, a.reason, a.error, a.started_at_ms, a.failed_at_ms"

export const attemptsOf = ({ sql }: StoreEnv) => Effect.fn("Store.attemptsOf")(function*(
  scope: { readonly callId: string } | { readonly conversationId: string }
) {
  const rows = yield* ("callId" in scope
    ? sql<AttemptRow>`SELECT ${sql.literal(ATTEMPT_COLUMNS)} FROM llm_call_attempts a WHERE a.call_id = ${scope.callId} ORDER BY a.seq`
    : sql<AttemptRow>`
      SELECT ${sql.literal(ATTEMPT_COLUMNS)} FROM llm_call_attempts a JOIN llm_calls c ON c.call_id = a.call_id
      WHERE c.conversation_id = ${scope.conversationId} ORDER BY a.failed_at_ms, a.call_id, a.seq`).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("attemptsOf")(e)))
    )
  return rows.map(toAttempt)
})

export const attemptsSince = ({ sql }: StoreEnv) => Effect.fn("Store.attemptsSince")(function*(sinceMs: number, limit: number) {
  const rows = yield* sql<AttemptRow & { readonly conversation_id: string; readonly model: string }>`
    SELECT ${sql.literal(ATTEMPT_COLUMNS)}, c.conversation_id, c.model
    FROM llm_call_attempts a JOIN llm_calls c ON c.call_id = a.call_id
    WHERE a.failed_at_ms >= ${sinceMs} ORDER BY a.failed_at_ms DESC, a.call_id, a.seq DESC LIMIT ${limit}`.pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("attemptsSince")(e)))
  )
  return rows.map((row): RecentAttempt => ({ ...toAttempt(row), conversationId: row.conversation_id, model: row.model })).reverse()
})

const CALL_COLUMNS = "c.call_id, c.conversation_id, c.turn_id, c.model, c.status, c.system_prompt_hash, c.tools_hash, c.segment_start, " +
  "c.message_count, c.messages_part_hash, c.usage_json, c.cost_usd, c.error, c.created_at_ms, c.updated_at_ms, c.first_delta_ms, c.target, c.attempts"

export const callLog = ({ sql }: StoreEnv) => Effect.fn("Store.callLog")(function*(query: CallLogQuery) {
  const failedAttempts = sql`(SELECT COUNT(*) FROM llm_call_attempts a WHERE a.call_id = c.call_id)`
  const clauses = [
    ...(query.conversationId === undefined ? [] : [sql`c.conversation_id = ${query.conversationId}`]),
    ...(query.model === undefined ? [] : [sql`c.model = ${query.model}`]),
    ...(query.provider === undefined ? [] : [sql`(SUBSTR(c.target, 1, ${query.provider.length + 1}) = ${`${query.provider}/`}
      OR EXISTS (SELECT 1 FROM llm_call_attempts a WHERE a.call_id = c.call_id AND a.provider = ${query.provider}))`]),
    ...(query.sinceMs === undefined ? [] : [sql`c.created_at_ms >= ${query.sinceMs}`]),
    ...(query.untilMs === undefined ? [] : [sql`c.created_at_ms < ${query.untilMs}`]),
    ...(query.outcome === undefined ? [] : [
      query.outcome === "answered"
        ? sql`c.status = 'committed'`
        : query.outcome === "failed"
        ? sql`c.status = 'failed'`
        : query.outcome === "canceled"
        ? sql`c.status = 'canceled'`
        : query.outcome === "running"
        ? sql`c.status IN ('planned', 'streaming')`
        : sql`EXISTS (SELECT 1 FROM llm_call_attempts a WHERE a.call_id = c.call_id)`
    ])
  ]
  const where = clauses.length === 0 ? sql`` : sql`WHERE ${sql.and(clauses)}`
  const read = Effect.gen(function*() {
    const rows = yield* sql<CallRow & { readonly failed_attempts: number }>`
      SELECT ${sql.literal(CALL_COLUMNS)}, ${failedAttempts} AS failed_attempts FROM llm_calls c ${where}
      ORDER BY c.created_at_ms DESC, c.call_id DESC LIMIT ${query.limit} OFFSET ${query.offset}`
    const counted = yield* sql<{ n: number }>`SELECT COUNT(*) AS n FROM llm_calls c ${where}`
    return { rows, total: Number(counted[0]?.n ?? 0) }
  })
  const { rows, total } = yield* sql.withTransaction(read).pipe(Effect.catchTag("SqlError", (e) => Effect.fail(storeError("callLog")(e))))
  return {
    calls: rows.map((row) => ({ ...toInsight(row, 0), conversationId: row.conversation_id, failedAttempts: Number(row.failed_attempts) })),
    total
  } satisfies CallLogPage
})

export const callInsight = ({ sql }: StoreEnv) => Effect.fn("Store.callInsight")(function*(callId: string) {
  const read = Effect.gen(function*() {
    const rows = yield* sql<CallRow>`SELECT ${sql.literal(CALL_COLUMNS)} FROM llm_calls c WHERE c.call_id = ${callId}`
    const row = rows[0]
    if (row === undefined) return undefined
    const names = [row.system_prompt_hash, row.tools_hash, ...(row.messages_part_hash === null ? [] : [row.messages_part_hash])]
    const parts = yield* sql<{ chars: number }>`SELECT LENGTH(body) AS chars FROM request_parts WHERE ${sql.in("hash", names)}`
    const start = Number(row.segment_start)
    const history = row.messages_part_hash !== null ? [] : yield* sql<{ chars: number | null }>`
      SELECT SUM(LENGTH(message_json)) AS chars FROM messages
      WHERE conversation_id = ${row.conversation_id} AND seq >= ${start} AND seq < ${start + Number(row.message_count)}`
    const chars = [...parts, ...history].reduce((sum, part) => sum + Number(part.chars ?? 0), 0)
    return { row, chars }
  })
  const found = yield* sql.withTransaction(read).pipe(Effect.catchTag("SqlError", (e) => Effect.fail(storeError("callInsight")(e))))
  return found === undefined
    ? Option.none<RecentCall>()
    : Option.some<RecentCall>({ ...toInsight(found.row, found.chars), conversationId: found.row.conversation_id })
})

export const answerOf = ({ sql }: StoreEnv) => Effect.fn("Store.answerOf")(function*(callId: string) {
  const read = Effect.gen(function*() {
    const calls = yield* sql<{ conversation_id: string; assistant_hash: string | null; segment_start: number; message_count: number }>`
      SELECT conversation_id, assistant_hash, segment_start, message_count FROM llm_calls WHERE call_id = ${callId}`
    const call = calls[0]
    if (call === undefined || call.assistant_hash === null) return []
    // The first message with that hash after the request's own (a summary call's answer is not in the journal).
    return yield* sql<{ message_json: string }>`
      SELECT message_json FROM messages WHERE conversation_id = ${call.conversation_id} AND hash = ${call.assistant_hash}
        AND seq >= ${Number(call.segment_start) + Number(call.message_count)} ORDER BY seq LIMIT 1`
  })
  const rows = yield* sql.withTransaction(read).pipe(Effect.catchTag("SqlError", (e) => Effect.fail(storeError("answerOf")(e))))
  const row = rows[0]
  if (row === undefined) return Option.none<Message>()
  const message = decodeJson(row.message_json, decodeMessage)
  return Either.isRight(message) ? Option.some<Message>(message.right) : Option.none<Message>()
})
