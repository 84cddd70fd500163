/**
 * Cursor's user `settings.json`, edited reversibly. `setup` sets the keys that send Cursor's
 * traffic through the local proxy with JSONC edits (comments, trailing commas, other keys and
 * the file's indentation survive) and keeps a journal of what was there before; `unsetup`
 * puts it back: byte for byte when the file is as we left it, key by key when the user has
 * edited it since. The edits themselves (`apply`, `revert`, `status`) are pure.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type { PlatformError } from "@effect/platform/Error"
import { Effect, Either, Option, Schema } from "effect"
import * as Jsonc from "jsonc-parser"
import { randomBytes } from "node:crypto"
import * as NodePath from "node:path"
import { isDeepStrictEqual } from "node:util"

// =============================================================================
// Errors
// =============================================================================

/** The settings file is not JSONC, or its top level is not an object; nothing was written. */
export class InvalidSettings extends Schema.TaggedError<InvalidSettings>("cursor-byok/InvalidSettings")("InvalidSettings", {
  path: Schema.String,
  offset: Schema.Number,
  line: Schema.Number,
  column: Schema.Number,
  message: Schema.String
}) {}

export class JournalError extends Schema.TaggedError<JournalError>("cursor-byok/JournalError")("JournalError", {
  reason: Schema.Literal("Missing", "Invalid", "Mismatch"),
  path: Schema.String,
  message: Schema.String
}) {}

export type SettingsError = InvalidSettings | JournalError

// =============================================================================
// Paths and the keys we set
// =============================================================================

type Env = Readonly<Record<string, string | undefined>>

const nonEmpty = (value: string | undefined) => (value === undefined || value === "" ? undefined : value)

/** Where Cursor keeps the user's settings on each OS; `BYOK_CURSOR_SETTINGS` wins. */
export const defaultSettingsPath = (platform: NodeJS.Platform, env: Env, homedir: string): string => {
  const override = nonEmpty(env["BYOK_CURSOR_SETTINGS"])
  if (override !== undefined) return override
  switch (platform) {
    case "darwin":
      return NodePath.posix.join(homedir, "Library", "Application Support", "Cursor", "User", "settings.json")
    case "win32":
      return NodePath.win32.join(nonEmpty(env["APPDATA"]) ?? NodePath.win32.join(homedir, "AppData", "Roaming"), "Cursor", "User", "settings.json")
    default:
      return NodePath.posix.join(nonEmpty(env["XDG_CONFIG_HOME"]) ?? NodePath.posix.join(homedir, ".config"), "Cursor", "User", "settings.json")
  }
}

/** The journal beside the settings file, so each Cursor profile has its own. */
export const defaultJournalPath = (settingsPath: string): string => `${settingsPath}.cursor-byok-journal.json`

/** The top-level keys we set and the values we set them to, in the order they are added. */
export type Desired = Readonly<Record<string, unknown>>

/** Cursor's Network → HTTP/1.1 switch: `true` runs the agent on RunSSE + BidiAppend, through `http.proxy`. */
export const DISABLE_HTTP2 = "cursor.general.disableHttp2"

/** The keys that send Cursor's HTTPS through the proxy and make it trust the OS's store (our CA). */
export const proxyKeys = (proxyUrl: string): Desired => ({
  "http.proxy": proxyUrl,
  "http.proxySupport": "on",
  "http.experimental.systemCertificatesV2": true
})

/**
 * The proxy keys and Cursor's HTTP/2 switch, written either way: `true` by default (the hookup
 * peer servers use with live Cursor builds), `false` for `setup --http2` (Cursor's node:http2
 * client ignores http.proxy and reaches the TLS listener `GetServerConfig` names).
 */
export const desired = (options: { readonly proxyUrl: string; readonly disableHttp2: boolean }): Desired => ({
  ...proxyKeys(options.proxyUrl),
  [DISABLE_HTTP2]: options.disableHttp2
})

/** How Cursor runs its agent: `http1` is RunSSE + BidiAppend through `http.proxy`, `http2` is `Run` on its HTTP/2 client. */
export type AgentPath = "http1" | "http2"

/** The path a settings file selects: HTTP/1.1 only when the switch is `true` (Cursor's default is HTTP/2). */
export const agentPathOf = (values: Readonly<Record<string, unknown>>): AgentPath => values[DISABLE_HTTP2] === true ? "http1" : "http2"

