/** What the runner is built with: the Loop's policy, and how tools, restarts and prices are judged. */
import type { Context, Effect } from "effect"
import type { AssistantMessage, ToolCall, ToolResultMessage } from "../Llm.js"
import type { Policy } from "../Loop.js"
import type { Store } from "../Store.js"

export interface RunnerOptions {
  readonly policy: Policy
  /** The tool's kind and whether running it twice is harmless (decides crash recovery). */
  readonly classifyTool: (toolCall: ToolCall) => { readonly kind: string; readonly idempotent: boolean }
  /** The result a non-idempotent operation gets when a restart interrupted it. */
  readonly interruptedResult: (toolCall: ToolCall) => ToolResultMessage
  /**
   * A non-idempotent operation a restart interrupted whose outcome the store can still tell (a
   * Task whose subagent ran as a conversation here): its result, handed back once; none: it is
   * reported as interrupted. Never re-runs anything.
   */
  readonly recoveredResult?: (toolCall: ToolCall, store: Context.Tag.Service<Store>) => Effect.Effect<ToolResultMessage | undefined>
  /**
   * How many conversations' committed states stay in memory between actors (most recently
   * used first), so that a tool result does not reload and re-verify a long history.
   */
  readonly stateCacheSize?: number
  /**
   * What a committed answer cost in USD (the price of the target that answered), for the model
   * id the call asked for, with the configured model that id names; undefined without a price.
   */
  readonly costOf?: (modelId: string, message: AssistantMessage) => { readonly usd: number; readonly model: string } | undefined
}

