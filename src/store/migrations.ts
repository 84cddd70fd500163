/**
 * The SQLite schema, as migrations for the Effect SQL migrator (`SqliteMigrator.fromRecord`).
 * A migration, once released, is never edited: a change is a new entry.
 *
 * History is a table of rows appended one per message, never rewritten (triggers refuse
 * UPDATE and DELETE), so that a commit writes only its new messages. A model call keeps its
 * exact request as references: the content-addressed system prompt and tool list in
 * `request_parts`, and the length and hash of the history prefix it was sent with.
 */
import { Effect } from "effect"
import * as SqlClient from "@effect/sql/SqlClient"

const init = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE conversations (
      conversation_id TEXT PRIMARY KEY NOT NULL,
      version INTEGER NOT NULL,
      status TEXT NOT NULL,
      turn_id TEXT NOT NULL,
      message_count INTEGER NOT NULL,
      messages_hash TEXT NOT NULL,
      waiting_json TEXT,
      state_json TEXT NOT NULL,
      updated_at_ms INTEGER NOT NULL
    )`
  yield* sql`
    CREATE TABLE messages (
      conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
      seq INTEGER NOT NULL,
      message_json TEXT NOT NULL,
      hash TEXT NOT NULL,
      PRIMARY KEY (conversation_id, seq)
    )`
  yield* sql`
    CREATE TRIGGER messages_no_update BEFORE UPDATE ON messages
    BEGIN SELECT RAISE(ABORT, 'messages are append-only'); END`
  yield* sql`
    CREATE TRIGGER messages_no_delete BEFORE DELETE ON messages
    BEGIN SELECT RAISE(ABORT, 'messages are append-only'); END`
  yield* sql`
    CREATE TABLE input_commits (
      conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
      input_id TEXT NOT NULL,
      committed_version INTEGER NOT NULL,
      result_json TEXT NOT NULL,
      committed_at_ms INTEGER NOT NULL,
      PRIMARY KEY (conversation_id, input_id)
    )`
  yield* sql`
    CREATE TABLE request_parts (
      hash TEXT PRIMARY KEY NOT NULL,
      body TEXT NOT NULL
    )`
  yield* sql`
    CREATE TABLE llm_calls (
      call_id TEXT PRIMARY KEY NOT NULL,
      conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
      turn_id TEXT NOT NULL,
      model TEXT NOT NULL,
      system_prompt_hash TEXT NOT NULL REFERENCES request_parts (hash),
      tools_hash TEXT NOT NULL REFERENCES request_parts (hash),
      message_count INTEGER NOT NULL,
      messages_hash TEXT NOT NULL,
      request_hash TEXT NOT NULL,
      status TEXT NOT NULL,
      assistant_hash TEXT,
      usage_json TEXT,
      error TEXT,
      created_at_ms INTEGER NOT NULL,
      updated_at_ms INTEGER NOT NULL
    )`
  // Recovery scans only what is unfinished; partial indexes keep that scan small as calls accumulate.
  yield* sql`CREATE INDEX llm_calls_in_flight ON llm_calls (status) WHERE status IN ('planned', 'streaming')`
  yield* sql`CREATE INDEX llm_calls_conversation ON llm_calls (conversation_id)`
  yield* sql`
    CREATE TABLE client_operations (
      operation_id TEXT PRIMARY KEY NOT NULL,
      conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
      turn_id TEXT NOT NULL,
      tool_call_id TEXT NOT NULL,
      tool_index INTEGER NOT NULL,
      kind TEXT NOT NULL,
      idempotent INTEGER NOT NULL,
      request_json TEXT NOT NULL,
      result_json TEXT,
      status TEXT NOT NULL,
      created_at_ms INTEGER NOT NULL,
      updated_at_ms INTEGER NOT NULL
    )`
  yield* sql`CREATE INDEX client_operations_in_flight ON client_operations (status) WHERE status IN ('planned', 'sent')`
  yield* sql`CREATE INDEX client_operations_conversation ON client_operations (conversation_id)`
  yield* sql`
    CREATE TABLE stream_diagnostics (
      call_id TEXT NOT NULL,
      event_index INTEGER NOT NULL,
      event_json TEXT NOT NULL,
      PRIMARY KEY (call_id, event_index)
    )`
})

/**
 * Which input started each turn (the first commit with that turn id), so that a process can
 * tell a client that asks about a request after a restart how the turn that request started
 * ended. A client request's input ids share a prefix (`<request id>/...`), hence the index on
 * `input_id` for a prefix range scan.
 */
const turnStarts = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE turn_starts (
      conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
      turn_id TEXT NOT NULL,
      input_id TEXT NOT NULL,
      started_version INTEGER NOT NULL,
      started_at_ms INTEGER NOT NULL,
      PRIMARY KEY (conversation_id, turn_id)
    )`
  yield* sql`CREATE INDEX turn_starts_input ON turn_starts (input_id)`
})