// =============================================================================
// The journal
// =============================================================================

export const JournalKey = Schema.Struct({
  key: Schema.String,
  /** The value we set. */
  value: Schema.Unknown,
  /** The value before the first setup; absent when the key was not in the file. */
  previous: Schema.optional(Schema.Unknown)
})
export type JournalKey = typeof JournalKey.Type

export const Journal = Schema.Struct({
  settingsPath: Schema.String,
  /** The file's text before the first setup; null when it did not exist. */
  original: Schema.NullOr(Schema.String),
  /** The text the last setup wrote. */
  written: Schema.String,
  keys: Schema.Array(JournalKey)
})
export type Journal = typeof Journal.Type

/** One key's move; `undefined` stands for "not in the file". */
export interface Change {
  readonly key: string
  readonly before: unknown
  readonly after: unknown
}

/** A key of ours the user changed (or removed) after setup: unsetup leaves it as it is. */
export interface LeftAlone {
  readonly key: string
  readonly ours: unknown
  readonly current: unknown
}

// =============================================================================
// Pure core
// =============================================================================

const parseOptions: Jsonc.ParseOptions = { allowTrailingComma: true, disallowComments: false, allowEmptyContent: true }

const positionOf = (text: string, offset: number) => {
  const before = text.slice(0, offset).split("\n")
  return { line: before.length, column: (before[before.length - 1]?.length ?? 0) + 1 }
}

const invalid = (path: string, text: string, offset: number, why: string) => {
  const { line, column } = positionOf(text, offset)
  return new InvalidSettings({ path, offset, line, column, message: `${path} is not valid JSONC at line ${line}, column ${column} (offset ${offset}): ${why}` })
}

/** Notepad may add a byte-order mark, which the JSONC scanner rejects: edits happen after it. */
const splitBom = (text: string) => (text.startsWith("\uFEFF") ? { bom: "\uFEFF", body: text.slice(1) } : { bom: "", body: text })

/** The top-level values of a settings text; an empty (or comments-only) text is an empty object. */
export const parseSettings = (path: string, withBom: string): Either.Either<Readonly<Record<string, unknown>>, InvalidSettings> => {
  const text = splitBom(withBom).body
  const errors: Array<Jsonc.ParseError> = []
  const tree = Jsonc.parseTree(text, errors, parseOptions)
  const first = errors[0]
  if (first !== undefined) return Either.left(invalid(path, text, first.offset, Jsonc.printParseErrorCode(first.error)))
  if (tree === undefined) return Either.right({})
  if (tree.type !== "object") return Either.left(invalid(path, text, tree.offset, `the top level is ${tree.type === "array" ? "an array" : `a ${tree.type}`}, not an object`))
  return Either.right(Jsonc.getNodeValue(tree) as Record<string, unknown>)
}

/** The file's own indentation (the first indented line) and line ending; 4 spaces for a new file. */
export const formattingOf = (text: string): Jsonc.FormattingOptions => {
  const eol = text.includes("\r\n") ? "\r\n" : "\n"
  const indent = /^([ \t]+)\S/m.exec(text)?.[1]
  if (indent === undefined) return { insertSpaces: true, tabSize: 4, eol }
  if (indent.startsWith("\t")) return { insertSpaces: false, tabSize: 1, eol }
  return { insertSpaces: true, tabSize: indent.length, eol }
}

const edit = (text: string, key: string, value: unknown, formattingOptions: Jsonc.FormattingOptions) =>
  Jsonc.applyEdits(text, Jsonc.modify(text, [key], value, { formattingOptions }))

const has = (values: Readonly<Record<string, unknown>>, key: string) => Object.prototype.hasOwnProperty.call(values, key)

export interface Applied {
  readonly text: string
  readonly journal: Journal
  readonly changes: ReadonlyArray<Change>
}

