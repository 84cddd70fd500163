/**
 * The whole server as one layer, from a resolved configuration: the SQLite store, the model
 * router over an HTTP client, the runner, Cursor's transport and side RPCs, on a Node HTTP
 * server. `main.ts` launches it with the configuration file watched (`config/Live.ts`: the
 * running configuration, which a valid change replaces); end-to-end tests build it with their
 * own configuration, HTTP client and port.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Effect, FiberRef, Layer, Option } from "effect"
import { URGENT } from "./internal/Scheduler.js"
import * as Capture from "./capture/Capture.js"
import { Cluster } from "./Cluster.js"
import * as Registry from "./cluster/Registry.js"
import * as Routing from "./cluster/Routing.js"
import { advertiseAddress } from "./Config.js"
import type { ConfigSource, ServerConfig } from "./Config.js"
import * as ContextUsage from "./ContextUsage.js"
import * as Live from "./config/Live.js"
import { LiveConfig } from "./config/Live.js"
import type { Llm, ToolCall, ToolResultMessage } from "./Llm.js"
import * as Console from "./Console.js"
import * as Dialect from "./Dialect.js"
import * as Drift from "./Drift.js"
import * as FaultInjection from "./FaultInjection.js"
import * as Hookup from "./Hookup.js"
import type { CompactionPolicy } from "./loop/Segments.js"
import * as Router from "./llm/Router.js"
import * as Ready from "./Ready.js"
import * as Run from "./transport/Run.js"
import * as Metrics from "./Metrics.js"
import * as Naming from "./Naming.js"
import * as Prompt from "./Prompt.js"
import * as Runner from "./Runner.js"
import * as Store from "./Store.js"
import * as Tools from "./Tools.js"
import * as Transport from "./Transport.js"
import * as Web from "./Web.js"
import * as Door from "./transport/Door.js"
import * as Front from "./transport/Front.js"
import { capConnections, type ConnectionLimits, defaultConnectionLimits } from "./transport/Limits.js"
import * as SideRpcs from "./transport/SideRpcs.js"
import * as TabRpcs from "./transport/side/Tab.js"
import * as TabService from "./tab/Service.js"
import * as UsersService from "./users/Service.js"

/** A tool call's kind, and whether a restart may run it again (reads) or must not (shell, writes, MCP). */
export const classifyTool = (call: ToolCall): { readonly kind: string; readonly idempotent: boolean } => {
  const kind = Tools.kindOf(call.name, []) ?? "mcp"
  return { kind, idempotent: Tools.isIdempotent(kind) }
}

/**
 * A Task a restart interrupted: its subagent ran as a conversation of this server, so its report
 * is handed back if it finished; one that had not is reported with its state (never re-run).
 */
export const recoveredResult = (call: ToolCall, store: Store.StoreService): Effect.Effect<ToolResultMessage | undefined> =>
  call.name !== "Task"
    ? Effect.succeed(undefined)
    : Effect.gen(function*() {
      const child = yield* store.findSubagentRun(call.id)
      if (Option.isNone(child)) return undefined
      const loaded = yield* store.load(child.value)
      if (Option.isNone(loaded)) return undefined
      const state = loaded.value.state
      if (state.status !== "final") {
        return Tools.recoveredTaskResult(call, { _tag: "Unfinished", agentId: child.value, status: state.status })
      }
      const last = [...state.messages].reverse().find((message) => message.role === "assistant")
      const report = last?.role === "assistant" ? last.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("") : ""
      return Tools.recoveredTaskResult(call, { _tag: "Finished", agentId: child.value, report })
    }).pipe(Effect.catchAll((error) => Effect.as(Effect.logWarning(`recovery: the subagent of ${call.id} could not be looked up`, error), undefined)))

/** What the model reads for a non-idempotent tool call a restart interrupted: it decides what to do. */
export const interruptedResult = (call: ToolCall): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: call.id,
  toolName: call.name,
  content: [{
    type: "text",
    text: "This tool call was interrupted by a server restart before its result arrived. It may or may not have run: check its effects before running it again."
  }],
  isError: true
})

