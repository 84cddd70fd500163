/**
 * ReadLints: the editor's problems (linter and type-checker diagnostics) for a few files. One
 * `diagnostics_args` exec per path, one at a time and in order; the answers are gathered, then
 * told to the model as one line per problem (errors first, at most `LINTS_LIMIT` in all) and
 * shown to the UI as Cursor's `ReadLintsToolCall`.
 */
import { create } from "@bufbuild/protobuf"
import {
  DiagnosticItemSchema,
  DiagnosticsArgsSchema,
  DiagnosticSeverity,
  FileDiagnosticsSchema,
  ReadLintsToolArgsSchema,
  ReadLintsToolCallSchema,
  ReadLintsToolResultSchema
} from "../gen/agent/v1/agent_pb.js"
import type { Diagnostic, DiagnosticItem, DiagnosticsResult, FileDiagnostics } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import { ToolRun, ToolStep } from "./Model.js"
import type { ExecReply, ToolOutcome, ToolRunOf, ToolStart } from "./Model.js"
import { clip, done, resultMessage, withId } from "./Results.js"
import { unexpected } from "./Cards.js"

/** Problems told to the model from one call, errors first; the rest are counted in a note. */
export const LINTS_LIMIT = 200
/** One problem's message is cut beyond this (a type error can quote a whole type). */
const MESSAGE_LIMIT = 500

const diagnosticsArgs = (call: ToolCall, path: string) => create(DiagnosticsArgsSchema, { path, toolCallId: call.id })

export const readLintsArgs = (paths: ReadonlyArray<string>) => create(ReadLintsToolArgsSchema, { paths: [...paths] })

/** Starts ReadLints on the paths (a repeated path is checked once): the typed call and the first file's exec. */
export const startLints = (call: ToolCall, requested: ReadonlyArray<string>): ToolStart => {
  const paths = [...new Set(requested)]
  const run = ToolRun.ReadLints({ call, paths, results: [] })
  return {
    started: withId(call, { case: "readLintsToolCall", value: create(ReadLintsToolCallSchema, { args: readLintsArgs(paths) }) }),
    step: ToolStep.Exec({ run, exec: { case: "diagnosticsArgs", value: diagnosticsArgs(call, paths[0]!) } })
  }
}

/** Takes one file's diagnostics: asks for the next file's, or, after the last, gives the outcome. */
export const onLints = (run: ToolRunOf<"ReadLints">, reply: ExecReply): ToolStep => {
  if (reply.case !== "diagnosticsResult") return unexpected(run, reply)
  const results = [...run.results, reply.value]
  const next = run.paths[results.length]
  return next === undefined
    ? done(lintsOutcome(run.call, run.paths, results))
    : ToolStep.Exec({ run: ToolRun.ReadLints({ ...run, results }), exec: { case: "diagnosticsArgs", value: diagnosticsArgs(run.call, next) } })
}

/** Errors, then warnings, then the rest (information, hint, unspecified). */
const rankOf = (severity: DiagnosticSeverity): number =>
  severity === DiagnosticSeverity.ERROR ? 0 : severity === DiagnosticSeverity.WARNING ? 1 : 2
const RANKS = [0, 1, 2] as const

const LABEL: Record<DiagnosticSeverity, string> = {
  [DiagnosticSeverity.UNSPECIFIED]: "problem",
  [DiagnosticSeverity.ERROR]: "error",
  [DiagnosticSeverity.WARNING]: "warning",
  [DiagnosticSeverity.INFORMATION]: "info",
  [DiagnosticSeverity.HINT]: "hint"
}

const itemOf = (diagnostic: Diagnostic): DiagnosticItem =>
  create(DiagnosticItemSchema, {
    severity: diagnostic.severity,
    message: diagnostic.message,
    source: diagnostic.source,
    code: diagnostic.code,
    isStale: diagnostic.isStale,
    ...(diagnostic.range !== undefined ? { range: { start: diagnostic.range.start, end: diagnostic.range.end } } : {})
  })

/**
 * One problem for the model: `path:line:col severity message (source code)`. Cursor's positions
 * are the language server's, 0-based line and column (its local executor copies LSP's `line` and
 * `character` as they are), so both are shown plus one, as editors and compilers print them.
 */
