/**
 * What the Store's statements share: the SQL connection, the remembered hashes of request
 * parts, and which parts are known to be stored; and how a SQL failure becomes a `StoreError`.
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Effect } from "effect"
import { systemPromptHash, toolsHash } from "../Llm.js"
import type { ErrorOf, Step } from "./Program.js"
import type { ToolDefinition } from "../Llm.js"
import { StoreError } from "./Model.js"

/**
 * System prompts and tool lists repeat across the calls of a conversation (and across
 * conversations), so their content hashes are remembered instead of recomputed each commit.
 */
export const makePartHashes = () => {
  const prompts = new Map<string, string>()
  // Keyed by identity: a tool list is an immutable value, rebuilt (not edited) when it changes.
  const tools = new WeakMap<ReadonlyArray<ToolDefinition>, string>()
  return {
    prompt: (systemPrompt: string): string => {
      let hash = prompts.get(systemPrompt)
      if (hash === undefined) {
        hash = systemPromptHash(systemPrompt)
        if (prompts.size >= 256) prompts.clear()
        prompts.set(systemPrompt, hash)
      }
      return hash
    },
    tools: (list: ReadonlyArray<ToolDefinition>): string => {
      let hash = tools.get(list)
      if (hash === undefined) {
        hash = toolsHash(list)
        tools.set(list, hash)
      }
      return hash
    }
  }
}

export const storeError = (operation: string) => (error: SqlError) =>
  new StoreError({
    operation,
    message: `${error.message}${error.cause instanceof Error ? `: ${error.cause.message}` : ""}`,
    cause: error
  })

/** The explicit environment of the Store's statements, built once by `SqlStore.make`. */
export interface StoreEnv {
  /** The client, for the statements that need its template's fragments (`sql.in`, nested parts) and the console's reads. */
  readonly sql: SqlClient.SqlClient
  /**
   * A fresh `program()` (`Program.ts`), its `SqlError` as the `StoreError` of `operation`; in a
   * transaction (BEGIN, COMMIT on success, ROLLBACK on any failure) when `transaction` is set.
   * On the server's connection, in one synchronous call (`Connection.ts`, `Direct.run`); on any
   * other `SqlClient`, statement by statement (`Program.drive`).
   */
  readonly run: <Y extends Step, A>(
    operation: string,
    program: () => Generator<Y, A, any>,
    transaction: boolean
  ) => Effect.Effect<A, ErrorOf<Y> | StoreError>
  readonly partHashes: ReturnType<typeof makePartHashes>
  /**
   * Part hashes known to be stored. Parts are immutable and never deleted, so a hash seen in a
   * committed transaction stays stored; it is added only after its transaction commits.
   */
  readonly storedParts: Set<string>
}