/**
 * Where the server listens. The accept backlog is raised from Node's 511 (the kernel caps it
 * at net.core.somaxconn) so that a burst of new connections (many Cursor windows reconnecting,
 * each opening several sockets) waits in the queue rather than being dropped. Note that Node
 * 20's libuv accepts one connection per event-loop iteration: on a saturated server, where an
 * iteration takes 10-20 ms, a queue of a thousand new connections takes many seconds to
 * drain (measured in the load test: up to 1,500 queued, drained at 30-90 per second).
 */
export const listenOptions = (port: number, host: string) => ({ port, host, backlog: 4096 })

/**
 * The HTTP/1.1 listener: Node's HTTP server with one request listener, its front door
 * (`transport/Front.ts`), bounded: at most `maxConnections` open (then a readable 503), a
 * request's headers within `headersTimeoutMs` (a connection that sends nothing is closed then),
 * idle keep-alive sockets kept `idleTimeoutMs` (by default longer than clients keep theirs, so a
 * client does not send an append on a socket the server is closing at that moment).
 */
export const makeHttpServer = (limits: ConnectionLimits = defaultConnectionLimits): Front.FrontDoor => {
  const front = new Front.FrontDoor({ connectionsCheckingInterval: Math.min(1_000, limits.headersTimeoutMs) })
  const server = capConnections(front.server, limits.maxConnections)
  server.keepAliveTimeout = limits.idleTimeoutMs
  server.headersTimeout = limits.headersTimeoutMs
  server.requestTimeout = Math.max(300_000, limits.headersTimeoutMs)
  return front
}

/** The listener of `front`, listening: Effect's `HttpServer` (whose app the front door sends all but the agent calls to) and `HttpFront`. */
export const layerHttpOn = (front: Front.FrontDoor, options: ReturnType<typeof listenOptions>) => Front.layerServer(front, options)

/** `layerHttpOn` a new `makeHttpServer`. */
export const layerHttp = (options: ReturnType<typeof listenOptions>) => Layer.unwrapEffect(Effect.sync(() => layerHttpOn(makeHttpServer(), options)))

/*
 * The options below read the running configuration (`LiveConfig`) at each use, through getters
 * and lookups: the transport and the runner read them when a request, a stream, a model call or
 * a checkpoint needs them, so a reload applies to what comes next without rebuilding anything.
 */

/** The turn sessions' options: limits and timings as the running configuration has them at each use. */
export const transportOptions = (current: () => ServerConfig): Transport.TransportOptions => ({
  ...Transport.defaultTransportOptions,
  get heartbeatMs() { return current().heartbeatMs },
  get orphanTimeoutMs() { return current().orphanTimeoutMs },
  get blobAckTimeoutMs() { return current().blobAckTimeoutMs },
  get queuedMessageGraceMs() { return current().queuedMessageGraceMs },
  get bidiAppendMaxBytes() { return current().limits.bidiAppendBytes },
  get runSseMaxBytes() { return current().limits.runSseRequestBytes },
  get appendWindow() { return current().limits.appendWindow },
  contextWindowOf: (model) => Router.modelOf(current().router, model)?.contextWindow ?? 200_000,
  subagentModel: () => current().subagentModel,
  childModel: (requested) =>
    Router.modelOf(current().router, requested) !== undefined ? requested : current().subagentModel ?? current().defaultModel ?? requested
})

/** The loop's compaction knobs, from the running configuration at each use. */
const compactionPolicy = (current: () => ServerConfig): CompactionPolicy => ({
  get auto() { return current().compaction.auto },
  get threshold() { return current().compaction.threshold },
  get tailShare() { return current().compaction.tailShare },
  get summaryMaxTokens() { return current().compaction.summaryMaxTokens },
  get elideToolResultChars() { return current().compaction.elideToolResultChars },
  contextWindowOf: (model) => Router.modelOf(current().router, model)?.contextWindow
})

/** The runner's options: the loop's policy and the prices, from the running configuration at each use. */
const runnerOptions = (current: () => ServerConfig): Runner.RunnerOptions => ({
  policy: {
    buildPrompt: Prompt.buildPrompt,
    buildTools: Prompt.buildTools,
    get maxLlmCallsPerTurn() { return current().maxLlmCallsPerTurn },
    compaction: compactionPolicy(current),
    promptIdOf: Dialect.promptIdOf,
    settingsAfter: Prompt.settingsAfter
  },
  classifyTool,
  interruptedResult,
  recoveredResult,
  // The price table when the answer is committed (a price changed while the call streamed applies to it).
  costOf: (model, message) => Router.answerCost(current().router, model, message)
})

