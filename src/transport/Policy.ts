/**
 * The request policy every listener applies before any handler (pure): which Host, Origin,
 * content type and token a request may carry. `transport/Door.ts` applies it to Node's requests
 * and HTTP/2 streams; the README's "Security model" says why each rule is there.
 */
import { Option, Redacted } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import { isIP } from "node:net"
import { isLoopback } from "../Config.js"
import { LOCAL, OPERATOR } from "../Users.js"
import type { Caller, User } from "../Users.js"

/** How a request reached the door that checks it. */
export type Via =
  /** Straight from a client to this listener. */
  | "direct"
  /** Through the intercepting proxy (loopback only): Cursor on this machine. */
  | "proxy"
  /** Through the TLS listener Cursor is pointed at, handed on in process or over loopback. */
  | "tls"

export interface PolicySettings {
  /** The address the server listens on: off loopback, every route but `/healthz` needs the token. */
  readonly bindHost: string
  /** Host names (or `name:port`) the operator allows besides loopback ones, lower case. */
  readonly allowedHosts: ReadonlyArray<string>
  readonly token: Redacted.Redacted<string> | undefined
  /** The team's users (`Users.ts`), from memory; absent: one person's server. */
  readonly users?: UserLookup | undefined
}

/** What the door asks of the users: whether there are any, and whose a token is. */
export interface UserLookup {
  readonly teamMode: () => boolean
  readonly authenticate: (token: string) => Option.Option<User>
}

export interface RequestFacts {
  readonly method: string
  /** The path, without the query. */
  readonly path: string
  readonly query: string
  /** `Host`, or HTTP/2's `:authority`. */
  readonly host: string | undefined
  readonly origin: string | undefined
  readonly contentType: string | undefined
  readonly authorization: string | undefined
  /** `x-byok-token`: the token a reverse proxy adds without touching `Authorization`. */
  readonly tokenHeader: string | undefined
  /** The port the client connected to (the listener's own). */
  readonly localPort: number | undefined
  /** The listener speaks TLS (a Host without a port means 443). */
  readonly secure: boolean
  /** This listener is one Cursor is pointed at by name (the TLS listener): Cursor's host names are accepted. */
  readonly cursorListener: boolean
  readonly via: Via
}

export type Verdict =
  /** Let through, sent by `caller`. */
  | { readonly _tag: "Pass"; readonly caller: Caller }
  | {
    readonly _tag: "Refuse"
    readonly status: 400 | 401 | 403 | 415
    /** A short stable name for the log's once-a-minute line. */
    readonly cause: "host" | "origin" | "content-type" | "token" | "no-token"
    readonly message: string
  }

const PASS: Verdict = { _tag: "Pass", caller: LOCAL }


/** Cursor's API hosts, canonical (lower case, no trailing dot): api2, api3, api5 and the agent hosts under it. The proxy decrypts these; the TLS listener is given to Cursor in their place. */
export const isCursorHost = (name: string): boolean =>
  name === "api2.cursor.sh" || name === "api3.cursor.sh" || name === "api5.cursor.sh" || name.endsWith(".api5.cursor.sh") || isTabHost(name)

/** The hosts only Tab's calls go to (its completions and file sync): the proxy decrypts them only while Tab is answered here. */
export const isTabHost = (name: string): boolean => name === "api4.cursor.sh" || name.endsWith(".gcpp.cursor.sh")

/** A Host header's name (lower case, IPv6 without brackets) and port; undefined when it is not one. */
export const parseHost = (header: string): { readonly name: string; readonly port: number | undefined } | undefined => {
  const value = header.trim().toLowerCase()
  const match = /^(?:\[([0-9a-f:.]+)\]|([a-z0-9._-]+))(?::(\d{1,5}))?$/.exec(value)
  if (match === null) return undefined
  const port = match[3] === undefined ? undefined : Number(match[3])
  if (port !== undefined && (port < 1 || port > 65535)) return undefined
  return { name: (match[1] ?? match[2]!).replace(/\.$/, ""), port }
}

