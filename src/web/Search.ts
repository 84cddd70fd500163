/**
 * Web search through the backend the operator configured: SearXNG (JSON API), the Brave Search
 * API or Tavily. Each answer is mapped to references (title, URL, plain-text snippet, capped).
 *
 * A backend is the operator's choice, so it is not subject to the private-address refusal (a
 * SearXNG on localhost is normal); it has the same time limit as a fetch. Keys stay `Redacted`
 * and are unwrapped only into the request header: an error names the backend and the status,
 * and a key echoed in an error body is blanked out.
 */
import * as Headers from "@effect/platform/Headers"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Duration, Effect, Redacted, Schema } from "effect"
import { STATUS_CODES } from "node:http"
import { Agent } from "undici"
import type { SearchBackendConfig, WebConfig } from "../Config.js"
import { readCapped } from "./Body.js"
import { describeCause, formatBytes, formatDuration, type SearchReference, WebError } from "./Domain.js"
import { htmlFragmentText } from "./Html.js"

export interface SearchSettings {
  readonly userAgent: string
}

const OptionalText = Schema.optional(Schema.NullOr(Schema.String))

const SearxngAnswer = Schema.Struct({
  results: Schema.Array(Schema.Struct({ title: OptionalText, url: Schema.String, content: OptionalText }))
})

const BraveAnswer = Schema.Struct({
  // Absent when nothing was found.
  web: Schema.optional(Schema.Struct({
    results: Schema.Array(Schema.Struct({ title: OptionalText, url: Schema.String, description: OptionalText }))
  }))
})

const TavilyAnswer = Schema.Struct({
  results: Schema.Array(Schema.Struct({ title: OptionalText, url: Schema.String, content: OptionalText }))
})

interface RawReference {
  readonly title: string | null | undefined
  readonly url: string
  readonly snippet: string | null | undefined
}

const trimSlashes = (url: string) => url.replace(/\/+$/, "")

/** The request for `query`, and how to read the answer's references. */
const requestFor = (
  backend: SearchBackendConfig,
  query: string,
  maxResults: number
): { readonly request: HttpClientRequest.HttpClientRequest; readonly references: (json: unknown) => ReadonlyArray<RawReference> } => {
  switch (backend.name) {
    case "searxng":
      return {
        request: HttpClientRequest.get(`${trimSlashes(backend.url)}/search`).pipe(
          HttpClientRequest.setUrlParams({ q: query, format: "json" })
        ),
        references: (json) =>
          Schema.decodeUnknownSync(SearxngAnswer)(json).results.map((r) => ({ title: r.title, url: r.url, snippet: r.content }))
      }
    case "brave":
      return {
        request: HttpClientRequest.get(`${trimSlashes(backend.baseUrl)}/res/v1/web/search`).pipe(
          HttpClientRequest.setUrlParams({ q: query, count: String(Math.min(maxResults, 20)) }),
          HttpClientRequest.setHeader("x-subscription-token", Redacted.value(backend.apiKey))
        ),
        references: (json) =>
          (Schema.decodeUnknownSync(BraveAnswer)(json).web?.results ?? []).map((r) => ({ title: r.title, url: r.url, snippet: r.description }))
      }
    case "tavily":
      return {
        request: HttpClientRequest.post(`${trimSlashes(backend.baseUrl)}/search`).pipe(
          HttpClientRequest.bearerToken(Redacted.value(backend.apiKey)),
          HttpClientRequest.bodyUnsafeJson({ query, max_results: maxResults })
        ),
        references: (json) =>
          Schema.decodeUnknownSync(TavilyAnswer)(json).results.map((r) => ({ title: r.title, url: r.url, snippet: r.content }))
      }
  }
}

const cap = (text: string, chars: number) => text.length <= chars ? text : `${text.slice(0, chars - 1).trimEnd()}…`

const statusText = (status: number) => `${status}${STATUS_CODES[status] === undefined ? "" : ` ${STATUS_CODES[status]}`}`

/** The first line of an error body, shortened, with the key blanked out should the backend echo it. */
const errorDetail = (text: string, backend: SearchBackendConfig): string => {
  const key = backend.name === "searxng" ? "" : Redacted.value(backend.apiKey)
  const clean = (key === "" ? text : text.split(key).join("<redacted>")).replace(/\s+/g, " ").trim()
  return clean === "" ? "" : `: ${cap(clean, 200)}`
}

/** Searches with the configured backend (`config` read once, at the start of the search). */
export const searchWeb = (config: WebConfig, query: string, settings: SearchSettings): Effect.Effect<ReadonlyArray<SearchReference>, WebError> => {
  const backend = config.search.backend
  if (backend === undefined) {
    return new WebError({
      kind: "NotConfigured",
      message: "Web search is not configured on this server (web.search in the configuration, or BYOK_WEB_SEARCH); fetch a known URL instead."
    })
  }
  const name = `the ${backend.name} search backend`
  const Name = `The ${backend.name} search backend`
  const { maxResults, chunkChars } = config.search
  return Effect.gen(function*() {
    const agent = yield* Effect.acquireRelease(
      Effect.sync(() => new Agent()),
      (agent) => Effect.sync(() => void agent.destroy().catch(() => undefined))
    )
    const client = NodeHttpClient.makeUndici(agent)
    const { references, request } = requestFor(backend, query, maxResults)
    const response: HttpClientResponse.HttpClientResponse = yield* client.execute(
      request.pipe(HttpClientRequest.setHeaders({ "user-agent": settings.userAgent, accept: "application/json", "accept-encoding": "identity" }))
    ).pipe(
      Effect.mapError((error) =>
        new WebError({ kind: "Network", message: `Could not reach ${name}: ${describeCause("cause" in error && error.cause !== undefined ? error.cause : error)}.` })
      )
    )
    const body = yield* readCapped(response, config.fetch.maxBytes, (cause) =>
      new WebError({ kind: "Network", message: `${Name} broke off its answer: ${describeCause(cause)}.` }))
    const text = new TextDecoder().decode(body.bytes)
    if (response.status < 200 || response.status >= 300) {
      return yield* new WebError({ kind: "Http", status: response.status, message: `${Name} answered ${statusText(response.status)}${errorDetail(text, backend)}.` })
    }
    if (body.truncated) {
      return yield* new WebError({ kind: "TooLarge", message: `${Name}'s answer is larger than ${formatBytes(config.fetch.maxBytes)}; it was not read.` })
    }
    const raw = yield* Effect.try({
      try: () => references(JSON.parse(text)),
      catch: () =>
        new WebError({ kind: "Http", status: response.status, message: `${Name} answered with something other than its JSON search results.` })
    })
    return raw
      .filter((reference) => reference.url !== "")
      .slice(0, maxResults)
      .map((reference): SearchReference => ({
        title: htmlFragmentText(reference.title ?? "") || reference.url,
        url: reference.url,
        chunk: cap(htmlFragmentText(reference.snippet ?? ""), chunkChars)
      }))
  }).pipe(
    Effect.scoped,
    // The client's trace spans record request headers: Brave's key header joins the redacted ones.
    Effect.locallyWith(Headers.currentRedactedNames, (names) => [...names, "x-subscription-token"]),
    Effect.timeoutFail({
      duration: Duration.millis(config.timeoutMs),
      onTimeout: () => new WebError({ kind: "Timeout", message: `${Name} did not answer within ${formatDuration(config.timeoutMs)}.` })
    })
  )
}
