/**
 * The REAL server for end-to-end tests: `Server.layerApp(config)` (SQLite store on a temp file,
 * model router, runner, transport, side RPCs, metrics) on Effect's Node HTTP server bound to an
 * ephemeral loopback port, calling providers through undici. The configuration is built by
 * `Config.resolve` exactly as `main.ts` builds it, with every provider pointing at a loopback
 * `FakeProvider`, so the whole provider path (adapters, SSE decoding, retries) is real.
 *
 *   const app = yield* AppHarness.make()                 // scoped: stopped with the scope
 *   app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("Hello")))
 *   new CursorClient({ baseUrl: app.baseUrl })
 *
 * Models (one provider per wire API, all on the same fake provider, so the FIFO script decides
 * every answer whatever the API):
 * - `fake-model`   openai-chat, upstream `fake-upstream`
 * - `fake-claude`  anthropic, upstream `claude-fake`, thinking with a 1024-token budget
 * - `fake-gemini`  gemini, upstream `gemini-fake`
 *
 * With `watchConfig`, the configuration is written to a file (`configPath`) and read from it by
 * `Config.loadFrom`, as `serve` reads it, and the file is watched: `writeConfig` changes it.
 */
import { HttpServer } from "@effect/platform"
import { NodeContext, NodeHttpClient } from "@effect/platform-node"
import { Context, Effect, Exit, FiberRef, Layer, Logger, LogLevel, Option, Schema, Scope } from "effect"
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Config from "../../src/Config.js"
import type { ServerConfig } from "../../src/Config.js"
import * as Live from "../../src/config/Live.js"
import * as Hookup from "../../src/Hookup.js"
import type { Message } from "../../src/Llm.js"
import * as Runner from "../../src/Runner.js"
import * as Server from "../../src/Server.js"
import * as Store from "../../src/Store.js"
import * as Transport from "../../src/Transport.js"
import * as Run from "../../src/transport/Run.js"
import * as FakeProvider from "./FakeProvider.js"

/** Small, deterministic retry settings: two retries 5-20 ms apart, a 2 s idle timeout. */
export const testRetry = { maxRetries: 2, initialDelayMs: 5, maxDelayMs: 20, maxRetryAfterMs: 2000, jitter: 0, idleTimeoutMs: 2000 } as const

export const API_KEY_ENV = "FAKE_PROVIDER_KEY"
export const API_KEY = "sk-fake-test-key"

/**
 * The configuration file (as JSON, before decoding) for providers at `baseUrl` (a FakeProvider's
 * `baseUrl`, `http://127.0.0.1:PORT/v1`). `overrides` replace top-level fields.
 */
export const fileConfigJson = (baseUrl: string, overrides: Record<string, unknown> = {}): Record<string, unknown> => ({
  heartbeatMs: 200,
  // A turn's stream ends with its checkpoint (a test of queued messages sets its own grace); no h2c unless a test asks.
  queuedMessageGraceMs: 0,
  http2: { cleartextPort: null, tls: null },
  proxy: { port: null },
  retry: testRetry,
  providers: [
    { id: "fake-openai", api: "openai-chat", baseUrl, apiKeyEnv: API_KEY_ENV },
    { id: "fake-anthropic", api: "anthropic", baseUrl, apiKeyEnv: API_KEY_ENV },
    { id: "fake-gemini", api: "gemini", baseUrl, apiKeyEnv: API_KEY_ENV }
  ],
  models: [
    { id: "fake-model", provider: "fake-openai", upstreamModel: "fake-upstream", contextWindow: 100000 },
    { id: "fake-claude", provider: "fake-anthropic", upstreamModel: "claude-fake", contextWindow: 200000, maxOutputTokens: 4096, thinking: { budgetTokens: 1024 } },
    { id: "fake-gemini", provider: "fake-gemini", upstreamModel: "gemini-fake", contextWindow: 100000 }
  ],
  ...overrides
})

export interface AppHarnessOptions {
  /** Top-level fields of the configuration file to replace (see `fileConfigJson`). */
  readonly config?: Record<string, unknown>
  /** Server log level (default: errors only). */
  readonly logLevel?: LogLevel.LogLevel
  /** A fake provider to use instead of a fresh one (it is not closed with the app then). */
  readonly provider?: FakeProvider.FakeProvider
  /** A database file to use instead of a fresh temp file (it is not deleted then). */
  readonly database?: string
  /** Write the configuration to a file and watch it, as `serve` does (see `configPath`, `writeConfig`). */
  readonly watchConfig?: boolean
  /** A logger for the server's logs (instead of the default one), e.g. to capture them. */
  readonly logger?: Logger.Logger<unknown, unknown>
}

