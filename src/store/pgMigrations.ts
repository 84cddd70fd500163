/**
 * The PostgreSQL schema, as migrations for the Effect SQL migrator (`PgMigrator.fromRecord`).
 * A migration, once released, is never edited: a change is a new entry, here and in
 * `migrations.ts` (SQLite's), which keep the same tables, columns and meanings.
 *
 * `0001_schema` is SQLite's 0001-0007 at once, in PostgreSQL's types: times in milliseconds and
 * counters as BIGINT (read back as numbers, `Postgres.ts`), costs as DOUBLE PRECISION, and every
 * text column in the "C" collation, so that text sorts and compares by bytes as in SQLite
 * (the input-id prefix scans and the orderings by id depend on it). The append-only history is
 * enforced by a trigger, as SQLite's.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

const schema = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE conversations (
      conversation_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      version BIGINT NOT NULL,
      status TEXT COLLATE "C" NOT NULL,
      turn_id TEXT COLLATE "C" NOT NULL,
      message_count BIGINT NOT NULL,
      messages_hash TEXT COLLATE "C" NOT NULL,
      waiting_json TEXT,
      state_json TEXT NOT NULL,
      updated_at_ms BIGINT NOT NULL,
      segment_start BIGINT NOT NULL DEFAULT 0
    )`
  yield* sql`
    CREATE TABLE messages (
      conversation_id TEXT COLLATE "C" NOT NULL REFERENCES conversations (conversation_id),
      seq BIGINT NOT NULL,
      message_json TEXT NOT NULL,
      hash TEXT COLLATE "C" NOT NULL,
      client_key TEXT COLLATE "C",
      PRIMARY KEY (conversation_id, seq)
    )`
  yield* sql`CREATE INDEX messages_client_key ON messages (client_key) WHERE client_key IS NOT NULL`
  yield* sql.unsafe(`
    CREATE FUNCTION messages_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'messages are append-only'; END $$`)
  yield* sql`
    CREATE TRIGGER messages_no_change BEFORE UPDATE OR DELETE ON messages
    FOR EACH ROW EXECUTE FUNCTION messages_append_only()`
  yield* sql`
    CREATE TABLE input_commits (
      conversation_id TEXT COLLATE "C" NOT NULL REFERENCES conversations (conversation_id),
      input_id TEXT COLLATE "C" NOT NULL,
      committed_version BIGINT NOT NULL,
      result_json TEXT NOT NULL,
      committed_at_ms BIGINT NOT NULL,
      PRIMARY KEY (conversation_id, input_id)
    )`
  yield* sql`
    CREATE TABLE request_parts (
      hash TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      body TEXT NOT NULL
    )`
  yield* sql`
    CREATE TABLE llm_calls (
      call_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      conversation_id TEXT COLLATE "C" NOT NULL REFERENCES conversations (conversation_id),
      turn_id TEXT COLLATE "C" NOT NULL,
      model TEXT COLLATE "C" NOT NULL,
      system_prompt_hash TEXT COLLATE "C" NOT NULL REFERENCES request_parts (hash),
      tools_hash TEXT COLLATE "C" NOT NULL REFERENCES request_parts (hash),
      message_count BIGINT NOT NULL,
      messages_hash TEXT COLLATE "C" NOT NULL,
      request_hash TEXT COLLATE "C" NOT NULL,
      status TEXT COLLATE "C" NOT NULL,
      assistant_hash TEXT COLLATE "C",
      usage_json TEXT,
      error TEXT,
      created_at_ms BIGINT NOT NULL,
      updated_at_ms BIGINT NOT NULL,
      cost_usd DOUBLE PRECISION,
      segment_start BIGINT NOT NULL DEFAULT 0,
      messages_part_hash TEXT COLLATE "C" REFERENCES request_parts (hash),
      first_delta_ms BIGINT,
      target TEXT COLLATE "C",
      attempts BIGINT
    )`
  yield* sql`CREATE INDEX llm_calls_in_flight ON llm_calls (status) WHERE status IN ('planned', 'streaming')`
  yield* sql`CREATE INDEX llm_calls_conversation ON llm_calls (conversation_id)`
  yield* sql`CREATE INDEX llm_calls_created ON llm_calls (created_at_ms)`
  yield* sql`
    CREATE TABLE client_operations (
      operation_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      conversation_id TEXT COLLATE "C" NOT NULL REFERENCES conversations (conversation_id),
      turn_id TEXT COLLATE "C" NOT NULL,
      tool_call_id TEXT COLLATE "C" NOT NULL,
      tool_index BIGINT NOT NULL,
      kind TEXT COLLATE "C" NOT NULL,
      idempotent BIGINT NOT NULL,
      request_json TEXT NOT NULL,
      result_json TEXT,
      status TEXT COLLATE "C" NOT NULL,
      created_at_ms BIGINT NOT NULL,
      updated_at_ms BIGINT NOT NULL
    )`
  yield* sql`CREATE INDEX client_operations_in_flight ON client_operations (status) WHERE status IN ('planned', 'sent')`
  yield* sql`CREATE INDEX client_operations_conversation ON client_operations (conversation_id)`
  yield* sql`
    CREATE TABLE stream_diagnostics (
      call_id TEXT COLLATE "C" NOT NULL,
      event_index BIGINT NOT NULL,
      event_json TEXT NOT NULL,
      PRIMARY KEY (call_id, event_index)
    )`
  yield* sql`
    CREATE TABLE turn_starts (
      conversation_id TEXT COLLATE "C" NOT NULL REFERENCES conversations (conversation_id),
      turn_id TEXT COLLATE "C" NOT NULL,
      input_id TEXT COLLATE "C" NOT NULL,
      started_version BIGINT NOT NULL,
      started_at_ms BIGINT NOT NULL,
      PRIMARY KEY (conversation_id, turn_id)
    )`
  yield* sql`CREATE INDEX turn_starts_input ON turn_starts (input_id)`
  yield* sql`
    CREATE TABLE segments (
      conversation_id TEXT COLLATE "C" NOT NULL REFERENCES conversations (conversation_id),
      start BIGINT NOT NULL,
      kind TEXT COLLATE "C" NOT NULL,
      turn_id TEXT COLLATE "C" NOT NULL,
      summary_call_id TEXT COLLATE "C",
      source TEXT,
      previous_start BIGINT NOT NULL,
      replaced BIGINT NOT NULL,
      kept BIGINT NOT NULL,
      created_at_ms BIGINT NOT NULL,
      PRIMARY KEY (conversation_id, start)
    )`
  yield* sql`
    CREATE TABLE conversation_names (
      conversation_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      name TEXT NOT NULL,
      updated_at_ms BIGINT NOT NULL
    )`
  yield* sql`
    CREATE TABLE llm_call_attempts (
      call_id TEXT COLLATE "C" NOT NULL REFERENCES llm_calls (call_id),
      seq BIGINT NOT NULL,
      provider TEXT COLLATE "C" NOT NULL,
      upstream_model TEXT COLLATE "C" NOT NULL,
      attempt BIGINT NOT NULL,
      http_status BIGINT,
      reason TEXT COLLATE "C" NOT NULL,
      error TEXT NOT NULL,
      started_at_ms BIGINT NOT NULL,
      failed_at_ms BIGINT NOT NULL,
      PRIMARY KEY (call_id, seq)
    )`
  yield* sql`CREATE INDEX llm_call_attempts_failed ON llm_call_attempts (failed_at_ms)`
})

/** SQLite's 0008: the users of a team's server and whose each conversation is (see `migrations.ts`). */
const users = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE users (
      user_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      name TEXT COLLATE "C" NOT NULL UNIQUE,
      token_hash TEXT COLLATE "C" NOT NULL UNIQUE,
      models_json TEXT,
      daily_usd DOUBLE PRECISION,
      monthly_usd DOUBLE PRECISION,
      created_at_ms BIGINT NOT NULL
    )`
  yield* sql`
    CREATE TABLE conversation_owners (
      conversation_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      user_id TEXT COLLATE "C" NOT NULL,
      claimed_at_ms BIGINT NOT NULL
    )`
  yield* sql`CREATE INDEX conversation_owners_user ON conversation_owners (user_id)`
})

/**
 * Several instances on one database (`cluster/Registry.ts`): the instances, each with the key of
 * the advisory lock it holds while it runs, and which instance holds each request's session.
 */
const instances = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE instances (
      instance_key SERIAL PRIMARY KEY,
      instance_id TEXT COLLATE "C" NOT NULL UNIQUE,
      address TEXT NOT NULL,
      started_at_ms BIGINT NOT NULL,
      heartbeat_at_ms BIGINT NOT NULL
    )`
  yield* sql`
    CREATE TABLE request_holders (
      request_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      instance_key INTEGER NOT NULL,
      claimed_at_ms BIGINT NOT NULL
    )`
  yield* sql`CREATE INDEX request_holders_claimed ON request_holders (claimed_at_ms)`
})

/** Which instance each conversation's requests are served by while it lives (`cluster/Registry.ts`). */
const homes = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE conversation_homes (
      conversation_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
      instance_key INTEGER NOT NULL,
      claimed_at_ms BIGINT NOT NULL
    )`
})

/** Keyed `<id>_<name>` as the migrator expects; applied in id order, each once. */
export const pgMigrations = {
  "0001_schema": schema,
  "0002_users": users,
  "0003_instances": instances,
  "0004_homes": homes
}
