/**
 * What a reloaded configuration changes, compared with the running one (pure): models and
 * providers added, removed or changed, the other keys that apply to what comes next (aliases,
 * the default model, retries, limits, timings, compaction), and the keys only a restart can
 * apply (the listeners, the database, the CA's home, the proxy). A reload keeps the running
 * values of the restart-only keys and takes everything else.
 */
import { Redacted } from "effect"
import type { ServerConfig } from "./File.js"

/** Keys read once, when the listeners, the store and the CA are made: a change waits for a restart. */
export const restartOnly = ["host", "port", "database", "advertise", "http2", "proxy", "home"] as const satisfies ReadonlyArray<keyof ServerConfig>

/** Keys read at each use (a new turn, a new request, a new model call): a change applies at once. */
const liveKeys = [
  "heartbeatMs", "orphanTimeoutMs", "blobAckTimeoutMs", "queuedMessageGraceMs", "maxLlmCallsPerTurn", "limits", "compaction", "defaultModel", "web", "subagentModel",
  "allowedHosts", "capture"
] as const satisfies ReadonlyArray<keyof ServerConfig>

export interface Delta {
  readonly added: ReadonlyArray<string>
  readonly removed: ReadonlyArray<string>
  readonly changed: ReadonlyArray<string>
}

export interface Changes {
  readonly models: Delta
  readonly providers: Delta
  /** Other keys whose new values apply now (`aliases`, `retry`, `limits`...). */
  readonly settings: ReadonlyArray<string>
  /** Keys that changed in the file but keep their running values until a restart. */
  readonly needsRestart: ReadonlyArray<string>
}

/** Key order does not matter; undefined fields are left out (as JSON does). */
const canonical = (value: unknown): string =>
  JSON.stringify(value, (_, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)))
      : v)

const same = (a: unknown, b: unknown) => canonical(a) === canonical(b)

const deltaOf = <A extends { readonly id: string }>(before: ReadonlyArray<A>, after: ReadonlyArray<A>, key: (a: A) => string): Delta => {
  const old = new Map(before.map((entry) => [entry.id, key(entry)]))
  const next = new Map(after.map((entry) => [entry.id, key(entry)]))
  return {
    added: [...next.keys()].filter((id) => !old.has(id)),
    removed: [...old.keys()].filter((id) => !next.has(id)),
    changed: [...next.entries()].filter(([id, value]) => old.has(id) && old.get(id) !== value).map(([id]) => id)
  }
}

/** A provider as compared: its key's value counts (only compared, never shown). */
const providerKey = (provider: ServerConfig["router"]["providers"][number]) => canonical({ ...provider, apiKey: Redacted.value(provider.apiKey) })

const tokenOf = (config: ServerConfig) => config.console.token === undefined ? undefined : Redacted.value(config.console.token)

/** What `next` changes in `running`. */
export const changesBetween = (running: ServerConfig, next: ServerConfig): Changes => ({
  models: deltaOf(running.router.models, next.router.models, canonical),
  providers: deltaOf(running.router.providers, next.router.providers, providerKey),
  settings: [
    ...(same(running.router.aliases, next.router.aliases) ? [] : ["aliases"]),
    ...(same(running.router.retry, next.router.retry) ? [] : ["retry"]),
    // The token's value counts (only compared, never shown).
    ...(tokenOf(running) === tokenOf(next) ? [] : ["console"]),
    ...liveKeys.filter((key) => !same(running[key], next[key]))
  ],
  needsRestart: restartOnly.filter((key) => !same(running[key], next[key]))
})

const isEmptyDelta = (delta: Delta) => delta.added.length + delta.removed.length + delta.changed.length === 0

/** Nothing that applies changed (a save without edits, or only restart-only keys). */
export const appliesNothing = (changes: Changes): boolean =>
  isEmptyDelta(changes.models) && isEmptyDelta(changes.providers) && changes.settings.length === 0

/** `models added: b, c; providers changed: x; aliases, retry changed`, or `nothing to apply`. */
export const describe = (changes: Changes): string => {
  const parts: Array<string> = []
  for (const [name, delta] of [["models", changes.models], ["providers", changes.providers]] as const) {
    if (delta.added.length > 0) parts.push(`${name} added: ${delta.added.join(", ")}`)
    if (delta.removed.length > 0) parts.push(`${name} removed: ${delta.removed.join(", ")}`)
    if (delta.changed.length > 0) parts.push(`${name} changed: ${delta.changed.join(", ")}`)
  }
  if (changes.settings.length > 0) parts.push(`${changes.settings.join(", ")} changed`)
  return parts.length === 0 ? "nothing to apply" : parts.join("; ")
}

/** The configuration a reload runs on: `next`, with the running values of the restart-only keys (and the crash-test faults). */
export const applicable = (running: ServerConfig, next: ServerConfig): ServerConfig => ({
  ...next,
  host: running.host,
  port: running.port,
  database: running.database,
  http2: running.http2,
  proxy: running.proxy,
  home: running.home,
  faults: running.faults
})
