/**
 * The model router: a Schema-defined configuration of providers and models, and the layer that
 * builds the `Llm` service from it. A model id names one provider configuration (wire API, base
 * URL, key, extra headers and body fields, compat overrides) and the upstream model to ask for.
 * API keys arrive already resolved (the caller reads the environment) and stay `Redacted`.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Chunk, Effect, Layer, Metric, Schema, Stream } from "effect"
import { type AssistantMessage, Llm, type LlmError, type Message, type RequestMessages, type ResponseEvent, type StreamOptions, type Usage, type UserContent } from "../Llm.js"
import * as Metrics from "../Metrics.js"
import type { Adapter, CallSettings } from "./Adapter.js"
import * as Anthropic from "./Anthropic.js"
import { llmError } from "./Common.js"
import * as Gemini from "./Gemini.js"
import { type AttemptFailure, defaultRetrySettings, type RetrySettings, streamWithRetry } from "./Http.js"
import * as OpenAiChat from "./OpenAiChat.js"
import * as OpenAiResponses from "./OpenAiResponses.js"

export const ApiKind = Schema.Literal("openai-chat", "anthropic", "gemini", "openai-responses")
export type ApiKind = typeof ApiKind.Type

export const ProviderConfig = Schema.Struct({
  id: Schema.String,
  api: ApiKind,
  /** Including the version segment: `https://api.openai.com/v1`, `https://api.anthropic.com/v1`, `https://generativelanguage.googleapis.com/v1beta`. */
  baseUrl: Schema.String,
  apiKey: Schema.Redacted(Schema.String),
  headers: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.String }), { default: () => ({}) }),
  /** Names of `headers` (any case) whose values are secrets, redacted like the key (`internal/Secrets.ts`). */
  secretHeaders: Schema.optional(Schema.Array(Schema.String)),
  extraBody: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) }),
  /**
   * Per-API overrides (openai-chat: maxTokensField, includeUsage, replayReasoning,
   * reasoningEffort, promptCacheKey (default: on for api.openai.com only); openai-responses:
   * promptCacheKey (default on); anthropic: cacheControl).
   */
  compat: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) })
})
export type ProviderConfig = typeof ProviderConfig.Type

export const ThinkingConfig = Schema.Struct({
  effort: Schema.optional(Schema.Literal("minimal", "low", "medium", "high")),
  budgetTokens: Schema.optional(Schema.Int.pipe(Schema.positive()))
})

const PerMillion = Schema.Number.pipe(Schema.nonNegative(), Schema.finite())

/** USD per million tokens. Cache reads and writes default to the input price. */
export const PriceConfig = Schema.Struct({
  input: PerMillion,
  output: PerMillion,
  cacheRead: Schema.optional(PerMillion),
  cacheWrite: Schema.optional(PerMillion)
})
export type PriceConfig = typeof PriceConfig.Type

/** Another place to send a model's calls when the first fails before any event: a provider and its upstream model. */
export const FallbackTarget = Schema.Struct({
  provider: Schema.String,
  upstreamModel: Schema.String,
  /** Its own price; the model's otherwise. */
  price: Schema.optional(PriceConfig)
})
export type FallbackTarget = typeof FallbackTarget.Type

export const ModelConfig = Schema.Struct({
  /** The id clients ask for. */
  id: Schema.String,
  /** A `ProviderConfig.id`. */
  provider: Schema.String,
  upstreamModel: Schema.String,
  /** Tried in order when the call fails before any event reached us (never once one has). */
  fallback: Schema.optional(Schema.Array(FallbackTarget)),
  price: Schema.optional(PriceConfig),
  contextWindow: Schema.optional(Schema.Int.pipe(Schema.positive())),
  maxOutputTokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  thinking: Schema.optional(ThinkingConfig),
  /** Whether the model takes images; without it, images in the history go to it as a line of text. */
  supportsImages: Schema.optional(Schema.Boolean)
})
export type ModelConfig = typeof ModelConfig.Type

