/**
 * The reference client's HTTP/2 wire: Cursor's `agent.v1.AgentService/Run`, one Connect bidi
 * call (`application/connect+proto` over h2c) per turn, spoken with the official
 * `@connectrpc/connect-node` client. Every client message of the turn (the run_request first,
 * then exec results, KV answers, heartbeats, follow-ups, cancels) goes on the call's request
 * stream, which stays open until the response ended; the server's messages come back on the
 * response and go through the same `Turn` path as RunSSE frames.
 *
 * The stream's outcome: a response that ends normally is end-stream `{}` (`EndStream.Ok()`); a
 * `ConnectError` is `EndStream.Error` with Connect's code string, the error's raw message and
 * its `aiserver.v1.ErrorDetails` detail as `Dialect.decodeEndStream` reads it from RunSSE. A
 * call that broke without the server's end-stream (a reset stream, a body without end-stream,
 * an HTTP error status) also leaves a problem in the transcript.
 *
 * An HTTP/2 stream cannot be reattached, so `reconnect` resumes as the CLI does: a new call with
 * a new request id whose first message is a run_request with `resume_action`.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect"
import type { Client } from "@connectrpc/connect"
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node"
import { Either, Schema } from "effect"
import { randomUUID } from "node:crypto"
import { performance } from "node:perf_hooks"
import * as Dialect from "../../src/Dialect.js"
import { AgentService } from "../../src/gen/agent/v1/agent_pb.js"
import type { AgentServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import { ErrorDetailsSchema } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import type { AgentClientMessageInit, AppendRecord, Connection, TurnWire } from "./CursorClient.js"

type RunClient = Client<typeof AgentService>

const runTransport = (runUrl: string, sessionManager: Http2SessionManager) =>
  createConnectTransport({ baseUrl: runUrl, httpVersion: "2", useBinaryFormat: true, sessionManager })

/** The `Run` client of one `CursorClient`: one HTTP/2 session for all its turns. */
export class RunConnection {
  private readonly sessions: Http2SessionManager
  readonly client: RunClient

  constructor(readonly runUrl: string) {
    this.sessions = new Http2SessionManager(runUrl)
    this.client = createClient(AgentService, runTransport(runUrl, this.sessions))
  }

  /** Closes the HTTP/2 session (and any call still open on it). */
  close(): void {
    this.sessions.abort()
  }
}

/**
 * One `Run` call opened by hand, outside a `Turn` (bad input, low-level tests): `messages` is
 * the request stream (the call's request side ends when it does), the result the server's
 * messages; a `ConnectError` is thrown as the official client throws it. Its own HTTP/2 session,
 * closed once the response is over.
 */
export const openRawRun = (
  runUrl: string,
  requestId: string,
  messages: AsyncIterable<AgentClientMessageInit>,
  signal?: AbortSignal
): AsyncIterable<AgentServerMessage> => {
  const sessions = new Http2SessionManager(runUrl)
  const responses = createClient(AgentService, runTransport(runUrl, sessions)).run(messages, {
    headers: { "x-request-id": requestId },
    ...(signal !== undefined ? { signal } : {})
  })
  return (async function*() {
    try {
      yield* responses
    } finally {
      sessions.abort()
    }
  })()
}

// =============================================================================
// End of stream
// =============================================================================

/** Connect's code strings (`src/transport/Connect.ts`'s `ConnectCode`), by `Code`. */
const CODE_STRINGS: Record<Code, string> = {
  [Code.Canceled]: "canceled",
  [Code.Unknown]: "unknown",
  [Code.InvalidArgument]: "invalid_argument",
  [Code.DeadlineExceeded]: "deadline_exceeded",
  [Code.NotFound]: "not_found",
  [Code.AlreadyExists]: "already_exists",
  [Code.PermissionDenied]: "permission_denied",
  [Code.ResourceExhausted]: "resource_exhausted",
  [Code.FailedPrecondition]: "failed_precondition",
  [Code.Aborted]: "aborted",
  [Code.OutOfRange]: "out_of_range",
  [Code.Unimplemented]: "unimplemented",
  [Code.Internal]: "internal",
  [Code.Unavailable]: "unavailable",
  [Code.DataLoss]: "data_loss",
  [Code.Unauthenticated]: "unauthenticated"
}

export const connectCodeString = (code: Code): string => CODE_STRINGS[code]

const isTurnCode = Schema.is(Dialect.ConnectCode)

/**
 * A `ConnectError` as the end-stream `Dialect.decodeEndStream` would have read: code string,
 * raw message, the `aiserver.v1.ErrorDetails` detail; left (like a bad RunSSE end-stream) for a
 * code a turn does not end with, or an ErrorDetails that does not decode.
 */
