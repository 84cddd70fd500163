/**
 * One structured log line per finished turn, for the operator: the conversation, the client's
 * request id, the model asked for and the target that answered, how many model and tool calls,
 * tokens by kind, what it cost, the time to the first streamed delta and the turn's duration,
 * and how it ended. Counts, tokens and cost come from the committed state (so a turn finished
 * after a restart counts the previous process's calls too); the two times are this process's
 * own clock readings, absent for a turn it did not start.
 */
import { Clock, Effect } from "effect"
import type { Usage } from "../Llm.js"
import type { ConversationState } from "../Loop.js"
import type { RunnerOptions } from "./Options.js"
import type { TurnOutcome } from "./ClientGateway.js"

/** When this process saw a turn start and its first streamed delta (ms since the epoch). */
export interface TurnClock {
  readonly started: Map<string, number>
  readonly firstDelta: Map<string, number>
}

export const makeTurnClock = (): TurnClock => ({ started: new Map(), firstDelta: new Map() })

/** The turn a model call id belongs to (`<turn id>/c<n>`). */
export const turnOfCall = (callId: string): string => callId.slice(0, Math.max(0, callId.lastIndexOf("/c")))

const outcomeOf = (outcome: TurnOutcome): string => outcome._tag === "Final" ? outcome.reason : outcome._tag.toLowerCase()

/** The fields of the line, from the committed state of the turn that ended. */
export const turnSummary = (
  options: Pick<RunnerOptions, "costOf">,
  state: ConversationState,
  outcome: TurnOutcome,
  usage: Usage,
  times: { readonly startedAt: number | undefined; readonly firstDeltaAt: number | undefined; readonly now: number }
): Record<string, unknown> => {
  const model = state.settings?.model ?? ""
  let toolCalls = 0
  let usd: number | undefined
  let target: string | undefined
  for (const message of state.messages.slice(state.turnStart)) {
    if (message.role === "toolResult") toolCalls++
    if (message.role !== "assistant") continue
    target = `${message.provider}/${message.model}`
    const cost = options.costOf?.(model, message)
    if (cost !== undefined) usd = (usd ?? 0) + cost.usd
  }
  return {
    conversationId: state.conversationId,
    turnId: state.turnId,
    requestId: state.settings?.requestId ?? "",
    model,
    ...(target === undefined ? {} : { target }),
    modelCalls: state.llmCallSeq,
    toolCalls,
    inputTokens: usage.input,
    outputTokens: usage.output,
    cacheReadTokens: usage.cacheRead,
    cacheWriteTokens: usage.cacheWrite,
    ...(usd === undefined ? {} : { costUsd: Number(usd.toFixed(6)) }),
    ...(times.startedAt === undefined || times.firstDeltaAt === undefined ? {} : { firstDeltaMs: times.firstDeltaAt - times.startedAt }),
    ...(times.startedAt === undefined ? {} : { durationMs: times.now - times.startedAt }),
    outcome: outcomeOf(outcome)
  }
}

/** Logs the line (info; a failed turn at warning, with its error) and forgets the turn's clock readings. */
export const logTurn = (clock: TurnClock, options: Pick<RunnerOptions, "costOf">, state: ConversationState, outcome: TurnOutcome, usage: Usage) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const summary = turnSummary(options, state, outcome, usage, {
      startedAt: clock.started.get(state.turnId),
      firstDeltaAt: clock.firstDelta.get(state.turnId),
      now
    })
    clock.started.delete(state.turnId)
    clock.firstDelta.delete(state.turnId)
    const line = outcome._tag === "Failed"
      ? Effect.logWarning(`turn failed: ${outcome.error}`)
      : Effect.logInfo(`turn ${summary["outcome"]}`)
    yield* line.pipe(Effect.annotateLogs(summary))
  })