/** What each committed model call cost (USD, from the configured prices; null without a price). */
const callCosts = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE llm_calls ADD COLUMN cost_usd REAL`
})

/**
 * History as segments. The journal (`messages`) stays append-only; the model sees the current
 * segment, from `conversations.segment_start` on. Each segment a compaction or a rewind opens
 * is recorded in `segments`: where it starts, why, and how many of the previous segment's
 * messages it replaced or kept. A model call's messages are the `message_count` messages from
 * its `segment_start`, or, for a summary call (the history plus an instruction, maybe with
 * stale tool output elided), a content-addressed part of their own (`messages_part_hash`).
 * A message row may carry the key a client knows it by (`client_key`, Cursor's prompt-message
 * blob id), so that a forked chat that names its history by those keys is seeded from it.
 */
const segments = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE conversations ADD COLUMN segment_start INTEGER NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE llm_calls ADD COLUMN segment_start INTEGER NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE llm_calls ADD COLUMN messages_part_hash TEXT REFERENCES request_parts (hash)`
  yield* sql`ALTER TABLE messages ADD COLUMN client_key TEXT`
  yield* sql`CREATE INDEX messages_client_key ON messages (client_key) WHERE client_key IS NOT NULL`
  yield* sql`
    CREATE TABLE segments (
      conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
      start INTEGER NOT NULL,
      kind TEXT NOT NULL,
      turn_id TEXT NOT NULL,
      summary_call_id TEXT,
      source TEXT,
      previous_start INTEGER NOT NULL,
      replaced INTEGER NOT NULL,
      kept INTEGER NOT NULL,
      created_at_ms INTEGER NOT NULL,
      PRIMARY KEY (conversation_id, start)
    )`
})

/**
 * What an operator reads about each model call besides its usage: the milliseconds from its
 * stream opening to its first delta, the target that answered (`provider/upstreamModel`, from
 * the committed answer), and how many attempts that target took (retries before the first
 * event). Nullable: older calls, and calls that never streamed, have none. The index serves the
 * console's charts over the last days.
 */
const callTimings = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE llm_calls ADD COLUMN first_delta_ms INTEGER`
  yield* sql`ALTER TABLE llm_calls ADD COLUMN target TEXT`
  yield* sql`ALTER TABLE llm_calls ADD COLUMN attempts INTEGER`
  yield* sql`CREATE INDEX llm_calls_created ON llm_calls (created_at_ms)`
})

/**
 * The names users give their chats (`UpdateConversationMetadata`). No reference to
 * `conversations`: Cursor names a chat before its first turn is committed.
 */
const conversationNames = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE conversation_names (
      conversation_id TEXT PRIMARY KEY NOT NULL,
      name TEXT NOT NULL,
      updated_at_ms INTEGER NOT NULL
    )`
})

/**
 * The attempts of model calls that failed before answering (a retry or a fallback followed, or
 * the call failed with it): one row each, written by the HTTP layer's retry loop through the
 * runner (`StreamOptions.onAttemptFailed`). An attempt that answers writes nothing (the call's
 * `target` and `attempts` say who answered), so the success path costs no extra row. `seq`
 * orders a call's attempts across its targets; `http_status` is null for a network error or a
 * timeout. The index serves the console's per-model and per-provider figures over the last days.
 */
const callAttempts = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE llm_call_attempts (
      call_id TEXT NOT NULL REFERENCES llm_calls (call_id),
      seq INTEGER NOT NULL,
      provider TEXT NOT NULL,
      upstream_model TEXT NOT NULL,
      attempt INTEGER NOT NULL,
      http_status INTEGER,
      reason TEXT NOT NULL,
      error TEXT NOT NULL,
      started_at_ms INTEGER NOT NULL,
      failed_at_ms INTEGER NOT NULL,
      PRIMARY KEY (call_id, seq)
    )`
  yield* sql`CREATE INDEX llm_call_attempts_failed ON llm_call_attempts (failed_at_ms)`
})

/**
 * The users of a team's server (`Users.ts`): a token's SHA-256 each (never the token), the
 * models they may use (a JSON array; null: every model) and their limits in USD (null: none).
 * `conversation_owners` says whose each conversation is; no reference to `conversations`, as a
 * conversation is claimed before its first commit, and removing a user leaves their rows.
 */
const users = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE users (
      user_id TEXT PRIMARY KEY NOT NULL,
      name TEXT NOT NULL UNIQUE,
      token_hash TEXT NOT NULL UNIQUE,
      models_json TEXT,
      daily_usd REAL,
      monthly_usd REAL,
      created_at_ms INTEGER NOT NULL
    )`
  yield* sql`
    CREATE TABLE conversation_owners (
      conversation_id TEXT PRIMARY KEY NOT NULL,
      user_id TEXT NOT NULL,
      claimed_at_ms INTEGER NOT NULL
    )`
  yield* sql`CREATE INDEX conversation_owners_user ON conversation_owners (user_id)`
})

/** Keyed `<id>_<name>` as the migrator expects; applied in id order, each once. */
export const migrations = {
  "0001_init": init,
  "0002_turn_starts": turnStarts,
  "0003_call_costs": callCosts,
  "0004_segments": segments,
  "0005_call_timings": callTimings,
  "0006_conversation_names": conversationNames,
  "0007_call_attempts": callAttempts,
  "0008_users": users
}
