/**
 * What an operator reads about conversations and model calls: each call's shape (prompt, tools,
 * segment, message count, request size), its status, usage, cost, times and the target that
 * answered, in the order the calls were made; the conversations with their totals; the calls of
 * the last days (for charts and per-model figures). Read-only; the console and the prefix
 * diagnostics (`Prefix.ts`) build on it.
 *
 * The SQL stays portable (SQLite and PostgreSQL): JSON columns (usage, the state's settings, the
 * first message) are decoded and aggregated here, never in SQL. `LENGTH` of a text column counts
 * characters in both.
 */
import { Array, Effect, Either, Schema } from "effect"
import { storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"
import type { CallInsight, ConversationInsight, RecentCall } from "./Model.js"
import { decodeJson, decodeMessage, decodeUsage } from "./Rows.js"
import { addUsage, emptyUsage } from "../Llm.js"
import type { Usage } from "../Llm.js"

/** The parts of `state_json` an operator reads (the rest is ignored). */
const decodeStateSummary = Schema.decodeUnknownEither(Schema.Struct({
  turnSeq: Schema.Number,
  settings: Schema.NullOr(Schema.Struct({ model: Schema.String }))
}))

/** An `llm_calls` row as the operator's queries select it (`CALL_COLUMNS`). */
export interface CallRow {
  readonly call_id: string
  readonly conversation_id: string
  readonly turn_id: string
  readonly model: string
  readonly status: string
  readonly system_prompt_hash: string
  readonly tools_hash: string
  readonly segment_start: number
  readonly message_count: number
  readonly messages_part_hash: string | null
  readonly usage_json: string | null
  readonly cost_usd: number | null
  readonly error: string | null
  readonly created_at_ms: number
  readonly updated_at_ms: number
  readonly first_delta_ms: number | null
  readonly target: string | null
  readonly attempts: number | null
}

const usageOf = (json: string | null): Usage | null => {
  if (json === null) return null
  const usage = decodeJson(json, decodeUsage)
  return Either.isLeft(usage) ? null : usage.right
}

const nullableNumber = (value: number | null): number | null => value === null ? null : Number(value)

export const toInsight = (row: CallRow, requestChars: number): CallInsight => ({
  callId: row.call_id,
  turnId: row.turn_id,
  model: row.model,
  status: row.status,
  systemPromptHash: row.system_prompt_hash,
  toolsHash: row.tools_hash,
  segmentStart: Number(row.segment_start),
  messageCount: Number(row.message_count),
  detached: row.messages_part_hash !== null,
  usage: usageOf(row.usage_json),
  costUsd: row.cost_usd,
  error: row.error,
  createdAtMs: Number(row.created_at_ms),
  updatedAtMs: Number(row.updated_at_ms),
  firstDeltaMs: nullableNumber(row.first_delta_ms),
  target: row.target,
  attempts: nullableNumber(row.attempts),
  requestChars
})

export const callsOf = ({ sql }: StoreEnv) => Effect.fn("Store.callsOf")(function*(conversationId: string) {
  const read = Effect.gen(function*() {
    const rows = yield* sql<CallRow>`
      SELECT call_id, conversation_id, turn_id, model, status, system_prompt_hash, tools_hash, segment_start, message_count,
        messages_part_hash, usage_json, cost_usd, error, created_at_ms, updated_at_ms, first_delta_ms, target, attempts
      FROM llm_calls WHERE conversation_id = ${conversationId} ORDER BY created_at_ms, call_id`
    // The request size: its parts' lengths, and the history's as prefix sums over the journal.
    const partNames = [...new Set(rows.flatMap((row) => [row.system_prompt_hash, row.tools_hash, ...(row.messages_part_hash === null ? [] : [row.messages_part_hash])]))]
    const parts = partNames.length === 0 ? [] : yield* sql<{ hash: string; chars: number }>`
      SELECT hash, LENGTH(body) AS chars FROM request_parts WHERE ${sql.in("hash", partNames)}`
    const lengths = rows.length === 0 ? [] : yield* sql<{ seq: number; chars: number }>`
      SELECT seq, LENGTH(message_json) AS chars FROM messages WHERE conversation_id = ${conversationId} ORDER BY seq`
    return { rows, parts, lengths }
  })
  const { lengths, parts, rows } = yield* sql.withTransaction(read).pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("callsOf")(e)))
  )
  const partChars = new Map(parts.map((part) => [part.hash, Number(part.chars)]))
  const prefix = [0]
  for (const row of lengths) prefix.push(prefix[prefix.length - 1]! + Number(row.chars))
  const upTo = (count: number) => prefix[Math.min(count, prefix.length - 1)]!
  return rows.map((row) => {
    const start = Number(row.segment_start)
    const messages = row.messages_part_hash !== null
      ? partChars.get(row.messages_part_hash) ?? 0
      : upTo(start + Number(row.message_count)) - upTo(start)
    return toInsight(row, (partChars.get(row.system_prompt_hash) ?? 0) + (partChars.get(row.tools_hash) ?? 0) + messages)
  })
})

