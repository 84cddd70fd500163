/**
 * A capture file: JSON lines, the header first, then what happened on one agent request in the
 * order the server saw it, each line with `t` (milliseconds since the capture began):
 *
 * - `capture`: the header: format version, request id, start time, whether contents were kept,
 *   the client version, and the server facts a replay needs (models, timings, compaction).
 * - `client`: a message the client sent: `wire` (`BidiAppend`, `RunSSE`, `Run`), `protocol`
 *   (`connect`, `grpc`, `grpc-web`), `codec`, `http` (`1.1`, `2`), `call` (the wire's call
 *   number on this request: a reconnect is call 2), and `message`: a BidiAppend's
 *   `BidiAppendRequest` with its `AgentClientMessage` decoded in `message.message` (and
 *   `encoding`: `hex` or `binary`, how it came), RunSSE's `BidiRequestId`, `Run`'s
 *   `AgentClientMessage` (protobuf JSON).
 * - `open`: a `Run` call began (its `x-request-id` header present or not).
 * - `server`: what the server wrote: `message` (an `AgentServerMessage`), `end` (the stream's
 *   outcome: `{}` or `{ error: { code, message } }`), `answer` (a BidiAppend's answer, with its
 *   `append` seqno), `error` (a call refused before it began), `closed` (the stream ended without
 *   its outcome: a newer reader took it).
 * - `side`: a side call of the same client version: `path`, `request`, `response` or `error`.
 * - `model`: one model call's answer as the runner received it: `callId`, `model`, `chunks`
 *   (the neutral response events, one array per network read) and `error` when it failed.
 *
 * Redaction (`Redact.ts`) has been applied to every message unless `contents` is true.
 */
import type { Json } from "./Json.js"

export const CAPTURE_VERSION = 1

export type Wire = "BidiAppend" | "RunSSE" | "Run"

export interface ServerFacts {
  readonly models: ReadonlyArray<Record<string, unknown> & { readonly id: string }>
  readonly defaultModel?: string
  readonly subagentModel?: string
  readonly aliases?: Readonly<Record<string, string>>
  readonly heartbeatMs: number
  readonly orphanTimeoutMs: number
  readonly blobAckTimeoutMs: number
  readonly queuedMessageGraceMs: number
  readonly maxLlmCallsPerTurn: number
  readonly compaction: Readonly<Record<string, unknown>>
  readonly appendWindow: number
}

export interface CaptureHeader {
  readonly kind: "capture"
  readonly version: number
  readonly requestId: string
  readonly startedAt: string
  readonly contents: boolean
  readonly clientVersion?: string
  readonly server: ServerFacts
}

export interface WireFields {
  readonly wire: Wire
  readonly protocol: "connect" | "grpc" | "grpc-web"
  readonly codec: "proto" | "json"
  readonly http: "1.1" | "2"
  readonly call: number
}

export type ErrorJson = {
  readonly code: string
  readonly message: string
}

export type CaptureLine =
  | WireFields & { readonly kind: "client"; readonly message: Json; readonly encoding?: "hex" | "binary" }
  | WireFields & { readonly kind: "open"; readonly requestIdHeader: boolean }
  | WireFields & {
    readonly kind: "server"
    readonly message?: Json
    readonly end?: Json
    readonly answer?: Json
    readonly append?: string
    readonly error?: ErrorJson
    readonly closed?: true
  }
  | { readonly kind: "side"; readonly path: string; readonly protocol: string; readonly request?: Json; readonly response?: Json; readonly error?: ErrorJson }
  | { readonly kind: "model"; readonly callId: string; readonly model: string; readonly chunks: Json; readonly error?: Json }

/** A line as read back (`t` added by the writer). */
export type ReadLine = (CaptureLine | CaptureHeader) & { readonly t?: number }

/** Reads a capture file's text: its header and lines (a line that is not JSON is an error naming it). */
export const parseCapture = (text: string): { readonly header: CaptureHeader; readonly lines: ReadonlyArray<ReadLine> } => {
  const lines = text.split("\n").filter((line) => line.trim() !== "").map((line, index) => {
    try {
      return JSON.parse(line) as ReadLine
    } catch {
      throw new Error(`line ${index + 1} is not JSON`)
    }
  })
  const header = lines[0]
  if (header === undefined || header.kind !== "capture") throw new Error("not a capture file: its first line is not the capture header")
  if (header.version !== CAPTURE_VERSION) throw new Error(`capture format ${header.version}; this server reads ${CAPTURE_VERSION}`)
  return { header, lines: lines.slice(1) }
}
