/**
 * AwaitShell: the model waits for a shell that moved to the background and reads its output.
 * Cursor writes such a shell's output to `<terminals folder>/<shell id>.txt`: a header between
 * `---` lines (pid, cwd, command, started_at), the output, and, once the command ended, a footer
 * block with its `exit_code` and `ended_at`. The server reads that file through the client (a
 * read exec, so it works wherever the editor runs), and while the command runs and the wait
 * allows, sleeps and reads again; it stops early when the output matches the model's pattern.
 * Pure: the sleeping is work the transport does (`ServerWork.Sleep`).
 */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { Either, Schema } from "effect"
import { AwaitResultSchema, AwaitToolCallSchema } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import { parseArgs, readArgs } from "./Arguments.js"
import { ServerWork, ToolRun, ToolStep } from "./Model.js"
import type { CursorToolCall, ExecReply, ToolRunOf, ToolStart, WorkResult } from "./Model.js"
import { describeFailure, done, resultMessage, withId } from "./Results.js"

/** How often a running shell's file is read again while the model waits. */
export const POLL_MS = 2_000
const DEFAULT_BLOCK_MS = 30_000
const MAX_BLOCK_MS = 600_000
/** The end of the output the model reads (the start of a long log matters least). */
export const OUTPUT_LIMIT = 16_000

export const AwaitInput = Schema.Struct({
  shell_id: Schema.Int.pipe(Schema.nonNegative()),
  block_until_ms: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  pattern: Schema.optional(Schema.String)
})

export type AwaitRun = ToolRunOf<"AwaitShell">

/** A terminal file as Cursor writes it. */
export interface TerminalSnapshot {
  readonly command: string
  readonly startedAt: string | undefined
  readonly endedAt: string | undefined
  readonly exitCode: number | undefined
  readonly output: string
}

const valueOf = (raw: string): string => {
  const trimmed = raw.trim()
  if (trimmed.length >= 2 && trimmed.startsWith("\"") && trimmed.endsWith("\"")) {
    try {
      return JSON.parse(trimmed) as string
    } catch {
      return trimmed.slice(1, -1)
    }
  }
  return trimmed
}

const metadataOf = (lines: ReadonlyArray<string>): Map<string, string> =>
  new Map(lines.flatMap((line) => {
    const colon = line.indexOf(":")
    return colon < 0 ? [] : [[line.slice(0, colon).trim(), valueOf(line.slice(colon + 1))] as const]
  }))

/** Parses a terminal file: the header, the output, and the footer once the command ended. */
export const parseTerminalFile = (text: string): TerminalSnapshot => {
  const lines = text.replace(/\r\n/g, "\n").split("\n")
  const separators = lines.flatMap((line, index) => (line.trim() === "---" ? [index] : []))
  const header = separators.length >= 2 ? metadataOf(lines.slice(separators[0]! + 1, separators[1]!)) : new Map<string, string>()
  const start = separators.length >= 2 ? separators[1]! + 1 : 0
  let end = lines.length
  let footer = new Map<string, string>()
  for (let index = separators.length - 2; index >= 1; index--) {
    const block = metadataOf(lines.slice(separators[index]! + 1, separators[index + 1]!))
    if (block.has("exit_code") || block.has("ended_at")) {
      footer = block
      end = separators[index]!
      break
    }
  }
  const exit = footer.get("exit_code")
  const exitCode = exit === undefined || !/^-?\d+$/.test(exit) ? undefined : Number(exit)
  return {
    command: header.get("command") ?? "",
    startedAt: header.get("started_at"),
    endedAt: footer.get("ended_at"),
    exitCode,
    output: start < end ? lines.slice(start, end).join("\n").replace(/\n$/, "") : ""
  }
}

const pathOf = (terminalsFolder: string, shellId: number) => `${terminalsFolder.replace(/[\\/]+$/, "")}/${shellId}.txt`

const argsOf = (run: AwaitRun) => ({
  taskId: String(run.shellId),
  blockUntilMs: run.blockUntilMs,
  ...(run.pattern !== undefined ? { regex: run.pattern } : {})
})

const card = (run: AwaitRun, result?: MessageInitShape<typeof AwaitResultSchema>): CursorToolCall =>
  withId(run.call, { case: "awaitToolCall", value: create(AwaitToolCallSchema, result === undefined ? { args: argsOf(run) } : { args: argsOf(run), result }) })

export const awaitStartedOf = (run: AwaitRun): CursorToolCall => card(run)

const failure = (run: AwaitRun, text: string): ToolStep =>
  done({ message: resultMessage(run.call, text, true), cursor: card(run, { result: { case: "error", value: { error: text } } }) })

