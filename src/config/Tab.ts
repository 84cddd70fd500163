/**
 * Tab's settings: the file's `tab` section (off when absent) and what the Tab service reads
 * once it is resolved: the FIM target (a configured provider, its key and headers, the model,
 * the FIM wire), the prompt's limits, the price, and the bounds of the synced files.
 */
import { Schema } from "effect"
import { PriceConfig } from "../llm/Router.js"
import type { ProviderConfig, RouterConfig } from "../llm/Router.js"
import type { FimApi } from "../tab/Fim.js"
import { defaultFileLimits } from "../tab/Files.js"
import type { TabSettings } from "../tab/Service.js"
import { defaultLimits } from "../Tab.js"
import { Bytes, HttpUrl } from "./Fields.js"

const TabApiField = Schema.Literal("openai-completions", "mistral-fim", "llamacpp-infill", "chat")
const Positive = Schema.Int.pipe(Schema.positive())

export const TabFileConfig = Schema.Struct({
  /** The provider (`providers[].id`) whose server answers Tab: its base URL, key and headers. */
  provider: Schema.String,
  /** The model's name at that provider, e.g. `qwen2.5-coder:7b`, `codestral-latest`. */
  model: Schema.String,
  /**
   * The FIM wire; by default `openai-completions` for an `openai-chat` provider (vLLM, Ollama,
   * DeepSeek beta), and `chat` (an edit prompt through the provider's chat API) for the others.
   */
  api: Schema.optional(TabApiField),
  /** Another base URL than the provider's (DeepSeek's FIM is at `https://api.deepseek.com/beta`). */
  baseUrl: Schema.optional(HttpUrl),
  price: Schema.optional(PriceConfig),
  temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 2))),
  /** No answer (or no byte) from the model for this long ends the suggestion. */
  timeoutMs: Schema.optionalWith(Positive, { default: () => 10_000 }),
  maxLines: Schema.optionalWith(Positive, { default: () => defaultLimits.maxLines }),
  maxTokens: Schema.optionalWith(Positive, { default: () => defaultLimits.maxTokens }),
  prefixChars: Schema.optionalWith(Positive, { default: () => defaultLimits.prefixChars }),
  suffixChars: Schema.optionalWith(Positive, { default: () => defaultLimits.suffixChars }),
  contextChars: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => defaultLimits.contextChars }),
  /** An identical request this soon after a call's end is answered from it. */
  shareMs: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 1_000 }),
  /** The files Cursor syncs for Tab, kept in memory only (never in the database). */
  syncedFiles: Schema.optionalWith(Schema.Struct({
    maxFiles: Schema.optionalWith(Positive, { default: () => defaultFileLimits.maxFiles }),
    maxBytes: Schema.optionalWith(Bytes, { default: () => defaultFileLimits.maxBytes }),
    maxFileBytes: Schema.optionalWith(Bytes, { default: () => defaultFileLimits.maxFileBytes })
  }), { default: () => defaultFileLimits })
})
export type TabFileConfig = typeof TabFileConfig.Type

/** The FIM wire a provider's API has: OpenAI Completions beside OpenAI Chat, else an edit prompt on its chat API. */
const defaultApiOf = (api: ProviderConfig["api"]): FimApi | "chat" => (api === "openai-chat" ? "openai-completions" : "chat")

/** The one-model router a chat-served Tab calls (`tab/Chat.ts`): no retries (a late suggestion is no use), the Tab timeout as the idle timeout. */
const chatRouterOf = (provider: ProviderConfig, tab: TabFileConfig, baseUrl: string): RouterConfig => ({
  providers: [{ ...provider, baseUrl }],
  models: [{ id: "tab", provider: provider.id, upstreamModel: tab.model, ...(tab.price === undefined ? {} : { price: tab.price }) } as RouterConfig["models"][number]],
  defaultModel: "tab",
  retry: { maxRetries: 0, initialDelayMs: 0, maxDelayMs: 0, maxRetryAfterMs: 0, jitter: 0, idleTimeoutMs: tab.timeoutMs }
})

/** The Tab settings of a `tab` section, its provider resolved (undefined: no section, Tab off); `tabProblems` says what a section names wrongly. */
export const tabOf = (tab: TabFileConfig | undefined, providers: ReadonlyArray<ProviderConfig>): TabSettings | undefined => {
  if (tab === undefined) return undefined
  const provider = providers.find((p) => p.id === tab.provider)
  const api = tab.api ?? (provider === undefined ? "openai-completions" : defaultApiOf(provider.api))
  const baseUrl = tab.baseUrl ?? provider?.baseUrl ?? ""
  return {
    model: `${tab.provider}/${tab.model}`,
    api,
    chat: api === "chat" && provider !== undefined ? chatRouterOf(provider, tab, baseUrl) : undefined,
    target: {
      provider: tab.provider,
      api: api === "chat" ? "openai-completions" : api,
      baseUrl,
      apiKey: provider?.apiKey ?? Schema.decodeSync(Schema.Redacted(Schema.String))(""),
      headers: provider?.headers ?? {},
      model: tab.model,
      ...(tab.temperature === undefined ? {} : { temperature: tab.temperature }),
      timeoutMs: tab.timeoutMs
    },
    limits: { maxLines: tab.maxLines, maxTokens: tab.maxTokens, prefixChars: tab.prefixChars, suffixChars: tab.suffixChars, contextChars: tab.contextChars },
    price: tab.price,
    shareMs: tab.shareMs,
    files: tab.syncedFiles
  }
}

/** What a `tab` section names wrongly, one line each: a provider not configured. */
export const tabProblems = (tab: Pick<TabSettings, "target"> | undefined, providers: ReadonlyArray<Pick<ProviderConfig, "id">>): ReadonlyArray<string> => {
  if (tab === undefined || providers.some((p) => p.id === tab.target.provider)) return []
  const ids = providers.map((p) => p.id)
  return [`tab.provider: names provider ${JSON.stringify(tab.target.provider)}, which is not configured: name one of providers[].id (${ids.length === 0 ? "none" : ids.join(", ")}) or add it to providers`]
}
