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
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect, Either, Option, ParseResult, Schema } from "effect"
import { createHash } from "node:crypto"
import {
  canonicalJson,
  emptyMessagesHash,
  extendMessagesHash,
  Message,
  messagesHash,
  requestHash,
  serializeMessage,
  systemPromptHash,
  ToolDefinition,
  toolsHash,
  Usage
} from "../Llm.js"
import type { RequestMessages } from "../Llm.js"
import { ConversationState, ConversationStatus, WaitingClient } from "../Loop.js"
import { StoredTurnSettings } from "./LegacyRows.js"
import {
  CorruptRow,
  DuplicateInput,
  HistoryRewritten,
  InvalidCommit,
  LlmCallStatus,
  NotFound,
  OperationStatus,
  RequestHashMismatch,
  StoreError,
  TURN_STARTS_LIMIT,
  VersionConflict
} from "./Model.js"
import type {

  CommitInput,
  InFlight,
  InputCommit,
  LlmCallDetails,
  LlmCallRecord,
  LlmCallUpdate,
  LoadedConversation,
  LoadedLlmCall,
  OperationRecord,
  PlannedLlmCall,
  PlannedOperation,
  StoreService,
  TurnStart
} from "./Model.js"

/**
 * A stored message row's hash: `Llm.messageHash` of the message, computed here with node's
 * native SHA-256 (the same digest as the pure implementation, ~15x faster on large rows such as
 * messages with images; the store is not bound to the pure modules' imports).
 */
const rowHash = (json: string): string => createHash("sha256").update(json, "utf8").digest("hex")

// =============================================================================
// Row shapes and decoding
// =============================================================================

interface ConversationRow {
  readonly version: number
  readonly status: string
  readonly turn_id: string
  readonly message_count: number
  readonly messages_hash: string
  readonly waiting_json: string | null
  readonly state_json: string
}

interface MessageRow {
  readonly seq: number
  readonly message_json: string
  readonly hash: string
}

interface LlmCallRow {
  readonly call_id: string
  readonly conversation_id: string
  readonly turn_id: string
  readonly model: string
  readonly system_prompt_hash: string
  readonly tools_hash: string
  readonly message_count: number
  readonly messages_hash: string
  readonly request_hash: string
  readonly status: string
  readonly assistant_hash: string | null
  readonly usage_json: string | null
  readonly error: string | null
}

interface OperationRow {
  readonly operation_id: string
  readonly conversation_id: string
  readonly turn_id: string
  readonly tool_call_id: string
  readonly tool_index: number
  readonly kind: string
  readonly idempotent: number | boolean
  readonly request_json: string
  readonly result_json: string | null
  readonly status: string
}

/**
 * The ConversationState fields that are neither history nor a column of their own: small,
 * rewritten at each commit as one JSON value. Derived from the schema, so a field the loop
 * adds is stored without a change here (rows written before it existed then fail to decode
 * until the field gets a default). Settings also decode from the shape earlier releases wrote.
 */
const StateFields = Schema.Struct({
  ...ConversationState.omit("conversationId", "status", "turnId", "messages", "messagesHash", "waiting").fields,
  settings: Schema.NullOr(StoredTurnSettings)
})

const decodeMessage = Schema.decodeUnknownEither(Message)
const decodeStatus = Schema.decodeUnknownEither(ConversationStatus)
const decodeWaiting = Schema.decodeUnknownEither(WaitingClient)
const decodeStateFields = Schema.decodeUnknownEither(StateFields)
const decodeTools = Schema.decodeUnknownEither(Schema.Array(ToolDefinition))
const decodeUsage = Schema.decodeUnknownEither(Usage)
const decodeCallStatus = Schema.decodeUnknownEither(LlmCallStatus)
const decodeOperationStatus = Schema.decodeUnknownEither(OperationStatus)

const parseJson = (text: string): Either.Either<unknown, string> => {
  try {
    return Either.right(JSON.parse(text))
  } catch (error) {
    return Either.left(`invalid JSON: ${error instanceof Error ? error.message : String(error)}`)
  }
}

