/**
 * What an operator reads about a conversation's model calls: each call's shape (prompt, tools,
 * segment, message count), its status, usage, cost and times, in the order the calls were
 * made. Read-only; the console and the prefix diagnostics (`Prefix.ts`) build on it.
 */
import { Effect, Either, Schema } from "effect"
import { storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"
import type { CallInsight } from "./Model.js"
import { decodeJson } from "./Rows.js"
import { Usage } from "../Llm.js"

const decodeUsage = Schema.decodeUnknownEither(Usage)

export const callsOf = ({ sql }: StoreEnv) => Effect.fn("Store.callsOf")(function*(conversationId: string) {
  const rows = yield* sql<{
    call_id: string
    turn_id: string
    model: string
    status: string
    system_prompt_hash: string
    tools_hash: string
    segment_start: number
    message_count: number
    messages_part_hash: string | null
    usage_json: string | null
    cost_usd: number | null
    error: string | null
    created_at_ms: number
    updated_at_ms: number
  }>`
    SELECT call_id, turn_id, model, status, system_prompt_hash, tools_hash, segment_start, message_count,
      messages_part_hash, usage_json, cost_usd, error, created_at_ms, updated_at_ms
    FROM llm_calls WHERE conversation_id = ${conversationId} ORDER BY created_at_ms, call_id`.pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("callsOf")(e)))
  )
  return rows.map((row): CallInsight => {
    const usage = row.usage_json === null ? undefined : decodeJson(row.usage_json, decodeUsage)
    return {
      callId: row.call_id,
      turnId: row.turn_id,
      model: row.model,
      status: row.status,
      systemPromptHash: row.system_prompt_hash,
      toolsHash: row.tools_hash,
      segmentStart: Number(row.segment_start),
      messageCount: Number(row.message_count),
      detached: row.messages_part_hash !== null,
      usage: usage === undefined || Either.isLeft(usage) ? null : usage.right,
      costUsd: row.cost_usd,
      error: row.error,
      createdAtMs: Number(row.created_at_ms),
      updatedAtMs: Number(row.updated_at_ms)
    }
  })
})
