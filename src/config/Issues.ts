/**
 * A configuration's decoding errors as one line per problem: the file, the JSON path, what was
 * expected and what was there (`byok.config.json: providers[0].api: expected one of
 * "openai-chat", "anthropic", "gemini", "openai-responses", got "openai-chatt"`), instead of
 * Schema's tree. The alternatives a union tried at one path are gathered into one line; an
 * unknown key names the closest known one.
 */
import { ParseResult } from "effect"

type Issue = ParseResult.ArrayFormatterIssue

/** `providers[0].api`, from Schema's path. */
export const formatPath = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>((out, key) =>
    typeof key === "number" ? `${out}[${key}]` : /^[A-Za-z_$][\w$]*$/.test(String(key)) ? (out === "" ? String(key) : `${out}.${String(key)}`) : `${out}[${JSON.stringify(String(key))}]`, "")

/** Edit distance with adjacent transpositions (optimal string alignment), case-insensitive: "prot" is one edit from "port". */
const distance = (a: string, b: string): number => {
  const x = a.toLowerCase()
  const y = b.toLowerCase()
  const d = Array.from({ length: x.length + 1 }, (_, i) => Array.from({ length: y.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)))
  for (let i = 1; i <= x.length; i++) {
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && x[i - 1] === y[j - 2] && x[i - 2] === y[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1)
    }
  }
  return d[x.length]![y.length]!
}

/** The known key closest to an unknown one, when it is close enough to be a typo. */
const closest = (key: string, known: ReadonlyArray<string>): string | undefined => {
  // A key that is the start of a known one (apiKey for apiKeyEnv) is taken as meant for it.
  const extended = known.find((candidate) => key.length >= 3 && candidate.toLowerCase().startsWith(key.toLowerCase()))
  if (extended !== undefined) return extended
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of known) {
    const d = distance(key, candidate)
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? best : undefined
}

const EXPECTED = /^Expected (.+), actual (.+)$/s

/** Schema's name of a type, as a reader of a JSON file says it. */
const plainType = (expected: string): string =>
  /^ReadonlyArray</.test(expected) ? "an array" : /^(\{|\(Struct|Struct)/.test(expected) ? "an object" : expected

/** The value that was there, cut short when long. */
const shown = (actual: string): string => actual.length > 80 ? `${actual.slice(0, 77)}...` : actual

/** One line per problem (per JSON path), in the order Schema found them. */
export const issueLines = (error: ParseResult.ParseError): ReadonlyArray<string> => {
  const byPath = new Map<string, Array<Issue>>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const key = formatPath(issue.path)
    const group = byPath.get(key) ?? []
    group.push(issue)
    byPath.set(key, group)
  }
  const lines: Array<string> = []
  const hasDeeper = (path: string) => [...byPath.keys()].some((other) => other !== path && (path === "" || other.startsWith(`${path}.`) || other.startsWith(`${path}[`)))
  for (const [path, issues] of byPath) {
    const at = path === "" ? "" : `${path}: `
    const unexpected = issues.find((issue) => issue._tag === "Unexpected")
    if (unexpected !== undefined) {
      const known = [...unexpected.message.matchAll(/"([^"]+)"/g)].map((m) => m[1]!)
      const key = String(unexpected.path[unexpected.path.length - 1] ?? "")
      const suggestion = closest(key, known)
      lines.push(`${at}is not a known key${suggestion === undefined ? ` (known: ${known.join(", ")})` : `: did you mean "${suggestion}"?`}`)
      continue
    }
    if (issues.some((issue) => issue._tag === "Missing")) {
      lines.push(`${at}is missing`)
      continue
    }
    const expected: Array<string> = []
    let actual: string | undefined
    const others: Array<string> = []
    for (const issue of issues) {
      const match = EXPECTED.exec(issue.message)
      if (match === null) {
        if (!others.includes(issue.message)) others.push(issue.message)
        continue
      }
      actual = shown(match[2]!)
      const type = plainType(match[1]!)
      if (!expected.includes(type)) expected.push(type)
    }
    // An optional field's "or undefined" is noise when something else was expected, or when its content is what is wrong.
    const wanted = expected.length > 1 ? expected.filter((e) => e !== "undefined") : expected
    if (wanted.length === 1 && wanted[0] === "undefined" && others.length === 0 && hasDeeper(path)) continue
    if (wanted.length > 0) {
      lines.push(`${at}expected ${wanted.length === 1 ? wanted[0] : `one of ${wanted.join(", ")}`}, got ${actual}`)
    }
    for (const message of others) lines.push(`${at}${message.replace(/^Expected /, "expected ")}`)
  }
  return lines
}

/** ` at line L, column C` of the offset a JSON.parse message names, when it names one. */
export const jsonPosition = (text: string, message: string): string => {
  const offset = /position (\d+)/.exec(message)?.[1]
  if (offset === undefined) return ""
  const before = text.slice(0, Number(offset)).split("\n")
  return ` at line ${before.length}, column ${before[before.length - 1]!.length + 1}`
}
