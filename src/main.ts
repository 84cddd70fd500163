/**
 * The service entry point. Until the runner and transport are assembled it only says so; the
 * layer composition (Config, Store, Llm router, Transport) lands with them.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"

const program = Effect.logWarning(
  "cursor-byok: the server is not assembled yet (the loop, the LLM contract and their tests are); nothing is listening"
)

NodeRuntime.runMain(program)