export interface AppHarness {
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly baseUrl: string
  /** `http://127.0.0.1:<port>` of the h2c listener serving `Run`. */
  readonly h2cUrl: string
  /** The TLS listener's port, when the configuration turns it on. */
  readonly tlsPort: number | undefined
  readonly provider: FakeProvider.FakeProvider
  readonly config: ServerConfig
  readonly database: string
  readonly store: Context.Tag.Service<Store.Store>
  readonly runner: Context.Tag.Service<Runner.Runner>
  readonly transport: Context.Tag.Service<Transport.Transport>
  /** The running configuration (replaced by a reload when `watchConfig` is on). */
  readonly live: Context.Tag.Service<Live.LiveConfig>
  /** The configuration file, when `watchConfig` is on. */
  readonly configPath: string | undefined
  /**
   * Replaces the configuration file with `fileConfigJson(provider.baseUrl, overrides)` (the
   * database kept), or with `text` as it is; written to a temporary file renamed over it, as
   * editors save.
   */
  readonly writeConfig: (content: Record<string, unknown> | string) => Effect.Effect<void>
}

const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "cursor-byok-e2e-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

/** Starts the real server in the current scope; it stops (and its temp database goes) when the scope closes. */
export const make = (options: AppHarnessOptions = {}): Effect.Effect<AppHarness, never, Scope.Scope> =>
  Effect.gen(function*() {
    const provider = options.provider ?? (yield* FakeProvider.make)
    const database = options.database ?? join(yield* tempDir, "byok.sqlite")
    const fileJson = (overrides: Record<string, unknown> | undefined) => ({ ...fileConfigJson(provider.baseUrl, overrides), database })
    const configPath = options.watchConfig === true ? join(yield* tempDir, "byok.config.json") : undefined
    const writeConfig = (content: Record<string, unknown> | string) =>
      Effect.sync(() => {
        if (configPath === undefined) throw new Error("writeConfig needs watchConfig")
        const text = typeof content === "string" ? content : JSON.stringify(fileJson(content), null, 2)
        writeFileSync(`${configPath}.tmp`, text)
        renameSync(`${configPath}.tmp`, configPath)
      })
    const env = { [API_KEY_ENV]: API_KEY }
    const source: Config.ConfigSource | undefined = configPath === undefined ? undefined : { path: configPath, explicit: true, env }
    if (configPath !== undefined) writeFileSync(configPath, JSON.stringify(fileJson(options.config), null, 2))
    const config = source === undefined
      ? Config.resolve(Schema.decodeUnknownSync(Config.FileConfig)(fileJson(options.config)), env)
      : yield* Config.loadFrom(source).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
    // h2c on an ephemeral port whatever the file says; TLS as configured.
    const tls = yield* Hookup.listenerTls(config, undefined).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
    const app = Run.layer({ host: "127.0.0.1", cleartextPort: 0, tls }).pipe(Layer.orDie,
      Layer.provideMerge(source === undefined ? Server.layerApp(config) : Server.layerAppWatched(config, source)),
      Layer.provideMerge(Server.layerHttp(Server.listenOptions(0, "127.0.0.1"))),
      Layer.provide(NodeHttpClient.dispatcherLayer),
      Layer.provide(NodeContext.layer)
    )
    const context = yield* Layer.build(app).pipe(
      Effect.orDie,
      Effect.locally(FiberRef.currentMinimumLogLevel, options.logLevel ?? LogLevel.Error),
      options.logger === undefined ? (effect) => effect : Effect.provide(Logger.replace(Logger.defaultLogger, options.logger))
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("the test server is not on TCP")
    return {
      port: address.port,
      baseUrl: `http://127.0.0.1:${address.port}`,
      h2cUrl: `http://127.0.0.1:${Context.get(context, Run.Http2Endpoints).cleartextPort}`,
      tlsPort: Context.get(context, Run.Http2Endpoints).tlsPort,
      provider,
      config,
      database,
      store: Context.get(context, Store.Store),
      runner: Context.get(context, Runner.Runner),
      transport: Context.get(context, Transport.Transport),
      live: Context.get(context, Live.LiveConfig),
      configPath,
      writeConfig
    }
  })

/** The committed model history of a conversation (none for a conversation the store does not know). */
export const messagesOf = (app: AppHarness, conversationId: string) =>
  app.store.load(conversationId).pipe(
    Effect.orDie,
    Effect.map((loaded) => Option.match(loaded, { onNone: (): ReadonlyArray<Message> => [], onSome: ({ state }) => state.messages }))
  )

/** Promise form (benchmarks, scripts): the harness with a `close` that stops the server and removes its files. */
export const start = async (options: AppHarnessOptions = {}): Promise<AppHarness & { readonly close: () => Promise<void> }> => {
  const scope = Effect.runSync(Scope.make())
  const harness = await Effect.runPromise(Scope.extend(make(options), scope))
  return { ...harness, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
