/**
 * The client operations: each tool call the client runs, planned in the commit that decides
 * it, marked sent before it is sent, and settled (completed with its result, or canceled)
 * exactly once.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect, Either, Option } from "effect"
import { storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"
import type { Query } from "./Tx.js"
import { NotFound } from "./Model.js"
import type { OperationRecord, PlannedOperation } from "./Model.js"
import { resultJson, toOperationRecord } from "./Rows.js"
import type { OperationRow } from "./Rows.js"

export const insertOperations = (q: Query, operations: ReadonlyArray<PlannedOperation>, now: number) =>
  Effect.forEach(operations, (operation) =>
    q`
      INSERT INTO client_operations (operation_id, conversation_id, turn_id, tool_call_id, tool_index, kind,
        idempotent, request_json, result_json, status, created_at_ms, updated_at_ms)
      VALUES (${operation.operationId}, ${operation.conversationId}, ${operation.turnId}, ${operation.toolCallId},
        ${operation.toolIndex}, ${operation.kind}, ${operation.idempotent ? 1 : 0}, ${resultJson(operation.request)},
        NULL, 'planned', ${now}, ${now})
      ON CONFLICT (operation_id) DO NOTHING`, { discard: true })

/** planned/sent -> `status`; rows in any other status are left alone. Returns whether the operation exists. */
export const settleOperation = (
  q: Query,
  operationId: string,
  status: "completed" | "canceled",
  result: string | null,
  now: number
) =>
  Effect.gen(function*() {
    const changed = yield* q<{ operation_id: string }>`
      UPDATE client_operations SET status = ${status}, result_json = COALESCE(${result}, result_json),
        updated_at_ms = ${now}
      WHERE operation_id = ${operationId} AND status IN ('planned', 'sent')
      RETURNING operation_id`
    if (changed.length > 0) return true
    const exists = yield* q<{ operation_id: string }>`
      SELECT operation_id FROM client_operations WHERE operation_id = ${operationId}`
    return exists.length > 0
  })

export const readOperation = (q: Query, operationId: string) =>
  Effect.gen(function*() {
    const rows = yield* q<OperationRow>`
      SELECT operation_id, conversation_id, turn_id, tool_call_id, tool_index, kind, idempotent, request_json,
        result_json, status
      FROM client_operations WHERE operation_id = ${operationId}`
    const row = rows[0]
    if (row === undefined) return Option.none<OperationRecord>()
    const record = toOperationRecord(row)
    if (Either.isLeft(record)) return yield* record.left
    return Option.some(record.right)
  })

/** Runs a status change and returns the record as it is afterwards. */
export const changeOperation = (
  { transaction }: StoreEnv,
  name: string,
  operationId: string,
  change: (q: Query, now: number) => Effect.Effect<unknown, SqlError>
) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const record = yield* transaction((q) =>
      Effect.gen(function*() {
        yield* change(q, now)
        return yield* readOperation(q, operationId)
      })).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError(name)(e)))
    )
    if (Option.isNone(record)) return yield* new NotFound({ entity: "operation", id: operationId })
    return record.value
  })

export const saveOperations = (env: StoreEnv) => Effect.fn("Store.saveOperations")(function*(operations: ReadonlyArray<PlannedOperation>) {
  const now = yield* Clock.currentTimeMillis
  yield* env.transaction((q) => insertOperations(q, operations, now)).pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("saveOperations")(e)))
  )
})

export const markOperationSent = (env: StoreEnv) => Effect.fn("Store.markOperationSent")(function*(operationId: string) {
  return yield* changeOperation(env, "markOperationSent", operationId, (q, now) =>
    q`
      UPDATE client_operations SET status = 'sent', updated_at_ms = ${now}
      WHERE operation_id = ${operationId} AND status = 'planned'`)
})

export const completeOperation = (env: StoreEnv) => Effect.fn("Store.completeOperation")(function*(operationId: string, result: unknown) {
  return yield* changeOperation(
    env,
    "completeOperation",
    operationId,
    (q, now) => settleOperation(q, operationId, "completed", resultJson(result), now)
  )
})

export const cancelOperation = (env: StoreEnv) => Effect.fn("Store.cancelOperation")(function*(operationId: string) {
  return yield* changeOperation(env, "cancelOperation", operationId, (q, now) => settleOperation(q, operationId, "canceled", null, now))
})

export const loadOperation = (env: StoreEnv) => Effect.fn("Store.loadOperation")(function*(operationId: string) {
  return yield* readOperation(env.query, operationId).pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("loadOperation")(e)))
  )
})