export const endStreamOfError = (error: ConnectError): Either.Either<Dialect.EndStream, { readonly message: string }> => {
  const code = CODE_STRINGS[error.code]
  if (!isTurnCode(code)) return Either.left({ message: `end-stream code ${code} is not one a turn ends with` })
  const [decoded] = error.findDetails(ErrorDetailsSchema)
  if (decoded === undefined) {
    const named = error.details.some((d) => ("desc" in d ? d.desc.typeName : d.type) === ErrorDetailsSchema.typeName)
    if (named) return Either.left({ message: `its ${ErrorDetailsSchema.typeName} detail does not decode` })
    return Either.right(Dialect.EndStream.Error({ code, message: error.rawMessage, detail: undefined }))
  }
  return Either.right(Dialect.EndStream.Error({
    code,
    message: error.rawMessage,
    detail: {
      error: decoded.error,
      title: decoded.details?.title ?? "",
      detail: decoded.details?.detail ?? "",
      isRetryable: decoded.details?.isRetryable ?? false
    }
  }))
}

// =============================================================================
// The wire
// =============================================================================

/** What `RunWire` needs from its `Turn`. */
export interface RunWireHost {
  /** The turn's request id: the first call's `x-request-id`. */
  readonly requestId: string
  readonly extraHeaders: Readonly<Record<string, string>>
  /** `Turn.send`: numbers and records a message, then hands it back to `RunWire.send`. */
  readonly send: (message: AgentClientMessageInit) => Promise<number>
  /** A new connection of the turn (one per call). */
  readonly newConnection: () => Connection
  readonly onMessage: (connection: Connection, message: AgentServerMessage, at: number) => void
  readonly onEnd: (connection: Connection, end: Either.Either<Dialect.EndStream, { readonly message: string }>, at: number) => void
  readonly problem: (problem: string) => void
  readonly recordAppend: (record: AppendRecord) => void
  /** The run_request that opens a resumed call. */
  readonly resumeRequest: () => AgentClientMessageInit
}

interface Outbound {
  readonly seqno: number
  readonly message: AgentClientMessageInit
  readonly what: string
  readonly sentAt: number
  readonly resolve: (status: number) => void
}

/**
 * One Run call: its request stream (a queue the connect client pulls from), its abort signal
 * and the connection its frames go to.
 */
class RunCall {
  readonly controller = new AbortController()
  /** The response is over (ended, failed or aborted). */
  responseOver = false
  /** Resolves when the response headers arrived, or the call is over without them. */
  readonly opened: Promise<void>
  private markOpened!: () => void
  private readonly queue: Array<Outbound> = []
  private requestEnded = false
  private wake: (() => void) | undefined

  constructor(readonly requestId: string, readonly connection: Connection, private readonly handed: (item: Outbound) => void) {
    this.opened = new Promise((r) => (this.markOpened = r))
  }

  open(): void {
    this.markOpened()
  }

  push(item: Outbound): void {
    this.queue.push(item)
    this.wake?.()
  }

  /** Ends the request side; returns the messages the call had not taken yet. */
  endRequests(): Array<Outbound> {
    this.requestEnded = true
    const left = this.queue.splice(0)
    this.wake?.()
    return left
  }

  /**
   * The request stream. Connect calls `throw`/`return` when the call is over (aborted, failed or
   * done): the request side ends, and the messages not taken stay for `endRequests`.
   */
  requests(): AsyncIterable<AgentClientMessageInit> {
    const stop = (): Promise<IteratorResult<AgentClientMessageInit>> => {
      this.requestEnded = true
      this.wake?.()
      return Promise.resolve({ done: true, value: undefined })
    }
    return { [Symbol.asyncIterator]: () => ({ next: () => this.next(), throw: stop, return: stop }) }
  }

  private next(): Promise<IteratorResult<AgentClientMessageInit>> {
    const item = this.requestEnded ? undefined : this.queue.shift()
    if (item !== undefined) {
      this.handed(item)
      return Promise.resolve({ done: false, value: item.message })
    }
    if (this.requestEnded) return Promise.resolve({ done: true, value: undefined })
    return new Promise((resolveNext) => {
      this.wake = () => {
        this.wake = undefined
        resolveNext(this.next())
      }
    })
  }
}

/** A turn's Run wire: the current call, and the messages waiting for a resumed one. */
export class RunWire implements TurnWire {
  /** The request ids of the resumed calls, in order. */
  readonly resumedRequestIds: Array<string> = []
  private call: RunCall | undefined
  /** Sent while disconnected: they go on the next (resumed) call. */
  private held: Array<Outbound> = []
  private halfClosed = false
  private over = false

