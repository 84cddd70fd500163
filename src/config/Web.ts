/**
 * The web tools' settings: the file's `web` section (WebFetch's limits and exempt hosts, the
 * WebSearch backend) and what the `Web` service reads once it is resolved, with the backend
 * `BYOK_WEB_SEARCH` names and the search key read from the variable the backend names.
 */
import { Redacted, Schema } from "effect"
import { Bytes, HttpUrl } from "./Fields.js"

/** Server-side web fetches (the WebFetch tool): limits, and the hosts exempt from the private-address refusal. */
export const WebFetchConfig = Schema.Struct({
  /** Offer the WebFetch tool (the user approves each fetch in Cursor). */
  enabled: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  /** `host` or `host:port` entries fetched even when they are loopback or private (an intranet's docs); exact matches. */
  allowHosts: Schema.optionalWith(
    Schema.Array(Schema.String.pipe(Schema.pattern(/^[^\s/@?#]+$/, { message: (issue) => `expected a host or host:port (no scheme, path or user), got ${JSON.stringify(issue.actual)}` }))),
    { default: () => [] }
  ),
  /** Bytes of a body read at most; the rest of a larger page is not read (it is returned truncated). */
  maxBytes: Schema.optionalWith(Bytes, { default: () => 2 * 1024 * 1024 }),
  maxRedirects: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 5 }),
  /** The Markdown handed to the model is cut here, with a note saying so. */
  maxMarkdownChars: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 100_000 })
})

/** The defaults of the backends that take a key. */
export const searchBackendDefaults = {
  brave: { apiKeyEnv: "BRAVE_SEARCH_API_KEY", baseUrl: "https://api.search.brave.com" },
  tavily: { apiKeyEnv: "TAVILY_API_KEY", baseUrl: "https://api.tavily.com" }
} as const

/**
 * The search backend of the WebSearch tool (one at most); without one the tool is not offered.
 * One struct rather than a union per backend, so a mistake reads as one line about one key.
 */
export const WebSearchConfig = Schema.Struct({
  backend: Schema.optionalWith(Schema.Literal("off", "searxng", "brave", "tavily"), { default: () => "off" as const }),
  /** SearXNG: the instance's URL (its JSON format must be enabled). */
  url: Schema.optionalWith(HttpUrl, { exact: true }),
  /** Brave, Tavily: the variable holding the key (BRAVE_SEARCH_API_KEY, TAVILY_API_KEY by default). */
  apiKeyEnv: Schema.optionalWith(Schema.String, { exact: true }),
  /** Brave, Tavily: the API's base URL. */
  baseUrl: Schema.optionalWith(HttpUrl, { exact: true }),
  maxResults: Schema.optionalWith(Schema.Int.pipe(Schema.between(1, 50)), { default: () => 8 }),
  /** Characters of each result's snippet kept. */
  chunkChars: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 1000 })
}).pipe(Schema.filter((search) => {
  if (search.backend === "searxng" && search.url === undefined) {
    return { path: ["url"], message: "is missing: the searxng backend needs the URL of a SearXNG instance" }
  }
  if (search.backend !== "searxng" && search.url !== undefined) {
    return { path: ["url"], message: `is for the searxng backend only (backend is "${search.backend}"); brave and tavily take baseUrl` }
  }
  for (const key of ["apiKeyEnv", "baseUrl"] as const) {
    if ((search.backend === "off" || search.backend === "searxng") && search[key] !== undefined) {
      return { path: [key], message: `is for the brave and tavily backends only (backend is "${search.backend}")` }
    }
  }
  return true
}))

export const WebFileConfig = Schema.Struct({
  /** The whole of one fetch (connection, redirects, body) or one search call. */
  timeoutMs: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 15_000 }),
  fetch: Schema.optionalWith(WebFetchConfig, { default: () => Schema.decodeSync(WebFetchConfig)({}) }),
  search: Schema.optionalWith(WebSearchConfig, { default: () => Schema.decodeSync(WebSearchConfig)({}) })
})

/** A configured search backend, its key (when it takes one) read from the variable it names. */
export type SearchBackendConfig =
  | { readonly name: "searxng"; readonly url: string }
  | {
    readonly name: "brave" | "tavily"
    readonly baseUrl: string
    readonly apiKeyEnv: string
    readonly apiKey: Redacted.Redacted<string>
  }

/** What the `Web` service reads at each call. */
export interface WebConfig {
  readonly timeoutMs: number
  readonly fetch: typeof WebFetchConfig.Type
  readonly search: {
    /** Undefined when no backend is configured (the WebSearch tool is then not offered). */
    readonly backend: SearchBackendConfig | undefined
    readonly maxResults: number
    readonly chunkChars: number
  }
}

/** `BYOK_WEB_SEARCH`: `searxng=<url>`, `brave`, `tavily` or `off`; undefined when unset, `invalid` otherwise. */
export const webSearchOverride = (text: string | undefined): { readonly backend: "off" | "searxng" | "brave" | "tavily"; readonly url?: string } | "invalid" | undefined => {
  const value = text?.trim()
  if (value === undefined || value === "") return undefined
  const lower = value.toLowerCase()
  if (lower === "off" || lower === "brave" || lower === "tavily") return { backend: lower }
  const searxng = /^searxng=(.+)$/i.exec(value)
  if (searxng === null) return "invalid"
  const url = searxng[1]!.trim()
  return Schema.is(HttpUrl)(url) ? { backend: "searxng", url } : "invalid"
}

/** The web section: the file's, with the search backend `BYOK_WEB_SEARCH` names (keeping the file's settings for the same backend). */
export const webOf = (web: typeof WebFileConfig.Type, env: Readonly<Record<string, string | undefined>>): WebConfig => {
  const override = webSearchOverride(env["BYOK_WEB_SEARCH"])
  const fromFile = web.search
  const common = { maxResults: fromFile.maxResults, chunkChars: fromFile.chunkChars }
  const search: typeof WebSearchConfig.Type = override === undefined || override === "invalid" || (override.backend === fromFile.backend && override.url === undefined)
    ? fromFile
    : { ...(override.url === undefined ? {} : { url: override.url }), backend: override.backend, ...common }
  const backendOf = (): SearchBackendConfig | undefined => {
    switch (search.backend) {
      case "off":
        return undefined
      case "searxng":
        return { name: "searxng", url: search.url ?? "" }
      case "brave":
      case "tavily": {
        const apiKeyEnv = search.apiKeyEnv ?? searchBackendDefaults[search.backend].apiKeyEnv
        const baseUrl = search.baseUrl ?? searchBackendDefaults[search.backend].baseUrl
        return { name: search.backend, baseUrl, apiKeyEnv, apiKey: Redacted.make(env[apiKeyEnv] ?? "") }
      }
    }
  }
  return { timeoutMs: web.timeoutMs, fetch: web.fetch, search: { backend: backendOf(), ...common } }
}
