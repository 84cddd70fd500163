/**
 * The benchmarks' client of Cursor's HTTP/2 wire: one `agent.v1.AgentService/Run` Connect bidi
 * call per turn on h2c (prior knowledge), spoken with `node:http2` directly (no Connect library
 * in between, as the RunSSE side of the benchmarks uses `node:http`). It returns the same
 * `StreamResult` as `streams.ts`, so the two wires are measured alike.
 *
 * One stream: headers `x-request-id`, `content-type: application/connect+proto`,
 * `connect-protocol-version: 1`; the first envelope (flags, 4-byte big-endian length,
 * protobuf `AgentClientMessage`) is the run_request `CursorClient` builds for RunSSE
 * (`runRequestMessage`); later ones are what the RunSSE client would have appended: a
 * `set_blob` acknowledgement (`kv_client_message.set_blob_result`) for each `set_blob`, a
 * `client_heartbeat` every `heartbeatMs` when asked, and on a probe a `cancel_action`. Every
 * server envelope is decoded (`AgentServerMessage`) as the RunSSE client decodes its frames,
 * with the time of the read that completed it; the call ends with the end-stream envelope
 * (flag 0x02, JSON), after which the client half-closes its side.
 *
 * HTTP/2 sessions: a turn opens its own session (TCP connection) unless it is given one, as
 * the RunSSE turns of the benchmarks each have their own `CursorClient` (own connections);
 * `openRunSession` gives one to share, as one Cursor window keeps one session for all its
 * streams. Node's default HTTP/2 settings on the client side, as a Connect client on Node has
 * them: 64 KiB stream and connection windows; Node credits the connection's back as data
 * arrives and a stream's as it is read, and these streams are read at once, so under 200
 * streams on one session the connection window was never seen below half (sampled every
 * millisecond); the server's stream limit, 1000, bounds the streams on one session.
 * `settings` and `localWindowSize` change them.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { Either } from "effect"
import { randomUUID } from "node:crypto"
import * as http2 from "node:http2"
import { performance } from "node:perf_hooks"
import * as Dialect from "../../src/Dialect.js"
import { AgentClientMessageSchema, AgentServerMessageSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { AgentServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import { ConnectError, splitEnvelopes } from "../../src/transport/Connect.js"
import { cancelAction, clientHeartbeat, envelope, FLAG_END_STREAM, runRequestMessage } from "../../test/support/CursorClient.js"
import type { AgentClientMessageInit, AppendRecord } from "../../test/support/CursorClient.js"
import { marker, stampsIn } from "./provider.js"
import type { StampedProvider } from "./provider.js"
import { countProblems, latenciesOf, noReactions } from "./streams.js"
import type { Reactions, StreamResult, StreamSpec } from "./streams.js"

export const RUN_PATH = "/agent.v1.AgentService/Run"

/** One HTTP/2 session to the server's h2c port; `close` ends it (its open streams are reset). */
export interface RunSession {
  readonly session: http2.ClientHttp2Session
  readonly close: () => Promise<void>
}

export interface RunSessionOptions extends http2.ClientSessionOptions {
  /** The session's own receive window (connection level, bytes); Node's default is 64 KiB. */
  readonly localWindowSize?: number
  /**
   * Resolve only once the server's SETTINGS arrived: until then Node assumes the server allows
   * 100 concurrent streams (`peerMaxConcurrentStreams`), so a burst of 200 would wait for it.
   */
  readonly waitForSettings?: boolean
}

/** Connects to `h2cUrl` (`http://127.0.0.1:<port>`) with prior knowledge; resolves once the session is up. */
export const openRunSession = (h2cUrl: string, options: RunSessionOptions = {}): Promise<RunSession> =>
  new Promise((resolve, reject) => {
    const { localWindowSize, waitForSettings, ...sessionOptions } = options
    const session = http2.connect(h2cUrl, sessionOptions)
    const failed = (error: Error) => reject(error)
    session.once("error", failed)
    const up = () => {
      session.off("error", failed)
      // Errors reach the streams; a session error after connect must not crash the bench.
      session.on("error", () => undefined)
      if (localWindowSize !== undefined) session.setLocalWindowSize(localWindowSize)
      resolve({
        session,
        close: () =>
          new Promise<void>((done) => {
            if (session.closed || session.destroyed) return done()
            const killer = setTimeout(() => session.destroy(), 2_000)
            session.close(() => {
              clearTimeout(killer)
              done()
            })
          })
      })
    }
    // Both orders happen: the server's SETTINGS may be read in the same tick as the connect.
    let connected = false
    let settings = waitForSettings !== true
    session.once("connect", () => {
      connected = true
      if (settings) up()
    })
    if (!settings) {
      session.once("remoteSettings", () => {
        settings = true
        if (connected) up()
      })
    }
  })

