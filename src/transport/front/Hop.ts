/**
 * A call forwarded to the instance that holds its request (`Cluster.route`): the body the
 * client sent, as a Connect call in binary (its own protocol stays between the client and this
 * instance), with the client's headers (its token among them: the holder's door checks the
 * caller itself) and `x-byok-hop`, so the holder serves it rather than forwarding it again. A
 * BidiAppend's answer comes back whole; a RunSSE's frames are passed on envelope by envelope as
 * they arrive, the end-stream one last.
 */
import * as Http from "node:http"
import * as Https from "node:https"
import { HOP_HEADER } from "../../Cluster.js"
import { ConnectError, connectErrorOfJson } from "../Connect.js"

const agents = { http: new Http.Agent({ keepAlive: true }), https: new Https.Agent({ keepAlive: true }) }

/** Headers of the client's that do not travel: the connection's own, the body's framing, HTTP/2's pseudo-headers. */
const LOCAL_HEADERS = new Set([
  "host", "connection", "keep-alive", "content-length", "content-type", "content-encoding", "transfer-encoding", "te",
  "upgrade", "proxy-connection", "accept-encoding", "connect-content-encoding", "connect-accept-encoding", "grpc-encoding",
  "grpc-accept-encoding", "grpc-timeout", "connect-timeout-ms", HOP_HEADER
])

const hopHeaders = (headers: Http.IncomingHttpHeaders, instanceId: string, stream: boolean): Http.OutgoingHttpHeaders => {
  const out: Http.OutgoingHttpHeaders = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name.startsWith(":") || LOCAL_HEADERS.has(name)) continue
    out[name] = value
  }
  out["content-type"] = stream ? "application/connect+proto" : "application/proto"
  out["connect-protocol-version"] = "1"
  out[HOP_HEADER] = instanceId
  return out
}

const unreached = new WeakSet<ConnectError>()

/** An instance that could not be reached or answered out of protocol: the client may retry (the next route finds the holder anew). */
const unreachable = (address: string, reason: string) => {
  const error = new ConnectError("unavailable", `the instance of this server that holds this request (${address}) did not answer (${reason}); send it again`)
  unreached.add(error)
  return error
}

/** Whether the holder never answered (gone, or not an instance): its route is worth asking again at once. */
export const isUnreachable = (error: ConnectError): boolean => unreached.has(error)

/** A Connect error answer (JSON `{ code, message, details }`) as the error it carries, details and all. */
const errorOf = (status: number, body: Buffer, address: string): ConnectError => {
  try {
    const error = connectErrorOfJson(JSON.parse(body.toString("utf8")) as Record<string, unknown>)
    if (error !== undefined) return error
  } catch {
    // not JSON: said below
  }
  return unreachable(address, `HTTP ${status}`)
}

export interface HopRequest {
  readonly address: string
  readonly path: string
  readonly body: Uint8Array
  readonly headers: Http.IncomingHttpHeaders
  /** This instance's id, for the `x-byok-hop` header. */
  readonly from: string
}

const send = (hop: HopRequest, stream: boolean, onResponse: (response: Http.IncomingMessage) => void, onError: (error: ConnectError) => void) => {
  let url: URL
  try {
    url = new URL(hop.path, hop.address)
  } catch {
    onError(unreachable(hop.address, "not an http(s) address"))
    return undefined
  }
  const secure = url.protocol === "https:"
  // A stream's body is its envelopes already, as the client sent them.
  const body = hop.body
  const request = (secure ? Https : Http).request(url, {
    method: "POST",
    agent: secure ? agents.https : agents.http,
    headers: { ...hopHeaders(hop.headers, hop.from, stream), "content-length": body.length }
  }, onResponse)
  request.once("error", (error) => onError(unreachable(hop.address, (error as NodeJS.ErrnoException).code ?? error.message)))
  request.end(body)
  return request
}

const collect = (response: Http.IncomingMessage, done: (body: Buffer) => void, failed: (error: Error) => void) => {
  const chunks: Array<Buffer> = []
  response.on("data", (chunk: Buffer) => chunks.push(chunk))
  response.once("end", () => done(Buffer.concat(chunks)))
  response.once("error", failed)
}

/** A unary call on the holder: its answer's bytes, or the error it answered. */
export const unary = (hop: HopRequest, done: (answer: Uint8Array | ConnectError) => void): void => {
  let settled = false
  const settle = (answer: Uint8Array | ConnectError) => {
    if (settled) return
    settled = true
    done(answer)
  }
  send(hop, false, (response) =>
    collect(
      response,
      (body) => settle(response.statusCode === 200 ? new Uint8Array(body) : errorOf(response.statusCode ?? 0, body, hop.address)),
      (error) => settle(unreachable(hop.address, error.message))
    ), settle)
}

export interface StreamSink {
  /** Complete Connect envelopes, in order (the end-stream one included). */
  readonly frames: (frames: ReadonlyArray<Uint8Array>) => void
  /** The stream ended (after its end-stream envelope, or cut off). */
  readonly end: () => void
  /** Refused before any frame. */
  readonly error: (error: ConnectError) => void
}

/** A server stream on the holder, its envelopes passed on as they arrive; returns a cancel (the client left). */
export const stream = (hop: HopRequest, sink: StreamSink): () => void => {
  let pending: Buffer = Buffer.alloc(0)
  let started = false
  let finished = false
  const finish = (error?: ConnectError) => {
    if (finished) return
    finished = true
    if (!started && error !== undefined) sink.error(error)
    else sink.end()
  }
  const request = send(hop, true, (response) => {
    if (response.statusCode !== 200) {
      return collect(response, (body) => finish(errorOf(response.statusCode ?? 0, body, hop.address)), (error) => finish(unreachable(hop.address, error.message)))
    }
    response.on("data", (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
      const frames: Array<Uint8Array> = []
      while (pending.length >= 5) {
        const length = pending.readUInt32BE(1)
        if (pending.length < 5 + length) break
        frames.push(new Uint8Array(pending.subarray(0, 5 + length)))
        pending = pending.subarray(5 + length)
      }
      if (frames.length === 0 || finished) return
      started = true
      sink.frames(frames)
    })
    response.once("end", () => finish())
    response.once("error", (error) => finish(unreachable(hop.address, error.message)))
  }, (error) => finish(error))
  return () => {
    finished = true
    request?.destroy()
  }
}
