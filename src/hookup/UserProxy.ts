/**
 * The user's own route out, kept by `setup`: a proxy Cursor's `http.proxy` held before setup (a
 * corporate proxy) becomes the server's upstream proxy, written as `proxy.upstream` into the
 * configuration file `serve` reads (created when there is none), with a journal beside Cursor's
 * settings journal; `unsetup` takes it out again (byte for byte when the file is as setup left
 * it, else the key alone while it still holds our value). A `http.proxy` that is already ours
 * (our proxy's loopback port, or the value our settings journal wrote) changes nothing.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type { PlatformError } from "@effect/platform/Error"
import { Effect, Option, Schema } from "effect"
import * as Jsonc from "jsonc-parser"
import { isLoopback } from "../Config.js"
import * as CursorSettings from "./CursorSettings.js"
import { parseProxyUrl } from "./proxy/Upstream.js"

export class ConfigFileError extends Schema.TaggedError<ConfigFileError>("cursor-byok/ConfigFileError")("ConfigFileError", {
  message: Schema.String
}) {}

/** What setup wrote into the server's configuration file: enough for unsetup to take it out. */
export const Journal = Schema.Struct({
  configPath: Schema.String,
  /** The file's text before the first setup wrote it; null when it did not exist. */
  original: Schema.NullOr(Schema.String),
  /** The text setup wrote. */
  written: Schema.String,
  /** The `proxy.upstream` setup wrote (the user's Cursor proxy). */
  value: Schema.String
})
export type Journal = typeof Journal.Type

/** Beside Cursor's settings journal: one per settings file, like it. */
export const journalPathOf = (settingsPath: string) => `${settingsPath}.cursor-byok-upstream.json`

/** A proxy URL with its password replaced, for printing. */
export const shown = (url: string) => url.replace(/^([a-z]+:\/\/[^:/@]*:)[^@/]*@/i, "$1***@")

const hostPortOf = (text: string) => {
  try {
    const url = new URL(text.includes("://") ? text : `http://${text}`)
    return { host: url.hostname.replace(/^\[|\]$/g, ""), port: url.port === "" ? (url.protocol === "https:" ? 443 : 80) : Number(url.port) }
  } catch {
    return undefined
  }
}

/** Whether a `http.proxy` value is this server's proxy: a loopback name on our proxy port, or the value setup wrote. */
export const isOurs = (value: string, ours: { readonly proxyPort: number | undefined; readonly written: ReadonlyArray<unknown> }) => {
  if (ours.written.includes(value)) return true
  const at = hostPortOf(value)
  return at !== undefined && isLoopback(at.host) && at.port === ours.proxyPort
}

export type Adopted =
  /** No proxy of the user's in Cursor's settings (none, or ours). */
  | { readonly _tag: "None" }
  | { readonly _tag: "Adopted"; readonly url: string; readonly configPath: string; readonly created: boolean }
  /** `proxy.upstream` already names it. */
  | { readonly _tag: "Already"; readonly url: string; readonly configPath: string }
  /** The configuration names another upstream of the user's own: left as it is. */
  | { readonly _tag: "Kept"; readonly url: string; readonly configPath: string; readonly current: string }
  /** Not a proxy the server can go through (not http://, not a URL). */
  | { readonly _tag: "Unusable"; readonly url: string; readonly why: string }

/** A cursor-byok configuration file's text as a JSON object; a failure naming the file otherwise. */
export const parseFile = (path: string, text: string) => {
  const errors: Array<Jsonc.ParseError> = []
  const value = Jsonc.parse(text, errors, { allowTrailingComma: false, disallowComments: true, allowEmptyContent: true }) as unknown
  if (errors.length > 0 || (value !== undefined && (typeof value !== "object" || value === null || Array.isArray(value)))) {
    return Effect.fail(new ConfigFileError({ message: `${path} is not a JSON object: it was not changed` }))
  }
  return Effect.succeed((value ?? {}) as Record<string, unknown>)
}

const upstreamIn = (values: Record<string, unknown>): unknown => {
  const proxy = values["proxy"]
  return typeof proxy === "object" && proxy !== null ? (proxy as Record<string, unknown>)["upstream"] : undefined
}

/** `text` with the value at `path` set, its formatting kept. */
export const editFile = (text: string, path: Jsonc.JSONPath, value: unknown) => {
  const body = text.trim() === "" ? "{}\n" : text
  const formattingOptions = CursorSettings.formattingOf(body.trim() === "{}" ? "" : body)
  return Jsonc.applyEdits(body, Jsonc.modify(body, path, value, { formattingOptions }))
}

const readOwnJournal = (fs: FileSystem.FileSystem, path: string) =>
  Effect.gen(function*() {
    if (!(yield* fs.exists(path))) return Option.none<Journal>()
    const text = yield* fs.readFileString(path)
    return Option.some(yield* Schema.decodeUnknown(Schema.parseJson(Journal))(text).pipe(
      Effect.mapError(() => new ConfigFileError({ message: `${path} is not a cursor-byok upstream journal` }))
    ))
  })

