/** The turn sessions' timing and size limits (configuration keys in the README). */
export interface TransportOptions {
  /** Heartbeat cadence on an open RunSSE (Cursor aborts after ~30 s of silence). */
  readonly heartbeatMs: number
  readonly bidiAppendMaxBytes: number
  readonly runSseMaxBytes: number
  /**
   * How far ahead of the next expected seqno an append may be held (for a request with no turn
   * in this process, past 0 only when the store knows the request: see `startedTurnBefore`).
   */
  readonly appendWindow: number
  /**
   * How long a BidiAppend waits to be handed on (when held behind a gap) and for the commit of
   * the input it carries, before it is answered `unavailable` so that the client sends it again
   * (see `ACKNOWLEDGING AN APPEND`). Below the ~5 s the IDE is reported to wait for an append.
   */
  readonly appendAckTimeoutMs: number
  /**
   * How long a recovered turn's inbox waits for a missing seqno that is not a committed input
   * before passing over it (see `PASSING OVER GAPS AFTER A RESTART`); shorter than
   * `appendAckTimeoutMs`, so the appends held behind it are still acknowledged in time.
   */
  readonly gapGraceMs: number
  /** How long the end of a turn waits for the client to acknowledge the checkpoint's blobs. */
  readonly blobAckTimeoutMs: number
  /** How long a turn waits for the request-context parts it reads back (ref_only transport) before starting without them. */
  readonly contextFetchTimeoutMs: number
  /** How long a finished request's output stays available to a reconnecting RunSSE. */
  readonly finishedRetentionMs: number
  /** A request that never becomes a turn (no run request) is forgotten after this long. */
  readonly idleRetentionMs: number
  /**
   * How long a RunSSE for a request with no run request and no turn in this process waits for
   * one; then the end of the request's turn that ended before a restart is replayed, and a
   * request the store knows no turn of is ended (unavailable). See `replayEnd`.
   */
  readonly orphanTimeoutMs: number
  /** How often finished and orphaned requests are looked for. */
  readonly sweepIntervalMs: number
  /**
   * How long a stream stays open after a turn's end (its checkpoint, or turn_ended when the turn
   * failed) for a message the user queued while the agent worked: Cursor sends it on the same
   * request right after `turn_ended`, and it runs as the next turn on the same stream.
   */
  readonly queuedMessageGraceMs: number
  /** The context window of a model, for the checkpoint's context meter. */
  readonly contextWindowOf: (model: string) => number
  /** The model a Task's subagent runs on; undefined: the parent turn's. */
  readonly subagentModel?: () => string | undefined
  /**
   * The model a subagent's child run asks for, made one this server has: Cursor may name its own
   * hosted model there (e.g. its fast composer); one not configured (nor aliased) runs on the
   * subagent model, else the default. Unset: as asked.
   */
  readonly childModel?: (requested: string) => string
}

export const defaultTransportOptions: TransportOptions = {
  heartbeatMs: 5_000,
  bidiAppendMaxBytes: 16 * 1024 * 1024,
  runSseMaxBytes: 64 * 1024,
  appendWindow: 1024,
  appendAckTimeoutMs: 4_000,
  gapGraceMs: 1_000,
  blobAckTimeoutMs: 30_000,
  contextFetchTimeoutMs: 10_000,
  finishedRetentionMs: 30_000,
  idleRetentionMs: 10 * 60_000,
  orphanTimeoutMs: 30_000,
  sweepIntervalMs: 5_000,
  queuedMessageGraceMs: 1_500,
  contextWindowOf: () => 200_000
}
