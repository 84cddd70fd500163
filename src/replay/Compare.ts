/**
 * The server half of two captures, compared after what legitimately differs between two runs
 * is normalized away: heartbeats (their count is the clock's), timestamps, blob ids (hashes: a
 * redacted capture's replay hashes the markers it sent, so ids are compared by first appearance,
 * which still checks every reference), the length a redaction marker states, and how text and
 * thinking deltas were split (the provider's network reads). What remains must be equal, in
 * order: the stream's messages and its outcome, and each append's answer; a value the capture
 * redacted matches any string (the replay cannot know what it was).
 */
import type { Json } from "../capture/Json.js"
import type { ReadLine } from "../capture/Format.js"

const TIME_KEY = /(At|AtMs|Timestamp|TimeMs|UnixMs)$|^(timestamp|time|durationMs|elapsedMs)$/
const BLOB_ID = /^[A-Za-z0-9+/]{43}=$/
const MARKERS = /(\[redacted \d+ (chars|bytes)\])+/g

export interface Normalized {
  readonly lines: ReadonlyArray<Json>
  readonly answers: ReadonlyArray<Json>
}

const isObject = (json: Json | undefined): json is { [key: string]: Json } => json !== null && typeof json === "object" && !Array.isArray(json)

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/

/**
 * Bytes (base64) with the blob ids seen so far inside them replaced by their names' numbers: a
 * blob that names other blobs (a turn, a checkpoint's state) compares equal when those differ
 * only as their contents' redaction made them differ.
 */
const withIdsNamed = (base64: string, ids: Map<string, string>): string => {
  let bytes = Buffer.from(base64, "base64")
  let changed = false
  for (const [id, name] of ids) {
    const raw = Buffer.from(id, "base64")
    const named = Buffer.alloc(raw.length, Number(name.replace(/\D/g, "")) % 256)
    for (let at = bytes.indexOf(raw); at !== -1; at = bytes.indexOf(raw, at + raw.length)) {
      if (!changed) bytes = Buffer.from(bytes)
      changed = true
      named.copy(bytes, at)
    }
  }
  return changed ? bytes.toString("base64") : base64
}

/** A message with its times, blob ids and marker lengths made run-independent (`ids` names blob ids by first appearance). */
const normalizeJson = (json: Json, ids: Map<string, string>, key = ""): Json => {
  if (typeof json === "string") {
    if (TIME_KEY.test(key)) return "<time>"
    if (BLOB_ID.test(json)) {
      if (!ids.has(json)) ids.set(json, `<blob ${ids.size + 1}>`)
      return ids.get(json)!
    }
    if (json.length > 44 && ids.size > 0 && BASE64.test(json)) return withIdsNamed(json, ids)
    return json.replace(MARKERS, "[redacted]")
  }
  if (typeof json === "number" && TIME_KEY.test(key)) return "<time>"
  if (Array.isArray(json)) return json.map((item) => normalizeJson(item, ids, key))
  if (!isObject(json)) return json
  return Object.fromEntries(Object.entries(json).map(([k, v]) => [k, normalizeJson(v, ids, k)]))
}

const updateOf = (line: Json): { [key: string]: Json } | undefined => {
  const message = isObject(line) ? line["message"] : undefined
  const update = isObject(message) ? message["interactionUpdate"] : undefined
  return isObject(update) ? update : undefined
}

const isHeartbeat = (line: ReadLine) =>
  line.kind === "server" && line.message !== undefined && isObject(line.message) && isObject(line.message["interactionUpdate"]) &&
  line.message["interactionUpdate"]["heartbeat"] !== undefined

/** Adjacent text (or thinking) deltas of one stream joined into one. */
const mergeDeltas = (lines: Array<Json>): Array<Json> => {
  const out: Array<Json> = []
  for (const line of lines) {
    const previous = out[out.length - 1]
    const [a, b] = [previous === undefined ? undefined : updateOf(previous), updateOf(line)]
    const kind = b === undefined ? undefined : (["textDelta", "thinkingDelta"] as const).find((k) => isObject(b[k]) && typeof (b[k] as { text?: Json }).text === "string")
    if (previous !== undefined && a !== undefined && b !== undefined && kind !== undefined && isObject(a[kind]) && typeof (a[kind] as { text?: Json }).text === "string" &&
      Object.keys(a).length === 1 && Object.keys(b).length === 1 && (previous as { call?: Json }).call === (line as { call?: Json }).call) {
      const joined = String((a[kind] as { text: Json }).text) + String((b[kind] as { text: Json }).text)
      out[out.length - 1] = { ...(previous as object), message: { interactionUpdate: { [kind]: { ...(a[kind] as object), text: joined } } } }
      continue
    }
    out.push(line)
  }
  return out
}