/** What Cursor's model lists show: the running configuration's models. */
const catalogue = (config: ServerConfig): SideRpcs.CatalogueOptions => ({
  models: config.models.map((model) => ({
    id: model.id,
    displayName: model.displayName ?? model.id,
    contextWindow: model.contextWindow,
    supportsThinking: model.thinking !== undefined,
    supportsImages: model.supportsImages
  })),
  defaultModel: config.defaultModel,
  agentUrl: config.http2.tls === undefined ? undefined : `https://${config.host}:${config.http2.tls.port}`
})

/**
 * Resumes what a previous process left in flight, and says what it did. With other instances
 * alive on the database, what is in flight may be theirs: a conversation of an instance that is
 * gone is resumed when its client comes back (`cluster/Routing.ts`).
 */
const Recovery = Layer.effectDiscard(Effect.gen(function*() {
  const runner = yield* Runner.Runner
  const cluster = yield* Cluster
  if (cluster.shared && (yield* cluster.othersAlive.pipe(Effect.orElseSucceed(() => true)))) {
    return yield* Effect.logInfo("cluster: other instances are running: what is in flight is resumed as each client comes back, not at start")
  }
  const report = yield* runner.recover
  if (report.conversations > 0) {
    yield* Effect.logInfo(
      `recovered ${report.conversations} conversations: ${report.llmCallsReissued} model calls re-issued, ` +
        `${report.operationsResent} tool calls re-sent, ${report.operationsInterrupted} reported as interrupted`
    )
  }
}))

/** Everything that reads the configuration, on the running configuration `LiveConfig` holds. */
const layerAppOn = <E, R>(live: Layer.Layer<LiveConfig, E, R>, database: string, faults: ServerConfig["faults"], llm?: Layer.Layer<Llm>) => {
  const core = Layer.unwrapEffect(Effect.map(LiveConfig, ({ current }) =>
    Runner.layer(runnerOptions(current)).pipe(
      Layer.provideMerge(Transport.layerSessions(transportOptions(current))),
      Layer.provideMerge(FaultInjection.wrapStore(Store.layerSql, faults)),
      // The team's users (none: one person's server), on the Store's database.
      Layer.provideMerge(UsersService.layer),
      // Instances sharing a PostgreSQL database: the registry (alone on SQLite).
      Layer.provideMerge(Registry.layerFor(database, { address: advertiseAddress(current()) })),
      Layer.provideMerge(Store.layerClient(database)),
      Layer.provideMerge(llm ?? Capture.recordingLlm(Router.layerLive(() => current().router))),
      Layer.provideMerge(Web.layer),
      // Tab on the user's FIM model, on the running configuration's `tab` (off without one).
      Layer.provideMerge(TabService.layer(() => current().tab))
    )))
  const sideRoutes = Layer.unwrapEffect(Effect.gen(function*() {
    const { current } = yield* LiveConfig
    const naming = yield* Naming.make(() => current().router)
    const contextUsage = yield* ContextUsage.make
    const tab = yield* TabService.Tab
    const source = () => ({ ...catalogue(current()), naming, contextUsage })
    const rpcs = new Map([...SideRpcs.rpcTable(source), ...TabRpcs.tabRoutes(tab)])
    return Layer.merge(SideRpcs.layerRoutes(source), Front.layerRpcs(rpcs))
  }))
  // The agent calls are not routes of the app: the front door sends them to their wire (`Front.layer`).
  const routes = Layer.mergeAll(sideRoutes, Metrics.layerRoutes, Console.layerRoutes)
  // No span per request: nothing exports traces, and the span (URL parsing, header redaction,
  // attributes) was ~60 µs of every request's ~250 µs in the HTTP layer (measured on /healthz).
  // A request is what a client waits on: its fiber (and what it forks) runs ahead of the
  // conversations' work on the server's scheduler (`internal/Scheduler.ts`).
  const http = HttpMiddleware.withTracerDisabledWhen(HttpLayerRouter.serve(routes, { disableLogger: true, disableListenLog: true }), () => true).pipe(
    Layer.locally(FiberRef.currentSchedulingPriority, URGENT)
  )
  // Several instances on one database: each agent call served where its request's session is.
  return Layer.mergeAll(http, Front.layer.pipe(Layer.provide(Routing.layer)), Capture.layerFront).pipe(
    Layer.provide(Recovery),
    // The warning for each kind of unknown client field, once (`Drift.ts`).
    Layer.provide(Drift.layerLog),
    Layer.provideMerge(Transport.layer),
    Layer.provideMerge(Door.layer),
    Layer.provideMerge(core),
    // Capture mode (`capture/`): the door's tap and the model's answers, on the running configuration.
    Layer.provideMerge(Capture.layer),
    Layer.provideMerge(live),
    // No spans anywhere (nothing exports traces): every SQL statement, transaction and outbound
    // HTTP call made a span, with its attributes, per use.
    Layer.provide(Layer.setTracerEnabled(false))
  )
}

