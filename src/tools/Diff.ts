/**
 * A unified diff of two file contents (what an edit's typed result shows), with the added and
 * removed line counts.
 */

export interface LineDiff {
  /** Unified diff text (`--- a/path`, `+++ b/path`, `@@` hunks with 3 lines of context). */
  readonly text: string
  readonly added: number
  readonly removed: number
}

type Op = { readonly kind: " " | "-" | "+"; readonly line: string }

const splitLines = (text: string): Array<string> => {
  if (text === "") return []
  const lines = text.split("\n")
  if (lines[lines.length - 1] === "") lines.pop()
  return lines
}

/** Line operations turning `a` into `b`: common prefix and suffix trimmed, LCS in between. */
const diffLines = (a: ReadonlyArray<string>, b: ReadonlyArray<string>): Array<Op> => {
  let start = 0
  while (start < a.length && start < b.length && a[start] === b[start]) start++
  let endA = a.length, endB = b.length
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB-- }
  const ops: Array<Op> = a.slice(0, start).map((line) => ({ kind: " ", line }))
  const midA = a.slice(start, endA), midB = b.slice(start, endB)
  const n = midA.length, m = midB.length
  if (n * m > 4_000_000) {
    // Too large for a quadratic table: show the changed middle as one replacement.
    for (const line of midA) ops.push({ kind: "-", line })
    for (const line of midB) ops.push({ kind: "+", line })
  } else {
    const width = m + 1
    const lcs = new Uint32Array((n + 1) * width)
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * width + j] = midA[i] === midB[j]
          ? lcs[(i + 1) * width + j + 1]! + 1
          : Math.max(lcs[(i + 1) * width + j]!, lcs[i * width + j + 1]!)
      }
    }
    let i = 0, j = 0
    while (i < n || j < m) {
      if (i < n && j < m && midA[i] === midB[j]) { ops.push({ kind: " ", line: midA[i]! }); i++; j++ }
      // Removals first, as unified diffs conventionally show them.
      else if (i < n && (j === m || lcs[(i + 1) * width + j]! >= lcs[i * width + j + 1]!)) { ops.push({ kind: "-", line: midA[i]! }); i++ }
      else { ops.push({ kind: "+", line: midB[j]! }); j++ }
    }
  }
  for (const line of a.slice(endA)) ops.push({ kind: " ", line })
  return ops
}

/** A unified diff of two file contents, with the added and removed line counts. */
export const unifiedDiff = (path: string, before: string, after: string, context = 3): LineDiff => {
  const ops = diffLines(splitLines(before), splitLines(after))
  let added = 0, removed = 0
  for (const op of ops) {
    if (op.kind === "+") added++
    else if (op.kind === "-") removed++
  }
  if (added === 0 && removed === 0) return { text: "", added, removed }
  const out: Array<string> = [`--- a/${path}`, `+++ b/${path}`]
  // Line numbers before each op, in the old and the new file.
  const oldAt: Array<number> = [], newAt: Array<number> = []
  let o = 1, nw = 1
  for (const op of ops) {
    oldAt.push(o); newAt.push(nw)
    if (op.kind !== "+") o++
    if (op.kind !== "-") nw++
  }
  let index = 0
  while (index < ops.length) {
    while (index < ops.length && ops[index]!.kind === " ") index++
    if (index >= ops.length) break
    let from = Math.max(0, index - context)
    let to = index
    // Extend the hunk while the next change is within 2*context unchanged lines.
    while (to < ops.length) {
      if (ops[to]!.kind !== " ") { to++; continue }
      let run = to
      while (run < ops.length && ops[run]!.kind === " ") run++
      if (run >= ops.length || run - to > 2 * context) { to = Math.min(ops.length, to + context); break }
      to = run
    }
    const hunk = ops.slice(from, to)
    const oldCount = hunk.filter((op) => op.kind !== "+").length
    const newCount = hunk.filter((op) => op.kind !== "-").length
    const oldStart = oldCount === 0 ? oldAt[from]! - 1 : oldAt[from]!
    const newStart = newCount === 0 ? newAt[from]! - 1 : newAt[from]!
    out.push(`@@ -${oldStart},${oldCount} +${newStart},${newCount} @@`)
    for (const op of hunk) out.push(`${op.kind}${op.line}`)
    index = to
    from = to
  }
  return { text: out.join("\n") + "\n", added, removed }
}