export interface AdoptOptions {
  readonly settingsPath: string
  readonly configPath: string
  /** Cursor's `http.proxy` before this setup (any JSON value; undefined when absent). */
  readonly existing: unknown
  readonly proxyPort: number | undefined
}

/** Makes the user's Cursor proxy the server's upstream, journaled (the journal first). */
export const adopt = (options: AdoptOptions): Effect.Effect<Adopted, ConfigFileError | CursorSettings.SettingsError | PlatformError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const url = options.existing
    if (typeof url !== "string" || url.trim() === "") return { _tag: "None" } as const
    const fs = yield* FileSystem.FileSystem
    const settingsJournal = yield* CursorSettings.readJournal(fs, CursorSettings.defaultJournalPath(options.settingsPath)).pipe(Effect.orElseSucceed(() => Option.none()))
    const written = Option.match(settingsJournal, { onNone: () => [], onSome: (journal) => journal.keys.filter((key) => key.key === "http.proxy").map((key) => key.value) })
    if (isOurs(url, { proxyPort: options.proxyPort, written })) return { _tag: "None" } as const
    const parsed = parseProxyUrl(url)
    if (typeof parsed === "string") return { _tag: "Unusable", url, why: parsed } as const
    const configPath = options.configPath
    const journalPath = journalPathOf(options.settingsPath)
    const earlier = yield* readOwnJournal(fs, journalPath)
    const original = yield* CursorSettings.readIfExists(fs, configPath)
    const current = upstreamIn(yield* parseFile(configPath, original ?? ""))
    if (current === url) return { _tag: "Already", url, configPath } as const
    const ownEarlier = Option.isSome(earlier) && earlier.value.configPath === configPath && current === earlier.value.value
    if (current !== undefined && !ownEarlier) return { _tag: "Kept", url, configPath, current: String(current) } as const
    const text = editFile(original ?? "", ["proxy", "upstream"], url)
    const journal: Journal = Option.isSome(earlier) && ownEarlier
      ? { ...earlier.value, written: text, value: url }
      : { configPath, original: original ?? null, written: text, value: url }
    yield* CursorSettings.writeAtomic(fs, journalPath, JSON.stringify(journal, null, 2) + "\n")
    yield* CursorSettings.writeAtomic(fs, configPath, text)
    return { _tag: "Adopted", url, configPath, created: original === undefined } as const
  })

export type Released =
  | { readonly _tag: "Nothing" }
  | { readonly _tag: "Removed"; readonly configPath: string; readonly value: string; readonly file: "restored" | "deleted" | "updated" }
  /** The user changed `proxy.upstream` since (or broke the file): left as it is. */
  | { readonly _tag: "LeftAlone"; readonly configPath: string; readonly value: string; readonly current: string }

/** Takes out what `adopt` wrote into the configuration file, then removes its journal. */
export const release = (settingsPath: string): Effect.Effect<Released, ConfigFileError | CursorSettings.SettingsError | PlatformError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const journalPath = journalPathOf(settingsPath)
    const found = yield* readOwnJournal(fs, journalPath)
    if (Option.isNone(found)) return { _tag: "Nothing" } as const
    const journal = found.value
    const current = yield* CursorSettings.readIfExists(fs, journal.configPath)
    const released = yield* releaseIn(fs, journal, current)
    yield* fs.remove(journalPath)
    return released
  })

const releaseIn = (fs: FileSystem.FileSystem, journal: Journal, current: string | undefined) =>
  Effect.gen(function*() {
    const { configPath, value } = journal
    if (current === journal.written) {
      if (journal.original === null) yield* fs.remove(configPath)
      else yield* CursorSettings.writeAtomic(fs, configPath, journal.original)
      return { _tag: "Removed", configPath, value, file: journal.original === null ? "deleted" : "restored" } as const
    }
    if (current === undefined) return { _tag: "LeftAlone", configPath, value, current: "(the file is gone)" } as const
    const values = yield* parseFile(configPath, current).pipe(Effect.either)
    if (values._tag === "Left") return { _tag: "LeftAlone", configPath, value, current: "(the file is not JSON)" } as const
    const now = upstreamIn(values.right)
    if (now !== value) return { _tag: "LeftAlone", configPath, value, current: now === undefined ? "(absent)" : JSON.stringify(now) } as const
    let text = editFile(current, ["proxy", "upstream"], undefined)
    // The `proxy` object setup added, now empty, goes too.
    const hadProxy = journal.original !== null && Jsonc.parse(journal.original)?.proxy !== undefined
    const proxy = (Jsonc.parse(text) as Record<string, unknown>)["proxy"]
    if (!hadProxy && typeof proxy === "object" && proxy !== null && Object.keys(proxy).length === 0) text = editFile(text, ["proxy"], undefined)
    yield* CursorSettings.writeAtomic(fs, configPath, text)
    return { _tag: "Removed", configPath, value, file: "updated" } as const
  })
