import type * as Net from "node:net"
import { ConnectError, errorAnswer } from "./Connect.js"

/** What bounds each listener's connections (`limits` in the configuration; the README's "Security model"). */
export interface ConnectionLimits {
  /** Open connections one listener keeps; past it a new one is answered 503 (HTTP/1.1, h2c) or closed (TLS). */
  readonly maxConnections: number
  /** A request's headers (or h2c's preface) must arrive within this; a connection that sends nothing is closed then. */
  readonly headersTimeoutMs: number
  /** An idle keep-alive connection (HTTP/1.1, or an HTTP/2 session with no traffic) is closed after this. */
  readonly idleTimeoutMs: number
  /** HTTP/2 streams one connection may have open at once. */
  readonly http2MaxConcurrentStreams: number
}

export const defaultConnectionLimits: ConnectionLimits = {
  maxConnections: 4096,
  headersTimeoutMs: 20_000,
  idleTimeoutMs: 65_000,
  http2MaxConcurrentStreams: 1000
}

/** HTTP/2 header lists larger than this are refused (Node's default is 64 KiB of compressed state; this bounds the list). */
export const HTTP2_MAX_HEADER_LIST_BYTES = 64 * 1024

/**
 * The HTTP/2 settings every listener advertises. One Cursor window keeps one session for all its
 * streams (issue 39), and these hold 200 streams on it (`npm run bench -- latency ack`, "Run, one
 * session"): 1000 concurrent streams leave room far past a window's few turns; the 1 MiB stream
 * window bounds what a client sends on one stream before the server reads it (run requests,
 * acknowledgements); the connection's is Node's 64 KiB, which Node credits back on arrival, so an
 * unread stream never holds up the others. What the server sends is bounded by the client's windows.
 */
export const http2Settings = (limits: ConnectionLimits) => ({
  initialWindowSize: 1 << 20,
  maxConcurrentStreams: limits.http2MaxConcurrentStreams,
  maxHeaderListSize: HTTP2_MAX_HEADER_LIST_BYTES
})

/** The raw HTTP/1.1 answer a connection past a listener's cap gets before it is closed (a Connect error, as every refusal). */
export const overCapacityResponse = (max: number): string => {
  const { body } = errorAnswer(new ConnectError("unavailable", `this listener has ${max} connections open, its limit (limits.maxConnections); try again later`))
  return `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n${body}`
}

/**
 * Caps `server`'s open connections at `max`: one past it is answered `overCapacityResponse` and
 * closed before any listener sees it (Node's own `maxConnections` drops it without a word).
 */
export const capConnections = <S extends Net.Server>(server: S, max: number): S => {
  let open = 0
  const emit = server.emit.bind(server)
  server.emit = ((event: string | symbol, ...args: Array<any>) => {
    if (event === "connection") {
      const socket = args[0] as Net.Socket
      if (open >= max) {
        socket.on("error", () => undefined)
        socket.end(overCapacityResponse(max))
        setTimeout(() => socket.destroy(), 1_000).unref()
        return true
      }
      open += 1
      socket.once("close", () => open -= 1)
    }
    return emit(event, ...args)
  }) as S["emit"]
  return server
}
