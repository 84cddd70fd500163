/**
 * From what a FIM model wrote to what Cursor shows: the completion cut where a reader would
 * stop (a blank line, the end of the cursor's block, the line limit) and where it starts
 * repeating the code after the cursor; the whole-line suggestion around it; and the rest of
 * a suggestion the user is typing through, which needs no model call. Pure.
 */
import type { Suggestion } from "../Tab.js"
import { cursorLineOf } from "./Prompt.js"

/** What the completion is read against: the cursor's line around it and the code after it. */
interface Surroundings {
  /** The cursor line's text before the cursor. */
  readonly before: string
  /** The cursor line's text after the cursor (no line break). */
  readonly rest: string
  /** The suffix without its leading whitespace: a closing bracket it starts with is not written again. */
  readonly suffixStart: string
  /** The first non-blank line after the cursor as a whole line (the cursor's line read whole when `rest` is not blank), trailing whitespace off. */
  readonly repeated: string | undefined
  readonly maxLines: number
}

const isBlank = (text: string): boolean => text.trim() === ""
const indentOf = (text: string): number => /^[ \t]*/.exec(text)![0].length
/** A line that only closes brackets (`}`, `})`, `];`): the end of a block worth keeping. */
const closesBlock = (line: string): boolean => /^[)\]}]+[;,]?$/.test(line.trim())

const surroundingsOf = (prompt: { prefix: string; suffix: string }, maxLines: number): Surroundings => {
  const before = prompt.prefix.slice(prompt.prefix.lastIndexOf("\n") + 1)
  const suffixLines = prompt.suffix.split("\n").map((line) => line.replace(/\r$/, ""))
  const rest = suffixLines[0]!
  const next = suffixLines.slice(1).find((line) => !isBlank(line))
  const repeated = !isBlank(rest) ? (before + rest).trimEnd() : next?.trimEnd()
  return { before, rest, suffixStart: prompt.suffix.trimStart(), repeated, maxLines }
}

/**
 * The completion's lines up to the first stop, and whether the stop fell at a line break.
 * Stops: line `maxLines`; a line equal to `repeated` (line 0 read with the text before the
 * cursor); a blank line after non-blank text; a line (after the first) indented less than
 * the cursor's line, kept when it only closes brackets the suffix does not start with.
 */
const keptLines = (lines: ReadonlyArray<string>, around: Surroundings): { kept: Array<string>; atLineBreak: boolean } => {
  const base = indentOf(around.before + lines[0]!)
  const kept: Array<string> = []
  let seenText = false
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index]!
    const whole = index === 0 ? around.before + line : line
    if (index >= around.maxLines || whole.trimEnd() === around.repeated) return { kept, atLineBreak: index > 0 }
    if (isBlank(line)) {
      if (seenText) return { kept, atLineBreak: true }
    } else if (index > 0 && indentOf(line) < base) {
      if (!closesBlock(line) || around.suffixStart.startsWith(line.trim()[0]!)) return { kept, atLineBreak: true }
      kept.push(line)
      return { kept, atLineBreak: index + 1 < lines.length }
    } else {
      seenText = true
    }
    kept.push(line)
  }
  return { kept, atLineBreak: false }
}

/** Sum over `()`, `[]`, `{}` of |opened − closed|. */
const imbalance = (text: string): number =>
  ["()", "[]", "{}"].reduce((sum, [open, close]) => {
    let depth = 0
    for (const char of text) depth += char === open ? 1 : char === close ? -1 : 0
    return sum + Math.abs(depth)
  }, 0)

/** The longest k such that `text` ends with the first k characters of `rest`. */
const overlapOf = (text: string, rest: string): number => {
  for (let k = Math.min(text.length, rest.length); k > 0; k--) if (text.endsWith(rest.slice(0, k))) return k
  return 0
}

/**
 * Cut, again and again, the end of `text` that repeats the start of the rest of the cursor
 * line (`foo(|)` completed with `x)` inserts `x`), unless the cut leaves the line's brackets
 * less balanced (`bar(|)` completed with `foo(x)` keeps its `)`).
 */
const withoutRestOverlap = (text: string, around: Surroundings): string => {
  let kept = text
  for (;;) {
    const overlap = overlapOf(kept, around.rest)
    if (overlap === 0) return kept
    const cut = kept.slice(0, kept.length - overlap)
    if (imbalance(around.before + cut + around.rest) > imbalance(around.before + kept + around.rest)) return kept
    kept = cut
  }
}

/**
 * The text to insert at the cursor: the completion cut at the stops of `keptLines`,
 * trailing whitespace off, its end's repeat of the rest of the cursor line off. When it
 * was cut at a line break with the cursor before the code of its line (only indentation
 * before it), the break and that indentation are kept, so the code stays on its own line
 * below the inserted ones. "" when nothing but whitespace is left.
 */
export const trimCompletion = (completion: string, prompt: { prefix: string; suffix: string }, limits: { maxLines: number }): string => {
  if (isBlank(completion)) return ""
  const around = surroundingsOf(prompt, limits.maxLines)
  const { kept, atLineBreak } = keptLines(completion.split("\n"), around)
  let text = withoutRestOverlap(kept.join("\n").trimEnd(), around)
  if (atLineBreak && isBlank(around.before) && !isBlank(around.rest) && !isBlank(text)) {
    text += (prompt.prefix + prompt.suffix).includes("\r\n") ? "\r\n" : "\n"
    text += around.before
  }
  return isBlank(text) ? "" : text
}

/**
 * The suggestion Cursor shows: Tab replaces whole lines, so `text` is the cursor's line with
 * `insert` at the cursor (the cursor clamped like `cursorOffset`); undefined for no insert.
 */
export const suggestionOf = (contents: string, line: number, column: number, insert: string): Suggestion | undefined => {
  if (insert === "") return undefined
  const cursor = cursorLineOf(contents, line, column)
  return {
    text: contents.slice(cursor.start, cursor.offset) + insert + contents.slice(cursor.offset, cursor.end),
    startLine: cursor.line,
    endLineInclusive: cursor.line,
    insert
  }
}

/**
 * Typing through a suggestion: when `prefix` is `previous.prefix` plus typed characters
 * that begin `previous.insert`, the rest of the insert (never empty); otherwise undefined.
 * Both prefixes must be cut the same way (the whole text before the cursor is safest): a
 * window that moved reads as no continuation.
 */
export const continues = (previous: { prefix: string; insert: string }, prefix: string): string | undefined => {
  if (prefix.length <= previous.prefix.length || !prefix.startsWith(previous.prefix)) return undefined
  const typed = prefix.slice(previous.prefix.length)
  return typed.length < previous.insert.length && previous.insert.startsWith(typed) ? previous.insert.slice(typed.length) : undefined
}