/** Sets the desired keys in `original` (undefined: the file does not exist). */
export const apply = (original: string | undefined, wanted: Desired, settingsPath: string): Either.Either<Applied, InvalidSettings> =>
  Either.gen(function*() {
    const values = yield* parseSettings(settingsPath, original ?? "")
    const { bom, body } = splitBom(original ?? "")
    const fresh = body.trim() === ""
    const formattingOptions = formattingOf(body)
    let text = fresh ? "{}" : body
    const keys: Array<JournalKey> = []
    const changes: Array<Change> = []
    for (const [key, value] of Object.entries(wanted)) {
      const present = has(values, key)
      keys.push(present ? { key, value, previous: values[key] } : { key, value })
      if (present && isDeepStrictEqual(values[key], value)) continue
      text = edit(text, key, value, formattingOptions)
      changes.push({ key, before: values[key], after: value })
    }
    if (fresh) text += formattingOptions.eol
    text = changes.length === 0 && original !== undefined ? original : bom + text
    return { text, journal: { settingsPath, original: original ?? null, written: text, keys }, changes }
  })

/**
 * A later setup's journal on top of the first one: the first one's original text and previous
 * values win, so unsetup still returns to the state before the first setup.
 */
export const mergeJournals = (first: Journal, later: Journal): Journal => {
  const keys = later.keys.map((entry): JournalKey => {
    const earlier = first.keys.find((k) => k.key === entry.key)
    if (earlier === undefined) return entry
    return earlier.previous === undefined ? { key: entry.key, value: entry.value } : { key: entry.key, value: entry.value, previous: earlier.previous }
  })
  const dropped = first.keys.filter((k) => !later.keys.some((entry) => entry.key === k.key))
  return { settingsPath: first.settingsPath, original: first.original, written: later.written, keys: [...keys, ...dropped] }
}

export interface Reverted {
  /** The text to write; undefined: delete the file (it did not exist before setup). */
  readonly text: string | undefined
  readonly changes: ReadonlyArray<Change>
  readonly leftAlone: ReadonlyArray<LeftAlone>
}

/** Undoes `apply` on the file as it is now (undefined: it no longer exists). */
export const revert = (current: string | undefined, journal: Journal): Either.Either<Reverted, InvalidSettings> =>
  Either.gen(function*() {
    const restored = journal.keys
      .filter((entry) => !isDeepStrictEqual(entry.value, entry.previous))
      .map((entry): Change => ({ key: entry.key, before: entry.value, after: entry.previous }))
    if (current === journal.written) return { text: journal.original ?? undefined, changes: restored, leftAlone: [] }
    // Deleted by the user since: there is nothing of ours left to take out.
    if (current === undefined) return { text: undefined, changes: [], leftAlone: [] }
    const values = yield* parseSettings(journal.settingsPath, current)
    const { bom, body } = splitBom(current)
    const formattingOptions = formattingOf(body)
    let text = body
    const changes: Array<Change> = []
    const leftAlone: Array<LeftAlone> = []
    for (const entry of journal.keys) {
      const present = has(values, entry.key)
      if (!present) {
        if (entry.previous !== undefined) leftAlone.push({ key: entry.key, ours: entry.value, current: undefined })
        continue
      }
      if (!isDeepStrictEqual(values[entry.key], entry.value)) {
        leftAlone.push({ key: entry.key, ours: entry.value, current: values[entry.key] })
        continue
      }
      if (isDeepStrictEqual(entry.previous, entry.value)) continue
      text = edit(text, entry.key, entry.previous, formattingOptions)
      changes.push({ key: entry.key, before: entry.value, after: entry.previous })
    }
    return { text: bom + text, changes, leftAlone }
  })

export interface KeyStatus {
  readonly key: string
  readonly state: "applied" | "missing" | "different"
  readonly wanted: unknown
  readonly current: unknown
}

/** Where each desired key stands in a settings text (undefined: no file), for `doctor`. */
export const status = (text: string | undefined, wanted: Desired, settingsPath = "settings.json"): Either.Either<ReadonlyArray<KeyStatus>, InvalidSettings> =>
  Either.map(parseSettings(settingsPath, text ?? ""), (values) =>
    Object.entries(wanted).map(([key, value]): KeyStatus => ({
      key,
      state: !has(values, key) ? "missing" : isDeepStrictEqual(values[key], value) ? "applied" : "different",
      wanted: value,
      current: values[key]
    })))

// =============================================================================
// Files
// =============================================================================

export interface Summary {
  readonly settingsPath: string
  readonly file: "created" | "updated" | "unchanged" | "restored" | "deleted"
  readonly changes: ReadonlyArray<Change>
  readonly leftAlone: ReadonlyArray<LeftAlone>
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })

