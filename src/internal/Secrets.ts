/**
 * Secrets never leave the process. The running configuration's secrets (each provider's API
 * key, the header values a provider lists in `secretHeaders`, the web search backend's key) are
 * replaced in any text about to be logged, stored or sent by a readable marker: `[key of
 * provider ID]`, `[header NAME of provider ID]`. Also their URL-encoded form and the masked
 * echoes providers print (`sk-abc1***...***wxyz`: a few first characters, 3+ `*`, the last 4).
 * Values shorter than 8 characters are not secrets here (`ollama` would mangle ordinary text).
 *
 * The registry is process-wide because the logger is: each running configuration registers a
 * reader of itself under an owner (`registered`, for the life of a scope); a text is redacted of
 * the union over the owners. An owner's secrets are re-read when its configuration object
 * changes (an applied reload) and kept until it unregisters: a turn in flight may still call
 * with a replaced key. Nothing to replace costs one `includes` per secret.
 */
import { Effect, Redacted } from "effect"
import type { Scope } from "effect"

export interface Secret {
  readonly value: string
  /** What replaces it: `[key of provider openai]`. */
  readonly marker: string
}

export const MIN_SECRET_LENGTH = 8

/** The parts of a configuration holding secrets (a `ServerConfig` is one), as plain shapes: this module imports no configuration. */
export interface SecretSource {
  readonly router: {
    readonly providers: ReadonlyArray<{
      readonly id: string
      readonly apiKey: Redacted.Redacted<string>
      readonly headers: Readonly<Record<string, string>>
      readonly secretHeaders?: ReadonlyArray<string> | undefined
    }>
  }
  readonly web?: {
    readonly search: {
      readonly backend: { readonly name: "searxng" } | { readonly name: "brave" | "tavily"; readonly apiKey: Redacted.Redacted<string> } | undefined
    }
  }
  readonly proxy?: { readonly upstreamServer: { readonly token: Redacted.Redacted<string> | undefined } | undefined }
}

/** The secrets of a configuration: provider keys (one marker naming every provider sharing a key), secret header values, the search backend's key. */
export const secretsOf = (source: SecretSource): ReadonlyArray<Secret> => {
  const keys = new Map<string, Array<string>>()
  const headers: Array<Secret> = []
  for (const provider of source.router.providers) {
    const key = Redacted.value(provider.apiKey)
    keys.set(key, [...(keys.get(key) ?? []), provider.id])
    const names = (provider.secretHeaders ?? []).map((name) => name.toLowerCase())
    for (const [name, value] of Object.entries(provider.headers)) {
      if (names.includes(name.toLowerCase())) headers.push({ value, marker: `[header ${name} of provider ${provider.id}]` })
    }
  }
  const secrets = [...keys].map(([value, ids]): Secret => ({ value, marker: `[key of provider${ids.length > 1 ? "s" : ""} ${ids.join(", ")}]` }))
  const search = source.web?.search.backend
  if (search !== undefined && search.name !== "searxng") secrets.push({ value: Redacted.value(search.apiKey), marker: `[key of web search ${search.name}]` })
  const teamToken = source.proxy?.upstreamServer?.token
  if (teamToken !== undefined) secrets.push({ value: Redacted.value(teamToken), marker: "[token for the team's server]" })
  return [...secrets, ...headers]
}

export type Redactor = (text: string) => string

const unchanged: Redactor = (text) => text

/** A masked echo: a few key characters, a run of `*` (with `...` inside, as some echo it), 4 key characters. */
const MASKED = /([\w.~+/=-]*)(\*[*.\u2026]*\*)([\w~+/=-]{4})/g

