/**
 * The real server on a loopback ephemeral port, for end-to-end tests: the HTTP/1.1 listener's
 * front door with the agent calls' wire (no app routes), the transport (sessions,
 * ClientGateway), the runner, an in-memory Store and the scripted fake `Llm` of
 * `FakeRuntime.ts`. Only the model is fake.
 */
import { HttpLayerRouter, HttpServer } from "@effect/platform"
import { Context, Effect, Exit, FiberRef, Layer, LogLevel, Ref, Scope } from "effect"
import * as Runner from "../../src/Runner.js"
import { layerHttp, listenOptions } from "../../src/Server.js"
import * as Store from "../../src/Store.js"
import * as Tools from "../../src/Tools.js"
import * as Transport from "../../src/Transport.js"
import * as Front from "../../src/transport/Front.js"
import * as Door from "../../src/transport/Door.js"
import * as Run from "../../src/transport/Run.js"
import { makeFakeLlm } from "./FakeRuntime.js"
import type { LlmCallRecord, Script } from "./FakeRuntime.js"
import type { RequestMessages } from "../../src/Llm.js"
import { mcpToolsOf, modeOfSettings } from "../../src/Loop.js"

export interface HarnessOptions {
  /** What the fake model answers, one script per model call, in order. */
  readonly scripts?: ReadonlyArray<Script>
  /** Answers model calls once `scripts` run out, from the request itself. */
  readonly respond?: (request: RequestMessages, callId: string) => Script
  /** Overrides of `Transport.defaultTransportOptions`. */
  readonly transport?: Partial<Transport.TransportOptions>
  /** Server log level (default: errors only, so fuzzing stays quiet). */
  readonly logLevel?: LogLevel.LogLevel
  /** Also serve `Run` over TLS (ALPN h2) on an ephemeral port, with this certificate and key. */
  readonly tls?: { readonly port: number; readonly cert: string | Buffer; readonly key: string | Buffer }
  /** A Store other than a private in-memory SQLite database. */
  readonly store?: Layer.Layer<Store.Store, Store.StoreError>
}

export interface Harness {
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly baseUrl: string
  /** `http://127.0.0.1:<port>` of the h2c listener serving `Run`. */
  readonly h2cUrl: string
  /** The TLS listener's port, when `tls` was given. */
  readonly tlsPort: number | undefined
  /** The fake model's calls so far, with their exact requests. */
  readonly llmCalls: Effect.Effect<ReadonlyArray<LlmCallRecord>>
  /** How many stalled model streams were interrupted (cancel). */
  readonly llmInterrupted: Effect.Effect<number>
  readonly store: Context.Tag.Service<Store.Store>
  readonly transport: Context.Tag.Service<Transport.Transport>
  readonly runner: Context.Tag.Service<Runner.Runner>
}

export const runnerOptions: Runner.RunnerOptions = {
  policy: {
    buildPrompt: () => "test system prompt",
    buildTools: (context) => Tools.toolCatalog(modeOfSettings(context.settings), mcpToolsOf(context.settings)),
    maxLlmCallsPerTurn: 20
  },
  classifyTool: (call) => {
    const kind = Tools.kindOf(call.name, []) ?? "mcp"
    return { kind, idempotent: Tools.isIdempotent(kind) }
  },
  interruptedResult: (call) => ({
    role: "toolResult",
    toolCallId: call.id,
    toolName: call.name,
    content: [{ type: "text", text: "Interrupted by a server restart; it may or may not have run." }],
    isError: true
  })
}

/** Test defaults: a short blob-ack timeout so a turn whose client went away ends quickly. */
export const testTransportOptions = (overrides: Partial<Transport.TransportOptions> = {}): Transport.TransportOptions => ({
  ...Transport.defaultTransportOptions,
  blobAckTimeoutMs: 2_000,
  // A turn's stream ends with its checkpoint: a test of queued messages sets its own grace.
  queuedMessageGraceMs: 0,
  ...overrides
})

/** The server's front door as on a loopback host with no allowed names (`transport/Door.ts`). */
const loopbackDoor = Layer.succeed(Door.Door, Door.make(() => ({ bindHost: "127.0.0.1", allowedHosts: [], token: undefined }), () => undefined))

/** Starts the server in the current scope; it stops when the scope closes. */
export const make = (options: HarnessOptions = {}): Effect.Effect<Harness, never, Scope.Scope> =>
  Effect.gen(function*() {
    const llm = yield* makeFakeLlm(options.scripts ?? [], options.respond)
    // No app routes: every request but an agent call finds none (404).
    const routes = HttpLayerRouter.serve(Layer.empty, { disableLogger: true, disableListenLog: true })
    const services = Layer.merge(routes, Front.layer).pipe(
      Layer.provideMerge(Run.layer({ host: "127.0.0.1", cleartextPort: 0, tls: options.tls })),
      Layer.provideMerge(Transport.layer),
      Layer.provideMerge(Runner.layer(runnerOptions)),
      Layer.provideMerge(Transport.layerSessions(testTransportOptions(options.transport))),
      Layer.provideMerge(Layer.mergeAll(options.store ?? Store.layerMemory, llm.layer, loopbackDoor)),
      Layer.provideMerge(layerHttp(listenOptions(0, "127.0.0.1")))
    )
    const context = yield* Layer.build(services).pipe(
      Effect.orDie,
      Effect.locally(FiberRef.currentMinimumLogLevel, options.logLevel ?? LogLevel.Error)
    )
    const server = Context.get(context, HttpServer.HttpServer)
    const endpoints = Context.get(context, Run.Http2Endpoints)
    const address = server.address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("the test server is not on TCP")
    return {
      port: address.port,
      baseUrl: `http://127.0.0.1:${address.port}`,
      h2cUrl: `http://127.0.0.1:${endpoints.cleartextPort}`,
      tlsPort: endpoints.tlsPort,
      llmCalls: Ref.get(llm.calls),
      llmInterrupted: Ref.get(llm.interrupted),
      store: Context.get(context, Store.Store),
      transport: Context.get(context, Transport.Transport),
      runner: Context.get(context, Runner.Runner)
    }
  })

/** For benchmarks and scripts outside Effect: starts the server, returns it with a `close`. */
export const start = async (options: HarnessOptions = {}): Promise<Harness & { readonly close: () => Promise<void> }> => {
  const scope = Effect.runSync(Scope.make())
  const harness = await Effect.runPromise(Scope.extend(make(options), scope))
  return { ...harness, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
