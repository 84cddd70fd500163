/**
 * Server-side web access for the agent's WebFetch and WebSearch tools, run once the user has
 * approved the call in Cursor: fetch a page as Markdown under an address policy that keeps the
 * model out of the user's own network (`web/Address.ts`, enforced at the connection), and search
 * with the backend the operator configured, if any. Every failure is a `WebError` whose message
 * the model can act on.
 *
 * The `web` configuration is read at each call, so a configuration reload applies to the next
 * fetch or search.
 */
import { Context, Effect, Layer } from "effect"
import type { WebConfig } from "./Config.js"
import { LiveConfig } from "./config/Live.js"
import { type Lookup, systemLookup } from "./web/Address.js"
import type { FetchedPage, SearchReference } from "./web/Domain.js"
import { WebError } from "./web/Domain.js"
import { fetchPage } from "./web/Fetch.js"
import { searchWeb } from "./web/Search.js"

export type { FetchedPage, SearchReference, WebErrorKind } from "./web/Domain.js"
export { WebError } from "./web/Domain.js"
export type { WebConfig } from "./Config.js"

export interface WebService {
  readonly fetch: (url: string) => Effect.Effect<FetchedPage, WebError>
  /** Whether WebFetch is offered (`web.fetch.enabled`). */
  readonly fetchEnabled: () => boolean
  /** Undefined when no search backend is configured: the tool is then not offered (never faked). */
  readonly searchBackend: () => string | undefined
  readonly search: (query: string) => Effect.Effect<ReadonlyArray<SearchReference>, WebError>
}

export class Web extends Context.Tag("cursor-byok/Web")<Web, WebService>() {}

/** Honest about what it is; some sites refuse clients that send no user agent at all. */
export const userAgent = "cursor-byok/0.1.0 (+web fetch)"

export interface MakeOptions {
  /** Replaces DNS (tests); every address it returns is checked. */
  readonly lookup?: Lookup
  readonly userAgent?: string
}

/** The service over a configuration read at each call. */
export const make = (config: () => WebConfig, options: MakeOptions = {}): WebService => {
  const settings = { lookup: options.lookup ?? systemLookup, userAgent: options.userAgent ?? userAgent }
  return Web.of({
    fetch: (url) => Effect.suspend(() => fetchPage(config(), url, settings)).pipe(Effect.withSpan("Web.fetch")),
    fetchEnabled: () => config().fetch.enabled,
    searchBackend: () => config().search.backend?.name,
    search: (query) => Effect.suspend(() => searchWeb(config(), query, settings)).pipe(Effect.withSpan("Web.search"))
  })
}

/** The service over the running configuration's `web` section. */
export const layer: Layer.Layer<Web, never, LiveConfig> = Layer.effect(
  Web,
  Effect.map(LiveConfig, (live) => make(() => live.current().web))
)
