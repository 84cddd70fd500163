/**
 * The `cursor-byok` command (`npm start` runs `serve`): `serve` starts the server on its
 * configuration (`byok.config.json` and the environment: the embedded SQLite store, Cursor's
 * endpoints and the proxy on loopback ports); `setup` / `unsetup` point Cursor at it and undo
 * that; `doctor` checks the hookup; `ca` shows or renews the installation's CA.
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Cli from "./Cli.js"

Cli.run(process.argv).pipe(
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
