/**
 * Forwards one decrypted request, unchanged, to where it is answered: this server's own
 * listeners (HTTP/1.1 for unary calls and RunSSE, h2c for `Run`) or Cursor's real host. Method,
 * path, headers (less the hop-by-hop ones), body bytes, status and response trailers pass
 * through as they are; Connect streams keep their trailers (dropping them shows in Cursor as
 * "Network disconnected"). Connections to each target are kept alive and reused.
 */
import * as Http from "node:http"
import * as Http2 from "node:http2"
import * as Https from "node:https"
import type * as Net from "node:net"
import * as Tls from "node:tls"
import { HOP_HEADER, hopMark } from "../../transport/Door.js"
import type { Address, UpstreamProxy } from "./Upstream.js"
import { openTcp } from "./Upstream.js"

export type ClientRequest = Http.IncomingMessage | Http2.Http2ServerRequest
export type ClientResponse = Http.ServerResponse | Http2.Http2ServerResponse

export type Target =
  /** This server's own listener; `via` is where the request came in (its hop mark, `transport/Door.ts`). */
  | { readonly _tag: "Local"; readonly address: Address; readonly http2: boolean; readonly via?: "proxy" | "tls" }
  | {
    readonly _tag: "Origin"
    readonly servername: string
    readonly address: Address
    readonly http2: boolean
    /** A team's server in this server's place: reached over TLS or not (`secure`), with the developer's token instead of Cursor's. */
    readonly team?: { readonly secure: boolean; readonly token: string | undefined; readonly authority: string }
  }

export interface ForwardOptions {
  readonly upstream: UpstreamProxy | undefined
  /** Extra roots for the real host's certificate (tests); the system's roots otherwise. */
  readonly originCa: ReadonlyArray<string> | undefined
}

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "transfer-encoding",
  "upgrade",
  "http2-settings",
  "host",
  HOP_HEADER
])

/** The headers a request takes to `target`: end to end, plus the hop mark towards this server's own listeners. */
const headersFor = (headers: Http.IncomingHttpHeaders | Http2.IncomingHttpHeaders, target: Target): Record<string, string | Array<string>> => {
  const out = endToEnd(headers)
  if (target._tag === "Local") out[HOP_HEADER] = hopMark(target.via ?? "proxy")
  if (target._tag === "Origin" && target.team !== undefined) {
    // Cursor's own credentials stay on this machine; the team's server knows the developer by their token.
    delete out["authorization"]
    delete out["x-byok-token"]
    if (target.team.token !== undefined) out["x-byok-token"] = target.team.token
  }
  return out
}

/** The target is reached without TLS: this server's own listener, or a team's server on `http:`. */
const plain = (target: Target) => target._tag === "Local" || target.team?.secure === false

/** The end-to-end headers of a message, without pseudo-headers and hop-by-hop fields. */
const endToEnd = (headers: Http.IncomingHttpHeaders | Http2.IncomingHttpHeaders): Record<string, string | Array<string>> => {
  const out: Record<string, string | Array<string>> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name.startsWith(":") || HOP_BY_HOP.has(name)) continue
    if (name === "te" && value !== "trailers") continue
    out[name] = value
  }
  return out
}

const authorityOf = (request: ClientRequest) =>
  request.httpVersionMajor === 2 ? String(request.headers[":authority"] ?? "") : String(request.headers.host ?? "")

/** The answer when the target cannot be reached: a Connect error the client can read, or a reset once answering began. */
const failed = (response: ClientResponse, message: string) => {
  if (response.headersSent) return void response.destroy()
  response.writeHead(502, { "content-type": "application/json" })
  response.end(JSON.stringify({ code: "unavailable", message }))
}

/** A TLS connection to Cursor's real host (through the upstream proxy when there is one), offering `alpn`. */
const tlsToOrigin = (options: ForwardOptions, target: Extract<Target, { _tag: "Origin" }>, alpn: ReadonlyArray<string>) =>
  openTcp(target.address, options.upstream, { name: target.servername }).then((socket) =>
    new Promise<Tls.TLSSocket>((resolve, reject) => {
      const secure = Tls.connect({
        socket,
        servername: target.servername,
        ALPNProtocols: [...alpn],
        ...(options.originCa === undefined ? {} : { ca: [...Tls.rootCertificates, ...options.originCa] })
      })
      secure.once("secureConnect", () => {
        secure.removeAllListeners("error")
        resolve(secure)
      })
      secure.once("error", reject)
    })
  )

