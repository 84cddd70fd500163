/**
 * The output side of one Cursor request (one turn): an ordered list of Connect frames with a
 * backlog, so that a reader that reconnects with the same request id receives everything from
 * the start, then the live frames, then the end-stream frame.
 *
 * Writes never wait for a reader: the turn runs on whether or not one is attached (a
 * disconnect is not a cancel). At most one reader reads at a time; a newer one replaces it.
 *
 * A reader is a `FrameSink`: the frames a write carries reach it synchronously, in the writer's
 * own call (the wires' sinks write them to their socket there and then: no queue and no fiber
 * hand-off per frame). `attach` wraps a sink around a mailbox for readers that want a Stream.
 */
import { Duration, Effect, Exit, Fiber, FiberId, Mailbox, Stream } from "effect"

/** A frame a reader gets when nothing else was sent for a while (not kept in the backlog). */
export interface Heartbeat {
  readonly frame: Uint8Array
  readonly interval: Duration.DurationInput
}

/** Where a reader's frames go, synchronously; the sink buffers what its socket cannot take yet. */
export interface FrameSink {
  /** Frames written together (one write of the turn), in order. */
  readonly write: (frames: ReadonlyArray<Uint8Array>) => void
  /** No more frames: after the end-stream frame, or because a newer reader replaced this one. */
  readonly end: () => void
}

export interface TurnChannel {
  readonly requestId: string
  /** Appends frames in order; they reach the attached reader, and any later one, in this order. */
  readonly write: (frames: ReadonlyArray<Uint8Array>) => Effect.Effect<void>
  /** The same, as a plain call (the delta fast path). */
  readonly unsafeWrite: (frames: ReadonlyArray<Uint8Array>) => void
  /** Appends the end-stream frame and closes; later writes are dropped. Idempotent. */
  readonly close: (endFrame: Uint8Array) => Effect.Effect<void>
  /**
   * Attaches a reader: the sink gets the backlog at once (with a heartbeat and nothing to
   * replay, the heartbeat's frame instead: it flushes the response headers), then live frames
   * and, every `interval`, the heartbeat's, and ends after the end-stream frame. Returns the
   * detach: the sink's connection is gone (idempotent; a replaced reader is detached already).
   */
  readonly attachSink: (sink: FrameSink, heartbeat?: Heartbeat) => Effect.Effect<() => void>
  /** A reader as a Stream of frames (one element per frame), on `attachSink`. */
  readonly attach: (heartbeat?: Heartbeat) => Effect.Effect<Stream.Stream<Uint8Array>>
  readonly isClosed: () => boolean
  /** Whether a reader is attached now. */
  readonly isAttached: () => boolean
  /** Whether a reader has received the end-stream frame (the turn was seen to its end). */
  readonly endDelivered: () => boolean
  /** Frames written so far (end frame included). */
  readonly size: () => number
}

interface Reader {
  readonly sink: FrameSink
  beat: Fiber.RuntimeFiber<unknown> | undefined
}

export const makeTurnChannel = (requestId: string): TurnChannel => {
  const backlog: Array<Uint8Array> = []
  let closed = false
  let delivered = false
  let reader: Reader | null = null

  const release = (current: Reader) => {
    if (reader === current) reader = null
    current.beat?.unsafeInterruptAsFork(FiberId.none)
    current.beat = undefined
  }

  const unsafeWrite = (frames: ReadonlyArray<Uint8Array>) => {
    if (closed || frames.length === 0) return
    for (const frame of frames) backlog.push(frame)
    reader?.sink.write(frames)
  }

  const close = (endFrame: Uint8Array) =>
    Effect.sync(() => {
      if (closed) return
      closed = true
      backlog.push(endFrame)
      const current = reader
      if (current !== null) {
        release(current)
        current.sink.write([endFrame])
        delivered = true
        current.sink.end()
      }
    })

  const attachSink = (sink: FrameSink, heartbeat?: Heartbeat) =>
    Effect.gen(function*() {
      // Replace a previous reader: its connection is stale once the client has reconnected.
      const previous = reader
      if (previous !== null) {
        release(previous)
        previous.sink.end()
      }
      const current: Reader = { sink, beat: undefined }
      if (heartbeat !== undefined && backlog.length === 0) sink.write([heartbeat.frame])
      if (backlog.length > 0) sink.write(backlog.slice())
      if (closed) {
        delivered = true
        sink.end()
        return () => undefined
      }
      reader = current
      if (heartbeat !== undefined) {
        const interval = Duration.decode(heartbeat.interval)
        current.beat = yield* Effect.forkDaemon(Effect.forever(Effect.zipRight(
          Effect.sleep(interval),
          Effect.sync(() => {
            if (reader === current) sink.write([heartbeat.frame])
          })
        )))
      }
      return () => release(current)
    })

  const attach = (heartbeat?: Heartbeat) =>
    Effect.gen(function*() {
      const mailbox = yield* Mailbox.make<Uint8Array>()
      const detach = yield* attachSink({
        // A copy: the mailbox may keep the array it is given as its buffer.
        write: (frames) => void mailbox.unsafeOfferAll(frames.slice()),
        end: () => void mailbox.unsafeDone(Exit.void)
      }, heartbeat)
      return Mailbox.toStream(mailbox).pipe(Stream.ensuring(Effect.sync(detach)))
    })

  return {
    requestId,
    write: (frames) => Effect.sync(() => unsafeWrite(frames)),
    unsafeWrite,
    close,
    attachSink,
    attach,
    isClosed: () => closed,
    isAttached: () => reader !== null,
    endDelivered: () => delivered,
    size: () => backlog.length
  }
}
