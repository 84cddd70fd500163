/**
 * The FIM prompt of a Tab request: the file around the cursor cut to the limits at line
 * boundaries, and a short context (problems near the cursor, recent edits, other files)
 * written as comments in the file's language, so the model reads it as part of the file.
 * Pure: no I/O, no clock.
 */
import type { FimPrompt, TabLimits, TabRequest } from "../Tab.js"

/** The cursor's line clamped into the file: its number, where it starts and ends (before `\r\n`), and the cursor's offset. */
export interface CursorLine {
  readonly line: number
  readonly start: number
  readonly end: number
  readonly offset: number
}

/** Diagnostics this many lines or fewer from the cursor are context. */
const nearLines = 20

const wholeOrZero = (n: number): number => (Number.isNaN(n) ? 0 : Math.max(0, Math.floor(n)))
const isHighSurrogate = (code: number): boolean => code >= 0xd800 && code <= 0xdbff
const isLowSurrogate = (code: number): boolean => code >= 0xdc00 && code <= 0xdfff

const lineEndOf = (contents: string, start: number): number => {
  const lineBreak = contents.indexOf("\n", start)
  if (lineBreak < 0) return contents.length
  return lineBreak > start && contents[lineBreak - 1] === "\r" ? lineBreak - 1 : lineBreak
}

/**
 * The cursor's line and offset; a line past the last is the end of the last line, a column
 * past its line's end is that end, negatives are 0. A column that splits a surrogate pair
 * keeps the pair whole (before it). Never throws.
 */
export const cursorLineOf = (contents: string, line: number, column: number): CursorLine => {
  const wanted = wholeOrZero(line)
  let start = 0
  let at = 0
  let clampedColumn = wholeOrZero(column)
  while (at < wanted) {
    const lineBreak = contents.indexOf("\n", start)
    if (lineBreak < 0) {
      clampedColumn = Infinity
      break
    }
    start = lineBreak + 1
    at++
  }
  const end = lineEndOf(contents, start)
  let offset = start + Math.min(clampedColumn, end - start)
  if (offset > start && isHighSurrogate(contents.charCodeAt(offset - 1)) && isLowSurrogate(contents.charCodeAt(offset))) offset--
  return { line: at, start, end, offset }
}

/** The cursor's offset in `contents` (UTF-16 code units), clamped as `cursorLineOf` says. */
export const cursorOffset = (contents: string, line: number, column: number): number =>
  cursorLineOf(contents, line, column).offset

const hashComment = ["python", "ruby", "shellscript", "shell", "bash", "sh", "zsh", "yaml", "toml", "perl", "r", "elixir", "dockerfile", "makefile", "powershell"]
const dashComment = ["sql", "lua", "haskell"]
const commentByLanguage: ReadonlyMap<string, string> = new Map([
  ...hashComment.map((id) => [id, "#"] as const),
  ...dashComment.map((id) => [id, "--"] as const)
])

/** The line-comment prefix of a language id: `#`, `--`, else `//` (ts, js, java, c, cpp, go, rust, swift, kotlin, csharp, php, scala, dart and unknown ids). */
export const lineCommentOf = (languageId: string): string => commentByLanguage.get(languageId.toLowerCase()) ?? "//"

/**
 * The last `limit` characters before the cursor, starting at the first line start inside
 * that window (whole lines, then the cursor's partial line); when the window holds no line
 * start, cut inside the line (one character less if the cut would split a surrogate pair).
 */
export const prefixOf = (before: string, limit: number): string => {
  if (before.length <= limit) return before
  if (limit <= 0) return ""
  const start = before.length - limit
  const lineBreak = before.indexOf("\n", start - 1)
  if (lineBreak >= 0 && lineBreak + 1 < before.length) return before.slice(lineBreak + 1)
  return before.slice(isLowSurrogate(before.charCodeAt(start)) ? start + 1 : start)
}

/** The first `limit` characters after the cursor, ending after the last line break inside them; with none, cut inside the line. */
export const suffixOf = (after: string, limit: number): string => {
  if (after.length <= limit) return after
  if (limit <= 0) return ""
  const lineBreak = after.lastIndexOf("\n", limit - 1)
  if (lineBreak >= 0) return after.slice(0, lineBreak + 1)
  return after.slice(0, isHighSurrogate(after.charCodeAt(limit - 1)) ? limit - 1 : limit)
}