/** The marker for a masked echo of one of `secrets`, and the part of `head` before the key's first characters. */
const maskedMatch = (bySuffix: ReadonlyMap<string, ReadonlyArray<Secret>>, head: string, run: string, tail: string) => {
  if (run.split("*").length - 1 < 3) return undefined
  for (const secret of bySuffix.get(tail) ?? []) {
    // The run of key characters before the stars may start earlier than the key (`key=sk-ab***`).
    for (let start = 0; head.length - start >= 2; start++) {
      const prefix = head.slice(start)
      if (prefix.length <= secret.value.length - 4 && secret.value.startsWith(prefix)) return { before: head.slice(0, start), marker: secret.marker }
    }
  }
  return undefined
}

/** The redactor of `secrets` (precomputed: the needles longest first, the masked echoes by last 4 characters). */
export const makeRedactor = (secrets: ReadonlyArray<Secret>): Redactor => {
  const kept = new Map<string, string>()
  for (const secret of secrets) if (secret.value.length >= MIN_SECRET_LENGTH && !kept.has(secret.value)) kept.set(secret.value, secret.marker)
  if (kept.size === 0) return unchanged
  const needles: Array<Secret> = []
  const bySuffix = new Map<string, Array<Secret>>()
  for (const [value, marker] of kept) {
    needles.push({ value, marker })
    const encoded = encodeURIComponent(value)
    if (encoded !== value) needles.push({ value: encoded, marker })
    const suffix = value.slice(-4)
    bySuffix.set(suffix, [...(bySuffix.get(suffix) ?? []), { value, marker }])
  }
  // A secret inside a longer one (a key that is part of a header value) must not split it first.
  needles.sort((a, b) => b.value.length - a.value.length)
  return (text) => {
    let out = text
    for (const needle of needles) if (out.includes(needle.value)) out = out.split(needle.value).join(needle.marker)
    if (!out.includes("***")) return out
    return out.replace(MASKED, (match, head: string, run: string, tail: string) => {
      const found = maskedMatch(bySuffix, head, run, tail)
      return found === undefined ? match : `${found.before}${found.marker}`
    })
  }
}

// =============================================================================
// The process-wide registry
// =============================================================================

interface Owner {
  readonly read: () => SecretSource
  seen: SecretSource | undefined
  /** Every secret seen for this owner, value → marker (the latest configuration's marker wins). */
  readonly secrets: Map<string, string>
}

const owners = new Map<object, Owner>()
let current: Redactor = unchanged

const rebuild = () => {
  const all: Array<Secret> = []
  for (const owner of owners.values()) for (const [value, marker] of owner.secrets) all.push({ value, marker })
  current = makeRedactor(all)
}

/** Takes in what each owner's configuration holds now, when it is another object than last time. */
const refresh = () => {
  let changed = false
  for (const owner of owners.values()) {
    const source = owner.read()
    if (source === owner.seen) continue
    owner.seen = source
    const taken = new Set<string>()
    for (const secret of secretsOf(source)) {
      if (taken.has(secret.value)) continue
      taken.add(secret.value)
      if (owner.secrets.get(secret.value) === secret.marker) continue
      owner.secrets.set(secret.value, secret.marker)
      changed = true
    }
  }
  if (changed) rebuild()
}

/** Adds `owner`'s configuration (read at each use, so a reload is seen as soon as it is applied). */
export const register = (owner: object, read: () => SecretSource): void => {
  owners.set(owner, { read, seen: undefined, secrets: new Map() })
  refresh()
}

/** Forgets `owner`'s secrets (those other owners also hold stay). */
export const unregister = (owner: object): void => {
  if (owners.delete(owner)) rebuild()
}

/** `text` with every registered secret replaced by its marker; the same string when there is none. */
export const redact = (text: string): string => {
  if (owners.size === 0) return text
  refresh()
  return current(text)
}

/** Registers the configuration `read` returns for the life of the scope. */
export const registered = (read: () => SecretSource): Effect.Effect<void, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const owner = {}
      register(owner, read)
      return owner
    }),
    (owner) => Effect.sync(() => unregister(owner))
  ).pipe(Effect.asVoid)
