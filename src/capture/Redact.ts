/**
 * What a capture keeps of a message (`capture/`). Secrets always go: a value under a key that
 * names one (api keys, tokens, passwords, Authorization, cookies) and anything in any string
 * that looks like a key (`sk-...`, `AIza...`, `ghp_...`, `Bearer ...`, a JWT). Unless the capture
 * keeps contents (`capture.contents`), so do file contents: the fields that carry them (read
 * results, write and edit texts, shell output, blob data, images, attachments) and any other
 * string longer than `LONG` characters that is not an id, a name or a path. A redacted value is
 * `[redacted N chars]` (`N bytes` for a bytes field); the structure and the small fields (ids,
 * tool names, paths, exit codes, flags) stay. A marker is never redacted again, so a replay that
 * sends markers and captures its own run compares equal.
 */
import type { DescMessage } from "@bufbuild/protobuf"
import { fieldOf, isBytesField, MARKER, messageOfField } from "./Json.js"
import type { Json } from "./Json.js"

/** Strings longer than this are redacted (unless their key is an id, a name or a path). */
export const LONG = 512

const SECRET_KEY = /(api[-_]?key|secret|password|passwd|authorization|cookie|credential|private[-_]?key|access[-_]?token|refresh[-_]?token|bearer|^token$|[a-z]Token$|^x-byok-token$)/i
const SECRET_VALUE = /(sk-[A-Za-z0-9_-]{12,}|sk_[A-Za-z0-9]{12,}|xai-[A-Za-z0-9]{12,}|AIza[0-9A-Za-z_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|Bearer\s+[A-Za-z0-9._~+/=-]{8,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})/g
const CONTENT_KEY = /^(argsTextDelta|content|contents|fileText|fileBytes|fileContents?|data|dataBinary|blobData|stdout|stderr|output|outputText|streamContent|newString|oldString|newText|oldText|diff|patch|image|imageData|selectedText|rawText|body)$/i
const KEEP_KEY = /^(id|ids|path|paths|name|model|uri|url|cwd|mode|case|type|status|reason|code|command|directory|workingDirectory)$|(Id|Ids|Path|Paths|Name|Uri|Url)$/

export const marker = (length: number, unit: "chars" | "bytes" = "chars") => `[redacted ${length} ${unit}]`

/** A string under `key`: a secret, content or a long text redacted, anything else as it is. */
export const redactString = (key: string, value: string, contents: boolean): string => {
  if (value === "" || MARKER.test(value)) return value
  if (SECRET_KEY.test(key)) return marker(value.length)
  const clean = value.replace(SECRET_VALUE, (found) => marker(found.length))
  if (contents) return clean
  if (CONTENT_KEY.test(key)) return marker(value.length)
  return clean.length > LONG && !KEEP_KEY.test(key) ? marker(value.length) : clean
}

/** A bytes field (base64 in JSON): ids and small values kept; content redacted; a replayed marker read back as the marker. */
const redactBytes = (key: string, base64: string, contents: boolean): string => {
  const bytes = Buffer.from(base64, "base64")
  const text = bytes.toString("latin1")
  if (MARKER.test(text)) return text
  if (SECRET_KEY.test(key)) return marker(bytes.length, "bytes")
  // Bytes cannot be cut: bytes holding a secret go whole.
  if (bytes.length > 32 && new RegExp(SECRET_VALUE.source).test(bytes.toString("utf8"))) return marker(bytes.length, "bytes")
  if (contents || KEEP_KEY.test(key) || bytes.length <= 32) return base64
  return CONTENT_KEY.test(key) || bytes.length > LONG ? marker(bytes.length, "bytes") : base64
}

/** Any JSON, by its keys: `arguments` (a tool call's JSON text) redacted inside. */
export const redactAny = (json: Json, contents: boolean, key = ""): Json => {
  if (typeof json === "string") {
    if (key === "arguments" && !contents) {
      try {
        return JSON.stringify(redactAny(JSON.parse(json) as Json, contents))
      } catch {
        return redactString("content", json, contents)
      }
    }
    return redactString(key, json, contents)
  }
  if (json === null || typeof json !== "object") return json
  if (Array.isArray(json)) return json.map((item) => redactAny(item, contents, key))
  return Object.fromEntries(Object.entries(json).map(([k, v]) => [k, redactAny(v, contents, k)]))
}

/** A protobuf message's JSON, by its schema: bytes fields told from strings. */
export const redactMessage = (schema: DescMessage, json: Json, contents: boolean): Json => {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return redactAny(json, contents)
  const out: Record<string, Json> = {}
  for (const [key, value] of Object.entries(json)) {
    const field = fieldOf(schema, key)
    if (field === undefined) {
      out[key] = redactAny(value, contents, key)
      continue
    }
    const nested = messageOfField(field)
    const one = (item: Json, name: string): Json =>
      nested !== undefined && !nested.typeName.startsWith("google.protobuf.") ? redactMessage(nested, item, contents)
        : typeof item === "string" && isBytesField(field) ? redactBytes(name, item, contents)
        : redactAny(item, contents, name)
    out[key] = Array.isArray(value) ? value.map((item) => one(item, key))
      : field.fieldKind === "map" && value !== null && typeof value === "object" ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, one(v, key)]))
      : one(value, key)
  }
  return out
}