/** The server half of a capture, normalized: the agent streams' lines in order, and the appends' answers by seqno. */
export const normalize = (lines: ReadonlyArray<ReadLine>): Normalized => {
  const ids = new Map<string, string>()
  const stream: Array<Json> = []
  const answers: Array<{ readonly append: number; readonly json: Json }> = []
  for (const line of lines) {
    if (line.kind !== "server" || isHeartbeat(line)) continue
    const { t: _t, protocol: _p, codec: _c, http: _h, kind: _k, ...rest } = line
    const json = normalizeJson(rest as unknown as Json, ids)
    if (line.wire === "BidiAppend") {
      const { call: _call, ...answer } = json as { [key: string]: Json }
      answers.push({ append: Number(line.append ?? 0), json: answer })
    } else stream.push(json)
  }
  return { lines: mergeDeltas(stream), answers: answers.sort((a, b) => a.append - b.append).map((a) => a.json) }
}

/** A value the capture redacted: the replay's value there cannot be checked, any string matches it. */
const REDACTED = "[redacted]"

/** Whether `got` is what `expected` says (a redacted string matches any string). */
export const matches = (expected: Json | undefined, got: Json | undefined): boolean => {
  if (expected === REDACTED) return typeof got === "string"
  if (isObject(expected) && isObject(got)) {
    const keys = new Set([...Object.keys(expected), ...Object.keys(got)])
    return [...keys].every((key) => matches(expected[key], got[key]))
  }
  if (Array.isArray(expected) && Array.isArray(got)) return expected.length === got.length && expected.every((item, index) => matches(item, got[index]))
  return JSON.stringify(expected) === JSON.stringify(got)
}

/** Where two JSON values differ: up to `limit` paths with both values. */
export const diffJson = (expected: Json | undefined, got: Json | undefined, path = "", limit = 6): Array<string> => {
  if (matches(expected, got)) return []
  if (isObject(expected) && isObject(got)) {
    const keys = [...new Set([...Object.keys(expected), ...Object.keys(got)])]
    return keys.flatMap((key) => diffJson(expected[key], got[key], path === "" ? key : `${path}.${key}`, limit)).slice(0, limit)
  }
  if (Array.isArray(expected) && Array.isArray(got) && expected.length === got.length) {
    return expected.flatMap((item, index) => diffJson(item, got[index], `${path}[${index}]`, limit)).slice(0, limit)
  }
  const show = (value: Json | undefined) => value === undefined ? "(absent)" : clip(JSON.stringify(value), 160)
  return [`${path === "" ? "(the line)" : path}: expected ${show(expected)}, got ${show(got)}`]
}

const clip = (text: string, max: number) => (text.length <= max ? text : `${text.slice(0, max)}...`)

export type Verdict =
  | { readonly _tag: "Matched"; readonly count: number }
  | { readonly _tag: "Diverged"; readonly what: "stream" | "answers"; readonly index: number; readonly expected: Json | undefined; readonly got: Json | undefined; readonly diff: ReadonlyArray<string> }

/** The first difference between the expected (captured) server half and the replayed one. */
export const compare = (expected: Normalized, got: Normalized): Verdict => {
  for (const what of ["stream", "answers"] as const) {
    const [a, b] = what === "stream" ? [expected.lines, got.lines] : [expected.answers, got.answers]
    for (let index = 0; index < Math.max(a.length, b.length); index++) {
      if (!matches(a[index], b[index])) {
        return { _tag: "Diverged", what, index, expected: a[index], got: b[index], diff: diffJson(a[index], b[index]) }
      }
    }
  }
  return { _tag: "Matched", count: expected.lines.length }
}

/** A verdict as the command prints it. */
export const describeVerdict = (verdict: Verdict): string => {
  if (verdict._tag === "Matched") return `replay matched (${verdict.count} server messages)`
  const name = verdict.what === "stream" ? "server message" : "append answer"
  return [
    `replay diverged at ${name} ${verdict.index}`,
    `  expected: ${clip(JSON.stringify(verdict.expected) ?? "(nothing)", 600)}`,
    `  got:      ${clip(JSON.stringify(verdict.got) ?? "(nothing)", 600)}`,
    ...verdict.diff.map((line) => `  - ${line}`)
  ].join("\n")
}
