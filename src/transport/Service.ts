/** The transport as a service: what the wires (`Front.ts`, `Run.ts`, the routes) call, and the agent routes' paths. */
import { Context } from "effect"
import type { Effect } from "effect"
import type * as Dialect from "../Dialect.js"
import type { ClientMessage } from "../Dialect.js"
import type { Caller } from "../Users.js"
import type { ConnectError } from "./Connect.js"
import type { TransportOptions } from "./Options.js"
import type { FrameSink } from "./TurnChannel.js"

export interface TransportService {
  readonly options: TransportOptions
  /** Handles a BidiAppend body; answers with the (empty) response bytes or a Connect error. */
  /**
   * An append's answer: at once (the bytes) when it was taken in this call, else the effect that
   * takes it. `clientVersion`: the request's `x-cursor-client-version`, which its unknown fields
   * are counted under (`Drift.ts`).
   */
  readonly bidiAppend: (body: Uint8Array, parent?: Dialect.ParentLink, clientVersion?: string, caller?: Caller) => Uint8Array | Effect.Effect<Uint8Array, ConnectError>
  /**
   * Opens the output of a RunSSE request body: attaching a sink gives it the frames (heartbeats
   * included), ending with end-stream; the attach returns the sink's detach.
   */
  readonly runSse: (body: Uint8Array, parent?: Dialect.ParentLink, clientVersion?: string, caller?: Caller) => Effect.Effect<AttachOutput, ConnectError>
  /**
   * One client message of a `Run` stream, the `seqno`th on it: taken in order like an append
   * (`Run` has no acknowledgements). Fails with a Connect error that ends the stream.
   */
  readonly runMessage: (requestId: string, seqno: number, message: ClientMessage) => Effect.Effect<void, ConnectError>
  /**
   * A `Run` stream half-closed: the end of the client's input (not a cancel). True when the
   * request has nothing to run (no run request came, and none can come now).
   */
  readonly runInputEnded: (requestId: string) => Effect.Effect<boolean>
  /** The output of a `Run` stream: the session's frames (heartbeats included), ending with end-stream. */
  readonly runOutput: (requestId: string, parent?: Dialect.ParentLink, caller?: Caller) => Effect.Effect<AttachOutput, ConnectError>
  /** Ends every open stream with a retryable error (graceful shutdown). */
  readonly shutdown: Effect.Effect<void>
  /** Open sessions, for metrics and tests. */
  readonly sessionCount: () => number
}

/** Attaches a wire's sink to a request's output (`TurnChannel.attachSink`); returns its detach. */
export type AttachOutput = (sink: FrameSink) => Effect.Effect<() => void>

/** The agent routes' paths (served by the front door's agent wire, `transport/front/Agent.ts`). */
export const BIDI_APPEND_PATH = "/aiserver.v1.BidiService/BidiAppend"
export const RUN_SSE_PATH = "/agent.v1.AgentService/RunSSE"


export class Transport extends Context.Tag("cursor-byok/Transport")<Transport, TransportService>() {}

/** One buffer for frames written together (a single frame passes as it is): one socket write. */
export const joinFrames = (frames: ReadonlyArray<Uint8Array>): Uint8Array => {
  if (frames.length === 1) return frames[0]!
  let size = 0
  for (const frame of frames) size += frame.length
  const out = new Uint8Array(size)
  let offset = 0
  for (const frame of frames) {
    out.set(frame, offset)
    offset += frame.length
  }
  return out
}