/** The model calls made since `sinceMs` (all conversations), oldest first, at most `limit`; no request sizes. */
export const callsSince = ({ sql }: StoreEnv) => Effect.fn("Store.callsSince")(function*(sinceMs: number, limit: number) {
  const rows = yield* sql<CallRow>`
    SELECT call_id, conversation_id, turn_id, model, status, system_prompt_hash, tools_hash, segment_start, message_count,
      messages_part_hash, usage_json, cost_usd, error, created_at_ms, updated_at_ms, first_delta_ms, target, attempts
    FROM llm_calls WHERE created_at_ms >= ${sinceMs} ORDER BY created_at_ms DESC, call_id LIMIT ${limit}`.pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("callsSince")(e)))
  )
  return rows.map((row): RecentCall => ({ ...toInsight(row, 0), conversationId: row.conversation_id })).reverse()
})

/** The first user message's text (its text parts joined), or "" when the journal's first messages hold none. */
const firstUserText = (rows: ReadonlyArray<{ readonly seq: number; readonly message_json: string }>): string => {
  for (const row of [...rows].sort((a, b) => Number(a.seq) - Number(b.seq))) {
    const message = decodeJson(row.message_json, decodeMessage)
    if (Either.isRight(message) && message.right.role === "user") {
      const text = message.right.content.flatMap((part) => part.type === "text" ? [part.text] : []).join(" ")
      if (text.trim() !== "") return text
    }
  }
  return ""
}

/** How many of a conversation's first journal rows are read to find its title. */
const TITLE_ROWS = 4

/**
 * The `limit` most recently active conversations (or the one named, or those `ownerId` owns in
 * `conversation_owners`), newest first, with their totals over all their model calls, each
 * titled by the name the user gave it or by its first user message.
 */
export const conversations = ({ sql }: StoreEnv) => Effect.fn("Store.conversations")(function*(limit: number, conversationId?: string, ownerId?: string) {
  const filters = [
    ...(conversationId === undefined ? [] : [sql`conversation_id = ${conversationId}`]),
    ...(ownerId === undefined ? [] : [sql`conversation_id IN (SELECT conversation_id FROM conversation_owners WHERE user_id = ${ownerId})`])
  ]
  const read = Effect.gen(function*() {
    const rows = yield* sql<{ conversation_id: string; status: string; state_json: string; message_count: number; updated_at_ms: number }>`
      SELECT conversation_id, status, state_json, message_count, updated_at_ms FROM conversations
      ${filters.length === 0 ? sql`` : sql`WHERE ${sql.and(filters)}`}
      ORDER BY updated_at_ms DESC, conversation_id LIMIT ${limit}`
    const ids = rows.map((row) => row.conversation_id)
    if (ids.length === 0) return { rows, firsts: [], calls: [], names: [] }
    const firsts = yield* sql<{ conversation_id: string; seq: number; message_json: string }>`
      SELECT conversation_id, seq, message_json FROM messages WHERE seq < ${TITLE_ROWS} AND ${sql.in("conversation_id", ids)}`
    const calls = yield* sql<{ conversation_id: string; usage_json: string | null; cost_usd: number | null; created_at_ms: number; updated_at_ms: number }>`
      SELECT conversation_id, usage_json, cost_usd, created_at_ms, updated_at_ms FROM llm_calls WHERE ${sql.in("conversation_id", ids)}`
    const names = yield* sql<{ conversation_id: string; name: string }>`
      SELECT conversation_id, name FROM conversation_names WHERE ${sql.in("conversation_id", ids)}`
    return { rows, firsts, calls, names }
  })
  const { calls, firsts, names, rows } = yield* sql.withTransaction(read).pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("conversations")(e)))
  )
  const callsBy = Array.groupBy(calls, (call) => call.conversation_id)
  const firstsBy = Array.groupBy(firsts, (first) => first.conversation_id)
  const nameOf = new Map(names.map((row) => [row.conversation_id, row.name]))
  return rows.map((row): ConversationInsight => {
    const state = decodeJson(row.state_json, decodeStateSummary)
    const own = callsBy[row.conversation_id] ?? []
    return {
      conversationId: row.conversation_id,
      status: row.status,
      title: nameOf.get(row.conversation_id) ?? firstUserText(firstsBy[row.conversation_id] ?? []),
      model: Either.isRight(state) ? state.right.settings?.model ?? null : null,
      turns: Either.isRight(state) ? state.right.turnSeq : 0,
      messageCount: Number(row.message_count),
      calls: own.length,
      usage: own.reduce((sum, call) => addUsage(sum, usageOf(call.usage_json) ?? emptyUsage), emptyUsage),
      costUsd: own.reduce((sum, call) => sum + (call.cost_usd ?? 0), 0),
      startedAtMs: own.length === 0 ? null : Math.min(...own.map((call) => Number(call.created_at_ms))),
      lastActivityMs: Math.max(Number(row.updated_at_ms), ...own.map((call) => Number(call.updated_at_ms)))
    }
  })
})
