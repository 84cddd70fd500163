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
  maxConnections: 1024,
  headersTimeoutMs: 20_000,
  idleTimeoutMs: 65_000,
  http2MaxConcurrentStreams: 1000
}

/** HTTP/2 header lists larger than this are refused (Node's default is 64 KiB of compressed state; this bounds the list). */
export const HTTP2_MAX_HEADER_LIST_BYTES = 64 * 1024

/** The HTTP/2 settings every listener advertises. */
export const http2Settings = (limits: ConnectionLimits) => ({
  initialWindowSize: 1 << 20,
  maxConcurrentStreams: limits.http2MaxConcurrentStreams,
  maxHeaderListSize: HTTP2_MAX_HEADER_LIST_BYTES
})