/** Starts waiting: reads the shell's terminal file (or says why it cannot). */
export const startAwait = (call: ToolCall, terminalsFolder: string): ToolStart | string => {
  const parsed = parseArgs(AwaitInput, call.arguments)
  if (Either.isLeft(parsed)) return parsed.left
  const { block_until_ms, pattern, shell_id } = parsed.right
  if (pattern !== undefined) {
    try {
      new RegExp(pattern)
    } catch (error) {
      return `pattern is not a valid regular expression (${(error as Error).message})`
    }
  }
  const run = ToolRun.AwaitShell({
    call,
    shellId: shell_id,
    path: terminalsFolder === "" ? "" : pathOf(terminalsFolder, shell_id),
    blockUntilMs: Math.min(block_until_ms ?? DEFAULT_BLOCK_MS, MAX_BLOCK_MS),
    pattern: pattern === undefined || pattern === "" ? undefined : pattern,
    waitedMs: 0
  })
  if (run.path === "") {
    return { started: card(run), step: failure(run, "The editor did not say where it keeps terminal output, so a background shell cannot be read here.") }
  }
  return { started: card(run), step: ToolStep.Exec({ run, exec: { case: "readArgs", value: readArgs(call, run.path, undefined, undefined) } }) }
}

/** The terminal file read back: finished, matched, out of time, or another wait. */
export const onAwaitReply = (run: AwaitRun, reply: ExecReply): ToolStep => {
  if (reply.case !== "readResult" && reply.case !== "redactedReadResult") {
    return failure(run, `The client answered AwaitShell with an unexpected ${reply.case}.`)
  }
  const result = reply.value.result
  if (result.case === "fileNotFound") {
    return failure(run, `There is no output for shell ${run.shellId} (${run.path}): it was not moved to the background, or its output is gone.`)
  }
  if (result.case !== "success") return failure(run, `The output of shell ${run.shellId} could not be read: ${describeFailure(result)}`)
  const output = result.value.output
  const snapshot = parseTerminalFile(output.case === "content" ? output.value : new TextDecoder().decode(output.value ?? new Uint8Array()))
  const match = run.pattern === undefined ? undefined : new RegExp(run.pattern, "m").exec(snapshot.output)?.[0]
  if (snapshot.exitCode === undefined && match === undefined && run.waitedMs < run.blockUntilMs) {
    const ms = Math.min(POLL_MS, run.blockUntilMs - run.waitedMs)
    return ToolStep.Work({ run: ToolRun.AwaitShell({ ...run, waitedMs: run.waitedMs + ms }), work: ServerWork.Sleep({ ms }) })
  }
  return done(outcomeOf(run, snapshot, match))
}

/** After a wait: read the file again. */
export const onAwaitSlept = (run: AwaitRun, result: WorkResult): ToolStep =>
  result._tag === "Failed"
    ? failure(run, result.error)
    : ToolStep.Exec({ run, exec: { case: "readArgs", value: readArgs(run.call, run.path, undefined, undefined) } })

const runtimeMs = (snapshot: TerminalSnapshot): number => {
  const start = snapshot.startedAt === undefined ? NaN : Date.parse(snapshot.startedAt)
  const end = snapshot.endedAt === undefined ? NaN : Date.parse(snapshot.endedAt)
  return Number.isFinite(start) && Number.isFinite(end) && end >= start ? end - start : 0
}

const outcomeOf = (run: AwaitRun, snapshot: TerminalSnapshot, match: string | undefined) => {
  const finished = snapshot.exitCode !== undefined
  const tail = snapshot.output.length > OUTPUT_LIMIT
    ? `(the first ${snapshot.output.length - OUTPUT_LIMIT} characters are left out; the whole output is in ${run.path})\n${snapshot.output.slice(-OUTPUT_LIMIT)}`
    : snapshot.output
  const what = snapshot.command !== "" ? `Shell ${run.shellId} (${snapshot.command})` : `Shell ${run.shellId}`
  const status = finished
    ? `${what} finished with exit code ${snapshot.exitCode}.`
    : match !== undefined
    ? `${what} is still running; its output matches ${JSON.stringify(run.pattern)} ("${match}").`
    : `${what} is still running after ${Math.round(run.waitedMs / 1000)} s of waiting. Wait again with AwaitShell, or type into it with WriteShellStdin.`
  const text = `${status}\n${tail === "" ? "(no output yet)" : `Output:\n${tail}`}`
  const common = {
    taskId: String(run.shellId),
    runtimeMs: BigInt(runtimeMs(snapshot)),
    outputFilePath: run.path,
    outputLength: BigInt(snapshot.output.length),
    regexRequested: run.pattern !== undefined,
    ...(match !== undefined ? { regexMatch: match } : {})
  }
  const result: MessageInitShape<typeof AwaitResultSchema> = finished
    ? { result: { case: "complete", value: { ...common, exitCode: snapshot.exitCode! } } }
    : { result: { case: "stillRunning", value: common } }
  return { message: resultMessage(run.call, text, false), cursor: card(run, result) }
}
