/**
 * One short, bounded model call: a request, a model, a small output allowance and a time
 * budget; the text of the model's answer, or why there is none (a failure, an error event, no
 * answer in time). Never fails and never outlives its budget: the stream is interrupted (its
 * HTTP request aborted) when the budget runs out.
 *
 * Short answers do not need extended thinking: `quickRouterConfig` is the model table without
 * the configured thinking (so Anthropic's is off, and Gemini's at the model's default), at the
 * lowest effort for OpenAI reasoning models (which cannot turn it off), and `outputAllowance`
 * leaves room for the reasoning tokens a model that may still think spends before it answers.
 */
import { Cause, Duration, Effect, Either, Option, Stream } from "effect"
import type { Context } from "effect"
import type { Llm, LlmError, RequestMessages } from "../Llm.js"
import type { ModelConfig, RouterConfig } from "../llm/Router.js"
import { modelOf } from "../llm/Router.js"

/** Output tokens added for a model configured to think: its reasoning may count against the limit. */
export const REASONING_ALLOWANCE = 1_024

const apiOf = (config: RouterConfig, model: ModelConfig) => config.providers.find((provider) => provider.id === model.provider)?.api

/** Anthropic's thinking is off without its parameter; an OpenAI reasoning model only goes down to its lowest effort. */
const quickModel = (config: RouterConfig) => (model: ModelConfig): ModelConfig => {
  if (model.thinking === undefined) return model
  const { thinking, ...rest } = model
  const api = apiOf(config, model)
  const lowerable = (api === "openai-chat" || api === "openai-responses") && thinking.effort !== undefined
  return lowerable ? { ...rest, thinking: { effort: thinking.effort === "minimal" ? "minimal" : "low" } } : rest
}

const quickConfigs = new WeakMap<RouterConfig, RouterConfig>()

/** The model table for short answers (see the module comment); the same object for the same table. */
export const quickRouterConfig = (config: RouterConfig): RouterConfig => {
  const known = quickConfigs.get(config)
  if (known !== undefined) return known
  const quick = { ...config, models: config.models.map(quickModel(config)) }
  quickConfigs.set(config, quick)
  return quick
}

/**
 * `tokens` for the answer, plus `REASONING_ALLOWANCE` for a model configured to think whose
 * thinking cannot be turned off (every API but Anthropic's: a Gemini model without a thinking
 * budget thinks as it likes).
 */
export const outputAllowance = (config: RouterConfig, modelId: string, tokens: number): number => {
  const model = modelOf(config, modelId)
  return model?.thinking === undefined || apiOf(config, model) === "anthropic" ? tokens : tokens + REASONING_ALLOWANCE
}

export interface Question {
  readonly request: RequestMessages
  /** A configured model id (or an id the aliases map to one). */
  readonly model: string
  /** Names the call in the router's logs (and its prompt-cache key). */
  readonly callId: string
  readonly maxOutputTokens: number
  readonly budgetMs: number
}

const answerText = (content: ReadonlyArray<{ readonly type: string; readonly text?: string }>) =>
  content.flatMap((block) => (block.type === "text" && block.text !== undefined ? [block.text] : [])).join("")

/** Why a call that failed, timed out or died has no answer, for the log. */
const reasonOf = (cause: Cause.Cause<string | LlmError>): string => {
  const failure = Cause.failureOption(cause)
  if (Option.isNone(failure)) return `the model call died: ${Cause.pretty(cause)}`
  return typeof failure.value === "string" ? failure.value : `the model call failed (${failure.value.reason}): ${failure.value.message}`
}

/** The answer's text (`Right`), or why there is none (`Left`, a sentence for the log). */
export const ask = (llm: Context.Tag.Service<Llm>, question: Question): Effect.Effect<Either.Either<string, string>> =>
  llm.stream(question.request, { model: question.model, callId: question.callId, maxOutputTokens: question.maxOutputTokens }).pipe(
    Stream.runFold(Either.left("the stream ended without an answer") as Either.Either<string, string>, (outcome, event) =>
      event._tag === "Done"
        ? Either.right(answerText(event.message.content))
        : event._tag === "Error"
        ? Either.left(`the model failed: ${event.message}`)
        : outcome),
    Effect.timeoutFail({ duration: Duration.millis(question.budgetMs), onTimeout: () => `no answer within ${question.budgetMs} ms` }),
    Effect.catchAllCause((cause) => Effect.succeed(Either.left(reasonOf(cause)))),
    Effect.map((outcome: Either.Either<string, string>) => Either.filterOrLeft(outcome, (text) => text.trim() !== "", () => "the answer was empty"))
  )
