/**
 * The client operations: each tool call the client runs, planned in the commit that decides
 * it, marked sent before it is sent, and settled (completed with its result, or canceled)
 * exactly once.
 */
import { Clock, Effect, Either, Option } from "effect"
import type { StoreEnv } from "./Env.js"
import { NotFound } from "./Model.js"
import type { CorruptRow, OperationRecord, PlannedOperation, StoreError } from "./Model.js"
import { fail, q } from "./Program.js"
import type { Program } from "./Program.js"
import { resultJson, toOperationRecord } from "./Rows.js"
import type { OperationRow } from "./Rows.js"

export const insertOperations = function*(operations: ReadonlyArray<PlannedOperation>, now: number): Program<void> {
  for (const operation of operations) {
    yield* q`
      INSERT INTO client_operations (operation_id, conversation_id, turn_id, tool_call_id, tool_index, kind,
        idempotent, request_json, result_json, status, created_at_ms, updated_at_ms)
      VALUES (${operation.operationId}, ${operation.conversationId}, ${operation.turnId}, ${operation.toolCallId},
        ${operation.toolIndex}, ${operation.kind}, ${operation.idempotent ? 1 : 0}, ${resultJson(operation.request)},
        NULL, 'planned', ${now}, ${now})
      ON CONFLICT (operation_id) DO NOTHING`
  }
}

/** planned/sent -> `status`; rows in any other status are left alone. Returns whether the operation exists. */
export const settleOperation = function*(
  operationId: string,
  status: "completed" | "canceled",
  result: string | null,
  now: number
): Program<boolean> {
  const changed = yield* q<{ operation_id: string }>`
    UPDATE client_operations SET status = ${status}, result_json = COALESCE(${result}, result_json),
      updated_at_ms = ${now}
    WHERE operation_id = ${operationId} AND status IN ('planned', 'sent')
    RETURNING operation_id`
  if (changed.length > 0) return true
  const exists = yield* q<{ operation_id: string }>`
    SELECT operation_id FROM client_operations WHERE operation_id = ${operationId}`
  return exists.length > 0
}

export const readOperation = function*(operationId: string): Program<Option.Option<OperationRecord>, CorruptRow> {
  const rows = yield* q<OperationRow>`
    SELECT operation_id, conversation_id, turn_id, tool_call_id, tool_index, kind, idempotent, request_json,
      result_json, status
    FROM client_operations WHERE operation_id = ${operationId}`
  const row = rows[0]
  if (row === undefined) return Option.none()
  const record = toOperationRecord(row)
  if (Either.isLeft(record)) return yield* fail(record.left)
  return Option.some(record.right)
}

/** Runs a status change and returns the record as it is afterwards. */
export const changeOperation = (
  env: StoreEnv,
  name: string,
  operationId: string,
  change: (now: number) => Program<unknown>
): Effect.Effect<OperationRecord, CorruptRow | NotFound | StoreError> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.flatMap(
      env.run(name, function*() {
        yield* change(now)
        return yield* readOperation(operationId)
      }, true),
      (record) => Option.isNone(record) ? Effect.fail(new NotFound({ entity: "operation", id: operationId })) : Effect.succeed(record.value)
    ))

export const saveOperations = (env: StoreEnv) => Effect.fn("Store.saveOperations")(function*(operations: ReadonlyArray<PlannedOperation>) {
  const now = yield* Clock.currentTimeMillis
  yield* env.run("saveOperations", () => insertOperations(operations, now), true)
})

const markSentStatements = function*(operationId: string, now: number): Program<void> {
  yield* q`
    UPDATE client_operations SET status = 'sent', updated_at_ms = ${now}
    WHERE operation_id = ${operationId} AND status = 'planned'`
}

export const markOperationSent = (env: StoreEnv) => (operationId: string) =>
  changeOperation(env, "markOperationSent", operationId, (now) => markSentStatements(operationId, now))

export const completeOperation = (env: StoreEnv) => (operationId: string, result: unknown) =>
  changeOperation(env, "completeOperation", operationId, (now) => settleOperation(operationId, "completed", resultJson(result), now))

export const cancelOperation = (env: StoreEnv) => (operationId: string) =>
  changeOperation(env, "cancelOperation", operationId, (now) => settleOperation(operationId, "canceled", null, now))

export const loadOperation = (env: StoreEnv) => (operationId: string) =>
  env.run("loadOperation", () => readOperation(operationId), false)