export const RetryConfig = Schema.Struct({
  maxRetries: Schema.Int.pipe(Schema.nonNegative()),
  initialDelayMs: Schema.Number.pipe(Schema.nonNegative()),
  maxDelayMs: Schema.Number.pipe(Schema.nonNegative()),
  maxRetryAfterMs: Schema.Number.pipe(Schema.nonNegative()),
  jitter: Schema.Number.pipe(Schema.between(0, 1)),
  idleTimeoutMs: Schema.Number.pipe(Schema.positive())
})

export const RouterConfig = Schema.Struct({
  providers: Schema.Array(ProviderConfig),
  models: Schema.Array(ModelConfig),
  /** Other model ids (Cursor's own: what it asks for on Auto, for subagents...) → a configured model id; `*` for any other id. */
  aliases: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  /** The model a request that names none goes to (the first model otherwise). */
  defaultModel: Schema.optional(Schema.String),
  retry: Schema.optional(RetryConfig)
})
export type RouterConfig = typeof RouterConfig.Type

/** A model's fallback naming a missing provider or repeating a target, or an alias naming no model: the first such problem. */
export const routingProblem = (config: RouterConfig): string | undefined => {
  const { models, providers, aliases } = config
  for (const [index, model] of models.entries()) {
    const seen = new Set([`${model.provider}/${model.upstreamModel}`])
    for (const [k, target] of (model.fallback ?? []).entries()) {
      const where = `models[${index}] (${model.id}).fallback[${k}]`
      if (!providers.some((p) => p.id === target.provider)) return `${where} names provider ${target.provider}, which is not configured`
      const key = `${target.provider}/${target.upstreamModel}`
      if (seen.has(key)) return `${where} repeats ${key}: a fallback loop`
      seen.add(key)
    }
  }
  for (const [alias, target] of Object.entries(aliases ?? {})) {
    if (models.some((m) => m.id === alias)) return `aliases.${alias}: ${alias} is a configured model id already`
    if (!models.some((m) => m.id === target)) {
      return `aliases.${alias} names model ${target}, which is not configured${Object.hasOwn(aliases ?? {}, target) ? " (it is an alias: name the model itself)" : ""}`
    }
  }
  return undefined
}

export const adapters: Readonly<Record<ApiKind, Adapter>> = {
  "openai-chat": OpenAiChat.adapter,
  anthropic: Anthropic.adapter,
  gemini: Gemini.adapter,
  "openai-responses": OpenAiResponses.adapter
}

/** The configured model a client's model id names: itself, through an alias, or through `*`; no id names the default model. */
export const modelOf = (config: Pick<RouterConfig, "models" | "aliases" | "defaultModel">, modelId: string): ModelConfig | undefined => {
  if (modelId === "") return config.models.find((candidate) => candidate.id === config.defaultModel) ?? config.models[0]
  const direct = config.models.find((candidate) => candidate.id === modelId)
  if (direct !== undefined) return direct
  const aliased = config.aliases?.[modelId] ?? config.aliases?.["*"]
  return aliased === undefined ? undefined : config.models.find((candidate) => candidate.id === aliased)
}

export interface ResolvedTarget {
  readonly adapter: Adapter
  readonly settings: CallSettings
  readonly acceptsImages: boolean
  readonly price: PriceConfig | undefined
}

/** A model's targets in the order they are tried: its own provider, then its fallbacks (those whose provider exists). */
export const resolveTargets = (
  config: RouterConfig,
  modelId: string,
  maxOutputTokens?: number,
  promptCacheKey?: string
): ReadonlyArray<ResolvedTarget> => {
  const model = modelOf(config, modelId)
  if (model === undefined) return []
  const targets = [{ provider: model.provider, upstreamModel: model.upstreamModel, price: model.price }, ...(model.fallback ?? [])]
  return targets.flatMap((target): Array<ResolvedTarget> => {
    const provider = config.providers.find((candidate) => candidate.id === target.provider)
    if (provider === undefined) return []
    return [{
      adapter: adapters[provider.api],
      acceptsImages: model.supportsImages === true,
      price: target.price ?? model.price,
      settings: {
        provider: provider.id,
        baseUrl: provider.baseUrl,
        apiKey: provider.apiKey,
        headers: provider.headers,
        extraBody: provider.extraBody,
        compat: provider.compat,
        model: target.upstreamModel,
        maxOutputTokens: maxOutputTokens ?? model.maxOutputTokens,
        thinking: model.thinking,
        ...(promptCacheKey === undefined ? {} : { promptCacheKey })
      }
    }]
  })
}

