/**
 * The whole server as `serve` runs it (`Server.layer`: HTTP/1.1, h2c, the TLS listener with the
 * CA's loopback leaf, the proxy), on free loopback ports named in its configuration (so `doctor`
 * finds them there), with a CA home and a database of its own and a fake provider.
 */
import { HttpServer } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Context, Effect, FiberRef, Layer, LogLevel, Schema } from "effect"
import * as Config from "../../src/Config.js"
import type { ServerConfig } from "../../src/Config.js"
import * as Ca from "../../src/hookup/Ca.js"
import * as Proxy from "../../src/hookup/Proxy.js"
import * as Server from "../../src/Server.js"
import * as Run from "../../src/transport/Run.js"
import * as AppHarness from "./AppHarness.js"
import { freePort } from "./ChildServer.js"
import * as FakeProvider from "./FakeProvider.js"
import { tempDirectory } from "./Transcripts.js"

export interface HookupConfigOptions {
  readonly providerUrl: string
  readonly dir: string
  /** Top-level configuration fields to replace. */
  readonly overrides?: Record<string, unknown>
}

/** A configuration on free ports (nothing listens on them yet), its home under `dir`. */
export const configOn = (options: HookupConfigOptions) =>
  Effect.gen(function*() {
    const [port, proxyPort, h2cPort, tlsPort] = yield* Effect.promise(() => Promise.all([freePort(), freePort(), freePort(), freePort()]))
    const file = Schema.decodeUnknownSync(Config.FileConfig)({
      ...AppHarness.fileConfigJson(options.providerUrl, {
        port,
        home: `${options.dir}/home`,
        proxy: { port: proxyPort },
        http2: { cleartextPort: h2cPort, tls: { port: tlsPort } },
        ...options.overrides
      }),
      database: `${options.dir}/byok.sqlite`
    })
    return Config.resolve(file, { [AppHarness.API_KEY_ENV]: AppHarness.API_KEY })
  })

/** Runs the server of `config` in the current scope. */
export const serveConfig = (config: ServerConfig) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(Server.layer(config).pipe(Layer.provide(NodeContext.layer))).pipe(
      Effect.orDie,
      Effect.locally(FiberRef.currentMinimumLogLevel, LogLevel.Error)
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    return {
      port: address._tag === "TcpAddress" ? address.port : 0,
      proxyPort: Context.get(context, Proxy.ProxyEndpoint).port!,
      tlsPort: Context.get(context, Run.Http2Endpoints).tlsPort!
    }
  })

/** A fake provider, a configuration on free ports, and the server running on it. */
export const make = (overrides: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const provider = yield* FakeProvider.make
    const dir = yield* tempDirectory("cursor-byok-hookup-")
    const config = yield* configOn({ providerUrl: provider.baseUrl, dir, overrides })
    const ports = yield* serveConfig(config)
    const ca = yield* Ca.load(config.home).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
    return { provider, dir, config, ca, ...ports }
  })