const lineOf = (path: string, item: DiagnosticItem): string => {
  const start = item.range?.start
  const where = start === undefined ? path : `${path}:${start.line + 1}:${start.column + 1}`
  const flat = item.message.replace(/\s*\n\s*/g, " ").trim()
  const message = flat.length > MESSAGE_LIMIT ? `${flat.slice(0, MESSAGE_LIMIT)}…` : flat
  const origin = [item.source, item.code].filter((part) => part !== "").join(" ")
  return `${where} ${LABEL[item.severity] ?? "problem"} ${message}${origin === "" ? "" : ` (${origin})`}${item.isStale ? " [stale]" : ""}`
}

/** Why a file could not be checked, in a sentence for the model. */
const failureOf = (path: string, result: DiagnosticsResult["result"]): string => {
  switch (result.case) {
    case "fileNotFound":
      return `File not found: ${path}`
    case "permissionDenied":
      return `Permission denied: ${path}`
    case "rejected":
      return `The user rejected reading the problems of ${path}${result.value.reason !== "" ? `: ${result.value.reason}` : "."}`
    case "error":
      return `Could not read the problems of ${path}: ${result.value.error || "the client gave no reason"}`
    case "success":
    case undefined:
      return `Could not read the problems of ${path}: the client sent no result`
  }
}

interface Checked {
  readonly path: string
  readonly result: DiagnosticsResult["result"]
  /** The file's problems, errors first (empty when it was not checked). */
  readonly items: ReadonlyArray<DiagnosticItem>
  /** How many the file has: the client may send fewer than it counted. */
  readonly count: number
}

const checkedOf = (path: string, answer: DiagnosticsResult): Checked => {
  const result = answer.result
  if (result.case !== "success") return { path, result, items: [], count: 0 }
  const items = result.value.diagnostics
    .map((diagnostic, index) => ({ item: itemOf(diagnostic), index }))
    .sort((a, b) => rankOf(a.item.severity) - rankOf(b.item.severity) || a.index - b.index)
    .map(({ item }) => item)
  return { path, result, items, count: Math.max(items.length, result.value.totalDiagnostics) }
}

/**
 * How many of each file's problems are kept: errors of every file before any warning, and so
 * on, up to `LINTS_LIMIT` in all. Each file's items are sorted by rank, so what is kept is a
 * prefix of them.
 */
const keptCounts = (files: ReadonlyArray<Checked>): Array<number> => {
  const kept = files.map(() => 0)
  let budget = LINTS_LIMIT
  for (const rank of RANKS) {
    files.forEach((file, index) => {
      const take = Math.min(budget, file.items.filter((item) => rankOf(item.severity) === rank).length)
      kept[index]! += take
      budget -= take
    })
  }
  return kept
}

/** The outcome of every path's answer: the model's lines (and a note when some were cut) and the typed result. */
export const lintsOutcome = (call: ToolCall, paths: ReadonlyArray<string>, answers: ReadonlyArray<DiagnosticsResult>): ToolOutcome => {
  const files = paths.map((path, index) => checkedOf(path, answers[index]!))
  const kept = keptCounts(files)
  const lines: Array<string> = []
  const cut: Array<string> = []
  files.forEach((file, index) => {
    const keep = kept[index]!
    if (file.result.case !== "success") lines.push(failureOf(file.path, file.result))
    else if (file.count === 0) lines.push(`No problems in ${file.path}.`)
    else lines.push(...file.items.slice(0, keep).map((item) => lineOf(file.path, item)))
    if (file.count > keep) cut.push(`${file.path} (${file.count - keep})`)
  })
  const total = files.reduce((sum, file) => sum + file.count, 0)
  const shown = kept.reduce((sum, n) => sum + n, 0)
  if (cut.length > 0) lines.push(`(Showing ${shown} of ${total} problems, errors first. Not shown: ${cut.join(", ")}.)`)
  const text = clip(lines.join("\n"))
  const checked = files.flatMap((file, index): Array<FileDiagnostics> =>
    file.result.case === "success"
      ? [create(FileDiagnosticsSchema, { path: file.result.value.path || file.path, diagnostics: file.items.slice(0, kept[index]), diagnosticsCount: file.count })]
      : []
  )
  const result = checked.length === 0
    ? create(ReadLintsToolResultSchema, { result: { case: "error", value: { errorMessage: text } } })
    : create(ReadLintsToolResultSchema, { result: { case: "success", value: { fileDiagnostics: checked, totalFiles: checked.length, totalDiagnostics: total } } })
  const cursor = withId(call, { case: "readLintsToolCall", value: create(ReadLintsToolCallSchema, { args: readLintsArgs(paths), result }) })
  return { message: resultMessage(call, text, checked.length === 0), cursor }
}
