/**
 * The shape every wire adapter exposes to the router: how to build one call's request (URL,
 * headers, deterministic body bytes, a fresh state machine) from the neutral request and the
 * resolved provider/model settings. Kept apart from `Router.ts` so adapters never import it.
 */
import type { Redacted } from "effect"
import { canonicalJson, type RequestMessages, type ToolDefinition } from "../Llm.js"
import type { Machine, StreamMeta } from "./Common.js"
import type { ProviderRequest } from "./Http.js"

/** The neutral reasoning knob; each adapter maps it to its own field. */
export interface ThinkingSettings {
  readonly effort?: "minimal" | "low" | "medium" | "high" | undefined
  readonly budgetTokens?: number | undefined
}

/** Everything an adapter needs to know about one call's provider and model. */
export interface CallSettings {
  /** The provider configuration id (stamped on messages as `provider`). */
  readonly provider: string
  readonly baseUrl: string
  readonly apiKey: Redacted.Redacted<string>
  readonly headers: Readonly<Record<string, string>>
  readonly extraBody: Readonly<Record<string, unknown>>
  readonly compat: Readonly<Record<string, unknown>>
  /** The upstream model id. */
  readonly model: string
  readonly maxOutputTokens: number | undefined
  readonly thinking: ThinkingSettings | undefined
  /**
   * A stable per-conversation key for the provider's prompt cache routing (OpenAI
   * `prompt_cache_key`); the same for every call of a conversation. Sent only where compat allows.
   */
  readonly promptCacheKey?: string | undefined
}

/** A request body split so that `head + history` of turn n is a byte prefix of turn n+1's body. */
export interface BodyParts {
  readonly head: string
  readonly history: string
  readonly tail: string
}

export const bodyOf = (parts: BodyParts): string => parts.head + parts.history + parts.tail

export interface Adapter {
  readonly api: string
  readonly buildBody: (request: RequestMessages, settings: CallSettings) => BodyParts
  readonly makeMachine: (meta: StreamMeta) => Machine
  readonly prepare: (request: RequestMessages, settings: CallSettings) => ProviderRequest
}

/**
 * An adapter from its parts: the request is always a POST of the body's bytes to
 * `baseUrl/path` asking for an event stream; wire APIs differ in the path and auth headers.
 */
export const makeAdapter = (spec: {
  readonly api: string
  readonly buildBody: Adapter["buildBody"]
  readonly makeMachine: Adapter["makeMachine"]
  readonly path: (settings: CallSettings) => string
  /** All headers but `accept` (configured extra headers included, in the order they should win). */
  readonly headers: (settings: CallSettings) => Readonly<Record<string, string>>
}): Adapter => ({
  api: spec.api,
  buildBody: spec.buildBody,
  makeMachine: spec.makeMachine,
  prepare: (request, settings) => ({
    provider: settings.provider,
    url: joinUrl(settings.baseUrl, spec.path(settings)),
    headers: { ...spec.headers(settings), accept: "text/event-stream" },
    body: bodyOf(spec.buildBody(request, settings)),
    makeMachine: () => spec.makeMachine({ api: spec.api, provider: settings.provider, model: settings.model })
  })
})

/** JSON made already, that `openHead` puts in as it is: a tool list's (`toolsOnWire`). */
export class PreparedJson {
  constructor(readonly json: string) {}
}

// A call's head carries the tool list, each tool's JSON schema included: Cursor's native tools
// are ~20 KB of canonical JSON, made again at every model call of the agent's loop (~0.3 ms a
// call in the cost bench, measured in a CPU profile). A tool list is treated as immutable (as
// `Llm.toolsHash` does; the catalogs are built once), so its wire JSON is made once per list
// object and wire shape.
const toolJsons = new WeakMap<ReadonlyArray<ToolDefinition>, Map<string, PreparedJson>>()

/**
 * The canonical JSON of `toWire(tools)`, made once per tool list object and `shape` (a name of
 * everything `toWire` depends on besides the list: the wire API and any setting it reads).
 */
export const toolsOnWire = (
  tools: ReadonlyArray<ToolDefinition>,
  shape: string,
  toWire: (tools: ReadonlyArray<ToolDefinition>) => unknown
): PreparedJson => {
  let shapes = toolJsons.get(tools)
  if (shapes === undefined) {
    shapes = new Map()
    toolJsons.set(tools, shapes)
  }
  let prepared = shapes.get(shape)
  if (prepared === undefined) {
    prepared = new PreparedJson(canonicalJson(toWire(tools)))
    shapes.set(shape, prepared)
  }
  return prepared
}

/**
 * `{...head fields...,"<key>":[` with the history array opened last: the fields' canonical JSON
 * (keys in code-point order, `undefined` left out), a `PreparedJson` value as it is.
 */
export const openHead = (fields: Readonly<Record<string, unknown>>, arrayKey: string): string => {
  let out = "{"
  for (const key of Object.keys(fields).sort()) {
    const value = fields[key]
    if (value === undefined || typeof value === "function" || typeof value === "symbol") continue
    if (out.length > 1) out += ","
    out += JSON.stringify(key) + ":" + (value instanceof PreparedJson ? value.json : canonicalJson(value))
  }
  return out + (out.length > 1 ? "," : "") + JSON.stringify(arrayKey) + ":["
}

/** Joins a base URL and a path without doubling or losing the slash. */
export const joinUrl = (baseUrl: string, path: string): string => baseUrl.replace(/\/+$/, "") + "/" + path.replace(/^\/+/, "")