/**
 * Everything but the listening socket and the outbound HTTP client: the application on an
 * `HttpServer` and an undici `Dispatcher` (`NodeHttpClient.dispatcherLayer`) the caller provides, on a configuration that never changes.
 * `llm` replaces the model router (`cursor-byok replay`'s scripted model).
 */
export const layerApp = (config: ServerConfig, options: { readonly llm?: Layer.Layer<Llm> } = {}) =>
  layerAppOn(Live.layerFixed(config), config.database, config.faults, options.llm)

/**
 * The same, on the configuration read from `source` and reloaded when its file changes (the
 * models, providers, aliases, prices, limits and timings apply to what comes next; the
 * listeners, the database, the CA's home and the proxy need a restart). Requires a `FileSystem`.
 */
export const layerAppWatched = (config: ServerConfig, source: ConfigSource) =>
  layerAppOn(Live.layerWatched(config, source), config.database, config.faults)

/**
 * The server listening on the configured host and port (HTTP/1.1: RunSSE, BidiAppend, side
 * RPCs), on its HTTP/2 ports (`Run`), and on the proxy port Cursor is pointed at, calling
 * providers through undici. The CA is made on first use when the proxy or the TLS listener
 * needs it.
 */
export const layer = (config: ServerConfig, source?: ConfigSource) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const authority = Hookup.needsCa(config) ? yield* Hookup.authorityFor(config) : undefined
    const tls = yield* Hookup.listenerTls(config, authority)
    // One front door: the proxy and the TLS listener hand HTTP/1.1 requests to it in process,
    // marked (`transport/Door.ts`); until every listener is bound it answers 503.
    const front = makeHttpServer(config.limits)
    front.accepting = false
    front.drainMs = config.drainMs
    const accepting = Layer.scopedDiscard(Effect.acquireRelease(
      Effect.gen(function*() {
        front.accepting = true
        front.started = true
        const endpoints = yield* Run.Http2Endpoints
        const proxy = yield* Hookup.Proxy.ProxyEndpoint
        const address = front.server.address()
        const main = typeof address === "object" && address !== null ? address.port : config.port
        for (const line of Ready.readyLines(config, { main, cleartext: endpoints.cleartextPort, tls: endpoints.tlsPort, proxy: proxy.port })) yield* Effect.logInfo(line)
      }),
      () => Effect.sync(() => void (front.accepting = false))
    ))
    const dispatchFrom = (via: "proxy" | "tls"): Hookup.Dispatch => (request, response) => {
      request.headers[Door.HOP_HEADER] = Door.hopMark(via)
      front.handle(request, response)
    }
    const listeners = Hookup.layerListeners(config, tls, dispatchFrom("tls"))
    const proxy = authority === undefined
      ? Layer.succeed(Hookup.Proxy.ProxyEndpoint, { port: undefined })
      : Hookup.layerProxy(config, authority, dispatchFrom("proxy")).pipe(Layer.provide(listeners))
    return accepting.pipe(
      Layer.provideMerge(Layer.merge(proxy, listeners)),
      Layer.provideMerge(source === undefined ? layerApp(config) : layerAppWatched(config, source)),
      Layer.provideMerge(layerHttpOn(front, listenOptions(config.port, config.host))),
      Layer.provide(NodeHttpClient.dispatcherLayer)
    )
  }))
