/**
 * The Store's contract without its implementation: the records it keeps, the errors it
 * reports, and the shape of the service. `src/Store.ts` re-exports all of it beside the
 * service tag and its layers; `src/store/Sqlite.ts` implements it on SQLite. Nothing here
 * names a SQL dialect, so a PostgreSQL implementation can satisfy the same shape.
 */
import { Schema } from "effect"
import type { Effect, Option } from "effect"
import { RequestMessages, Usage } from "../Llm.js"
import type { FailedAttempt, Message } from "../Llm.js"
import type { ConversationState } from "../Loop.js"

// =============================================================================
// Records
// =============================================================================

export const LlmCallStatus = Schema.Literal("planned", "streaming", "committed", "failed", "canceled")
export type LlmCallStatus = typeof LlmCallStatus.Type

export const OperationStatus = Schema.Literal("planned", "sent", "completed", "canceled")
export type OperationStatus = typeof OperationStatus.Type

/** A model call saved before its stream opens: the exact request, and the hashes that pin it. */
export interface PlannedLlmCall {
  readonly callId: string
  readonly conversationId: string
  readonly turnId: string
  readonly model: string
  /** Stored as references: its system prompt and tools by content hash, its messages as a prefix of the history. */
  readonly request: RequestMessages
  /** `Llm.messagesHash(request.messages)`. */
  readonly messagesHash: string
  /** `Llm.requestHash(model, request, messagesHash, request.messages.length)`. */
  readonly requestHash: string
  /** Journal position of the segment the messages are a prefix of. */
  readonly segmentStart: number
  /**
   * True when the messages are not a prefix of the history (a summary call: the history plus an
   * instruction): they are stored whole, as a content-addressed part.
   */
  readonly detached: boolean
}

/** A model call as the operator reads it (`Store.callsOf`); the shape the prefix diagnostics compare. */
export interface CallInsight {
  readonly callId: string
  readonly turnId: string
  readonly model: string
  readonly status: string
  readonly systemPromptHash: string
  readonly toolsHash: string
  readonly segmentStart: number
  readonly messageCount: number
  /** A summary call (its messages stored whole). */
  readonly detached: boolean
  readonly usage: Usage | null
  readonly costUsd: number | null
  readonly error: string | null
  readonly createdAtMs: number
  /** When it last changed status (committed, failed...). */
  readonly updatedAtMs: number
  /** Milliseconds from the stream opening to its first delta; null when unknown. */
  readonly firstDeltaMs: number | null
  /** The target that answered (`provider/upstreamModel`); null until an answer is committed. */
  readonly target: string | null
  /** Attempts the answering target took; null when unknown. */
  readonly attempts: number | null
  /**
   * The request's size in characters of its stored JSON (system prompt, tools and messages as
   * the store keeps them): close to, not exactly, the bytes the provider received.
   */
  readonly requestChars: number
}

/** A model call of any conversation, as the console's charts and per-model figures read it (`requestChars` is 0). */
export interface RecentCall extends CallInsight {
  readonly conversationId: string
}

/** A conversation as the operator lists it: its title, model, turns and totals over all its model calls. */
export interface ConversationInsight {
  readonly conversationId: string
  readonly status: string
  /** The name the user gave the chat, else its first user message's text (whole: the reader shortens it). */
  readonly title: string
  /** The model the last turn asked for; null before any turn settled one. */
  readonly model: string | null
  readonly turns: number
  readonly messageCount: number
  readonly calls: number
  readonly usage: Usage
  /** USD over the calls with a price. */
  readonly costUsd: number
  /** When its first model call was made; null before any. */
  readonly startedAtMs: number | null
  /** The last commit or model-call change. */
  readonly lastActivityMs: number
}

/** A segment of a conversation's history as recorded when it opened (see `Loop.Segment`). */
export interface SegmentRecord {
  readonly start: number
  readonly kind: string
  readonly turnId: string
  readonly summaryCallId: string | null
  /** The conversation a forked segment was seeded from. */
  readonly source: string | null
  /** Where the segment it replaced started. */
  readonly previousStart: number
  readonly replaced: number
  readonly kept: number
  readonly createdAtMs: number
}

/** A saved model call, without its request (see `loadLlmCall` for the request). */
export const LlmCallRecord = Schema.Struct({
  callId: Schema.String,
  conversationId: Schema.String,
  turnId: Schema.String,
  model: Schema.String,
  status: LlmCallStatus,
  messageCount: Schema.Int,
  messagesHash: Schema.String,
  requestHash: Schema.String,
  assistantHash: Schema.NullOr(Schema.String),
  usage: Schema.NullOr(Usage),
  error: Schema.NullOr(Schema.String)
})
export type LlmCallRecord = typeof LlmCallRecord.Type