/**
 * One session kept across a bench's rounds, as one Cursor window keeps its own for all its
 * turns: opened on first use (after the server's SETTINGS), opened again if it was closed.
 */
export interface KeptRunSession {
  readonly get: () => Promise<RunSession>
  /** Sessions opened so far (1 when the same one served every round). */
  readonly opened: () => number
  readonly close: () => Promise<void>
}

export const keptRunSession = (h2cUrl: string, options: RunSessionOptions = {}): KeptRunSession => {
  let current: Promise<RunSession> | undefined
  let opened = 0
  const get = async (): Promise<RunSession> => {
    const existing = current === undefined ? undefined : await current.catch(() => undefined)
    if (existing !== undefined && !existing.session.closed && !existing.session.destroyed) return existing
    opened += 1
    current = openRunSession(h2cUrl, { waitForSettings: true, ...options })
    return current
  }
  return {
    get,
    opened: () => opened,
    close: async () => {
      const existing = current === undefined ? undefined : await current.catch(() => undefined)
      current = undefined
      await existing?.close()
    }
  }
}

const encode = (message: AgentClientMessageInit): Uint8Array =>
  envelope(0, toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, message)))

export interface RunStreamOptions {
  /** Sends a `client_heartbeat` this often during the turn; absent: none. */
  readonly heartbeatMs?: number
  readonly conversationId?: string
  /** A session to open the stream on (shared); absent: the turn opens its own and closes it after. */
  readonly session?: RunSession
  readonly timeoutMs?: number
}

/** One turn through the server on the Run wire. */
export const runStream = async (h2cUrl: string, provider: StampedProvider, spec: StreamSpec, options: RunStreamOptions = {}): Promise<StreamResult> => {
  const problems: Array<string> = []
  let own: RunSession | undefined
  let session: RunSession
  try {
    session = options.session ?? (own = await openRunSession(h2cUrl))
  } catch (error) {
    problems.push(`HTTP/2 connect failed: ${(error as Error).message}`)
    return { latencies: [], deltas: 0, batched: 0, firstAt: Number.NaN, lastAt: Number.NaN, appends: [], reactions: noReactions, problems }
  }
  try {
    return await turnOn(session.session, provider, spec, options, problems)
  } finally {
    await own?.close()
  }
}

