/**
 * The intercepting HTTPS proxy Cursor is pointed at (`http.proxy`): HTTP CONNECT on loopback.
 * A CONNECT to one of Cursor's API hosts (port 443) is answered by a TLS endpoint of ours with a
 * leaf for that host, signed by the installation's name-constrained CA, speaking HTTP/2 or
 * HTTP/1.1 as the client chooses; each decrypted request is routed (`proxy/Routing.ts`) to this
 * server or to the real host unchanged (`proxy/Forward.ts`). Every other CONNECT is a byte-for-
 * byte tunnel, never decrypted. With an upstream proxy, tunnels and forwards go through it.
 *
 * The proxy listens on 127.0.0.1 only, whatever host the server itself is on: it is never an
 * open proxy for the network. Its TLS endpoints are kept per canonical host name, for the most
 * recently used names only (`proxy/Leaves.ts`).
 *
 * A connection that misbehaves (garbage instead of CONNECT, a target that refuses, a handshake
 * that stops half way, a client that never sends) is closed with a log line; the proxy serves
 * everyone else on.
 */
import { Context, Effect, FiberSet, Layer } from "effect"
import type * as Http from "node:http"
import * as HttpServer from "node:http"
import * as Http2 from "node:http2"
import type * as Net from "node:net"
import type * as Stream from "node:stream"
import type * as Tls from "node:tls"
import { ConfigError } from "../Config.js"
import { capConnections, defaultConnectionLimits } from "../transport/Limits.js"
import { RUN_PATH } from "../transport/Run.js"
import * as Ca from "./Ca.js"
import type { ClientRequest, ClientResponse, Forwarder, Target } from "./proxy/Forward.js"
import { makeForwarder } from "./proxy/Forward.js"
import { canonicalName, makeEndpointCache } from "./proxy/Leaves.js"
import type { RoutingTable } from "./proxy/Routing.js"
import { isInterceptedHost, pathOf, routeOf } from "./proxy/Routing.js"
import type { Address, UpstreamProxy } from "./proxy/Upstream.js"
import { bypasses, openTcp } from "./proxy/Upstream.js"

/** Where the proxy listens, always: Cursor on this machine is its only client. */
export const PROXY_HOST = "127.0.0.1"

export interface ProxyOptions {
  readonly host?: typeof PROXY_HOST | undefined
  /** 0: an ephemeral port. */
  readonly port: number
  readonly authority: Ca.Authority
  readonly routing: RoutingTable
  /**
   * This server's own listeners: HTTP/1.1 (unary calls, RunSSE, BidiAppend) and h2c (`Run`),
   * when on; and, when given, its HTTP server in process, for a client speaking HTTP/1.1.
   */
  readonly local: {
    readonly host: string
    readonly port: number
    readonly h2cPort: number | undefined
    readonly dispatch?: ((request: Http.IncomingMessage, response: Http.ServerResponse) => void) | undefined
  }
  readonly upstream: UpstreamProxy | undefined
  /** Where a host's connections really go (tests point Cursor's hosts at a fake origin); identity otherwise. */
  readonly resolve?: ((target: Address) => Address) | undefined
  /** Extra roots trusted for the real hosts' certificates (tests). */
  readonly originCa?: ReadonlyArray<string> | undefined
  /** A client that sends nothing (no CONNECT head, no TLS handshake) this long is closed. */
  readonly idleHandshakeMs?: number | undefined
  /** Open client connections past which a new one gets 503 (`limits.maxConnections`). */
  readonly maxConnections?: number | undefined
  /**
   * A team's server (`proxy.upstreamServer`): what would be answered here goes there, with the
   * developer's token, but for the paths in `keepLocal` (Tab on this machine's own model).
   */
  readonly team?: { readonly url: string; readonly token: string | undefined; readonly keepLocal: ReadonlySet<string> } | undefined
}

/** Where a team's server is reached: over TLS for `https:` (HTTP/2 when the client speaks it), else HTTP/1.1 in the clear. */
const teamTarget = (team: NonNullable<ProxyOptions["team"]>, resolve: (target: Address) => Address, http2: boolean): Target => {
  const url = new URL(team.url)
  const secure = url.protocol === "https:"
  const port = url.port === "" ? (secure ? 443 : 80) : Number(url.port)
  return { _tag: "Origin", servername: url.hostname, address: resolve({ host: url.hostname, port }), http2: http2 && secure, team: { secure, token: team.token, authority: url.host } }
}