interface TurnStartRow {
  readonly conversation_id: string
  readonly turn_id: string
  readonly input_id: string
  readonly started_version: number
  readonly started_at_ms: number
}

/**
 * The least string above every string that starts with `prefix`, in code point order (which is
 * UTF-8 byte order, SQLite's BINARY collation): the prefix with its last code point raised by
 * one. Undefined when no code point can be raised (a prefix of U+10FFFF only).
 */
export const prefixUpperBound = (prefix: string): string | undefined => {
  const points = Array.from(prefix)
  while (points.length > 0) {
    let next = points.pop()!.codePointAt(0)! + 1
    if (next >= 0xd800 && next <= 0xdfff) next = 0xe000
    if (next <= 0x10ffff) return points.join("") + String.fromCodePoint(next)
  }
  return undefined
}

const formatIssue = (error: ParseResult.ParseError): string => ParseResult.TreeFormatter.formatErrorSync(error)

/** JSON text, then a schema: the first failure as a readable reason. */
const decodeJson = <A>(text: string, decode: (u: unknown) => Either.Either<A, ParseResult.ParseError>) =>
  Either.flatMap(parseJson(text), (value) => Either.mapLeft(decode(value), formatIssue))

/** A `result: unknown` as stored: canonical JSON, so equal results are equal bytes. */
const resultJson = (result: unknown): string => canonicalJson(result)

interface DecodedHistory {
  readonly messages: ReadonlyArray<Message>
  readonly chain: string
}

/**
 * Decodes history rows and checks each one: contiguous seq, valid JSON, a valid `Message`
 * that re-serializes to the stored bytes, and bytes that hash to the stored `hash`. Returns
 * the hash chain over them, equal to `Llm.messagesHash(messages)` once every row checks.
 */
const decodeHistory = (
  conversationId: string,
  rows: ReadonlyArray<MessageRow>,
  expectedCount: number
): Either.Either<DecodedHistory, CorruptRow> => {
  const corrupt = (seq: number | null, reason: string) =>
    Either.left(new CorruptRow({ conversationId, table: "messages", seq, key: null, reason }))
  const messages: Array<Message> = []
  let chain = emptyMessagesHash
  for (let index = 0; index < rows.length; index++) {
    const row = rows[index]!
    if (row.seq !== index) return corrupt(index, `expected seq ${index}, found seq ${row.seq}`)
    if (typeof row.message_json !== "string") return corrupt(index, "message_json is not text")
    const decoded = decodeJson(row.message_json, decodeMessage)
    if (Either.isLeft(decoded)) return corrupt(index, decoded.left)
    if (serializeMessage(decoded.right) !== row.message_json) {
      return corrupt(index, "the decoded message does not serialize to the stored bytes")
    }
    if (rowHash(row.message_json) !== row.hash) return corrupt(index, "the stored bytes do not match the stored hash")
    messages.push(decoded.right)
    chain = extendMessagesHash(chain, row.hash)
  }
  if (rows.length !== expectedCount) return corrupt(rows.length, `expected ${expectedCount} messages, found ${rows.length}`)
  return Either.right({ messages, chain })
}

const toCallRecord = (row: LlmCallRow): Either.Either<LlmCallRecord, CorruptRow> => {
  const corrupt = (reason: string) =>
    new CorruptRow({ conversationId: row.conversation_id, table: "llm_calls", seq: null, key: row.call_id, reason })
  const status = decodeCallStatus(row.status)
  if (Either.isLeft(status)) return Either.left(corrupt(`unknown status ${row.status}`))
  let usage: Usage | null = null
  if (row.usage_json !== null) {
    const decoded = decodeJson(row.usage_json, decodeUsage)
    if (Either.isLeft(decoded)) return Either.left(corrupt(`usage: ${decoded.left}`))
    usage = decoded.right
  }
  return Either.right({
    callId: row.call_id,
    conversationId: row.conversation_id,
    turnId: row.turn_id,
    model: row.model,
    status: status.right,
    messageCount: row.message_count,
    messagesHash: row.messages_hash,
    requestHash: row.request_hash,
    assistantHash: row.assistant_hash,
    usage,
    error: row.error
  })
}

