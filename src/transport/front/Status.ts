/**
 * How a call's outcome travels in gRPC and gRPC-Web: the status trailers (`grpc-status`, the
 * percent-encoded `grpc-message`, `grpc-status-details-bin`: a `google.rpc.Status` with the
 * error's details as `Any`), read from the outcome the turn's channel writes as a Connect
 * end-stream frame; and each protocol's deadline header.
 */
import { BinaryWriter } from "@bufbuild/protobuf/wire"
import type { IncomingHttpHeaders } from "node:http"
import { ConnectError, connectErrorOfJson } from "../Connect.js"
import type { ConnectCode } from "../Connect.js"

/** gRPC's status numbers, in the order of its table (0 is OK). */
const GRPC_CODES: ReadonlyArray<ConnectCode> = [
  "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists", "permission_denied",
  "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable",
  "data_loss", "unauthenticated"
]

export const grpcStatusOf = (code: ConnectCode): number => GRPC_CODES.indexOf(code) + 1

/** `grpc-message`: percent-encoded outside printable ASCII (and `%` itself), as the gRPC spec asks. */
const percentEncoded = (message: string): string => {
  let out = ""
  for (const byte of Buffer.from(message, "utf8")) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`
  }
  return out
}

/** `google.rpc.Status` { code = 1; message = 2; details = 3 (Any: type_url = 1, value = 2) }, base64 without padding. */
const statusDetailsBin = (error: ConnectError): string => {
  const writer = new BinaryWriter()
  writer.uint32(8).int32(grpcStatusOf(error.code)).uint32(18).string(error.message)
  for (const detail of error.details) {
    writer.uint32(26).fork().uint32(10).string(`type.googleapis.com/${detail.type}`).uint32(18).bytes(detail.value).join()
  }
  return Buffer.from(writer.finish()).toString("base64").replace(/=+$/, "")
}

/** The status trailers of an outcome (undefined: success). */
export const trailersOf = (error: ConnectError | undefined): Record<string, string> =>
  error === undefined
    ? { "grpc-status": "0" }
    : {
      "grpc-status": String(grpcStatusOf(error.code)),
      "grpc-message": percentEncoded(error.message),
      ...(error.details.length > 0 ? { "grpc-status-details-bin": statusDetailsBin(error) } : {})
    }

/**
 * The outcome a Connect end-stream frame's JSON payload says (undefined: success). A payload
 * that is not one reads as `internal`, never a throw.
 */
export const outcomeOfEndStream = (payload: Uint8Array): ConnectError | undefined => {
  try {
    const parsed = JSON.parse(Buffer.from(payload).toString("utf8")) as { error?: { code?: unknown; message?: unknown; details?: unknown } }
    const error = parsed.error
    return error === undefined || error === null ? undefined : connectErrorOfJson(error, "unknown")
  } catch {
    return new ConnectError("internal", "the stream ended with an unreadable outcome")
  }
}

const header = (headers: IncomingHttpHeaders, name: string): string | undefined => {
  const value = headers[name]
  return typeof value === "string" ? value : undefined
}

const GRPC_UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000001 }

/** The client's deadline in milliseconds, when it states one: Connect's `connect-timeout-ms`, gRPC's `grpc-timeout` (`10S`, `500m`...). */
export const timeoutMsOf = (headers: IncomingHttpHeaders): number | undefined => {
  const connect = Number(header(headers, "connect-timeout-ms"))
  if (Number.isFinite(connect) && connect > 0) return connect
  const grpc = /^(\d{1,8})([HMSmun])$/.exec(header(headers, "grpc-timeout") ?? "")
  if (grpc === null) return undefined
  const ms = Number(grpc[1]) * GRPC_UNITS[grpc[2]!]!
  return ms > 0 ? Math.max(1, Math.round(ms)) : undefined
}