/** The proxy's bound port; undefined when the proxy is off. */
export class ProxyEndpoint extends Context.Tag("cursor-byok/hookup/ProxyEndpoint")<ProxyEndpoint, {
  readonly port: number | undefined
  /** The address it is bound to (`PROXY_HOST`), when on. */
  readonly host?: string | undefined
  /** TLS endpoints for intercepted hosts kept now (tests). */
  readonly interceptorsKept?: (() => number) | undefined
  /** Client and outgoing sockets open now (tests). */
  readonly socketsOpen?: (() => number) | undefined
}>() {}

const ESTABLISHED = "HTTP/1.1 200 Connection Established\r\n\r\n"

const refuse = (socket: Stream.Duplex, status: string, message: string) => {
  if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(message)}\r\n\r\n${message}`)
  // A client that does not close its side after the answer is not kept.
  setTimeout(() => socket.destroy(), 1_000).unref()
}

/** `host:port` of a CONNECT request target, IPv6 in brackets. */
export const parseAuthority = (target: string): Address | undefined => {
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(target)
  if (match === null) return undefined
  const port = Number(match[3])
  return port > 0 && port < 65536 ? { host: (match[1] ?? match[2])!, port } : undefined
}

/** A plain-HTTP request in absolute form (`GET http://host/path`): forwarded as any proxy would. */
const plainForwarder = (
  upstreamProxy: UpstreamProxy | undefined,
  resolve: (target: Address) => Address,
  log: (message: string) => void
) =>
(request: Http.IncomingMessage, response: Http.ServerResponse) => {
  let url: URL
  try {
    url = new URL(request.url ?? "")
  } catch {
    response.writeHead(400, { "content-type": "text/plain" })
    return response.end("this is a proxy: send CONNECT host:port, or an absolute http:// URL\n")
  }
  if (url.protocol !== "http:") {
    response.writeHead(400, { "content-type": "text/plain" })
    return response.end(`only http:// URLs are proxied in plain form, not ${url.protocol}\n`)
  }
  const port = url.port === "" ? 80 : Number(url.port)
  const upstream = bypasses(upstreamProxy, url.hostname) ? undefined : upstreamProxy
  const direct = resolve({ host: url.hostname, port })
  const outgoing = HttpServer.request({
    ...(upstream === undefined
      ? { host: direct.host, port: direct.port, path: `${url.pathname}${url.search}` }
      : { host: upstream.host, port: upstream.port, path: url.href }),
    method: request.method,
    headers: request.headers
  }, (answer) => {
    response.writeHead(answer.statusCode ?? 502, answer.headers)
    answer.pipe(response)
  })
  outgoing.on("error", (error) => {
    log(`${request.method} ${url.href}: ${error.message}`)
    if (!response.headersSent) response.writeHead(502, { "content-type": "text/plain" })
    response.end(`cannot reach ${url.host}: ${error.message}\n`)
  })
  request.pipe(outgoing)
}