const toOperationRecord = (row: OperationRow): Either.Either<OperationRecord, CorruptRow> => {
  const corrupt = (reason: string) =>
    new CorruptRow({
      conversationId: row.conversation_id,
      table: "client_operations",
      seq: null,
      key: row.operation_id,
      reason
    })
  const status = decodeOperationStatus(row.status)
  if (Either.isLeft(status)) return Either.left(corrupt(`unknown status ${row.status}`))
  const request = parseJson(row.request_json)
  if (Either.isLeft(request)) return Either.left(corrupt(`request: ${request.left}`))
  let result: unknown = null
  if (row.result_json !== null) {
    const parsed = parseJson(row.result_json)
    if (Either.isLeft(parsed)) return Either.left(corrupt(`result: ${parsed.left}`))
    result = parsed.right
  }
  return Either.right({
    operationId: row.operation_id,
    conversationId: row.conversation_id,
    turnId: row.turn_id,
    toolCallId: row.tool_call_id,
    toolIndex: row.tool_index,
    kind: row.kind,
    idempotent: row.idempotent === 1 || row.idempotent === true,
    status: status.right,
    request: request.right,
    result
  })
}

// =============================================================================
// Hashes of request parts
// =============================================================================

/**
 * System prompts and tool lists repeat across the calls of a conversation (and across
 * conversations), so their content hashes are remembered instead of recomputed each commit.
 */
