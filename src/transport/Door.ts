/**
 * The door: `Policy.check` applied to every request before any handler sees it, on every
 * listener (to each HTTP/1.1 request by the front door, `Front.ts`; to HTTP/2 streams in
 * `transport/Run.ts`). A refused request gets a Connect error as JSON (`Connect.errorAnswer`)
 * and at most one log line per cause a minute.
 *
 * Requests the proxy or the TLS listener hand on (in process, or over loopback by the
 * forwarder) carry a hop mark holding this process's secret: only they may name Cursor's hosts,
 * and only the proxy's (loopback only) are exempt from the token off loopback.
 */
import { Context, Effect, Layer, Option, Runtime } from "effect"
import type * as Http from "node:http"
import type * as Http2 from "node:http2"
import { randomBytes } from "node:crypto"
import { LiveConfig } from "../config/Live.js"
import { ConnectError, errorAnswer } from "./Connect.js"
import { writeError } from "./front/Protocol.js"
import { trailersOf } from "./front/Status.js"
import * as Policy from "./Policy.js"
import { LOCAL, Users } from "../Users.js"
import type { Caller } from "../Users.js"

/** The hop mark's header (dropped before any handler, and by the forwarder towards Cursor). */
export const HOP_HEADER = "x-cursor-byok-hop"

const SECRET = randomBytes(24).toString("base64url")

/** Marks a request this process hands on from the proxy or the TLS listener. */
export const hopMark = (via: Exclude<Policy.Via, "direct">): string => `${SECRET} ${via}`

/** How a request came, from its hop mark (removed from `headers`); `forged` for a mark that is not ours. */
export const takeVia = (headers: Record<string, unknown>): Policy.Via | "forged" => {
  const mark = headers[HOP_HEADER]
  if (mark === undefined) return "direct"
  delete headers[HOP_HEADER]
  if (typeof mark !== "string") return "forged"
  const [secret, via] = mark.split(" ")
  if (secret === undefined || !Policy.sameToken(secret, SECRET)) return "forged"
  return via === "proxy" || via === "tls" ? via : "forged"
}

/** What a listener is, for the policy. */
export interface Listener {
  readonly secure: boolean
  /** Cursor is pointed at it by name (the TLS listener). */
  readonly cursorListener: boolean
}

export const PLAIN: Listener = { secure: false, cursorListener: false }
export const CURSOR_TLS: Listener = { secure: true, cursorListener: true }

export type Refusal = Extract<Policy.Verdict, { _tag: "Refuse" }>

export interface DoorService {
  /** Checks a request: its caller lets it through (its hop mark removed, `callerOf` tells it after); false means it was answered. */
  readonly http1: (request: Http.IncomingMessage, response: Http.ServerResponse, listener?: Listener) => Caller | false
  /** The same for an HTTP/2 stream not yet responded to. */
  readonly http2: (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders, listener: Listener) => Caller | false
}

const callers = new WeakMap<object, Caller>()

/**
 * Who sent a request the door let through (HTTP/1.1's request, or an HTTP/2 stream or its
 * compatibility request); `Local` for one that did not pass a door (tests' direct calls).
 */
export const callerOf = (request: object): Caller =>
  callers.get(request) ?? ("stream" in request && typeof request.stream === "object" && request.stream !== null ? callers.get(request.stream) : undefined) ?? LOCAL

export class Door extends Context.Tag("cursor-byok/transport/Door")<Door, DoorService>() {}

const header = (value: string | Array<string> | undefined): string | undefined => (Array.isArray(value) ? value[0] : value)

const FORGED: Refusal = { _tag: "Refuse", status: 403, cause: "host", message: "this request carries a hop mark that is not this server's" }

/** The verdict on a request's headers as they arrived (the hop mark is taken out of them). */
const verdictOf = (
  settings: Policy.PolicySettings,
  method: string,
  url: string,
  headers: Http.IncomingHttpHeaders | Http2.IncomingHttpHeaders,
  localPort: number | undefined,
  listener: Listener
): Policy.Verdict => {
  const via = takeVia(headers as Record<string, unknown>)
  if (via === "forged") return FORGED
  const query = url.indexOf("?")
  return Policy.check(settings, {
    method,
    path: query === -1 ? url : url.slice(0, query),
    query: query === -1 ? "" : url.slice(query + 1),
    host: header(headers[":authority"] as string | undefined) ?? header(headers.host),
    origin: header(headers.origin),
    contentType: header(headers["content-type"]),
    authorization: header(headers.authorization),
    tokenHeader: header(headers["x-byok-token"]),
    localPort,
    secure: listener.secure,
    cursorListener: listener.cursorListener,
    via
  })
}

