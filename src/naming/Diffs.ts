/**
 * The unified diffs Cursor sends for a commit message or a branch name: split into one section
 * per file, the files they change, and a deterministic cut to a character budget that keeps
 * whole file sections first, then the heads of the others, then only their names.
 */

/** A file's part of a diff: the path it changes (when its headers name one) and its text. */
export interface FileSection {
  readonly path: string | undefined
  readonly text: string
}

/** The path a section's headers name: `diff --git a/x b/y`, else `+++ b/y`, else `--- a/x` (a deleted file). */
const pathOf = (text: string): string | undefined => {
  const git = /^diff --git "?a\/(.+?)"? "?b\/(.+?)"?$/m.exec(text)
  if (git !== null) return git[2]
  const added = /^\+\+\+ (?:b\/)?(.+?)(?:\t.*)?$/m.exec(text)
  if (added !== null && added[1] !== "/dev/null") return added[1]
  const removed = /^--- (?:a\/)?(.+?)(?:\t.*)?$/m.exec(text)
  return removed !== null && removed[1] !== "/dev/null" ? removed[1] : undefined
}

/** The sections of one diff, split before each `diff --git` line (or before `--- ` headers of a plain diff). */
export const fileSections = (diff: string): ReadonlyArray<FileSection> => {
  if (diff.trim() === "") return []
  const lines = diff.split("\n")
  const gitStyle = lines.some((line) => line.startsWith("diff --git "))
  const starts: Array<number> = []
  lines.forEach((line, index) => {
    const opens = gitStyle
      ? line.startsWith("diff --git ")
      : line.startsWith("--- ") && (lines[index + 1] ?? "").startsWith("+++ ")
    if (opens) starts.push(index)
  })
  if (starts[0] !== 0) starts.unshift(0)
  return starts.map((start, i) => {
    const text = lines.slice(start, starts[i + 1] ?? lines.length).join("\n")
    return { path: pathOf(text), text }
  }).filter((section) => section.text.trim() !== "")
}

/** The files the diffs change, each once, in the order they first appear. */
export const changedFiles = (diffs: ReadonlyArray<string>): ReadonlyArray<string> => [
  ...new Set(diffs.flatMap(fileSections).flatMap((section) => (section.path === undefined ? [] : [section.path])))
]

/** A section is cut only when at least this much of it fits; a smaller room gets its name only. */
const MIN_HEAD_CHARS = 400
/** At most this many left-out files are named. */
const NAMED_OMISSIONS = 40

/**
 * The diffs as one text of at most about `budget` characters, the same for the same input:
 * every whole section that fits (in order), then the head of each remaining section (cut at a
 * line, with how much was left out) while at least `MIN_HEAD_CHARS` remain, then the names of
 * the files left out entirely.
 */
export const truncateDiffs = (diffs: ReadonlyArray<string>, budget: number): string => {
  const sections = diffs.flatMap(fileSections)
  const kept: Array<string | undefined> = sections.map(() => undefined)
  let remaining = budget
  sections.forEach((section, index) => {
    if (section.text.length + 1 <= remaining) {
      kept[index] = section.text
      remaining -= section.text.length + 1
    }
  })
  const omitted: Array<string> = []
  sections.forEach((section, index) => {
    if (kept[index] !== undefined) return
    if (remaining < MIN_HEAD_CHARS) {
      omitted.push(section.path ?? "(unnamed diff)")
      return
    }
    const room = remaining - 80
    const cut = section.text.lastIndexOf("\n", room)
    const head = section.text.slice(0, cut > 0 ? cut : room)
    const text = `${head}\n[... ${section.text.length - head.length} more characters of this diff left out]`
    kept[index] = text
    remaining -= text.length + 1
  })
  const body = kept.filter((text): text is string => text !== undefined).join("\n")
  if (omitted.length === 0) return body
  const named = omitted.slice(0, NAMED_OMISSIONS).join(", ")
  const more = omitted.length > NAMED_OMISSIONS ? ` and ${omitted.length - NAMED_OMISSIONS} more` : ""
  return `${body}\n[diffs of ${omitted.length} more files left out: ${named}${more}]`
}
