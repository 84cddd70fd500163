/**
 * Starts the server: configuration from `byok.config.json` and the environment, the embedded
 * SQLite store, Cursor's endpoints on a loopback port. Ctrl-C ends open streams with a
 * retryable error and closes the database.
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import * as Config from "./Config.js"
import * as Server from "./Server.js"

const Main = Layer.unwrapEffect(Effect.gen(function*() {
  const config = yield* Config.load
  for (const notice of config.notices) yield* Effect.logWarning(notice)
  yield* Effect.logInfo(
    `cursor-byok: ${config.models.length} models (${config.models.map((m) => m.id).join(", ") || "none"}), database ${config.database}, ` +
      `RunSSE + BidiAppend on http://${config.host}:${config.port}` +
      (config.http2.cleartextPort === undefined ? "" : `, Run (h2c) on http://${config.host}:${config.http2.cleartextPort}`) +
      (config.http2.tls === undefined ? "" : `, Run (TLS, h2) on https://${config.host}:${config.http2.tls.port}`)
  )
  return Server.layer(config)
})).pipe(Layer.provide(NodeContext.layer))

Layer.launch(Main).pipe(
  Effect.tapErrorTag("ConfigError", (error) => Effect.logError(error.message)),
  NodeRuntime.runMain
)
