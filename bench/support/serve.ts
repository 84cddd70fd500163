/**
 * The real server in a child process for the benchmarks: `Server.layer(config)` (SQLite store,
 * undici HTTP client, Node HTTP server) built from the `FileConfig` JSON in `BENCH_CONFIG`, on
 * an ephemeral loopback port. Prints `READY <port> <pid>` once listening. Debug hook: see ipc.ts.
 *
 *   node --expose-gc --import tsx bench/support/serve.ts
 */
import { HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Schema } from "effect"
import * as Config from "../../src/Config.js"
import * as Server from "../../src/Server.js"
import { installDebugHook } from "./ipc.js"

installDebugHook()
const file = Schema.decodeUnknownSync(Config.FileConfig)(JSON.parse(process.env["BENCH_CONFIG"] ?? "{}"))
const config = { ...Config.resolve(file, {}), host: "127.0.0.1", port: 0 }

const program = Effect.gen(function*() {
  const server = yield* HttpServer.HttpServer
  const address = server.address
  if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("not on TCP")
  process.stdout.write(`READY ${address.port} ${process.pid}\n`)
  return yield* Effect.never
}).pipe(Effect.provide(Server.layer(config)))

NodeRuntime.runMain(program)
