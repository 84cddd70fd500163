/**
 * The model router: a Schema-defined configuration of providers and models, and the layer that
 * builds the `Llm` service from it. A model id names one provider configuration (wire API, base
 * URL, key, extra headers and body fields, compat overrides) and the upstream model to ask for.
 * API keys arrive already resolved (the caller reads the environment) and stay `Redacted`.
 */
import { HttpClient } from "@effect/platform"
import { Effect, Layer, Schema, Stream } from "effect"
import { Llm, type Message, type RequestMessages, type StreamOptions, type UserContent } from "../Llm.js"
import type { Adapter, CallSettings } from "./Adapter.js"
import * as Anthropic from "./Anthropic.js"
import { llmError } from "./Common.js"
import * as Gemini from "./Gemini.js"
import { defaultRetrySettings, type RetrySettings, streamWithRetry } from "./Http.js"
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
  extraBody: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) }),
  /** Per-API overrides (openai-chat: maxTokensField, includeUsage, replayReasoning, reasoningEffort; anthropic: cacheControl). */
  compat: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) })
})
export type ProviderConfig = typeof ProviderConfig.Type

export const ThinkingConfig = Schema.Struct({
  effort: Schema.optional(Schema.Literal("minimal", "low", "medium", "high")),
  budgetTokens: Schema.optional(Schema.Int.pipe(Schema.positive()))
})

export const ModelConfig = Schema.Struct({
  /** The id clients ask for. */
  id: Schema.String,
  /** A `ProviderConfig.id`. */
  provider: Schema.String,
  upstreamModel: Schema.String,
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
  retry: Schema.optional(RetryConfig)
})
export type RouterConfig = typeof RouterConfig.Type

export const adapters: Readonly<Record<ApiKind, Adapter>> = {
  "openai-chat": OpenAiChat.adapter,
  anthropic: Anthropic.adapter,
  gemini: Gemini.adapter,
  "openai-responses": OpenAiResponses.adapter
}

/** The adapter and settings for one model id, or `undefined` when the configuration has none. */
export const resolveModel = (
  config: RouterConfig,
  modelId: string,
  maxOutputTokens?: number
): { readonly adapter: Adapter; readonly settings: CallSettings; readonly acceptsImages: boolean } | undefined => {
  const model = config.models.find((candidate) => candidate.id === modelId)
  if (model === undefined) return undefined
  const provider = config.providers.find((candidate) => candidate.id === model.provider)
  if (provider === undefined) return undefined
  return {
    adapter: adapters[provider.api],
    acceptsImages: model.supportsImages === true,
    settings: {
      provider: provider.id,
      baseUrl: provider.baseUrl,
      apiKey: provider.apiKey,
      headers: provider.headers,
      extraBody: provider.extraBody,
      compat: provider.compat,
      model: model.upstreamModel,
      maxOutputTokens: maxOutputTokens ?? model.maxOutputTokens,
      thinking: model.thinking
    }
  }
}

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
    messages: request.messages.map((message): Message =>
      message.role === "user" ? { ...message, content: strip(message.content) } : message.role === "toolResult" ? { ...message, content: strip(message.content) } : message
    )
  }
}

/** Builds the `Llm` service from a configuration value and an `HttpClient`. */
export const make = Effect.fn("Router.make")(function*(config: RouterConfig) {
  const client = yield* HttpClient.HttpClient
  const retry: RetrySettings = config.retry ?? defaultRetrySettings
  const stream = (request: RequestMessages, options: StreamOptions) =>
    Stream.suspend(() => {
      const resolved = resolveModel(config, options.model, options.maxOutputTokens)
      if (resolved === undefined) {
        return Stream.fail(llmError("notConfigured", `no provider configured for model ${options.model}`))
      }
      // No Stream.withSpan here: it sets the fiber's context on every pull (~17 µs per network
      // read, measured), and nothing exports traces; the runner's logs carry the call id.
      const sent = resolved.acceptsImages ? request : withoutImages(request, options.model)
      return streamWithRetry(client, resolved.adapter.prepare(sent, resolved.settings), retry)
    })
  return Llm.of({ stream })
})

/** The `Llm` layer for a configuration value (requires an `HttpClient`). */
export const layer = (config: RouterConfig): Layer.Layer<Llm, never, HttpClient.HttpClient> => Layer.effect(Llm, make(config))
