/**
 * The Store's operations on an Effect `SqlClient`.
 *
 * The statements here keep to SQL that SQLite (≥ 3.35) and PostgreSQL both accept
 * (`RETURNING`, `ON CONFLICT ... DO NOTHING`, `COALESCE`); everything dialect-specific (the
 * schema, triggers, PRAGMAs, the connection) lives in `Sqlite.ts`.
 *
 * A commit costs O(new bytes): it touches the conversation row once to win the version,
 * appends the new messages, and proves they extend the stored history by extending the stored
 * hash chain, never by reading or re-hashing old messages. Loading is O(history) anyway, so
 * the load path verifies every row against its hash and the chain against `messages_hash`.
 *
 * The statements are grouped by what they keep: `Conversations.ts` (commits, loading, applied
 * inputs and turn starts), `LlmCalls.ts` (model calls and their request parts, stream
 * diagnostics), `Operations.ts` (client operations) and `Names.ts` (chat names), each a
 * function of an explicit `StoreEnv` (`Env.ts`); the rows and their decoding are in `Rows.ts`.
 * This module builds that environment and assembles the service. Each operation's statements
 * are written once, as a program (`Program.ts`) that `env.run` runs: on the server's SQLite
 * connection as one synchronous call on its prepared statements (`Connection.ts`, `Direct.run`),
 * on any other client statement by statement, in the client's transactions (`Tx.ts`). The
 * reads that need the client's fragments (`sql.in`, optional clauses) and the console's stay
 * on the client's template.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Either, Option, Predicate } from "effect"
import { answerOf, attemptsOf, attemptsSince, callInsight, callLog, recordAttempt } from "./Attempts.js"
import { Direct } from "./Connection.js"
import { commitInput, findHistory, findInputCommit, findSubagentRun, findTurnStarts, load, segments } from "./Conversations.js"
import { makePartHashes, storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"
import { callsOf, callsSince, conversations } from "./Insights.js"
import { appendDiagnostic, costs, loadLlmCall, markLlmCall, recordCallTiming, saveLlmCall } from "./LlmCalls.js"
import type { InFlight, LlmCallRecord, OperationRecord, StoreError, StoreService } from "./Model.js"
import { conversationName, nameConversation } from "./Names.js"
import { cancelOperation, completeOperation, loadOperation, markOperationSent, saveOperations } from "./Operations.js"
import { drive, q } from "./Program.js"
import type { Program } from "./Program.js"
import { toCallRecord, toOperationRecord } from "./Rows.js"
import type { LlmCallRow, OperationRow } from "./Rows.js"
import * as Tx from "./Tx.js"

export { prefixUpperBound } from "./Rows.js"

const isSqlError = (error: unknown): error is SqlError => Predicate.isTagged(error, "SqlError")

/** A statement's failure as the `StoreError` of `operation`; the program's own failures as they are. */
const asStoreError = <A, E>(operation: string, effect: Effect.Effect<A, E | SqlError>): Effect.Effect<A, Exclude<E, SqlError> | StoreError> =>
  Effect.catchIf(effect, isSqlError, (error) => Effect.fail(storeError(operation)(error)))

/** The Store on any `SqlClient` whose database holds the tables of `migrations.ts`. */
export const make: Effect.Effect<StoreService, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // On SQLite's own connection (`Connection.ts`) each operation is one synchronous call; on any other client, statement by statement.
  const direct = yield* Effect.serviceOption(Direct)
  const run: StoreEnv["run"] = Option.isSome(direct)
    ? (operation, program, transaction) => asStoreError(operation, direct.value.run(program, transaction))
    : (operation, program, transaction) =>
      asStoreError(operation, transaction ? Tx.transaction(sql, (query) => drive(program, query)) : drive(program, sql))
  const env: StoreEnv = {
    sql,
    run,
    partHashes: makePartHashes(),
    storedParts: new Set<string>()
  }
  return {
    load: load(env),
    findInputCommit: findInputCommit(env),
    findTurnStarts: findTurnStarts(env),
    commitInput: commitInput(env),
    saveLlmCall: saveLlmCall(env),
    markLlmCall: markLlmCall(env),
    recordCallTiming: recordCallTiming(env),
    loadLlmCall: loadLlmCall(env),
    saveOperations: saveOperations(env),
    markOperationSent: markOperationSent(env),
    completeOperation: completeOperation(env),
    cancelOperation: cancelOperation(env),
    loadOperation: loadOperation(env),
    listInFlight: listInFlight(env),
    costs: costs(env),
    segments: segments(env),
    callsOf: callsOf(env),
    conversations: conversations(env),
    callsSince: callsSince(env),
    findHistory: findHistory(env),
    findSubagentRun: findSubagentRun(env),
    recordAttempt: recordAttempt(env),
    attemptsOf: attemptsOf(env),
    attemptsSince: attemptsSince(env),
    callLog: callLog(env),
    callInsight: callInsight(env),
    answerOf: answerOf(env),
    appendDiagnostic: appendDiagnostic(env),
    nameConversation: nameConversation(env),
    conversationName: conversationName(env)
  } satisfies StoreService
})

const inFlightStatements = function*(): Program<{ calls: ReadonlyArray<LlmCallRow>; operations: ReadonlyArray<OperationRow> }> {
  const calls = yield* q<LlmCallRow>`
    SELECT call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash, message_count,
      messages_hash, request_hash, status, assistant_hash, usage_json, error
    FROM llm_calls WHERE status IN ('planned', 'streaming') ORDER BY created_at_ms, call_id`
  const operations = yield* q<OperationRow>`
    SELECT operation_id, conversation_id, turn_id, tool_call_id, tool_index, kind, idempotent, request_json,
      result_json, status
    FROM client_operations WHERE status IN ('planned', 'sent') ORDER BY created_at_ms, operation_id`
  return { calls, operations }
}

const listInFlight = (env: StoreEnv) => Effect.fn("Store.listInFlight")(function*() {
  const { calls, operations } = yield* env.run("listInFlight", inFlightStatements, true)
  const llmCalls: Array<LlmCallRecord> = []
  for (const row of calls) {
    const record = toCallRecord(row)
    if (Either.isLeft(record)) return yield* record.left
    llmCalls.push(record.right)
  }
  const pendingOperations: Array<OperationRecord> = []
  for (const row of operations) {
    const record = toOperationRecord(row)
    if (Either.isLeft(record)) return yield* record.left
    pendingOperations.push(record.right)
  }
  return { llmCalls, operations: pendingOperations } satisfies InFlight
})
