/**
 * The conversations: `commitInput`, the one way a conversation changes (a compare-and-swap on
 * its version, in one transaction with its new messages, the input record, the turn it starts
 * and the calls it plans), loading a conversation back with every row verified, and the
 * records of applied inputs and of the inputs that started turns.
 *
 * Each operation a turn uses is one program (`Program.ts`) run by `env.run`: on the server's
 * connection one synchronous call, its transaction included.
 */
import { Clock, Effect, Either, Option } from "effect"
import { canonicalJson, emptyMessagesHash, extendMessagesHash, serializeMessage } from "../Llm.js"
import type { Message } from "../Llm.js"
import type { ConversationState, WaitingClient } from "../Loop.js"
import { storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"
import { checkLlmCall, insertLlmCall, insertPart, readParts, rememberParts, updateLlmCall } from "./LlmCalls.js"
import { CorruptRow, DuplicateInput, HistoryRewritten, InvalidCommit, StoreError, TURN_STARTS_LIMIT, VersionConflict } from "./Model.js"
import type { CommitError, CommitInput, InputCommit, LoadedConversation, SegmentRecord, TurnStart } from "./Model.js"
import { insertOperations, settleOperation } from "./Operations.js"
import { fail, q } from "./Program.js"
import type { Program } from "./Program.js"
import {
  decodeHistory,
  decodeJson,
  decodeStatus,
  decodeWaiting,
  parseJson,
  prefixUpperBound,
  resultJson,
  rowHash
} from "./Rows.js"
import { decodeStateFields, partHashesOf, resolveSettings, storedFormOf } from "./StateJson.js"
import type { SettingsPart, StateFields } from "./StateJson.js"
import type { ConversationRow, MessageRow, TurnStartRow } from "./Rows.js"

/** A forked chat's history found in a journal (`findHistory`). */
interface HistorySeed {
  readonly conversationId: string
  readonly messages: ReadonlyArray<Message>
}

/** The record of an applied input, read: none, its commit, or the row that does not parse. */
const readInputCommit = function*(conversationId: string, inputId: string): Program<Either.Either<Option.Option<InputCommit>, CorruptRow>> {
  const rows = yield* q<{ committed_version: number; result_json: string }>`
    SELECT committed_version, result_json FROM input_commits
    WHERE conversation_id = ${conversationId} AND input_id = ${inputId}`
  const row = rows[0]
  if (row === undefined) return Either.right(Option.none())
  const result = parseJson(row.result_json)
  if (Either.isLeft(result)) {
    return Either.left(new CorruptRow({ conversationId, table: "input_commits", seq: null, key: inputId, reason: result.left }))
  }
  return Either.right(Option.some({ version: row.committed_version, result: result.right }))
}

export const recordedInput = function*(conversationId: string, inputId: string): Program<Option.Option<InputCommit>, CorruptRow> {
  const read = yield* readInputCommit(conversationId, inputId)
  if (Either.isLeft(read)) return yield* fail(read.left)
  return read.right
}

/** Why a compare-and-swap found no row: the input was applied already, or another writer moved on. */
export const lostRace = function*(
  conversationId: string,
  inputId: string,
  expectedVersion: number
): Program<never, DuplicateInput | VersionConflict> {
  const recorded = yield* readInputCommit(conversationId, inputId)
  if (Either.isRight(recorded) && Option.isSome(recorded.right)) {
    return yield* fail(new DuplicateInput({ conversationId, inputId, ...recorded.right.value }))
  }
  const rows = yield* q<{ version: number }>`SELECT version FROM conversations WHERE conversation_id = ${conversationId}`
  return yield* fail(new VersionConflict({ conversationId, expectedVersion, actualVersion: rows[0]?.version ?? null }))
}

/**
 * The journal rows to append: the messages beyond the stored ones, proven to extend the
 * stored segment's chain to `next.messagesHash`; or, when the state opens a new segment, all
 * of its messages, placed at the end of the journal (never over it) and chained afresh.
 */
const journalRows = (
  input: CommitInput,
  storedCount: number,
  storedHash: string,
  storedStart: number
): Either.Either<Array<MessageRow & { readonly client_key: string | null }>, HistoryRewritten> => {
  const { conversationId, next } = input
  const start = next.segment.start
  const rewritten = (reason: string) =>
    Either.left(new HistoryRewritten({ conversationId, storedCount, nextCount: start + next.messages.length, reason }))
  let from: number
  let chain: string
  if (start === storedStart) {
    from = storedCount - start
    chain = storedHash
    if (next.messages.length < from) return rewritten("the next state has fewer messages than are stored")
  } else if (start === storedCount && start > storedStart) {
    from = 0
    chain = emptyMessagesHash
  } else {
    return rewritten(`a new segment must begin at the end of the journal (${storedCount}), not at ${start}`)
  }
  const rows: Array<MessageRow & { readonly client_key: string | null }> = []
  for (let index = from; index < next.messages.length; index++) {
    const message = next.messages[index]!
    const json = serializeMessage(message)
    const hash = rowHash(json)
    chain = extendMessagesHash(chain, hash)
    rows.push({ seq: start + index, message_json: json, hash, client_key: input.messageKey?.(message) ?? null })
  }
  if (chain !== next.messagesHash) {
    return rewritten("the stored history followed by the new messages does not hash to the next state's messagesHash")
  }
  return Either.right(rows)
}


/** What is wrong with a commit before any statement (ids of another conversation, a call that does not match its request). */
const invalidCommit = (input: CommitInput): InvalidCommit | undefined => {
  const { conversationId, next } = input
  if (next.conversationId !== conversationId) {
    return new InvalidCommit({ conversationId, reason: `the next state belongs to ${next.conversationId}` })
  }
  if (input.llmCall !== undefined) {
    const invalid = checkLlmCall(conversationId, next, input.llmCall)
    if (invalid !== undefined) return invalid
  }
  for (const operation of input.clientOperations ?? []) {
    if (operation.conversationId !== conversationId) {
      return new InvalidCommit({ conversationId, reason: `operation ${operation.operationId} belongs to ${operation.conversationId}` })
    }
  }
  return undefined
}

/**
 * The commit's statements, in its transaction: win the version (or learn why not), append the
 * new messages, record the input, the turn it starts, the call it plans and the operations;
 * the new version and the request parts it wrote.
 */
const commitStatements = function*(
  env: StoreEnv,
  input: CommitInput,
  now: number,
  stateJson: string,
  waitingJson: string | null,
  settingsParts: ReadonlyArray<SettingsPart>
): Program<{ readonly version: number; readonly parts: Array<string> }, CommitError> {
  const { conversationId, expectedVersion, inputId, next } = input
  const newVersion = expectedVersion + 1
  let fresh: Either.Either<ReadonlyArray<MessageRow & { readonly client_key: string | null }>, HistoryRewritten>
  let storedTurnId = ""
  let storedStart = 0
  const journalLength = next.segment.start + next.messages.length
  if (expectedVersion === 0) {
    fresh = journalRows(input, 0, emptyMessagesHash, 0)
    if (Either.isLeft(fresh)) return yield* fail(fresh.left)
    const created = yield* q<{ version: number }>`
      INSERT INTO conversations (conversation_id, version, status, turn_id, message_count, messages_hash,
        waiting_json, state_json, updated_at_ms, segment_start)
      VALUES (${conversationId}, 1, ${next.status}, ${next.turnId}, ${journalLength}, ${next.messagesHash},
        ${waitingJson}, ${stateJson}, ${now}, ${next.segment.start})
      ON CONFLICT (conversation_id) DO NOTHING
      RETURNING version`
    if (created.length === 0) return yield* lostRace(conversationId, inputId, expectedVersion)
  } else {
    // Touching the row first takes the write lock at once and wins (or loses) the version.
    const won = yield* q<{ message_count: number; messages_hash: string; turn_id: string; segment_start: number }>`
      UPDATE conversations SET version = version + 1
      WHERE conversation_id = ${conversationId} AND version = ${expectedVersion}
      RETURNING message_count, messages_hash, turn_id, segment_start`
    const stored = won[0]
    if (stored === undefined) return yield* lostRace(conversationId, inputId, expectedVersion)
    storedTurnId = stored.turn_id
    storedStart = stored.segment_start
    fresh = journalRows(input, stored.message_count, stored.messages_hash, stored.segment_start)
    if (Either.isLeft(fresh)) return yield* fail(fresh.left)
    yield* q`
      UPDATE conversations SET status = ${next.status}, turn_id = ${next.turnId},
        message_count = ${journalLength}, messages_hash = ${next.messagesHash},
        waiting_json = ${waitingJson}, state_json = ${stateJson}, updated_at_ms = ${now},
        segment_start = ${next.segment.start}
      WHERE conversation_id = ${conversationId}`
  }
  // A new segment, or a new conversation that starts forked: the boundary is recorded.
  if (next.segment.start !== storedStart || (expectedVersion === 0 && next.segment.kind !== "origin")) {
    const segment = next.segment
    yield* q`
      INSERT INTO segments (conversation_id, start, kind, turn_id, summary_call_id, source, previous_start, replaced, kept, created_at_ms)
      VALUES (${conversationId}, ${segment.start}, ${segment.kind}, ${segment.turnId}, ${segment.summaryCallId ?? null},
        ${segment.source ?? null}, ${storedStart}, ${segment.replaced}, ${segment.kept}, ${now})`
  }
  for (const row of fresh.right) {
    yield* q`
      INSERT INTO messages (conversation_id, seq, message_json, hash, client_key)
      VALUES (${conversationId}, ${row.seq}, ${row.message_json}, ${row.hash}, ${row.client_key})`
  }
  const recorded = yield* q<{ input_id: string }>`
    INSERT INTO input_commits (conversation_id, input_id, committed_version, result_json, committed_at_ms)
    VALUES (${conversationId}, ${inputId}, ${newVersion}, ${resultJson(input.result)}, ${now})
    ON CONFLICT (conversation_id, input_id) DO NOTHING
    RETURNING input_id`
  if (recorded.length === 0) {
    // Applied before under another version: fail so the transaction leaves nothing behind.
    const previous = yield* readInputCommit(conversationId, inputId)
    if (Either.isLeft(previous)) {
      return yield* fail(new StoreError({ operation: "commitInput", message: previous.left.message, cause: previous.left }))
    }
    if (Option.isSome(previous.right)) return yield* fail(new DuplicateInput({ conversationId, inputId, ...previous.right.value }))
  }
  if (next.turnId !== "" && next.turnId !== storedTurnId) {
    yield* q`
      INSERT INTO turn_starts (conversation_id, turn_id, input_id, started_version, started_at_ms)
      VALUES (${conversationId}, ${next.turnId}, ${inputId}, ${newVersion}, ${now})
      ON CONFLICT (conversation_id, turn_id) DO NOTHING`
  }
  const parts = input.llmCall === undefined ? [] : yield* insertLlmCall(env, input.llmCall, now)
  for (const part of settingsParts) {
    if (env.storedParts.has(part.hash)) continue
    yield* insertPart(part.hash, part.body)
    parts.push(part.hash)
  }
  if (input.clientOperations !== undefined) yield* insertOperations(input.clientOperations, now)
  if (input.llmCallUpdate !== undefined) {
    const updated = yield* updateLlmCall(input.llmCallUpdate, now)
    if (updated.length === 0) {
      return yield* fail(new InvalidCommit({ conversationId, reason: `unknown model call ${input.llmCallUpdate.callId}` }))
    }
  }
  if (input.operationCompletion !== undefined) {
    const { operationId, result } = input.operationCompletion
    const exists = yield* settleOperation(operationId, "completed", resultJson(result), now)
    if (!exists) return yield* fail(new InvalidCommit({ conversationId, reason: `unknown operation ${operationId}` }))
  }
  return { version: newVersion, parts }
}

export const commitInput = (env: StoreEnv) => (input: CommitInput): Effect.Effect<number, CommitError> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const invalid = invalidCommit(input)
    if (invalid !== undefined) return Effect.fail(invalid)
    const { next } = input
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
    // The settings' bulky lists go to request parts, written once (see StateJson.ts).
    const storedSettings = next.settings === null ? null : storedFormOf(next.settings)
    const stateJson = canonicalJson({ ...fields, settings: storedSettings?.settings ?? null } satisfies StateFields)
    const waitingJson = next.waiting === null ? null : canonicalJson(next.waiting)
    const settingsParts = storedSettings?.parts ?? []
    return Effect.map(
      env.run("commitInput", () => commitStatements(env, input, now, stateJson, waitingJson, settingsParts), true),
      (committed) => {
        rememberParts(env, committed.parts)
        return committed.version
      }
    )
  })