const hostAllowed = (settings: PolicySettings, facts: RequestFacts, header: string | undefined): boolean => {
  if (header === undefined) return false
  const host = parseHost(header)
  if (host === undefined) return false
  const port = host.port ?? (facts.secure ? 443 : 80)
  if (settings.allowedHosts.includes(host.name) || settings.allowedHosts.includes(`${host.name}:${port}`)) return true
  if (isCursorHost(host.name)) return facts.via !== "direct" || facts.cursorListener
  // Off loopback (where every request needs the token) the bind name and address literals are
  // the server's too: a literal cannot be rebound, so no web page is behind it.
  if (!isLoopback(settings.bindHost) && (host.name === settings.bindHost.toLowerCase().replace(/^\[(.*)\]$/, "$1") || isIP(host.name) !== 0)) return true
  if (!isLoopback(host.name)) return false
  // Handed on by the proxy or the TLS listener: the Host names the port the client used there.
  return facts.via !== "direct" || facts.localPort === undefined || port === facts.localPort
}

/** Cursor's web origins (`https://cursor.com`, its subdomains, its API hosts). */
const isCursorOrigin = (name: string) => name === "cursor.com" || name.endsWith(".cursor.com") || name.endsWith(".cursor.sh")

/** Schemes of Cursor's own app and webviews, whose requests are Cursor's. */
const APP_SCHEMES = ["vscode-file:", "vscode-webview:"]

const originAllowed = (settings: PolicySettings, facts: RequestFacts): boolean => {
  const origin = facts.origin?.trim()
  if (origin === undefined || origin === "") return true
  if (origin === "null") return false
  let url: URL
  try {
    url = new URL(origin)
  } catch {
    return false
  }
  if (APP_SCHEMES.includes(url.protocol)) return true
  if (url.protocol !== "http:" && url.protocol !== "https:") return true
  // In Cursor's place (through the proxy, on the TLS listener) Cursor's own web origins are ours.
  if ((facts.via !== "direct" || facts.cursorListener) && url.protocol === "https:" && isCursorOrigin(url.hostname)) return true
  // The server's own pages: the Origin names the host this request was addressed to.
  return url.host === (facts.host ?? "").trim().toLowerCase() && hostAllowed(settings, facts, url.host)
}

/** The media types of Connect (unary and streaming), gRPC and gRPC-Web, and OTLP's protobuf. */
const RPC_MEDIA_TYPES = new Set([
  "application/proto",
  "application/json",
  "application/connect+proto",
  "application/connect+json",
  "application/grpc",
  "application/grpc+proto",
  "application/grpc+json",
  "application/grpc-web",
  "application/grpc-web+proto",
  "application/grpc-web+json",
  "application/grpc-web-text",
  "application/grpc-web-text+proto",
  "application/x-protobuf"
])

/** The media type of a Content-Type header, lower case, without parameters. */
export const mediaTypeOf = (header: string | undefined): string => (header ?? "").split(";")[0]!.trim().toLowerCase()

/**
 * A path as the app's router (find-my-way, under `HttpLayerRouter`) matches it: an absolute-form
 * target's scheme and host dropped, repeated slashes as one, cut at `;` or `#`, percent-decoded,
 * without a trailing slash, in lower case. The page rules read it, so that `//Console`,
 * `/%63onsole/` or `/console;x` is the page the router sends it to.
 */