export const readIfExists = (fs: FileSystem.FileSystem, path: string) =>
  Effect.gen(function*() {
    if (!(yield* fs.exists(path))) return undefined
    const bytes = yield* fs.readFile(path)
    return yield* Effect.try({
      try: () => utf8.decode(bytes),
      catch: () => new InvalidSettings({ path, offset: 0, line: 1, column: 1, message: `${path} is not UTF-8 text` })
    })
  })

/** Writes through a temporary file in the same folder, so a crash leaves the old file or the new one. */
export const writeAtomic = (fs: FileSystem.FileSystem, path: string, text: string) =>
  Effect.gen(function*() {
    yield* fs.makeDirectory(NodePath.dirname(path), { recursive: true })
    const temporary = `${path}.${randomBytes(6).toString("hex")}.tmp`
    yield* fs.writeFileString(temporary, text)
    yield* fs.rename(temporary, path).pipe(Effect.tapError(() => fs.remove(temporary).pipe(Effect.ignore)))
  })

export const readJournal = (fs: FileSystem.FileSystem, journalPath: string) =>
  Effect.gen(function*() {
    if (!(yield* fs.exists(journalPath))) return Option.none<Journal>()
    const text = yield* fs.readFileString(journalPath)
    const journal = yield* Schema.decodeUnknown(Schema.parseJson(Journal))(text).pipe(
      Effect.mapError(() => new JournalError({ reason: "Invalid", path: journalPath, message: `${journalPath} is not a cursor-byok settings journal` }))
    )
    return Option.some(journal)
  })

const checkJournalFor = (journal: Journal, journalPath: string, settingsPath: string) =>
  journal.settingsPath === settingsPath
    ? Effect.void
    : new JournalError({ reason: "Mismatch", path: journalPath, message: `${journalPath} is the journal of ${journal.settingsPath}, not of ${settingsPath}` })

/** Points Cursor at the proxy; a second setup keeps the first one's journal of prior values. */
export const setup = (
  settingsPath: string,
  journalPath: string,
  wanted: Desired
): Effect.Effect<Summary, SettingsError | PlatformError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const original = yield* readIfExists(fs, settingsPath)
    const earlier = yield* readJournal(fs, journalPath)
    if (Option.isSome(earlier)) yield* checkJournalFor(earlier.value, journalPath, settingsPath)
    const applied = yield* apply(original, wanted, settingsPath)
    const journal = Option.isSome(earlier) ? mergeJournals(earlier.value, applied.journal) : applied.journal
    // The journal first: a crash in between must never lose the original.
    yield* writeAtomic(fs, journalPath, JSON.stringify(journal, null, 2) + "\n")
    if (applied.text !== original) yield* writeAtomic(fs, settingsPath, applied.text)
    const file = original === undefined ? "created" : applied.text === original ? "unchanged" : "updated"
    return { settingsPath, file, changes: applied.changes, leftAlone: [] } satisfies Summary
  }).pipe(Effect.withSpan("CursorSettings.setup"))

/** Undoes every setup since the journal was started, then removes the journal. */
export const unsetup = (settingsPath: string, journalPath: string): Effect.Effect<Summary, SettingsError | PlatformError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const found = yield* readJournal(fs, journalPath)
    if (Option.isNone(found)) {
      return yield* new JournalError({ reason: "Missing", path: journalPath, message: `no journal at ${journalPath}: setup has not been run (or unsetup already ran), nothing to undo` })
    }
    yield* checkJournalFor(found.value, journalPath, settingsPath)
    const current = yield* readIfExists(fs, settingsPath)
    const reverted = yield* revert(current, found.value)
    if (reverted.text === undefined) {
      if (current !== undefined) yield* fs.remove(settingsPath)
    } else if (reverted.text !== current) {
      yield* writeAtomic(fs, settingsPath, reverted.text)
    }
    yield* fs.remove(journalPath)
    const file = reverted.text === undefined ? (current === undefined ? "unchanged" : "deleted") : reverted.text === current ? "unchanged" : "restored"
    return { settingsPath, file, changes: reverted.changes, leftAlone: reverted.leftAlone } satisfies Summary
  }).pipe(Effect.withSpan("CursorSettings.unsetup"))
