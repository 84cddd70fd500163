/**
 * The output side of one Cursor request (one turn): an ordered list of Connect frames with a
 * backlog, so that a RunSSE that reconnects with the same request id receives everything from
 * the start, then the live frames, then the end-stream frame.
 *
 * Writes never wait for a reader: the turn runs on whether or not a RunSSE is attached (a
 * disconnect is not a cancel). At most one RunSSE reads at a time; a newer one replaces it.
 */
import { Chunk, Duration, Effect, Exit, Mailbox, Stream } from "effect"

/** A frame a reader gets when nothing else was sent for a while (not kept in the backlog). */
export interface Heartbeat {
  readonly frame: Uint8Array
  readonly interval: Duration.DurationInput
}

export interface TurnChannel {
  readonly requestId: string
  /** Appends frames in order; they reach the attached reader, and any later one, in this order. */
  readonly write: (frames: ReadonlyArray<Uint8Array>) => Effect.Effect<void>
  /** Appends the end-stream frame and closes; later writes are dropped. Idempotent. */
  readonly close: (endFrame: Uint8Array) => Effect.Effect<void>
  /**
   * A reader: the backlog, then live frames, ending after the end-stream frame. With a
   * heartbeat, the reader also gets its frame at once (unless there is a backlog to replay) and then every `interval`, offered into
   * the same queue as the frames (a merged second stream costs far more per frame).
   */
  readonly attach: (heartbeat?: Heartbeat) => Effect.Effect<Stream.Stream<Uint8Array>>
  readonly isClosed: () => boolean
  /** Whether a RunSSE is reading now. */
  readonly isAttached: () => boolean
  /** Whether a reader has received the end-stream frame (the turn was seen to its end). */
  readonly endDelivered: () => boolean
  /** Frames written so far (end frame included). */
  readonly size: () => number
}

export const makeTurnChannel = (requestId: string): TurnChannel => {
  const backlog: Array<Uint8Array> = []
  let closed = false
  let endFrameSent: Uint8Array | null = null
  let delivered = false
  let reader: Mailbox.Mailbox<Uint8Array> | null = null

  const write = (frames: ReadonlyArray<Uint8Array>) =>
    Effect.sync(() => {
      if (closed || frames.length === 0) return
      for (const frame of frames) backlog.push(frame)
      reader?.unsafeOfferAll(frames.slice())
    })

  const close = (endFrame: Uint8Array) =>
    Effect.sync(() => {
      if (closed) return
      closed = true
      endFrameSent = endFrame
      backlog.push(endFrame)
      if (reader !== null) {
        reader.unsafeOffer(endFrame)
        reader.unsafeDone(Exit.void)
      }
    })

  const attach = (heartbeat?: Heartbeat) =>
    Effect.gen(function*() {
      const mailbox = yield* Mailbox.make<Uint8Array>()
      // Replace a previous reader: its connection is stale once the client has reconnected.
      reader?.unsafeDone(Exit.void)
      reader = mailbox
      // With nothing to replay, the first heartbeat goes out at once: it flushes the response headers.
      if (heartbeat !== undefined && backlog.length === 0) mailbox.unsafeOffer(heartbeat.frame)
      // A copy: the mailbox may keep the array it is given as its buffer.
      mailbox.unsafeOfferAll(backlog.slice())
      if (closed) mailbox.unsafeDone(Exit.void)
      const frames = Mailbox.toStream(mailbox).pipe(
        // The end frame is the last one offered, so it ends the last chunk.
        Stream.mapChunks((chunk) => {
          if (endFrameSent !== null && Chunk.isNonEmpty(chunk) && Chunk.lastNonEmpty(chunk) === endFrameSent) delivered = true
          return chunk
        }),
        Stream.ensuring(Effect.sync(() => {
          if (reader === mailbox) reader = null
        }))
      )
      if (heartbeat === undefined) return frames
      // Offers fail once the mailbox is done, and the beat ends with the reader's scope.
      const beat = Effect.sync(() => mailbox.unsafeOffer(heartbeat.frame)).pipe(
        Effect.delay(heartbeat.interval),
        Effect.forever
      )
      return Stream.unwrapScoped(Effect.as(Effect.forkScoped(beat), frames))
    })

  return {
    requestId,
    write,
    close,
    attach,
    isClosed: () => closed,
    isAttached: () => reader !== null,
    endDelivered: () => delivered,
    size: () => backlog.length
  }
}