/** A saved model call with its exact request rebuilt from the stored references. */
export interface LoadedLlmCall extends LlmCallRecord {
  readonly request: RequestMessages
}

export interface LlmCallDetails {
  readonly assistantHash?: string
  readonly usage?: Usage
  /** USD, from the configured price of the target that answered. */
  readonly costUsd?: number
  readonly error?: string
  /** The target that answered: `provider/upstreamModel`. */
  readonly target?: string
}

/** A call's stream as the console reads it (`recordCallTiming`). */
export interface CallTiming {
  /** Milliseconds from the stream opening to its first delta. */
  readonly firstDeltaMs: number
  /** Attempts the answering target took (1 without a retry). */
  readonly attempts: number
}

/** An attempt of a model call that failed before answering, as stored (`recordAttempt`). */
export interface AttemptRecord {
  readonly callId: string
  /** Its place among the call's failed attempts, across targets (0 first). */
  readonly seq: number
  readonly provider: string
  readonly upstreamModel: string
  /** 1 for the target's first attempt, 2 for its first retry... */
  readonly attempt: number
  /** The provider's HTTP status; null for a network error or a timeout. */
  readonly status: number | null
  readonly reason: string
  readonly error: string
  readonly startedAtMs: number
  readonly failedAtMs: number
}

/** A failed attempt of any conversation's call, with the call's model (the console's per-model and per-provider figures). */
export interface RecentAttempt extends AttemptRecord {
  readonly conversationId: string
  readonly model: string
}

/** What the call log shows: a call's outcome, as a filter. `retried`: some attempt failed (a retry or a fallback answered, or none did). */
export type CallOutcome = "answered" | "failed" | "canceled" | "running" | "retried"

export interface CallLogQuery {
  readonly conversationId?: string
  readonly model?: string
  /** Calls answered by it or with an attempt on it. */
  readonly provider?: string
  readonly outcome?: CallOutcome
  readonly sinceMs?: number
  readonly untilMs?: number
  readonly limit: number
  readonly offset: number
}

/** A page of the call log, newest first, and how many calls match in all. */
export interface CallLogPage {
  readonly calls: ReadonlyArray<RecentCall & { readonly failedAttempts: number }>
  readonly total: number
}

/** What a conversation's committed model calls cost, in USD, per turn and in all (calls without a price count 0). */
export interface ConversationCosts {
  readonly conversationId: string
  readonly usd: number
  /** Committed calls, and how many of them had a price. */
  readonly calls: number
  readonly pricedCalls: number
  readonly turns: ReadonlyArray<{ readonly turnId: string; readonly usd: number; readonly calls: number }>
}

/** A status change for a model call, applied inside a commit (e.g. `committed` with the Done message's hash). */
export interface LlmCallUpdate extends LlmCallDetails {
  readonly callId: string
  readonly status: LlmCallStatus
}

/** A client operation saved before it is sent: one tool call of one assistant message. */
export interface PlannedOperation {
  readonly operationId: string
  readonly conversationId: string
  readonly turnId: string
  readonly toolCallId: string
  readonly toolIndex: number
  /** The tool's kind (`read`, `shell`, `write`, `mcp`...), for recovery decisions. */
  readonly kind: string
  /** Whether re-sending it after a crash is harmless (reads) or not (shell, write, delete, MCP). */
  readonly idempotent: boolean
  /** What is sent to the client, as JSON. */
  readonly request: unknown
}

export const OperationRecord = Schema.Struct({
  operationId: Schema.String,
  conversationId: Schema.String,
  turnId: Schema.String,
  toolCallId: Schema.String,
  toolIndex: Schema.Int,
  kind: Schema.String,
  idempotent: Schema.Boolean,
  status: OperationStatus,
  request: Schema.Unknown,
  /** `null` until completed. */
  result: Schema.Unknown
})
export type OperationRecord = typeof OperationRecord.Type

