/**
 * The `cursor-byok` command (`npm start` runs `serve`): `serve` starts the server on its
 * configuration (`byok.config.json` and the environment: the embedded SQLite store, Cursor's
 * endpoints and the proxy on loopback ports); `setup` / `unsetup` point Cursor at it and undo
 * that; `doctor` checks the hookup; `ca` shows or renews the installation's CA.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Effect, Layer } from "effect"
import * as Cli from "./Cli.js"

// A stop is bounded (`transport/Front.ts` drains requests for `drainMs`); a second SIGINT or
// SIGTERM while it is under way exits at once.
let stopping = false
const onSignal = (signal: NodeJS.Signals) => {
  if (stopping) process.exit(signal === "SIGINT" ? 130 : 143)
  stopping = true
}
process.on("SIGINT", onSignal)
process.on("SIGTERM", onSignal)

const logging = Cli.logging(process.env)
if (typeof logging === "string") {
  process.stderr.write(`${logging}\n`)
  process.exitCode = 1
} else {
  Cli.run(process.argv).pipe(
    Effect.provide(Layer.merge(NodeContext.layer, logging)),
    NodeRuntime.runMain({ disableErrorReporting: true, disablePrettyLogger: true })
  )
}
