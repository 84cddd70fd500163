/**
 * How the Cursor IDE reaches this server: the installation's name-constrained CA
 * (`hookup/Ca.ts`), the intercepting proxy Cursor's `http.proxy` points at (`hookup/Proxy.ts`),
 * the TLS listener's loopback certificate, and the reversible changes `setup` makes to the
 * user's machine (`hookup/CursorSettings.ts`, `hookup/Trust.ts`), checked by `doctor`.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as HttpServer from "@effect/platform/HttpServer"
import { Effect, Layer, Redacted } from "effect"
import type * as Http from "node:http"
import type { ServerConfig } from "./Config.js"
import { ConfigError, isLoopback } from "./Config.js"
import * as Ca from "./hookup/Ca.js"
import * as Proxy from "./hookup/Proxy.js"
import { parseProxyUrl } from "./hookup/proxy/Upstream.js"
import type { UpstreamProxy } from "./hookup/proxy/Upstream.js"
import * as Run from "./transport/Run.js"
import { TAB_PATHS } from "./transport/side/Tab.js"
import * as SideRpcs from "./transport/SideRpcs.js"

export { Ca, Proxy }

/** Whether the configuration needs the CA: the proxy, or a TLS listener without its own files. */
export const needsCa = (config: ServerConfig) =>
  config.proxy.port !== undefined || (config.http2.tls !== undefined && config.http2.tls.certFile === undefined)

/** The CA for serving: made on first use; a broken or foreign one stops the start with the fix. */
export const authorityFor = (config: ServerConfig) =>
  Ca.load(config.home).pipe(
    Effect.catchIf((error) => error.reason === "missing", () =>
      Effect.tap(Ca.ensure(config.home), () =>
        Effect.logInfo(`made this installation's CA in ${config.home} (it signs the certificates of Cursor's hosts for the proxy, on this machine only); \`npx cursor-byok setup --trust\` has this system trust it`))),
    Effect.mapError((error) => new ConfigError({ message: error.message }))
  )

/** The TLS listener's certificate: the configured PEM files, or a loopback leaf from the CA. */
export const listenerTls = (
  config: Pick<ServerConfig, "http2">,
  authority: Ca.Authority | undefined
): Effect.Effect<Run.Http2Options["tls"], ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const tls = config.http2.tls
    if (tls === undefined) return undefined
    if (tls.certFile !== undefined && tls.keyFile !== undefined) {
      const fs = yield* FileSystem.FileSystem
      const read = (path: string) =>
        fs.readFile(path).pipe(Effect.mapError((error) =>
          new ConfigError({ message: `the TLS certificate or key of the HTTP/2 listener could not be read: ${error.message}` })
        ))
      return { port: tls.port, cert: Buffer.from(yield* read(tls.certFile)), key: Buffer.from(yield* read(tls.keyFile)) }
    }
    if (authority === undefined) return yield* new ConfigError({ message: "the TLS listener has no certificate: give http2.tls.certFile and keyFile, or let the CA issue one" })
    const leaf = yield* Ca.issueLeaf(authority, Ca.loopbackNames, Ca.LISTENER_LEAF_VALIDITY_DAYS).pipe(Effect.mapError((error) => new ConfigError({ message: error.message })))
    return { port: tls.port, cert: leaf.certPem, key: leaf.keyPem }
  })

/** Hands an HTTP/1.1 request to this server's own HTTP server, in process (no loopback hop). */
export type Dispatch = (request: Http.IncomingMessage, response: Http.ServerResponse) => void

/**
 * The HTTP/2 listeners. The TLS one is also the agent URL Cursor is given: its HTTP/2 streams
 * (`Run`, RunSSE, BidiAppend, the side RPCs) go to the front door once the door let them
 * through, its HTTP/1.1 requests to the front door's `handle` as from TLS (`dispatch`).
 */
export const layerListeners = (config: ServerConfig, tls: Run.Http2Options["tls"], dispatch: Dispatch) =>
  Run.layer({ host: config.host, cleartextPort: config.http2.cleartextPort, tls, limits: config.limits, http1: dispatch })

export const upstreamOf = (config: ServerConfig): Effect.Effect<UpstreamProxy | undefined, ConfigError> => {
  if (config.proxy.upstream === undefined) return Effect.succeed(undefined)
  const parsed = parseProxyUrl(config.proxy.upstream)
  return typeof parsed === "string"
    ? Effect.fail(new ConfigError({ message: parsed }))
    : Effect.succeed({ ...parsed, bypass: config.proxy.noProxy })
}

/**
 * The proxy in front of this server's listeners as bound (the HTTP/1.1 port, and h2c for `Run`).
 * It listens on 127.0.0.1 whatever `host` the server is on: a non-loopback proxy would be an
 * open CONNECT proxy for the network.
 */
export const layerProxy = (config: ServerConfig, authority: Ca.Authority, dispatch: Dispatch) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    if (config.proxy.port === undefined) return Layer.succeed(Proxy.ProxyEndpoint, { port: undefined })
    const upstream = yield* upstreamOf(config)
    const address = (yield* HttpServer.HttpServer).address
    const local = {
      port: address._tag === "TcpAddress" ? address.port : config.port,
      h2cPort: (yield* Run.Http2Endpoints).cleartextPort
    }
    // This server's own listeners, from this machine: on a wildcard host, by loopback.
    const localHost = config.host === "0.0.0.0" ? "127.0.0.1" : config.host === "::" || config.host === "[::]" ? "::1" : config.host
    if (!isLoopback(config.host)) {
      yield* Effect.logWarning(`the proxy listens on ${Proxy.PROXY_HOST} only, not on ${config.host}: it serves Cursor on this machine`)
    }
    return Proxy.layer({
      host: Proxy.PROXY_HOST,
      port: config.proxy.port,
      authority,
      // Tab's calls are answered here while a Tab model is configured (at start: a reload that
      // turns Tab on or off takes a restart to move them), else they go to Cursor.
      routing: { local: new Set([...SideRpcs.localProcedures, ...(config.tab === undefined ? [] : TAB_PATHS)]), offline: config.proxy.offline, tab: config.tab !== undefined },
      local: { host: localHost, port: local.port, h2cPort: local.h2cPort, dispatch },
      upstream,
      maxConnections: config.limits.maxConnections,
      idleHandshakeMs: config.limits.headersTimeoutMs,
      team: config.proxy.upstreamServer === undefined ? undefined : {
        url: config.proxy.upstreamServer.url,
        token: config.proxy.upstreamServer.token === undefined ? undefined : Redacted.value(config.proxy.upstreamServer.token),
        keepLocal: new Set(config.tab === undefined ? [] : TAB_PATHS)
      }
    })
  }))