/**
 * A conversation's row and the messages of its current segment (earlier segments stay in the
 * journal, never loaded again), every row verified, the settings' parts read back.
 */
const loadStatements = function*(conversationId: string): Program<
  Option.Option<{ readonly loaded: LoadedConversation; readonly parts: ReadonlyArray<string> }>,
  CorruptRow
> {
  const rows = yield* q<ConversationRow>`
    SELECT version, status, turn_id, message_count, messages_hash, waiting_json, state_json, segment_start
    FROM conversations WHERE conversation_id = ${conversationId}`
  const row = rows[0]
  if (row === undefined) return Option.none()
  const messageRows = yield* q<MessageRow>`
    SELECT seq, message_json, hash FROM messages
    WHERE conversation_id = ${conversationId} AND seq >= ${row.segment_start} ORDER BY seq`
  const corrupt = (reason: string) => fail(new CorruptRow({ conversationId, table: "conversations", seq: null, key: null, reason }))

  const history = decodeHistory(conversationId, messageRows, row.message_count - row.segment_start, row.segment_start)
  if (Either.isLeft(history)) return yield* fail(history.left)
  if (history.right.chain !== row.messages_hash) {
    return yield* fail(new CorruptRow({
      conversationId,
      table: "messages",
      seq: null,
      key: null,
      reason: "the hash chain over the stored messages does not match messages_hash"
    }))
  }
  const status = decodeStatus(row.status)
  if (Either.isLeft(status)) return yield* corrupt(`unknown status ${row.status}`)
  const fields = decodeJson(row.state_json, decodeStateFields)
  if (Either.isLeft(fields)) return yield* corrupt(`state_json: ${fields.left}`)
  if (fields.right.segment.start !== row.segment_start) {
    return yield* corrupt(`state_json names a segment at ${fields.right.segment.start}; segment_start is ${row.segment_start}`)
  }
  let settings = fields.right.settings
  const partNames = partHashesOf(settings)
  if (settings !== null && partNames.length > 0) {
    const partRows = yield* readParts(partNames)
    const resolved = resolveSettings(conversationId, settings, new Map(partRows.map((part) => [part.hash, part.body])))
    if (Either.isLeft(resolved)) return yield* fail(resolved.left)
    settings = resolved.right
  }
  let waiting: WaitingClient | null = null
  if (row.waiting_json !== null) {
    const decoded = decodeJson(row.waiting_json, decodeWaiting)
    if (Either.isLeft(decoded)) return yield* corrupt(`waiting_json: ${decoded.left}`)
    waiting = decoded.right
  }
  const state: ConversationState = {
    ...fields.right,
    settings,
    conversationId,
    status: status.right,
    turnId: row.turn_id,
    messages: history.right.messages,
    messagesHash: row.messages_hash,
    waiting
  }
  return Option.some({ loaded: { state, version: row.version }, parts: partNames })
}