/** One applied input: the state it produced, what the caller should answer a duplicate with, and what to do next. */
export interface CommitInput {
  readonly conversationId: string
  /** Stable across retries (`requestId + appendSeqno`); applied once per conversation. */
  readonly inputId: string
  /** The version the caller loaded; 0 for a conversation that does not exist yet. */
  readonly expectedVersion: number
  readonly next: ConversationState
  /** Returned, as JSON, to a duplicate of this input. */
  readonly result: unknown
  /** Saved with status `planned` in the same transaction: commit before acting. */
  readonly llmCall?: PlannedLlmCall
  readonly clientOperations?: ReadonlyArray<PlannedOperation>
  /** A status change of an earlier model call made atomic with this commit (a Done's message and `committed`). */
  readonly llmCallUpdate?: LlmCallUpdate
  /** The key a client knows each new message by (kept with its row, to find a forked chat's history). */
  readonly messageKey?: (message: Message) => string
  /** An operation completed atomically with this commit (the ToolResult input that carries its result). */
  readonly operationCompletion?: { readonly operationId: string; readonly result: unknown }
}

export interface LoadedConversation {
  readonly state: ConversationState
  readonly version: number
}

export interface InputCommit {
  readonly version: number
  readonly result: unknown
}

/** The input whose commit started a turn: the first commit that carried that turn id. */
export interface TurnStart {
  readonly conversationId: string
  readonly turnId: string
  readonly inputId: string
  /** The conversation version that commit produced. */
  readonly version: number
  readonly startedAtMs: number
}

export interface InFlight {
  /** Model calls still `planned` or `streaming`: re-issue each with its exact saved request. */
  readonly llmCalls: ReadonlyArray<LlmCallRecord>
  /** Operations still `planned` or `sent`: re-send the idempotent ones, answer the others as interrupted. */
  readonly operations: ReadonlyArray<OperationRecord>
}

// =============================================================================
// Errors
// =============================================================================