/** The adapter and settings for one model id (its first target), or `undefined` when the configuration has none. */
export const resolveModel = (
  config: RouterConfig,
  modelId: string,
  maxOutputTokens?: number
): ResolvedTarget | undefined => resolveTargets(config, modelId, maxOutputTokens)[0]

/** What a call cost in USD, from its usage and the price of the target that answered. */
export const costOf = (price: PriceConfig, usage: Usage): number =>
  (usage.input * price.input + usage.output * price.output +
    usage.cacheRead * (price.cacheRead ?? price.input) + usage.cacheWrite * (price.cacheWrite ?? price.input)) / 1_000_000

/** The price of the target that produced `message` (its provider and upstream model), for the model a client asked for. */
export const priceOf = (config: RouterConfig, modelId: string, message: AssistantMessage): PriceConfig | undefined => {
  const model = modelOf(config, modelId)
  if (model === undefined) return undefined
  const target = (model.fallback ?? []).find((t) => t.provider === message.provider && t.upstreamModel === message.model)
  return target?.price ?? model.price
}

/** What an answer cost, with the configured model the asked-for id names; undefined without a price. */
export const answerCost = (config: RouterConfig, modelId: string, message: AssistantMessage): { readonly usd: number; readonly model: string } | undefined => {
  const model = modelOf(config, modelId)
  const price = priceOf(config, modelId, message)
  return model === undefined || price === undefined ? undefined : { usd: costOf(price, message.usage), model: model.id }
}

/** The stable per-conversation prompt-cache key for a call id (`<conversation>/t<n>/c<n>`). */
export const promptCacheKeyOf = (callId: string): string => `byok-${callId.replace(/\/t\d+\/c\d+$/, "")}`

/**
 * The request for a model that takes no images: each image in a user message or a tool result
 * becomes a line of text saying it was there (the same text every time, so the request stays a
 * byte prefix of the next one). The stored history keeps the images, for a model that takes them.
 */
export const withoutImages = (request: RequestMessages, model: string): RequestMessages => {
  const note: UserContent = { type: "text", text: `[An image was attached here; the model ${model} does not accept images.]` }
  const strip = (content: ReadonlyArray<UserContent>) => content.some((block) => block.type === "image") ? content.map((block) => (block.type === "image" ? note : block)) : content
  if (!request.messages.some((message) => message.role !== "assistant" && message.content.some((block) => block.type === "image"))) return request
  return {
    ...request,
    messages: request.messages.map((message): Message => {
      if (message.role === "assistant") return message
      // A message without an image stays the same object (adapters remember what it became: `HistoryParts.ts`).
      const content = strip(message.content)
      return content === message.content ? message : { ...message, content }
    })
  }
}

/** The conversation and call a model call belongs to, for its log lines (`<conversation>/t<n>/c<n>`). */
export const callAnnotations = (callId: string): Record<string, string> => ({
  conversationId: callId.replace(/\/t\d+\/c\d+$/, ""),
  callId
})

/**
 * Builds the `Llm` service over an undici `Dispatcher` from the configuration `current` returns. Each
 * call reads it once, when it starts: its targets, fallbacks and retry policy stay those for
 * the whole call, while a call started after the configuration changed sees the new table.
 */