const makePartHashes = () => {
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

// =============================================================================
// The service
// =============================================================================

const storeError = (operation: string) => (error: SqlError) =>
  new StoreError({
    operation,
    message: `${error.message}${error.cause instanceof Error ? `: ${error.cause.message}` : ""}`,
    cause: error
  })

/** The Store on any `SqlClient` whose database holds the tables of `migrations.ts`. */
export const make: Effect.Effect<StoreService, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const partHashes = makePartHashes()

  /** Checks a planned call against the state it is committed with, before any write. */
  const checkLlmCall = (conversationId: string, next: ConversationState, call: PlannedLlmCall) => {
    const invalid = (reason: string) => Effect.fail(new InvalidCommit({ conversationId, reason }))
    if (call.conversationId !== conversationId) return invalid(`model call ${call.callId} belongs to ${call.conversationId}`)
    const count = call.request.messages.length
    if (count > next.messages.length) {
      return invalid(`model call ${call.callId} sends ${count} messages; the state holds ${next.messages.length}`)
    }
    // The usual case (the call asks about the state being committed) costs nothing; an older prefix is re-hashed.
    const prefixHash = count === next.messages.length ? next.messagesHash : messagesHash(call.request.messages)
    if (prefixHash !== call.messagesHash) return invalid(`model call ${call.callId}: messagesHash does not match its messages`)
    const expected = requestHash(call.model, call.request, call.messagesHash, count)
    if (expected !== call.requestHash) return invalid(`model call ${call.callId}: requestHash does not match its request`)
    return Effect.void
  }

  const insertPart = (hash: string, body: string) =>
    sql`INSERT INTO request_parts (hash, body) VALUES (${hash}, ${body}) ON CONFLICT (hash) DO NOTHING`

  /**
   * Part hashes known to be stored. Parts are immutable and never deleted, so a hash seen in a
   * committed transaction stays stored; it is added only after its transaction commits.
   */
  const storedParts = new Set<string>()

  /** Inserts a planned call; the same call id planned again must name the same request. Returns the parts it wrote. */
  const insertLlmCall = (call: PlannedLlmCall, now: number) =>
    Effect.gen(function*() {
      const promptHash = partHashes.prompt(call.request.systemPrompt)
      const listHash = partHashes.tools(call.request.tools)
      if (!storedParts.has(promptHash)) yield* insertPart(promptHash, canonicalJson(call.request.systemPrompt))
      if (!storedParts.has(listHash)) yield* insertPart(listHash, canonicalJson(call.request.tools))
      const written = [promptHash, listHash]
      const inserted = yield* sql<{ call_id: string }>`
        INSERT INTO llm_calls (call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash,
          message_count, messages_hash, request_hash, status, created_at_ms, updated_at_ms)
        VALUES (${call.callId}, ${call.conversationId}, ${call.turnId}, ${call.model}, ${promptHash}, ${listHash},
          ${call.request.messages.length}, ${call.messagesHash}, ${call.requestHash}, 'planned', ${now}, ${now})
        ON CONFLICT (call_id) DO NOTHING
        RETURNING call_id`
      if (inserted.length > 0) return written
      const existing = yield* sql<{ request_hash: string }>`SELECT request_hash FROM llm_calls WHERE call_id = ${call.callId}`
      if (existing[0]?.request_hash !== call.requestHash) {
        return yield* new InvalidCommit({
          conversationId: call.conversationId,
          reason: `model call ${call.callId} was saved before with another request`
        })
      }
      return written
    })

  const rememberParts = (parts: ReadonlyArray<string>) =>
    Effect.sync(() => {
      if (storedParts.size >= 4096) storedParts.clear()
      for (const part of parts) storedParts.add(part)
    })

  const insertOperations = (operations: ReadonlyArray<PlannedOperation>, now: number) =>
    Effect.forEach(operations, (operation) =>
      sql`
        INSERT INTO client_operations (operation_id, conversation_id, turn_id, tool_call_id, tool_index, kind,
          idempotent, request_json, result_json, status, created_at_ms, updated_at_ms)
        VALUES (${operation.operationId}, ${operation.conversationId}, ${operation.turnId}, ${operation.toolCallId},
          ${operation.toolIndex}, ${operation.kind}, ${operation.idempotent ? 1 : 0}, ${resultJson(operation.request)},
          NULL, 'planned', ${now}, ${now})
        ON CONFLICT (operation_id) DO NOTHING`, { discard: true })

  const updateLlmCall = (update: LlmCallUpdate, now: number) =>
    sql<{ call_id: string }>`
      UPDATE llm_calls SET
        status = ${update.status},
        assistant_hash = COALESCE(${update.assistantHash ?? null}, assistant_hash),
        usage_json = COALESCE(${update.usage === undefined ? null : canonicalJson(update.usage)}, usage_json),
        error = COALESCE(${update.error ?? null}, error),
        updated_at_ms = ${now}
      WHERE call_id = ${update.callId}
      RETURNING call_id`

  /** planned/sent -> `status`; rows in any other status are left alone. Returns whether the operation exists. */
  const settleOperation = (operationId: string, status: "completed" | "canceled", result: string | null, now: number) =>
    Effect.gen(function*() {
      const changed = yield* sql<{ operation_id: string }>`
        UPDATE client_operations SET status = ${status}, result_json = COALESCE(${result}, result_json),
          updated_at_ms = ${now}
        WHERE operation_id = ${operationId} AND status IN ('planned', 'sent')
        RETURNING operation_id`
      if (changed.length > 0) return true
      const exists = yield* sql<{ operation_id: string }>`
        SELECT operation_id FROM client_operations WHERE operation_id = ${operationId}`
      return exists.length > 0
    })

  const recordedInput = (conversationId: string, inputId: string) =>
    Effect.gen(function*() {
      const rows = yield* sql<{ committed_version: number; result_json: string }>`
        SELECT committed_version, result_json FROM input_commits
        WHERE conversation_id = ${conversationId} AND input_id = ${inputId}`
      const row = rows[0]
      if (row === undefined) return Option.none<InputCommit>()
      const result = parseJson(row.result_json)
      if (Either.isLeft(result)) {
        return yield* new CorruptRow({ conversationId, table: "input_commits", seq: null, key: inputId, reason: result.left })
      }
      return Option.some<InputCommit>({ version: row.committed_version, result: result.right })
    })

  /** Why a compare-and-swap found no row: the input was applied already, or another writer moved on. */
  const lostRace = (conversationId: string, inputId: string, expectedVersion: number) =>
    Effect.gen(function*() {
      const recorded = yield* recordedInput(conversationId, inputId).pipe(
        Effect.catchTag("CorruptRow", () => Effect.succeed(Option.none<InputCommit>()))
      )
      if (Option.isSome(recorded)) {
        return yield* new DuplicateInput({ conversationId, inputId, ...recorded.value })
      }
      const rows = yield* sql<{ version: number }>`SELECT version FROM conversations WHERE conversation_id = ${conversationId}`
      return yield* new VersionConflict({ conversationId, expectedVersion, actualVersion: rows[0]?.version ?? null })
    })

  const commitInput = Effect.fn("Store.commitInput")(function*(input: CommitInput) {
    const { conversationId, expectedVersion, inputId, next } = input
    if (next.conversationId !== conversationId) {
      return yield* new InvalidCommit({ conversationId, reason: `the next state belongs to ${next.conversationId}` })
    }
    if (input.llmCall !== undefined) yield* checkLlmCall(conversationId, next, input.llmCall)
    for (const operation of input.clientOperations ?? []) {
      if (operation.conversationId !== conversationId) {
        return yield* new InvalidCommit({
          conversationId,
          reason: `operation ${operation.operationId} belongs to ${operation.conversationId}`
        })
      }
    }
    const now = yield* Clock.currentTimeMillis
    const newVersion = expectedVersion + 1

    /** The messages beyond the stored ones, proven to extend the stored chain to `next.messagesHash`. */
    const appended = (storedCount: number, storedHash: string) => {
      if (next.messages.length < storedCount) {
        return Either.left(new HistoryRewritten({
          conversationId,
          storedCount,
          nextCount: next.messages.length,
          reason: "the next state has fewer messages than are stored"
        }))
      }
      const rows: Array<MessageRow> = []
      let chain = storedHash
      for (let seq = storedCount; seq < next.messages.length; seq++) {
        const json = serializeMessage(next.messages[seq]!)
        const hash = rowHash(json)
        chain = extendMessagesHash(chain, hash)
        rows.push({ seq, message_json: json, hash })
      }
      if (chain !== next.messagesHash) {
        return Either.left(new HistoryRewritten({
          conversationId,
          storedCount,
          nextCount: next.messages.length,
          reason: "the stored history followed by the new messages does not hash to the next state's messagesHash"
        }))
      }
      return Either.right(rows)
    }

    // Everything but the columns: the history, its hash, status, turn id and waiting are stored on their own.
    const {
      conversationId: _conversationId,
      messages: _messages,
      messagesHash: _messagesHash,
      status: _status,
      turnId: _turnId,
      waiting: _waiting,
      ...fields
    } = next
    const stateJson = canonicalJson(fields satisfies typeof StateFields.Type)
    const waitingJson = next.waiting === null ? null : canonicalJson(next.waiting)

    const transaction = Effect.gen(function*() {
      let fresh: ReadonlyArray<MessageRow>
      let storedTurnId = ""
      if (expectedVersion === 0) {
        fresh = yield* appended(0, emptyMessagesHash)
        const created = yield* sql<{ version: number }>`
          INSERT INTO conversations (conversation_id, version, status, turn_id, message_count, messages_hash,
            waiting_json, state_json, updated_at_ms)
          VALUES (${conversationId}, 1, ${next.status}, ${next.turnId}, ${next.messages.length}, ${next.messagesHash},
            ${waitingJson}, ${stateJson}, ${now})
          ON CONFLICT (conversation_id) DO NOTHING
          RETURNING version`
        if (created.length === 0) return yield* lostRace(conversationId, inputId, expectedVersion)
      } else {
        // Touching the row first takes the write lock at once and wins (or loses) the version.
        const won = yield* sql<{ message_count: number; messages_hash: string; turn_id: string }>`
          UPDATE conversations SET version = version + 1
          WHERE conversation_id = ${conversationId} AND version = ${expectedVersion}
          RETURNING message_count, messages_hash, turn_id`
        const stored = won[0]
        if (stored === undefined) return yield* lostRace(conversationId, inputId, expectedVersion)
        storedTurnId = stored.turn_id
        fresh = yield* appended(stored.message_count, stored.messages_hash)
        yield* sql`
          UPDATE conversations SET status = ${next.status}, turn_id = ${next.turnId},
            message_count = ${next.messages.length}, messages_hash = ${next.messagesHash},
            waiting_json = ${waitingJson}, state_json = ${stateJson}, updated_at_ms = ${now}
          WHERE conversation_id = ${conversationId}`
      }
      for (const row of fresh) {
        yield* sql`
          INSERT INTO messages (conversation_id, seq, message_json, hash)
          VALUES (${conversationId}, ${row.seq}, ${row.message_json}, ${row.hash})`
      }
      const recorded = yield* sql<{ input_id: string }>`
        INSERT INTO input_commits (conversation_id, input_id, committed_version, result_json, committed_at_ms)
        VALUES (${conversationId}, ${inputId}, ${newVersion}, ${resultJson(input.result)}, ${now})
        ON CONFLICT (conversation_id, input_id) DO NOTHING
        RETURNING input_id`
      if (recorded.length === 0) {
        // Applied before under another version: fail so the transaction leaves nothing behind.
        const previous = yield* recordedInput(conversationId, inputId)
        if (Option.isSome(previous)) return yield* new DuplicateInput({ conversationId, inputId, ...previous.value })
      }
      if (next.turnId !== "" && next.turnId !== storedTurnId) {
        yield* sql`
          INSERT INTO turn_starts (conversation_id, turn_id, input_id, started_version, started_at_ms)
          VALUES (${conversationId}, ${next.turnId}, ${inputId}, ${newVersion}, ${now})
          ON CONFLICT (conversation_id, turn_id) DO NOTHING`
      }
      const parts = input.llmCall === undefined ? [] : yield* insertLlmCall(input.llmCall, now)
      if (input.clientOperations !== undefined) yield* insertOperations(input.clientOperations, now)
      if (input.llmCallUpdate !== undefined) {
        const updated = yield* updateLlmCall(input.llmCallUpdate, now)
        if (updated.length === 0) {
          return yield* new InvalidCommit({ conversationId, reason: `unknown model call ${input.llmCallUpdate.callId}` })
        }
      }
      if (input.operationCompletion !== undefined) {
        const { operationId, result } = input.operationCompletion
        const exists = yield* settleOperation(operationId, "completed", resultJson(result), now)
        if (!exists) return yield* new InvalidCommit({ conversationId, reason: `unknown operation ${operationId}` })
      }
      return { version: newVersion, parts }
    })

    const committed = yield* sql.withTransaction(transaction).pipe(
      Effect.catchTag("CorruptRow", (error) =>
        Effect.fail(new StoreError({ operation: "commitInput", message: error.message, cause: error }))),
      Effect.catchTag("SqlError", (error) => Effect.fail(storeError("commitInput")(error)))
    )
    yield* rememberParts(committed.parts)
    return committed.version
  })

  const load = Effect.fn("Store.load")(function*(conversationId: string) {
    const read = Effect.gen(function*() {
      const rows = yield* sql<ConversationRow>`
        SELECT version, status, turn_id, message_count, messages_hash, waiting_json, state_json
        FROM conversations WHERE conversation_id = ${conversationId}`
      const row = rows[0]
      if (row === undefined) return Option.none()
      const messageRows = yield* sql<MessageRow>`
        SELECT seq, message_json, hash FROM messages WHERE conversation_id = ${conversationId} ORDER BY seq`
      return Option.some({ row, messageRows })
    })
    const found = yield* sql.withTransaction(read).pipe(Effect.catchTag("SqlError", (e) => Effect.fail(storeError("load")(e))))
    if (Option.isNone(found)) return Option.none<LoadedConversation>()
    const { messageRows, row } = found.value
    const corrupt = (reason: string) =>
      new CorruptRow({ conversationId, table: "conversations", seq: null, key: null, reason })

    const history = decodeHistory(conversationId, messageRows, row.message_count)
    if (Either.isLeft(history)) return yield* history.left
    if (history.right.chain !== row.messages_hash) {
      return yield* new CorruptRow({
        conversationId,
        table: "messages",
        seq: null,
        key: null,
        reason: "the hash chain over the stored messages does not match messages_hash"
      })
    }
    const status = decodeStatus(row.status)
    if (Either.isLeft(status)) return yield* corrupt(`unknown status ${row.status}`)
    const fields = decodeJson(row.state_json, decodeStateFields)
    if (Either.isLeft(fields)) return yield* corrupt(`state_json: ${fields.left}`)
    let waiting: WaitingClient | null = null
    if (row.waiting_json !== null) {
      const decoded = decodeJson(row.waiting_json, decodeWaiting)
      if (Either.isLeft(decoded)) return yield* corrupt(`waiting_json: ${decoded.left}`)
      waiting = decoded.right
    }
    const state: ConversationState = {
      ...fields.right,
      conversationId,
      status: status.right,
      turnId: row.turn_id,
      messages: history.right.messages,
      messagesHash: row.messages_hash,
      waiting
    }
    return Option.some<LoadedConversation>({ state, version: row.version })
  })

  const findInputCommit = Effect.fn("Store.findInputCommit")(function*(conversationId: string, inputId: string) {
    return yield* recordedInput(conversationId, inputId).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("findInputCommit")(e)))
    )
  })

  const findTurnStarts = Effect.fn("Store.findTurnStarts")(function*(inputIdPrefix: string) {
    // A range on the input_id index (in PostgreSQL it needs the C collation to be a prefix range);
    // the prefix test after it keeps the answer exact whatever the bound.
    const upper = prefixUpperBound(inputIdPrefix)
    const rows = yield* sql<TurnStartRow>`
      SELECT conversation_id, turn_id, input_id, started_version, started_at_ms FROM turn_starts
      WHERE input_id >= ${inputIdPrefix}${upper === undefined ? sql`` : sql` AND input_id < ${upper}`}
      ORDER BY started_at_ms DESC, started_version DESC
      LIMIT ${TURN_STARTS_LIMIT}`.pipe(Effect.catchTag("SqlError", (e) => Effect.fail(storeError("findTurnStarts")(e))))
    return rows.filter((row) => row.input_id.startsWith(inputIdPrefix)).map((row): TurnStart => ({
      conversationId: row.conversation_id,
      turnId: row.turn_id,
      inputId: row.input_id,
      version: row.started_version,
      startedAtMs: row.started_at_ms
    }))
  })

  const saveLlmCall = Effect.fn("Store.saveLlmCall")(function*(call: PlannedLlmCall) {
    const invalid = (reason: string) => new InvalidCommit({ conversationId: call.conversationId, reason })
    const expected = requestHash(call.model, call.request, call.messagesHash, call.request.messages.length)
    if (expected !== call.requestHash) return yield* invalid(`model call ${call.callId}: requestHash does not match its request`)
    const now = yield* Clock.currentTimeMillis
    const transaction = Effect.gen(function*() {
      const rows = yield* sql<{ message_count: number }>`
        SELECT message_count FROM conversations WHERE conversation_id = ${call.conversationId}`
      const stored = rows[0]
      if (stored === undefined) return yield* invalid(`conversation ${call.conversationId} does not exist`)
      if (stored.message_count < call.request.messages.length) {
        return yield* invalid(`model call ${call.callId} sends messages that are not stored`)
      }
      return yield* insertLlmCall(call, now)
    })
    const parts = yield* sql.withTransaction(transaction).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("saveLlmCall")(e)))
    )
    yield* rememberParts(parts)
  })

  const markLlmCall = Effect.fn("Store.markLlmCall")(
    function*(callId: string, status: LlmCallStatus, details?: LlmCallDetails) {
      const now = yield* Clock.currentTimeMillis
      const updated = yield* updateLlmCall({ ...details, callId, status }, now).pipe(
        Effect.catchTag("SqlError", (e) => Effect.fail(storeError("markLlmCall")(e)))
      )
      if (updated.length === 0) return yield* new NotFound({ entity: "llmCall", id: callId })
    }
  )

  const loadLlmCall = Effect.fn("Store.loadLlmCall")(function*(callId: string) {
    const read = Effect.gen(function*() {
      const rows = yield* sql<LlmCallRow>`
        SELECT call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash, message_count,
          messages_hash, request_hash, status, assistant_hash, usage_json, error
        FROM llm_calls WHERE call_id = ${callId}`
      const row = rows[0]
      if (row === undefined) return Option.none()
      const parts = yield* sql<{ hash: string; body: string }>`
        SELECT hash, body FROM request_parts WHERE hash IN (${row.system_prompt_hash}, ${row.tools_hash})`
      const messageRows = yield* sql<MessageRow>`
        SELECT seq, message_json, hash FROM messages
        WHERE conversation_id = ${row.conversation_id} AND seq < ${row.message_count} ORDER BY seq`
      return Option.some({ row, parts, messageRows })
    })
    const found = yield* sql.withTransaction(read).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("loadLlmCall")(e)))
    )
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
    const history = decodeHistory(row.conversation_id, messageRows, row.message_count)
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

  const readOperation = (operationId: string) =>
    Effect.gen(function*() {
      const rows = yield* sql<OperationRow>`
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
  const changeOperation = (name: string, operationId: string, change: (now: number) => Effect.Effect<unknown, SqlError>) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const transaction = Effect.gen(function*() {
        yield* change(now)
        return yield* readOperation(operationId)
      })
      const record = yield* sql.withTransaction(transaction).pipe(
        Effect.catchTag("SqlError", (e) => Effect.fail(storeError(name)(e)))
      )
      if (Option.isNone(record)) return yield* new NotFound({ entity: "operation", id: operationId })
      return record.value
    })

  const saveOperations = Effect.fn("Store.saveOperations")(function*(operations: ReadonlyArray<PlannedOperation>) {
    const now = yield* Clock.currentTimeMillis
    yield* sql.withTransaction(insertOperations(operations, now)).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("saveOperations")(e)))
    )
  })

  const markOperationSent = Effect.fn("Store.markOperationSent")(function*(operationId: string) {
    return yield* changeOperation("markOperationSent", operationId, (now) =>
      sql`
        UPDATE client_operations SET status = 'sent', updated_at_ms = ${now}
        WHERE operation_id = ${operationId} AND status = 'planned'`)
  })

  const completeOperation = Effect.fn("Store.completeOperation")(function*(operationId: string, result: unknown) {
    return yield* changeOperation(
      "completeOperation",
      operationId,
      (now) => settleOperation(operationId, "completed", resultJson(result), now)
    )
  })

  const cancelOperation = Effect.fn("Store.cancelOperation")(function*(operationId: string) {
    return yield* changeOperation("cancelOperation", operationId, (now) => settleOperation(operationId, "canceled", null, now))
  })

  const loadOperation = Effect.fn("Store.loadOperation")(function*(operationId: string) {
    return yield* readOperation(operationId).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("loadOperation")(e)))
    )
  })

  const listInFlight = Effect.fn("Store.listInFlight")(function*() {
    const read = Effect.gen(function*() {
      const calls = yield* sql<LlmCallRow>`
        SELECT call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash, message_count,
          messages_hash, request_hash, status, assistant_hash, usage_json, error
        FROM llm_calls WHERE status IN ('planned', 'streaming') ORDER BY created_at_ms, call_id`
      const operations = yield* sql<OperationRow>`
        SELECT operation_id, conversation_id, turn_id, tool_call_id, tool_index, kind, idempotent, request_json,
          result_json, status
        FROM client_operations WHERE status IN ('planned', 'sent') ORDER BY created_at_ms, operation_id`
      return { calls, operations }
    })
    const { calls, operations } = yield* sql.withTransaction(read).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("listInFlight")(e)))
    )
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

  const appendDiagnostic = Effect.fn("Store.appendDiagnostic")(
    function*(callId: string, eventIndex: number, event: unknown) {
      yield* sql`
        INSERT INTO stream_diagnostics (call_id, event_index, event_json)
        VALUES (${callId}, ${eventIndex}, ${canonicalJson(event)})
        ON CONFLICT (call_id, event_index) DO NOTHING`.pipe(
        Effect.catchTag("SqlError", (e) => Effect.fail(storeError("appendDiagnostic")(e)))
      )
    }
  )

  return {
    load,
    findInputCommit,
    findTurnStarts,
    commitInput,
    saveLlmCall,
    markLlmCall,
    loadLlmCall,
    saveOperations,
    markOperationSent,
    completeOperation,
    cancelOperation,
    loadOperation,
    listInFlight,
    appendDiagnostic
  } satisfies StoreService
})