/** The database failed (I/O, lock timeout, constraint the store did not expect). */
export class StoreError extends Schema.TaggedError<StoreError>("cursor-byok/Store/StoreError")("StoreError", {
  operation: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * The error SQLite (or the OS) raised under a store failure's wrapping (`@effect/sql`'s
 * `SqlError`, a `StoreError`): its message and its code (`SQLITE_FULL`, `ENOSPC`...; "" when
 * none is given), for a message that says what went wrong and what to do.
 */
export const rootCauseOf = (cause: unknown): { readonly text: string; readonly code: string } => {
  let at = cause
  for (let depth = 0; depth < 4 && at !== null && typeof at === "object"; depth++) {
    const code = (at as { code?: unknown }).code
    if (typeof code === "string") return { text: at instanceof Error ? at.message : String(at), code }
    const inner = (at as { cause?: unknown }).cause
    if (inner === undefined) break
    at = inner
  }
  return { text: at instanceof Error ? at.message : String(at), code: "" }
}

/** Another writer committed first: reload and re-apply the input. Nothing of this commit was stored. */
export class VersionConflict extends Schema.TaggedError<VersionConflict>("cursor-byok/Store/VersionConflict")(
  "VersionConflict",
  {
    conversationId: Schema.String,
    expectedVersion: Schema.Int,
    /** The stored version, or null when the conversation does not exist. */
    actualVersion: Schema.NullOr(Schema.Int)
  }
) {
  override get message(): string {
    return `Conversation ${this.conversationId}: expected version ${this.expectedVersion}, found ${this.actualVersion ?? "none"}`
  }
}

/**
 * The input was applied before. Nothing changed; `version` and `result` are what the first
 * application recorded, so the caller answers the duplicate exactly as it answered the original.
 */
export class DuplicateInput extends Schema.TaggedError<DuplicateInput>("cursor-byok/Store/DuplicateInput")(
  "DuplicateInput",
  {
    conversationId: Schema.String,
    inputId: Schema.String,
    version: Schema.Int,
    result: Schema.Unknown
  }
) {}

/** The next state does not extend the stored history: messages were dropped or an old one changed. */
export class HistoryRewritten extends Schema.TaggedError<HistoryRewritten>("cursor-byok/Store/HistoryRewritten")(
  "HistoryRewritten",
  {
    conversationId: Schema.String,
    storedCount: Schema.Int,
    nextCount: Schema.Int,
    reason: Schema.String
  }
) {
  override get message(): string {
    return `Conversation ${this.conversationId}: history is append-only (${this.storedCount} stored, ${this.nextCount} given): ${this.reason}`
  }
}

/** A commit whose parts disagree with each other (ids of another conversation, a call whose hashes do not match its request). */
export class InvalidCommit extends Schema.TaggedError<InvalidCommit>("cursor-byok/Store/InvalidCommit")("InvalidCommit", {
  conversationId: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `Conversation ${this.conversationId}: invalid commit: ${this.reason}`
  }
}

/** A stored row that cannot be read back as it was written: bad JSON, a schema failure, a hash that does not match. */
export class CorruptRow extends Schema.TaggedError<CorruptRow>("cursor-byok/Store/CorruptRow")("CorruptRow", {
  conversationId: Schema.String,
  table: Schema.String,
  /** The message's position, for rows of `messages`. */
  seq: Schema.NullOr(Schema.Int),
  /** The row's key in other tables (call id, operation id, input id, part hash). */
  key: Schema.NullOr(Schema.String),
  reason: Schema.String
}) {
  override get message(): string {
    const where = this.seq !== null ? ` seq ${this.seq}` : this.key !== null ? ` ${this.key}` : ""
    return `Corrupt row in ${this.table} of conversation ${this.conversationId}${where}: ${this.reason}`
  }
}

/** A saved model call whose request, rebuilt from its references, no longer hashes to its `request_hash`. */
export class RequestHashMismatch extends Schema.TaggedError<RequestHashMismatch>(
  "cursor-byok/Store/RequestHashMismatch"
)("RequestHashMismatch", {
  callId: Schema.String,
  conversationId: Schema.String,
  expected: Schema.String,
  actual: Schema.String
}) {}

/** A model call or client operation id that was never saved. */
export class NotFound extends Schema.TaggedError<NotFound>("cursor-byok/Store/NotFound")("NotFound", {
  entity: Schema.Literal("llmCall", "operation"),
  id: Schema.String
}) {}

export type CommitError = VersionConflict | DuplicateInput | HistoryRewritten | InvalidCommit | StoreError

/** How many turn starts `findTurnStarts` returns at most (a request id is reused for a few turns, not hundreds). */
export const TURN_STARTS_LIMIT = 50

// =============================================================================
// The service's shape
// =============================================================================

export interface StoreService {
  /** The committed state and its version; the history is decoded and checked against its hashes. */
  readonly load: (conversationId: string) => Effect.Effect<Option.Option<LoadedConversation>, CorruptRow | StoreError>
  /** The recorded outcome of an input already applied to this conversation. */
  readonly findInputCommit: (
    conversationId: string,
    inputId: string
  ) => Effect.Effect<Option.Option<InputCommit>, CorruptRow | StoreError>
  /**
   * The turns started by inputs whose id begins with `inputIdPrefix` (the inputs of one client
   * request share a prefix), newest first, at most `TURN_STARTS_LIMIT`. `commitInput` records a
   * turn's start with the commit that first carries its turn id.
   */
  readonly findTurnStarts: (inputIdPrefix: string) => Effect.Effect<ReadonlyArray<TurnStart>, StoreError>
  /**
   * Applies one input in one transaction and returns the new version: compare-and-swap on the
   * version, append the new messages, record the input and its result (and, when it starts a
   * turn, that it did), save the planned model call and client operations. A duplicate input fails with `DuplicateInput` carrying the
   * recorded result; a stale version fails with `VersionConflict`; in both cases nothing is written.
   */
  readonly commitInput: (input: CommitInput) => Effect.Effect<number, CommitError>
  /** Saves a planned model call outside a commit (its conversation must exist and hold its messages). */
  readonly saveLlmCall: (call: PlannedLlmCall) => Effect.Effect<void, InvalidCommit | StoreError>
  readonly markLlmCall: (
    callId: string,
    status: LlmCallStatus,
    details?: LlmCallDetails
  ) => Effect.Effect<void, NotFound | StoreError>
  /** The call with its exact request, rebuilt from the stored references and verified against `request_hash`. */
  readonly loadLlmCall: (
    callId: string
  ) => Effect.Effect<Option.Option<LoadedLlmCall>, CorruptRow | RequestHashMismatch | StoreError>
  /** Saves planned operations outside a commit; an operation id saved before keeps its first record. */
  readonly saveOperations: (operations: ReadonlyArray<PlannedOperation>) => Effect.Effect<void, StoreError>
  /** planned -> sent; any other status is left as it is. Returns the record after the call. */
  readonly markOperationSent: (operationId: string) => Effect.Effect<OperationRecord, NotFound | CorruptRow | StoreError>
  /** planned/sent -> completed with its result; a completed or canceled operation keeps its record (first outcome wins). */
  readonly completeOperation: (
    operationId: string,
    result: unknown
  ) => Effect.Effect<OperationRecord, NotFound | CorruptRow | StoreError>
  /** planned/sent -> canceled; a completed operation stays completed. */
  readonly cancelOperation: (operationId: string) => Effect.Effect<OperationRecord, NotFound | CorruptRow | StoreError>
  readonly loadOperation: (operationId: string) => Effect.Effect<Option.Option<OperationRecord>, CorruptRow | StoreError>
  /** What a restarted process must resume: model calls planned/streaming, operations planned/sent. */
  readonly listInFlight: () => Effect.Effect<InFlight, CorruptRow | StoreError>
  /** What the conversation's committed model calls cost, per turn and in all. */
  readonly costs: (conversationId: string) => Effect.Effect<ConversationCosts, StoreError>
  /**
   * Messages stored with these client keys, consecutive and in this order, in some
   * conversation's journal (a forked chat's history): the messages and that conversation, or
   * none. Each row is verified against its hash.
   */
  readonly findHistory: (
    keys: ReadonlyArray<string>
  ) => Effect.Effect<Option.Option<{ readonly conversationId: string; readonly messages: ReadonlyArray<Message> }>, StoreError>
  /**
   * The subagent conversation a parent's Task opened (its settings name the Task's tool call as
   * its parent), the most recently active one; none when no child named it.
   */
  readonly findSubagentRun: (parentToolCallId: string) => Effect.Effect<Option.Option<string>, StoreError>
  /** The conversation's model calls in the order they were made, as the operator reads them. */
  readonly callsOf: (conversationId: string) => Effect.Effect<ReadonlyArray<CallInsight>, StoreError>
  /**
   * The `limit` most recently active conversations (or only the one named; or only those the user
   * `ownerId` owns, on a team's server), newest first, with their totals (the console's lists).
   */
  readonly conversations: (limit: number, conversationId?: string, ownerId?: string) => Effect.Effect<ReadonlyArray<ConversationInsight>, StoreError>
  /** The model calls of every conversation made since `sinceMs`, oldest first, the newest `limit` of them. */
  readonly callsSince: (sinceMs: number, limit: number) => Effect.Effect<ReadonlyArray<RecentCall>, StoreError>
  /** The segments a compaction or a rewind opened, oldest first (the origin segment has no record). */
  readonly segments: (conversationId: string) => Effect.Effect<ReadonlyArray<SegmentRecord>, StoreError>
  /** Records a call's time to its first delta and its attempts (never its status; not a commit point). */
  readonly recordCallTiming: (callId: string, timing: CallTiming) => Effect.Effect<void, StoreError>
  /**
   * Sets a conversation's name (an empty name clears it); with `onlyIfEmpty`, only when it has
   * none. Whether it changed. The conversation need not exist yet.
   */
  readonly nameConversation: (conversationId: string, name: string, onlyIfEmpty: boolean) => Effect.Effect<boolean, StoreError>
  /** The name a conversation was given, if any. */
  readonly conversationName: (conversationId: string) => Effect.Effect<Option.Option<string>, StoreError>
  /** Records an attempt of the call that failed before answering (not a commit point). */
  readonly recordAttempt: (callId: string, attempt: FailedAttempt) => Effect.Effect<void, StoreError>
  /** The failed attempts of one call, or of every call of a conversation, in the order they were made. */
  readonly attemptsOf: (scope: { readonly callId: string } | { readonly conversationId: string }) => Effect.Effect<ReadonlyArray<AttemptRecord>, StoreError>
  /** The failed attempts of every conversation's calls since `sinceMs`, oldest first, the newest `limit` of them. */
  readonly attemptsSince: (sinceMs: number, limit: number) => Effect.Effect<ReadonlyArray<RecentAttempt>, StoreError>
  /** The model calls of every conversation that match, newest first, a page of them. */
  readonly callLog: (query: CallLogQuery) => Effect.Effect<CallLogPage, StoreError>
  /** The call, as the operator reads it (`requestChars` included), with its conversation. */
  readonly callInsight: (callId: string) => Effect.Effect<Option.Option<RecentCall>, StoreError>
  /** The answer a committed call added to the journal (the message its `assistant_hash` names, after its request); none otherwise. */
  readonly answerOf: (callId: string) => Effect.Effect<Option.Option<Message>, StoreError>
  /** Appends one stream event to the optional diagnostics log (never read back into history). */
  readonly appendDiagnostic: (callId: string, eventIndex: number, event: unknown) => Effect.Effect<void, StoreError>
}