const turnOn = (session: http2.ClientHttp2Session, provider: StampedProvider, spec: StreamSpec, options: RunStreamOptions, problems: Array<string>): Promise<StreamResult> =>
  new Promise((resolve) => {
    const requestId = randomUUID()
    const arrivals: Array<{ at: number; text: string }> = []
    const appends: Array<AppendRecord> = []
    let seqno = 0
    let stamps = 0
    let end: string | undefined
    let endAt: number | undefined
    let canceledAt: number | undefined
    let lastBlobAckAt: number | undefined
    let checkpointAt: number | undefined
    let settled = false

    let stream: http2.ClientHttp2Stream
    try {
      stream = session.request({
        ":method": "POST",
        ":path": RUN_PATH,
        "content-type": "application/connect+proto",
        "connect-protocol-version": "1",
        "x-request-id": requestId
      }, { endStream: false })
    } catch (error) {
      problems.push(`Run request failed: ${(error as Error).message}`)
      return resolve(result())
    }

    /** Writes one client message as the next envelope on the request stream; returns when it was written. */
    const send = (message: AgentClientMessageInit, what: string): number => {
      const at = performance.now()
      if (stream.destroyed || stream.writableEnded) {
        appends.push({ seqno: seqno++, what, status: 0, sentAt: at, answeredAt: at, attempts: 0 })
        return at
      }
      stream.write(encode(message))
      appends.push({ seqno: seqno++, what, status: 200, sentAt: at, answeredAt: at, attempts: 1 })
      return at
    }

    const heartbeat = options.heartbeatMs !== undefined && options.heartbeatMs > 0
      ? setInterval(() => send(clientHeartbeat(), "clientHeartbeat"), options.heartbeatMs)
      : undefined
    const timer = setTimeout(() => {
      problems.push(`the Run stream did not end within ${options.timeoutMs ?? 120_000} ms`)
      stream.close(http2.constants.NGHTTP2_CANCEL)
      finish()
    }, options.timeoutMs ?? 120_000)

    function result(): StreamResult {
      const measured = latenciesOf(provider, spec.id, arrivals)
      const reactions: Reactions = {
        cancelToEndMs: canceledAt !== undefined && endAt !== undefined ? endAt - canceledAt : undefined,
        cancelEnd: spec.cancelAfterDeltas !== undefined ? end : undefined,
        blobAckToCheckpointMs: checkpointAt !== undefined && lastBlobAckAt !== undefined ? checkpointAt - lastBlobAckAt : undefined
      }
      return { ...measured, deltas: measured.latencies.length, appends, reactions, problems: [...problems, ...countProblems(spec, measured.latencies.length, end)] }
    }

    function finish() {
      if (settled) return
      settled = true
      clearTimeout(timer)
      if (heartbeat !== undefined) clearInterval(heartbeat)
      resolve(result())
    }

    /** What Cursor does with a server message: acknowledge set_blob; the probe cancels once enough deltas arrived. */
    const onMessage = (message: AgentServerMessage, at: number) => {
      const m = message.message
      if (m.case === "interactionUpdate" && m.value.message.case === "textDelta") {
        const text = m.value.message.value.text
        arrivals.push({ at, text })
        stamps += stampsIn(text).length
        if (spec.cancelAfterDeltas !== undefined && canceledAt === undefined && stamps >= spec.cancelAfterDeltas) {
          canceledAt = send(cancelAction(), "conversationAction.cancelAction")
        }
      } else if (m.case === "kvServerMessage") {
        const kv = m.value.message
        if (kv.case === "setBlobArgs") {
          lastBlobAckAt = send({ message: { case: "kvClientMessage", value: { id: m.value.id, message: { case: "setBlobResult", value: {} } } } }, "kvClientMessage.setBlobResult")
        } else if (kv.case === "getBlobArgs") {
          send({ message: { case: "kvClientMessage", value: { id: m.value.id, message: { case: "getBlobResult", value: { error: { message: "blob not found" } } } } } }, "kvClientMessage.getBlobResult")
        }
      } else if (m.case === "conversationCheckpointUpdate") {
        checkpointAt ??= at
      } else if (m.case === "execServerMessage") {
        problems.push(`unexpected exec ${m.value.message.case} on a bench turn`)
      }
    }

    let buffer: Uint8Array = new Uint8Array(0)
    stream.on("response", (headers) => {
      const status = Number(headers[":status"])
      if (status !== 200) problems.push(`Run answered HTTP ${status} (${String(headers["content-type"])})`)
    })
    stream.on("data", (chunk: Buffer) => {
      if (end !== undefined) return
      const at = performance.now()
      const split = splitEnvelopes(buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]), Number.MAX_SAFE_INTEGER)
      if (split instanceof ConnectError) {
        problems.push(`bad envelope: ${split.message}`)
        return
      }
      buffer = split.rest
      for (const [index, { flags, payload }] of split.envelopes.entries()) {
        if ((flags & FLAG_END_STREAM) !== 0) {
          const decoded = Dialect.decodeEndStream(payload)
          end = Either.isLeft(decoded) ? "bad end-stream" : decoded.right._tag === "Ok" ? "ok" : decoded.right.code
          endAt = at
          const after = split.envelopes.length - index - 1
          if (after > 0 || buffer.length > 0) problems.push(`${after} envelopes and ${buffer.length} bytes after the end-stream envelope`)
          // The response is over: the request side ends too (as Cursor's client does).
          stream.end()
          // The server ends its side after the end-stream; wait for the close, not longer than 5 s.
          const closing = setTimeout(() => {
            problems.push("the Run stream stayed open 5 s after its end-stream")
            stream.close(http2.constants.NGHTTP2_CANCEL)
          }, 5_000)
          stream.once("close", () => clearTimeout(closing))
          finish()
          return
        }
        let message: AgentServerMessage
        try {
          message = fromBinary(AgentServerMessageSchema, payload)
        } catch (error) {
          problems.push(`undecodable server envelope: ${(error as Error).message}`)
          continue
        }
        onMessage(message, at)
      }
    })
    stream.on("error", (error) => {
      if (end === undefined) problems.push(`Run stream failed: ${error.message}`)
    })
    stream.on("close", () => {
      if (end !== undefined) return
      problems.push(`the Run stream closed without an end-stream (rst code ${stream.rstCode ?? "none"}${buffer.length > 0 ? `, ${buffer.length} bytes of a frame left` : ""})`)
      finish()
    })
    send(runRequestMessage({
      conversationId: options.conversationId ?? randomUUID(),
      text: `Please answer. ${marker(spec.id, spec.deltas, spec.minMs, spec.maxMs, spec.lead === true)}`,
      model: "bench-model"
    }), "runRequest")
  })