export const makeForwarder = (options: ForwardOptions) => {
  const h1Agents = new Map<string, Http.Agent>()
  const h2Sessions = new Map<string, Promise<Http2.ClientHttp2Session>>()

  const keyOf = (target: Target) => `${target._tag}|${target.address.host}|${target.address.port}`

  const tlsTo = (target: Extract<Target, { _tag: "Origin" }>, alpn: ReadonlyArray<string>) => tlsToOrigin(options, target, alpn)

  const h1Agent = (target: Target): Http.Agent => {
    const key = keyOf(target)
    const existing = h1Agents.get(key)
    if (existing !== undefined) return existing
    const made = plain(target)
      ? new Http.Agent({ keepAlive: true })
      : new Https.Agent({ keepAlive: true })
    if (target._tag === "Origin" && !plain(target)) {
      // The callback form of createConnection: the socket comes after the (upstream) CONNECT and the handshake.
      const connect = (_options: unknown, done: (error: Error | null, socket?: Net.Socket) => void) => {
        tlsTo(target, ["http/1.1"]).then((socket) => done(null, socket), (error: Error) => done(error))
        return undefined
      }
      ;(made as unknown as { createConnection: typeof connect }).createConnection = connect
    }
    h1Agents.set(key, made)
    return made
  }

  const h2Session = (target: Target): Promise<Http2.ClientHttp2Session> => {
    const key = keyOf(target)
    const existing = h2Sessions.get(key)
    if (existing !== undefined) return existing
    const opened = (target._tag === "Local" || plain(target)
      ? Promise.resolve(Http2.connect(`http://${target.address.host}:${target.address.port}`))
      : tlsTo(target, ["h2"]).then((socket) => Http2.connect(`https://${target.servername}`, { createConnection: () => socket })))
      .then((session) => {
        const forget = () => {
          if (h2Sessions.get(key) === opened) h2Sessions.delete(key)
        }
        session.on("close", forget)
        session.on("goaway", forget)
        session.on("error", forget)
        return session
      })
    opened.catch(() => h2Sessions.delete(key))
    h2Sessions.set(key, opened)
    return opened
  }

  const viaHttp1 = (request: ClientRequest, response: ClientResponse, target: Target) => {
    const outgoing = (plain(target) ? Http.request : Https.request)({
      host: target.address.host,
      port: target.address.port,
      method: request.method,
      path: request.url,
      headers: { ...headersFor(request.headers, target), host: target._tag === "Origin" && target.team !== undefined ? target.team.authority : authorityOf(request) },
      agent: h1Agent(target),
      ...(target._tag === "Origin" && !plain(target) ? { servername: target.servername } : {})
    })
    outgoing.on("response", (answer) => {
      response.writeHead(answer.statusCode ?? 502, endToEnd(answer.headers))
      answer.on("data", (chunk: Buffer) => {
        if (!(response as Http.ServerResponse).write(chunk)) answer.pause()
      })
      response.on("drain", () => answer.resume())
      answer.on("end", () => {
        if (Object.keys(answer.trailers).length > 0) response.addTrailers(answer.trailers as Record<string, string>)
        response.end()
      })
      answer.on("error", () => response.destroy())
    })
    outgoing.on("error", (error) => failed(response, `${target._tag === "Local" ? "this server" : target.servername}: ${error.message}`))
    request.pipe(outgoing)
    request.on("error", () => outgoing.destroy())
  }

  const viaHttp2 = (request: ClientRequest, response: ClientResponse, target: Target) => {
    h2Session(target).then((session) => {
      const stream = session.request({
        ":method": request.method ?? "GET",
        ":path": request.url ?? "/",
        ":authority": target._tag === "Origin" ? target.team?.authority ?? target.servername : authorityOf(request),
        ...headersFor(request.headers, target)
      })
      stream.on("response", (headers) => {
        response.writeHead(Number(headers[":status"] ?? 502), endToEnd(headers))
        stream.on("data", (chunk: Buffer) => {
          if (!(response as Http.ServerResponse).write(chunk)) stream.pause()
        })
        response.on("drain", () => stream.resume())
      })
      let trailers: Record<string, string> = {}
      stream.on("trailers", (received) => {
        trailers = endToEnd(received) as Record<string, string>
      })
      stream.on("end", () => {
        if (Object.keys(trailers).length > 0) response.addTrailers(trailers)
        response.end()
      })
      stream.on("error", (error) => failed(response, `${target._tag === "Local" ? "this server" : target.servername}: ${error.message}`))
      request.pipe(stream)
      request.on("error", () => stream.close(Http2.constants.NGHTTP2_CANCEL))
      response.on("close", () => {
        if (!stream.closed) stream.close(Http2.constants.NGHTTP2_CANCEL)
      })
    }, (error: Error) => failed(response, `${target._tag === "Local" ? "this server" : target.servername}: ${error.message}`))
  }

  /** An HTTP/2 server stream (outside the compatibility API) to an HTTP/1.1 target. */
  const streamViaHttp1 = (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders, target: Extract<Target, { _tag: "Local" }>) => {
    stream.on("error", () => undefined)
    const outgoing = Http.request({
      host: target.address.host,
      port: target.address.port,
      method: String(headers[":method"] ?? "GET"),
      path: String(headers[":path"] ?? "/"),
      headers: { ...headersFor(headers, target), host: String(headers[":authority"] ?? target.address.host) },
      agent: h1Agent(target)
    })
    outgoing.on("response", (answer) => {
      if (stream.destroyed) return void answer.destroy()
      stream.respond({ ":status": answer.statusCode ?? 502, ...endToEnd(answer.headers) })
      answer.pipe(stream)
    })
    outgoing.on("error", (error) => {
      if (stream.destroyed) return
      if (stream.headersSent) return void stream.close(Http2.constants.NGHTTP2_INTERNAL_ERROR)
      stream.respond({ ":status": 502, "content-type": "application/json" })
      stream.end(JSON.stringify({ code: "unavailable", message: `this server: ${error.message}` }))
    })
    stream.pipe(outgoing)
    stream.on("close", () => outgoing.destroy())
  }

  return {
    forward: (request: ClientRequest, response: ClientResponse, target: Target) =>
      target.http2 ? viaHttp2(request, response, target) : viaHttp1(request, response, target),
    forwardStream: streamViaHttp1,
    close: () => {
      for (const agent of h1Agents.values()) agent.destroy()
      for (const session of h2Sessions.values()) session.then((s) => s.close(), () => undefined)
      h1Agents.clear()
      h2Sessions.clear()
    }
  }
}

export type Forwarder = ReturnType<typeof makeForwarder>