/**
 * Loading reads in one transaction, so that the row and its messages are one snapshot. On the
 * server's connection the whole load is one synchronous call, and nothing else in this process
 * can write between its statements; but in WAL mode each statement outside a transaction reads
 * the database as it is when that statement starts, and another process on the same file (the
 * busy timeout is for one) could commit between the two. The read transaction rules that out
 * for two more statement steps in the same call (BEGIN and COMMIT), no fiber operations.
 */
export const load = (env: StoreEnv) => (conversationId: string): Effect.Effect<Option.Option<LoadedConversation>, CorruptRow | StoreError> =>
  Effect.map(env.run("load", () => loadStatements(conversationId), true), (found) => {
    if (Option.isNone(found)) return Option.none()
    rememberParts(env, found.value.parts)
    return Option.some(found.value.loaded)
  })

export const findInputCommit = (env: StoreEnv) => (conversationId: string, inputId: string): Effect.Effect<Option.Option<InputCommit>, CorruptRow | StoreError> =>
  env.run("findInputCommit", () => recordedInput(conversationId, inputId), false)

export const findTurnStarts = ({ sql }: StoreEnv) => Effect.fn("Store.findTurnStarts")(function*(inputIdPrefix: string) {
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

export const segments = ({ sql }: StoreEnv) => Effect.fn("Store.segments")(function*(conversationId: string) {
  const rows = yield* sql<{
    start: number
    kind: string
    turn_id: string
    summary_call_id: string | null
    source: string | null
    previous_start: number
    replaced: number
    kept: number
    created_at_ms: number
  }>`
    SELECT start, kind, turn_id, summary_call_id, source, previous_start, replaced, kept, created_at_ms
    FROM segments WHERE conversation_id = ${conversationId} ORDER BY start`.pipe(
    Effect.catchTag("SqlError", (e) => Effect.fail(storeError("segments")(e)))
  )
  return rows.map((row): SegmentRecord => ({
    start: Number(row.start),
    kind: row.kind,
    turnId: row.turn_id,
    summaryCallId: row.summary_call_id,
    source: row.source,
    previousStart: Number(row.previous_start),
    replaced: Number(row.replaced),
    kept: Number(row.kept),
    createdAtMs: Number(row.created_at_ms)
  }))
})

/** How many conversations holding the first key are tried (a message repeated across many forks). */
const HISTORY_CANDIDATES = 16

/** The first of `keys`' candidate places whose messages carry exactly `keys`, in order. */
const findHistoryStatements = function*(keys: ReadonlyArray<string>): Program<
  Option.Option<{ readonly conversationId: string; readonly seq: number; readonly rows: ReadonlyArray<MessageRow> }>
> {
  const starts = yield* q<{ conversation_id: string; seq: number }>`
    SELECT conversation_id, seq FROM messages WHERE client_key = ${keys[0]!}
    ORDER BY conversation_id, seq LIMIT ${HISTORY_CANDIDATES}`
  for (const start of starts) {
    const rows = yield* q<MessageRow & { client_key: string | null }>`
      SELECT seq, message_json, hash, client_key FROM messages
      WHERE conversation_id = ${start.conversation_id} AND seq >= ${start.seq} AND seq < ${start.seq + keys.length}
      ORDER BY seq`
    if (rows.length === keys.length && rows.every((row, index) => row.client_key === keys[index])) {
      return Option.some({ conversationId: start.conversation_id, seq: Number(start.seq), rows })
    }
  }
  return Option.none()
}

export const findHistory = (env: StoreEnv) => (keys: ReadonlyArray<string>) => {
  if (keys.length === 0) return Effect.succeed(Option.none<HistorySeed>())
  return Effect.map(env.run("findHistory", () => findHistoryStatements(keys), true), (found) => {
    if (Option.isNone(found)) return Option.none<HistorySeed>()
    const { conversationId, rows, seq } = found.value
    const history = decodeHistory(conversationId, rows, keys.length, seq)
    // A row that does not verify is no history to seed from.
    if (Either.isLeft(history)) return Option.none<HistorySeed>()
    return Option.some<HistorySeed>({ conversationId, messages: history.right.messages })
  })
}

/** The child conversation whose turn settings name `parentToolCallId` as the Task it runs for. */
export const findSubagentRun = ({ sql }: StoreEnv) => Effect.fn("Store.findSubagentRun")(function*(parentToolCallId: string) {
  const rows = yield* sql<{ conversation_id: string }>`
    SELECT conversation_id FROM conversations
    WHERE json_extract(state_json, '$.settings.subagent.parentToolCallId') = ${parentToolCallId}
    ORDER BY updated_at_ms DESC LIMIT 1`.pipe(Effect.catchTag("SqlError", (e) => Effect.fail(storeError("findSubagentRun")(e))))
  return Option.fromNullable(rows[0]?.conversation_id)
})