export const routedPath = (path: string): string => {
  const target = (path.startsWith("/") ? path : path.replace(/^https?:\/\/.*?\//i, "/")).replace(/\/\/+/g, "/").split(/[;#]/)[0]!
  let decoded = target
  try {
    decoded = decodeURI(target)
  } catch {
    // Malformed escapes: the router finds no route for it either.
  }
  return (decoded.length > 1 && decoded.endsWith("/") ? decoded.slice(0, -1) : decoded).toLowerCase()
}

/** Routes that are pages or probes, not RPCs: the console, `/metrics`, `/healthz` (however the path spells them). */
const isPageRoute = (path: string) => {
  const routed = routedPath(path)
  return routed === "/healthz" || routed === "/metrics" || routed === "/console" || routed.startsWith("/console/")
}

/** A user's own console page (their spend and conversations): the one page a user's token opens, with GET. */
export const USER_PAGE_PATH = "/console/me"

const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()

/** Equal tokens, compared in constant time (of their digests). */
export const sameToken = (given: string, expected: string): boolean => timingSafeEqual(digest(given), digest(expected))

/**
 * The token a request's headers carry: `x-byok-token`, else `Authorization: Bearer` (a request
 * from Cursor through a developer's proxy carries Cursor's own bearer token beside ours).
 */
export const headerTokenOf = (authorization: string | undefined, tokenHeader: string | undefined): string | undefined =>
  tokenHeader ?? authorization?.match(/^Bearer\s+(\S+)\s*$/i)?.[1]

/** The token a request carries: in its headers, or `?token=`. */
export const tokenOf = (facts: Pick<RequestFacts, "authorization" | "tokenHeader" | "query">): string | undefined =>
  headerTokenOf(facts.authorization, facts.tokenHeader) ?? (new URLSearchParams(facts.query).get("token") ?? undefined)

export const TOKEN_HELP =
  "set console.token in the configuration file or BYOK_CONSOLE_TOKEN (at least 16 characters), then send it as " +
  "Authorization: Bearer <token>, x-byok-token: <token> or ?token=<token>"

const tokenVerdict = (settings: PolicySettings, facts: RequestFacts): Verdict => {
  if (isLoopback(settings.bindHost) || facts.path === "/healthz" || facts.via === "proxy") return PASS
  if (settings.token === undefined) {
    return {
      _tag: "Refuse",
      status: 403,
      cause: "no-token",
      message: `this server listens on ${settings.bindHost}, not a loopback address: every request needs a token and none is configured; ${TOKEN_HELP}`
    }
  }
  const given = tokenOf(facts)
  if (given !== undefined && sameToken(given, Redacted.value(settings.token))) return PASS
  return { _tag: "Refuse", status: 401, cause: "token", message: `this server needs its token: ${TOKEN_HELP}` }
}

export const TEAM_TOKEN_HELP =
  "this is a team's server: send your token (from the operator: `cursor-byok users add <name>`) as Authorization: Bearer <token> or x-byok-token: <token>"

/**
 * On a team's server every request but `/healthz` names its caller: the operator (`console.token`),
 * or a user by their token. The console and `/metrics` show every user's figures: the operator's;
 * a user opens only their own page (`GET /console/me`).
 */
const teamVerdict = (settings: PolicySettings, facts: RequestFacts, users: UserLookup): Verdict => {
  if (facts.path === "/healthz") return PASS
  const given = tokenOf(facts)
  if (given === undefined) return { _tag: "Refuse", status: 401, cause: "token", message: TEAM_TOKEN_HELP }
  if (settings.token !== undefined && sameToken(given, Redacted.value(settings.token))) return { _tag: "Pass", caller: OPERATOR }
  const user = users.authenticate(given)
  if (Option.isNone(user)) {
    return { _tag: "Refuse", status: 401, cause: "token", message: "this token is not one of this server's users (removed, or replaced by `cursor-byok users token`): ask the operator for yours" }
  }
  if (isPageRoute(facts.path) && !(facts.method === "GET" && routedPath(facts.path) === USER_PAGE_PATH)) {
    return { _tag: "Refuse", status: 403, cause: "token", message: `${facts.path.slice(0, 100)} shows every user's conversations and figures: it takes the operator's token (console.token)` }
  }
  return { _tag: "Pass", caller: { _tag: "User", user: user.value } }
}

/** The policy's verdict on one request. */
export const check = (settings: PolicySettings, facts: RequestFacts): Verdict => {
  if (!hostAllowed(settings, facts, facts.host)) {
    return {
      _tag: "Refuse",
      status: 403,
      cause: "host",
      message: `Host ${JSON.stringify((facts.host ?? "").slice(0, 100))} is not this server's: address it as localhost, 127.0.0.1 or [::1] with its port` +
        (isLoopback(settings.bindHost) ? "" : ", or add the name to allowedHosts")
    }
  }
  if (!originAllowed(settings, facts)) {
    return { _tag: "Refuse", status: 403, cause: "origin", message: `requests from web pages (Origin ${JSON.stringify(facts.origin?.slice(0, 100))}) are refused: this server serves Cursor, not browsers` }
  }
  if (facts.method !== "GET" && facts.method !== "HEAD" && !RPC_MEDIA_TYPES.has(mediaTypeOf(facts.contentType)) && !isPageRoute(facts.path)) {
    return {
      _tag: "Refuse",
      status: 415,
      cause: "content-type",
      message: `${facts.path.slice(0, 200)} takes the Connect, gRPC or gRPC-Web protocol (application/proto, application/connect+proto, application/grpc...), not ${facts.contentType === undefined || facts.contentType === "" ? "a body without a content type" : JSON.stringify(facts.contentType.slice(0, 100))}`
    }
  }
  return settings.users?.teamMode() === true ? teamVerdict(settings, facts, settings.users) : tokenVerdict(settings, facts)
}