export const makeLive = Effect.fn("Router.makeLive")(function*(current: () => RouterConfig) {
  const client = yield* NodeHttpClient.Dispatcher
  const stream = (request: RequestMessages, options: StreamOptions) =>
    Stream.suspend(() => {
      const config = current()
      const retry: RetrySettings = config.retry ?? defaultRetrySettings
      const targets = resolveTargets(config, options.model, options.maxOutputTokens, promptCacheKeyOf(options.callId))
      if (targets.length === 0) {
        return Stream.fail(llmError("notConfigured", `no provider configured for model ${options.model}`))
      }
      const annotations = { ...callAnnotations(options.callId), model: options.model }
      // No Stream.withSpan here: it sets the fiber's context on every pull (~17 µs per network
      // read, measured), and nothing exports traces; the runner's logs carry the call id.
      const configured = modelOf(config, options.model)?.id
      const attempt = (index: number): Stream.Stream<ResponseEvent, LlmError> => {
        const target = targets[index]!
        const sent = target.acceptsImages ? request : withoutImages(request, options.model)
        const mark = routedMarker(routedModelOf(options.model, configured, index, target))
        let emitted = false
        // What went to the fast path's callback was emitted too: no fallback after it.
        const onEvents = options.onEvents === undefined ? undefined : (events: ReadonlyArray<ResponseEvent>) => {
          emitted = true
          options.onEvents!(mark === undefined ? events : events.map(mark))
        }
        const report = options.onAttemptFailed
        const onFailed = report === undefined ? undefined : (failure: AttemptFailure) =>
          report({
            provider: target.settings.provider,
            upstreamModel: target.settings.model,
            attempt: failure.attempt,
            ...(failure.error.status === undefined ? {} : { status: failure.error.status }),
            reason: failure.error.reason,
            message: failure.error.message,
            startedAtMs: failure.startedAtMs,
            failedAtMs: failure.failedAtMs
          })
        return streamWithRetry(client, target.adapter.prepare(sent, target.settings), retry, { ...annotations, upstreamModel: target.settings.model }, onEvents, onFailed).pipe(
          Stream.mapChunks((chunk) => {
            emitted = true
            return mark === undefined ? chunk : Chunk.map(chunk, mark)
          }),
          // Only while nothing has come from this target: once an event has, a switch would mix two answers.
          Stream.catchAll((error) => {
            const next = targets[index + 1]
            if (emitted || next === undefined || error.reason === "aborted") return Stream.fail(error)
            const from = `${target.settings.provider}/${target.settings.model}`
            const to = `${next.settings.provider}/${next.settings.model}`
            return Stream.fromEffect(Effect.gen(function*() {
              yield* Effect.logWarning(
                `model ${options.model}: ${from} failed before answering (${error.reason}: ${error.message}); falling back to ${to}`
              ).pipe(Effect.annotateLogs({
                ...annotations,
                from,
                to,
                fallback: index + 1,
                reason: error.reason,
                error: error.message,
                ...(error.status === undefined ? {} : { status: error.status })
              }))
              yield* Metric.increment(Metric.tagged(Metrics.llmFallbacks, "model", options.model))
            })).pipe(Stream.drain, Stream.concat(attempt(index + 1)))
          })
        )
      }
      return attempt(0)
    })
  return Llm.of({ stream })
})

/**
 * What answers a call, when it is not the model the client named: the configured model an alias,
 * `*` or the default (no id) named, on its own provider; a fallback target as `provider/upstream`.
 */
export const routedModelOf = (
  requested: string,
  configured: string | undefined,
  index: number,
  target: ResolvedTarget
): string | undefined =>
  index > 0 ? `${target.settings.provider}/${target.settings.model}` : configured !== undefined && configured !== requested ? configured : undefined

/** Stamps `routedModel` on a stream's `Start` (none when the model named is the one answering). */
const routedMarker = (routedModel: string | undefined) =>
  routedModel === undefined ? undefined : (event: ResponseEvent): ResponseEvent => event._tag === "Start" ? { ...event, routedModel } : event

/** Builds the `Llm` service from a configuration value and an `HttpClient`. */
export const make = (config: RouterConfig) => makeLive(() => config)

/** The `Llm` layer for a configuration value (requires an undici `Dispatcher`: `NodeHttpClient.dispatcherLayer`). */
export const layer = (config: RouterConfig): Layer.Layer<Llm, never, NodeHttpClient.Dispatcher> => Layer.effect(Llm, make(config))

/** The `Llm` layer over a changing configuration, read when each call starts (requires an undici `Dispatcher`: `NodeHttpClient.dispatcherLayer`). */
export const layerLive = (current: () => RouterConfig): Layer.Layer<Llm, never, NodeHttpClient.Dispatcher> => Layer.effect(Llm, makeLive(current))