/** `text` as comment lines, ending with a newline. */
const commented = (comment: string, text: string): string =>
  text
    .trimEnd()
    .split("\n")
    .map((line) => line.replace(/\r$/, ""))
    .map((line) => (line === "" ? comment : `${comment} ${line}`))
    .join("\n") + "\n"

/** The context items, highest priority first: problems nearest the cursor, edits newest first, other files. */
const contextItems = (request: TabRequest, cursorLine: number, comment: string): Array<string> => {
  const where = request.path === "" ? "line " : `${request.path}:`
  const problems = request.diagnostics
    .filter((problem) => Math.abs(problem.line - cursorLine) <= nearLines && problem.message.trim() !== "")
    .sort((a, b) => Math.abs(a.line - cursorLine) - Math.abs(b.line - cursorLine))
    .map((problem) => {
      const severity = problem.severity === "" ? "" : `${problem.severity}: `
      return commented(comment, `${where}${problem.line + 1}: ${severity}${problem.message}`)
    })
  const edits = [...request.recentEdits]
    .reverse()
    .filter((edit) => edit.trim() !== "")
    .map((edit) => commented(comment, `Recent edit:\n${edit}`))
  const seen = new Set([request.path])
  const files = request.otherFiles.flatMap((file) => {
    if (seen.has(file.path) || file.contents.trim() === "") return []
    seen.add(file.path)
    return [commented(comment, `Compare this snippet from ${file.path}:\n${file.contents}`)]
  })
  return [...problems, ...edits, ...files]
}

/** The head of an item that alone is over `budget`: its whole lines that fit, or its first line cut (ending with a newline). */
const headOf = (item: string, budget: number): string => {
  if (budget < 2) return ""
  const lineBreak = item.lastIndexOf("\n", budget - 1)
  if (lineBreak >= 0) return item.slice(0, lineBreak + 1)
  const end = isHighSurrogate(item.charCodeAt(budget - 2)) ? budget - 2 : budget - 1
  return item.slice(0, end) + "\n"
}

/** The items that fit in `budget`, in order: an item that does not fit is dropped, except the first, which is cut to fit. */
const fitted = (items: ReadonlyArray<string>, budget: number): Array<string> => {
  const chosen: Array<string> = []
  let left = budget
  items.forEach((item, index) => {
    const kept = item.length <= left ? item : index === 0 ? headOf(item, left) : ""
    if (kept === "") return
    chosen.push(kept)
    left -= kept.length
  })
  return chosen
}

/**
 * The context: `<comment> Path: <path>` first (when the path is not empty), then the items
 * that fit. At most `contextChars` characters, unless the path line alone is longer.
 */
export const contextOf = (request: TabRequest, cursorLine: number, contextChars: number): string => {
  const comment = lineCommentOf(request.languageId)
  const pathLine = request.path === "" ? "" : `${comment} Path: ${request.path}\n`
  return pathLine + fitted(contextItems(request, cursorLine, comment), contextChars - pathLine.length).join("")
}

/** Where a new top-level definition starts, for languages where that ends a suggestion. */
const topLevelStarts: ReadonlyMap<string, ReadonlyArray<string>> = new Map([
  ["python", ["def ", "class "]],
  ["go", ["func "]],
  ["rust", ["fn "]]
])

/** Two blank lines end a suggestion in any language; a new top-level definition in some. Line ends are the file's. */
export const stopsOf = (languageId: string, eol: string): ReadonlyArray<string> => [
  eol.repeat(3),
  ...(topLevelStarts.get(languageId.toLowerCase()) ?? []).map((start) => eol + start)
]

/** The FIM prompt of a request, bounded by `limits`. */
export const promptOf = (request: TabRequest, limits: TabLimits): FimPrompt => {
  const cursor = cursorLineOf(request.contents, request.line, request.column)
  return {
    context: contextOf(request, cursor.line, limits.contextChars),
    prefix: prefixOf(request.contents.slice(0, cursor.offset), limits.prefixChars),
    suffix: suffixOf(request.contents.slice(cursor.offset), limits.suffixChars),
    path: request.path,
    languageId: request.languageId,
    stop: stopsOf(request.languageId, request.contents.includes("\r\n") ? "\r\n" : "\n"),
    maxTokens: limits.maxTokens
  }
}