/** A refusal as a Connect error (answered with the refusal's own status: 415 is not the table's for `invalid_argument`). */
const errorOf = (refusal: Refusal) =>
  new ConnectError(refusal.status === 401 ? "unauthenticated" : refusal.status === 415 ? "invalid_argument" : "permission_denied", refusal.message)

/** gRPC's and gRPC-Web's binary media types: a refusal of theirs is a trailers-only answer their clients read as a status. */
const GRPC_TYPE = /^\s*(application\/grpc(-web)?(\+proto)?)\s*(;|$)/i

/** The head of a refusal in the request's protocol: gRPC's trailers-only form, or undefined (Connect JSON). */
const grpcRefusal = (contentType: unknown, error: ConnectError): Record<string, string> | undefined => {
  const match = typeof contentType === "string" ? GRPC_TYPE.exec(contentType) : null
  if (match === null) return undefined
  return { "content-type": match[2] === undefined ? "application/grpc+proto" : "application/grpc-web+proto", ...trailersOf(error) }
}

/** A door over settings read at each request; `log` writes a refusal's line (rate-limited here). */
export const make = (settings: () => Policy.PolicySettings, log: (line: string) => void, now: () => number = Date.now): DoorService => {
  const lastLogged = new Map<string, { at: number; suppressed: number }>()
  const note = (refusal: Refusal, method: string, url: string) => {
    const at = now()
    const last = lastLogged.get(refusal.cause)
    if (last !== undefined && at - last.at < 60_000) {
      last.suppressed += 1
      return
    }
    lastLogged.set(refusal.cause, { at, suppressed: 0 })
    const more = last !== undefined && last.suppressed > 0 ? ` (${last.suppressed} more refused for this cause in the last minute)` : ""
    log(`request refused (${refusal.cause}): ${method} ${url.split("?")[0]}: ${refusal.message}${more}`)
  }
  return {
    http1: (request, response, listener = PLAIN) => {
      const verdict = verdictOf(settings(), request.method ?? "GET", request.url ?? "/", request.headers, request.socket?.localPort, listener)
      if (verdict._tag === "Pass") {
        if (verdict.caller !== LOCAL) callers.set(request, verdict.caller)
        return verdict.caller
      }
      note(verdict, request.method ?? "GET", request.url ?? "/")
      const grpc = grpcRefusal(request.headers["content-type"], errorOf(verdict))
      if (grpc !== undefined && !response.headersSent) {
        response.writeHead(200, grpc)
        response.end()
      } else {
        writeError(response, errorOf(verdict), { status: verdict.status, headers: verdict.status === 401 ? { "www-authenticate": "Bearer" } : {} })
      }
      // The body is drained unread, so the connection can serve the client's next request.
      request.resume()
      return false
    },
    http2: (stream, headers, listener) => {
      const method = String(headers[":method"] ?? "GET")
      const url = String(headers[":path"] ?? "/")
      const verdict = verdictOf(settings(), method, url, headers, stream.session?.socket?.localPort, listener)
      if (verdict._tag === "Pass") {
        if (verdict.caller !== LOCAL) callers.set(stream, verdict.caller)
        return verdict.caller
      }
      note(verdict, method, url)
      if (!stream.destroyed && !stream.headersSent) {
        const grpc = grpcRefusal(headers["content-type"], errorOf(verdict))
        if (grpc !== undefined) {
          stream.respond({ ":status": 200, ...grpc }, { endStream: true })
          return false
        }
        const answer = errorAnswer(errorOf(verdict), verdict.status)
        stream.respond({ ":status": answer.status, "content-type": "application/json" })
        stream.end(answer.body)
      }
      return false
    }
  }
}

/** The policy's settings from a configuration (and the team's users, when the server has them). */
export const settingsOf = (
  config: { readonly host: string; readonly allowedHosts: ReadonlyArray<string>; readonly console: { readonly token: Policy.PolicySettings["token"] } },
  users?: Policy.UserLookup
): Policy.PolicySettings => ({
  bindHost: config.host,
  allowedHosts: config.allowedHosts,
  token: config.console.token,
  users
})

/** The door over the running configuration (a reload's allowed hosts and token apply to the next request) and the users, if provided. */
export const layer: Layer.Layer<Door, never, LiveConfig> = Layer.effect(Door, Effect.gen(function*() {
  const { current } = yield* LiveConfig
  const users = Option.getOrUndefined(yield* Effect.serviceOption(Users))
  const runtime = yield* Effect.runtime<never>()
  return make(() => settingsOf(current(), users), (line) => void Runtime.runFork(runtime)(Effect.logWarning(line)))
}))