  constructor(private readonly connection: RunConnection, private readonly host: RunWireHost) {}

  open(run: AgentClientMessageInit): Promise<void> {
    const call = this.start(this.host.requestId)
    void this.host.send(run)
    return call.opened
  }

  send(seqno: number, message: AgentClientMessageInit, what: string): Promise<number> {
    return new Promise((resolve) => {
      const item: Outbound = { seqno, message, what, sentAt: performance.now(), resolve }
      // After the response ended there is no request stream left: nothing was lost that the
      // server still waited for (as a late append after the end on RunSSE).
      if (this.over) this.drop(item, undefined)
      else if (this.halfClosed) this.drop(item, "it was sent after halfClose()")
      else if (this.call === undefined) this.held.push(item)
      else this.call.push(item)
    })
  }

  disconnect(): void {
    const call = this.call
    if (call === undefined) return
    this.call = undefined
    call.connection.finished = true
    // Abort first: ending the request side first would reach the server as a half-close.
    call.controller.abort()
    this.held.push(...call.endRequests())
  }

  reconnect(): Promise<void> {
    if (this.over) return Promise.resolve()
    this.disconnect()
    const requestId = randomUUID()
    this.resumedRequestIds.push(requestId)
    const call = this.start(requestId)
    void this.host.send(this.host.resumeRequest())
    const held = this.held
    this.held = []
    for (const item of held) call.push(item)
    return call.opened
  }

  halfClose(): void {
    if (this.halfClosed) return
    this.halfClosed = true
    for (const item of [...this.held, ...(this.call?.endRequests() ?? [])]) this.drop(item, "it was sent before halfClose() but not taken yet")
    this.held = []
  }

  close(): void {
    if (this.over) return
    this.over = true
    const call = this.call
    for (const item of this.held) this.drop(item, "the Run call was disconnected and not resumed")
    this.held = []
    if (call !== undefined && !call.responseOver) call.controller.abort()
    for (const item of call?.endRequests() ?? []) this.drop(item, undefined)
  }

  private start(requestId: string): RunCall {
    const connection = this.host.newConnection()
    const call = new RunCall(requestId, connection, (item) => this.handed(item))
    this.call = call
    let headersSeen = false
    const responses = this.connection.client.run(call.requests(), {
      headers: { "x-request-id": requestId, ...this.host.extraHeaders },
      signal: call.controller.signal,
      onHeader: (headers) => {
        headersSeen = true
        connection.headers = Object.fromEntries(headers.entries())
        call.open()
      }
    })
    void this.read(call, responses, () => headersSeen)
    return call
  }

  private async read(call: RunCall, responses: AsyncIterable<AgentServerMessage>, headersSeen: () => boolean) {
    const connection = call.connection
    try {
      for await (const message of responses) {
        if (connection.finished) return
        this.host.onMessage(connection, message, performance.now())
      }
      call.responseOver = true
      if (connection.finished) return
      this.host.onEnd(connection, Either.right(Dialect.EndStream.Ok()), performance.now())
    } catch (cause) {
      call.responseOver = true
      if (connection.finished) return // disconnect() or the turn's end aborted it
      const error = ConnectError.from(cause)
      // The server's end-stream error carries the response headers in its metadata; a reset
      // stream, a body without end-stream or a bad response is the client's own error.
      if (!headersSeen()) this.host.problem(`Run failed before its response headers: ${error.message}`)
      else if (!error.metadata.has("content-type")) this.host.problem(`Run broke without an end-stream: ${error.message}`)
      this.host.onEnd(connection, endStreamOfError(error), performance.now())
    } finally {
      call.responseOver = true
      call.open()
      // The response is over: the request side ends too. (A disconnected call's messages were
      // moved to `held` before its abort; the turn is over otherwise.)
      for (const item of call.endRequests()) this.drop(item, undefined)
    }
  }

  private handed(item: Outbound): void {
    this.host.recordAppend({ seqno: item.seqno, what: item.what, status: 200, sentAt: item.sentAt, answeredAt: performance.now(), attempts: 1 })
    item.resolve(200)
  }

  private drop(item: Outbound, why: string | undefined): void {
    this.host.recordAppend({ seqno: item.seqno, what: item.what, status: 0, sentAt: item.sentAt, answeredAt: performance.now(), attempts: 0 })
    if (why !== undefined) this.host.problem(`message ${item.seqno} (${item.what}) was never sent: ${why}`)
    item.resolve(0)
  }
}
