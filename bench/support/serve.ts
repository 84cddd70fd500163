/**
 * The real server in a child process for the benchmarks: `Server.layer(config)` (SQLite store,
 * undici HTTP client, Node HTTP server, the HTTP/2 `Run` listener) built from the `FileConfig`
 * JSON in `BENCH_CONFIG`, on ephemeral loopback ports: the HTTP/1.1 port and the h2c port of
 * `agent.v1.AgentService/Run` are both 0 (never the default 8789, so a bench server does not
 * collide with a server running on this machine, or with another bench), TLS off, the proxy
 * off unless `BENCH_PROXY=1` (then on port 0 too). Prints `READY <port> <pid> <h2c port>
 * [<proxy port>]` once listening. Debug hook: see ipc.ts.
 *
 *   node --expose-gc --import tsx bench/support/serve.ts
 */
import * as HttpServer from "@effect/platform/HttpServer"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect, Schema } from "effect"
import * as Cli from "../../src/Cli.js"
import * as Config from "../../src/Config.js"
import * as Proxy from "../../src/hookup/Proxy.js"
import * as Scheduler from "../../src/internal/Scheduler.js"
import * as Server from "../../src/Server.js"
import * as Run from "../../src/transport/Run.js"
import { installDebugHook } from "./ipc.js"

installDebugHook()
const file = Schema.decodeUnknownSync(Config.FileConfig)(JSON.parse(process.env["BENCH_CONFIG"] ?? "{}"))
const resolved = Config.resolve(file, {})
// The proxy only when the bench asks (BENCH_PROXY=1, with `home` in BENCH_CONFIG for its CA), on an ephemeral port.
const withProxy = process.env["BENCH_PROXY"] === "1"
// BENCH_PORT: a port of the bench's choosing, which other instances on a shared database reach it at (`instances.ts`).
const port = Number(process.env["BENCH_PORT"] ?? 0)
const config = {
  ...resolved,
  host: "127.0.0.1",
  port,
  http2: { ...resolved.http2, cleartextPort: 0, tls: undefined },
  proxy: { ...resolved.proxy, port: withProxy ? 0 : undefined, upstream: undefined }
}

const program = Effect.gen(function*() {
  const server = yield* HttpServer.HttpServer
  const address = server.address
  if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("not on TCP")
  const { cleartextPort } = yield* Run.Http2Endpoints
  if (cleartextPort === undefined) return yield* Effect.dieMessage("the h2c listener of Run is off")
  const proxy = yield* Proxy.ProxyEndpoint
  process.stdout.write(`READY ${address.port} ${process.pid} ${cleartextPort}${proxy.port === undefined ? "" : ` ${proxy.port}`}\n`)
  return yield* Effect.never
  // On the scheduler `npm start` runs the server on.
}).pipe(Effect.provide(Server.layer(config)), Effect.provide(NodeContext.layer), Effect.withScheduler(Scheduler.server))

// The logger `npm start` picks (stdout is a pipe here: logfmt, unless BYOK_LOG_FORMAT says otherwise).
const logging = Cli.logging(process.env)
if (typeof logging === "string") throw new Error(logging)
NodeRuntime.runMain(program.pipe(Effect.provide(logging)), { disablePrettyLogger: true })
