/**
 * The end of a turn on the wire, in the order Cursor's own server uses: the `set_blob`
 * messages for the blobs the client does not hold yet and `turn_ended` at once (Cursor shows
 * the turn done), then the checkpoint once every blob is acknowledged (within
 * `blobAckTimeoutMs`), then the end-stream frame. A failed or canceled turn ends at once.
 *
 * A message the user queued while the agent worked arrives on the same request right after
 * `turn_ended`; the stream stays open `queuedMessageGraceMs` for it, and a turn it starts runs
 * on the same stream (`beginNextTurn`), building on this turn's checkpoint. Only then does the
 * stream end.
 */
import { Clock, Deferred, Effect } from "effect"
import * as Dialect from "../Dialect.js"
import type { Usage } from "../Llm.js"
import type { ConversationState } from "../Loop.js"
import type { TurnOutcome, TurnRef } from "../Runner.js"
import * as State from "../Session.js"
import { SessionInput, sessionTransition } from "../Session.js"
import { endFrameOf, frameOf, isEnded, write } from "./Session.js"
import type { Session, SessionEnv } from "./Session.js"
import { URGENT } from "../internal/Scheduler.js"

/** How long a queued message the runner was given may take to start its turn before the stream ends anyway. */
const QUEUED_TURN_START_MS = 10_000

/** Writes the end-stream frame: the session is over; what still waits on the client is released. */
export const endSession = (session: Session, end: Dialect.EndStream) =>
  Effect.gen(function*() {
    session.state = sessionTransition(session.state, SessionInput.Ended({ atMs: yield* Clock.currentTimeMillis })).state
    for (const ack of session.blobAcks.values()) ack(false)
    for (const read of session.blobReads.values()) yield* Deferred.succeed(read, undefined)
    session.blobAcks.clear()
    session.blobReads.clear()
    yield* session.channel.close(endFrameOf(end))
  })

/** The client's input ended (a half-closed `Run`): what waits for its answers is released. */
export const endInput = (session: Session) =>
  Effect.gen(function*() {
    session.inputEnded = true
    for (const ack of session.blobAcks.values()) ack(false)
    for (const read of session.blobReads.values()) yield* Deferred.succeed(read, undefined)
  })

/** Whether `session` is still ending the turn `turnId` (no later turn started on it, not ended). */
const stillEnding = (session: Session, turnId: string) => State.stillEnding(session.state, turnId)

/**
 * What ends a turn on the wire, once per turn. Urgent (`internal/Scheduler.ts`) whoever calls it
 * (the runner's actor, a resume, a replay after a restart): the client waits on a turn's end,
 * and on the checkpoint once it acknowledged the blobs.
 */
export const sendTurnEnd = (
  env: SessionEnv,
  session: Session,
  turn: TurnRef,
  outcome: TurnOutcome,
  state: ConversationState,
  usage: Usage
) =>
  Effect.gen(function*() {
    const maxTokens = env.options.contextWindowOf(turn.settings.model)
    const step = sessionTransition(session.state, SessionInput.Ending({ turn, outcome, conversation: state, usage, maxTokens }))
    session.state = step.state
    const send = step.commands.find((command) => command._tag === "SendTurnEnd")
    if (send === undefined) return
    const { replayed, end, checkpoint } = send
    if (checkpoint === undefined) {
      yield* write(session, send.messages)
      yield* endSession(session, end)
      return
    }
    const acks = awaitBlobs(session, send.blobs)
    session.channel.unsafeWrite(send.messages.map(frameOf))
    // A client whose input ended cannot acknowledge them: the turn ends without its checkpoint.
    if (session.inputEnded) acks.expire()
    const graceEndsAtMs = (yield* Clock.currentTimeMillis) + (replayed ? 0 : env.options.queuedMessageGraceMs)
    // In a later pass of the event loop: the answer to the append whose acknowledgement got here goes out first.
    const ended = () =>
      void setImmediate(() => env.fork(Effect.suspend(() => (stillEnding(session, turn.turnId) ? endSession(session, end) : Effect.void))))
    // Past the timeout a late acknowledgement publishes nothing.
    // The timers are unref'd: they never hold up the process's exit.
    const ackTimer = setTimeout(acks.expire, env.options.blobAckTimeoutMs).unref()
    // The checkpoint goes out in the handler of the client's last acknowledgement, after
    // `turn_ended` (written just above), and the end follows on timers: no fiber waits for
    // either (on a busy server each wake-up waits its turn in the run queue, and the checkpoint
    // waited seconds under `bench/ack.ts`).
    acks.whenSettled((ok) => {
      clearTimeout(ackTimer)
      if (isEnded(session)) return
      if (ok) session.channel.unsafeWrite([frameOf(Dialect.encodeCheckpoint(checkpoint))])
      else env.fork(Effect.logWarning(`transport: the client did not acknowledge the blobs of ${session.requestId}; checkpoint not published`))
      const afterGrace = () => {
        if (!stillEnding(session, turn.turnId)) return
        if (!session.state.queuedTurnExpected) return ended()
        // A queued message was handed to the runner: its turn ends the stream, unless it does not start in time.
        const waiting = setTimeout(() => {
          session.nextTurnStarted = undefined
          ended()
        }, QUEUED_TURN_START_MS).unref()
        session.nextTurnStarted = () => clearTimeout(waiting)
      }
      const left = graceEndsAtMs - Date.now()
      if (left > 0 && stillEnding(session, turn.turnId)) setTimeout(afterGrace, left).unref()
      else afterGrace()
    })
  }).pipe(Effect.withSchedulingPriority(URGENT))

/**
 * A turn the runner speaks for on a session that is ending an earlier one (the machine's
 * `NextTurn`): a message the user queued started it. It runs on the same stream, with its own
 * tool calls and checkpoint.
 */
export const beginNextTurn = (session: Session) => {
  session.nextTurnStarted?.()
  session.nextTurnStarted = undefined
}

/** The acknowledgements of one checkpoint's blobs, counted down as the client's answers come. */
interface BlobAcks {
  /** `f` runs once, with whether every blob was stored: at once if that is known, else in the handler of the answer that settles it. */
  readonly whenSettled: (f: (ok: boolean) => void) => void
  /** Settles as not acknowledged, unless settled already. */
  readonly expire: () => void
}

/** The acknowledgements to wait for of the `set_blob`s the machine sent, by KV id. */
const awaitBlobs = (session: Session, kvIds: ReadonlyArray<number>): BlobAcks => {
  let left = kvIds.length
  let outcome: boolean | undefined = left === 0 ? true : undefined
  let then: ((ok: boolean) => void) | undefined
  const settle = (ok: boolean) => {
    if (outcome !== undefined) return
    outcome = ok
    then?.(ok)
  }
  // Called once: the entry leaves the map when the client answers or the session ends.
  for (const kvId of kvIds) {
    session.blobAcks.set(kvId, (ok) => {
      if (!ok) settle(false)
      else if (--left === 0) settle(true)
    })
  }
  return {
    whenSettled: (f) => {
      if (outcome !== undefined) f(outcome)
      else then = f
    },
    expire: () => settle(false)
  }
}