export const layer = (options: ProxyOptions): Layer.Layer<ProxyEndpoint, ConfigError> =>
  Layer.scoped(ProxyEndpoint, Effect.gen(function*() {
    const runFork = yield* FiberSet.makeRuntime<never>()
    const log = (message: string) => void runFork(Effect.logWarning(`proxy: ${message}`))
    const resolve = options.resolve ?? ((target: Address) => target)
    const idleMs = options.idleHandshakeMs ?? 10_000
    const forwarder: Forwarder = makeForwarder({ upstream: options.upstream, originCa: options.originCa })
    const open = new Set<Stream.Duplex>()
    const track = (socket: Stream.Duplex) => {
      open.add(socket)
      socket.on("close", () => open.delete(socket))
      socket.on("error", () => undefined)
    }

    const route = (host: string) => (request: ClientRequest, response: ClientResponse) => {
      const http2 = request.httpVersionMajor === 2
      if (routeOf(options.routing, request.url ?? "/") === "local") {
        if (options.team !== undefined && !options.team.keepLocal.has(pathOf(request.url ?? "/"))) {
          return forwarder.forward(request, response, teamTarget(options.team, resolve, http2))
        }
        const toRun = pathOf(request.url ?? "/") === RUN_PATH
        const dispatch = options.local.dispatch
        if (!http2 && !toRun && dispatch !== undefined) return dispatch(request as Http.IncomingMessage, response as Http.ServerResponse)
        const h2c = toRun && options.local.h2cPort !== undefined
        forwarder.forward(request, response, {
          _tag: "Local",
          address: { host: options.local.host, port: h2c ? options.local.h2cPort! : options.local.port },
          http2: h2c
        })
      } else {
        forwarder.forward(request, response, { _tag: "Origin", servername: host, address: resolve({ host, port: 443 }), http2 })
      }
    }

    /** A TLS endpoint for one intercepted host, holding that host's leaf. */
    const endpoint = (host: string) => (leaf: Ca.Leaf) => {
      const server = Http2.createSecureServer({
        cert: leaf.certPem,
        key: leaf.keyPem,
        allowHTTP1: true,
        handshakeTimeout: idleMs,
        settings: { initialWindowSize: 1 << 20 }
      })
      server.on("request", route(host))
      server.on("tlsClientError", (error: Error, socket: Tls.TLSSocket) => {
        log(`TLS with the client for ${host} failed: ${error.message}`)
        socket.destroy()
      })
      server.on("session", (session: Http2.ServerHttp2Session) => session.on("error", () => undefined))
      return server
    }

    /** One endpoint per intercepted name, made on its first CONNECT and again a day before its leaf expires; the most recently used kept. */
    const interceptors = makeEndpointCache({
      make: (name) => Effect.runPromise(Ca.issueLeaf(options.authority, [name])).then(endpoint(name)),
      renewAfterMs: (Ca.LEAF_VALIDITY_DAYS - 1) * 86_400_000
    })

    const tunnel = (client: Stream.Duplex, target: Address, head: Buffer) => {
      openTcp(resolve(target), options.upstream, { name: target.host }).then((remote) => {
        track(remote)
        if (client.destroyed) return void remote.destroy()
        client.write(ESTABLISHED)
        if (head.length > 0) remote.write(head)
        remote.pipe(client)
        client.pipe(remote)
        remote.on("error", () => client.destroy())
        client.on("error", () => remote.destroy())
        remote.on("close", () => client.destroy())
        client.on("close", () => remote.destroy())
        remote.resume()
      }, (error: Error) => {
        log(`CONNECT ${target.host}:${target.port}: ${error.message}`)
        refuse(client, "502 Bad Gateway", `cannot reach ${target.host}:${target.port}: ${error.message}\n`)
      })
    }

    const onConnect = (request: Http.IncomingMessage, client: Stream.Duplex, head: Buffer) => {
      track(client)
      const target = parseAuthority(request.url ?? "")
      if (target === undefined) {
        log(`CONNECT ${request.url}: not a host:port`)
        return refuse(client, "400 Bad Request", `CONNECT takes host:port, not ${request.url}\n`)
      }
      if (!(isInterceptedHost(target.host, options.routing.tab === true) && target.port === 443)) return tunnel(client, target, head)
      // One leaf and one endpoint per name, however the client spelled it.
      const name = canonicalName(target.host)
      interceptors.get(name).then((server) => {
        if (client.destroyed) return
        client.write(ESTABLISHED)
        if (head.length > 0) client.unshift(head)
        // The HTTP server's sockets allow half-open; the TLS socket over one inherits it, and would stay
        // open (holding this endpoint) after a client that went away, mid-handshake or without a GOAWAY.
        client.allowHalfOpen = false
        server.emit("connection", client)
      }, (error: Error) => {
        log(`no leaf for ${name}: ${error.message}`)
        refuse(client, "502 Bad Gateway", `cannot intercept ${name}: ${error.message}\n`)
      })
    }

    const onPlainRequest = plainForwarder(options.upstream, resolve, log)

    const server = capConnections(
      HttpServer.createServer({ connectionsCheckingInterval: Math.min(1_000, idleMs), headersTimeout: idleMs, requestTimeout: 0 }),
      options.maxConnections ?? defaultConnectionLimits.maxConnections
    )
    server.on("connect", onConnect)
    server.on("request", onPlainRequest)
    server.on("clientError", (error: NodeJS.ErrnoException, socket: Net.Socket) => {
      log(`a client sent no valid proxy request (${error.code ?? error.message}); closed`)
      refuse(socket, error.code === "ERR_HTTP_REQUEST_TIMEOUT" ? "408 Request Timeout" : "400 Bad Request", "this is a proxy: send CONNECT host:port\n")
    })
    server.on("connection", (socket: Net.Socket) => track(socket))

    const host = options.host ?? PROXY_HOST
    const port = yield* Effect.async<number, ConfigError>((resume) => {
      server.once("error", (error: NodeJS.ErrnoException) =>
        resume(Effect.fail(new ConfigError({
          message: error.code === "EADDRINUSE"
            ? `the proxy port ${host}:${options.port} is in use: choose another (proxy.port or BYOK_PROXY_PORT, or off)`
            : `the proxy could not listen on ${host}:${options.port}: ${error.message}`
        }))))
      server.listen({ port: options.port, host, backlog: 1024 }, () => resume(Effect.succeed((server.address() as Net.AddressInfo).port)))
    })
    yield* Effect.addFinalizer(() =>
      Effect.async<void>((resume) => {
        forwarder.close()
        for (const socket of open) socket.destroy()
        server.close(() => resume(Effect.void))
      })
    )
    return { port, host, interceptorsKept: interceptors.size, socketsOpen: () => open.size }
  }))
