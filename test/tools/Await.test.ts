/**
 * AwaitShell's machine: the terminal file Cursor writes for a background shell parsed (header,
 * output, footer), and the wait: read, sleep, read again, until the command ends, its output
 * matches the pattern, or the wait runs out; the failures in its own typed card.
 */
import { create } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { ReadResultSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../../src/Llm.js"
import * as Tools from "../../src/Tools.js"
import type { ExecReply, ToolStep } from "../../src/Tools.js"

const call = (args: Record<string, unknown>): ToolCall => ({ type: "toolCall", id: "call-await", name: "AwaitShell", arguments: JSON.stringify(args) })
const context = { mcpTools: [], todos: [], mode: "agent" as const, terminalsFolder: "/home/u/.cursor/projects/p/terminals/" }

const file = (output: string, footer?: { exit: number }) =>
  [
    "---",
    "pid: 4242",
    "cwd: \"/w\"",
    "command: \"npm test\"",
    "started_at: 2026-12-02T01:00:00.000Z",
    "---",
    output,
    ...(footer === undefined ? [] : ["---", `exit_code: ${footer.exit}`, "ended_at: 2026-12-02T01:00:42.500Z", "---"])
  ].join("\n")

const read = (content: string): ExecReply => ({
  case: "readResult",
  value: create(ReadResultSchema, { result: { case: "success", value: { path: "x", output: { case: "content", value: content } } } })
})
const notFound: ExecReply = { case: "readResult", value: create(ReadResultSchema, { result: { case: "fileNotFound", value: {} } }) }

const textOf = (step: ToolStep) => {
  if (step._tag !== "Done") throw new Error(`expected Done, got ${step._tag}`)
  return step.outcome.message.content.map((c) => (c.type === "text" ? c.text : "")).join("")
}

describe("AwaitShell", () => {
  it("parses Cursor's terminal file: the header, the output, the footer once the command ended", () => {
    const running = Tools.parseTerminalFile(file("PASS a\nPASS b"))
    assert.deepStrictEqual([running.command, running.output, running.exitCode, running.endedAt], ["npm test", "PASS a\nPASS b", undefined, undefined])
    const ended = Tools.parseTerminalFile(file("PASS a\nFAIL b", { exit: 1 }))
    assert.deepStrictEqual([ended.output, ended.exitCode, ended.endedAt], ["PASS a\nFAIL b", 1, "2026-12-02T01:00:42.500Z"])
    // Output that itself holds a `---` line stays output.
    assert.strictEqual(Tools.parseTerminalFile(file("a\n---\nb", { exit: 0 })).output, "a\n---\nb")
  })

  it("reads the shell's file in the terminals folder; a finished command ends the wait with its exit code, runtime and output", () => {
    const start = Tools.startTool(call({ shell_id: 7 }), context)
    assert.strictEqual(start.started.tool.case, "awaitToolCall")
    if (start.step._tag !== "Exec" || start.step.exec.case !== "readArgs") throw new Error("no read")
    assert.strictEqual(start.step.exec.value.path, "/home/u/.cursor/projects/p/terminals/7.txt")
    const finished = Tools.onExecReply(start.step.run, read(file("ok", { exit: 0 })))
    assert.strictEqual(textOf(finished), "Shell 7 (npm test) finished with exit code 0.\nOutput:\nok")
    if (finished._tag !== "Done" || finished.outcome.cursor.tool.case !== "awaitToolCall") throw new Error("no card")
    const result = finished.outcome.cursor.tool.value.result?.result
    if (result?.case !== "complete") throw new Error("not complete")
    assert.deepStrictEqual([result.value.exitCode, result.value.runtimeMs, result.value.outputLength], [0, 42_500n, 2n])
  })

  it("a running command: sleep, read again, until the wait runs out (in 2 s steps), then says it still runs", () => {
    const start = Tools.startTool(call({ shell_id: 3, block_until_ms: 5000 }), context)
    if (start.step._tag !== "Exec") throw new Error("no read")
    let step: ToolStep = Tools.onExecReply(start.step.run, read(file("building...")))
    const sleeps: Array<number> = []
    while (step._tag === "Work") {
      if (step.work._tag !== "Sleep") throw new Error("not a sleep")
      sleeps.push(step.work.ms)
      const again = Tools.onAwaitSlept(step.run as never, Tools.WorkResult.Slept())
      if (again._tag !== "Exec") throw new Error("no read after the sleep")
      step = Tools.onExecReply(again.run, read(file("building...")))
    }
    assert.deepStrictEqual(sleeps, [2000, 2000, 1000])
    assert.strictEqual(textOf(step), "Shell 3 (npm test) is still running after 5 s of waiting. Wait again with AwaitShell, or type into it with WriteShellStdin.\nOutput:\nbuilding...")
  })

  it("stops early when the output matches the pattern", () => {
    const start = Tools.startTool(call({ shell_id: 3, pattern: "listening on \\d+" }), context)
    if (start.step._tag !== "Exec") throw new Error("no read")
    const step = Tools.onExecReply(start.step.run, read(file("starting\nlistening on 3000")))
    assert.include(textOf(step), "is still running; its output matches \"listening on \\\\d+\" (\"listening on 3000\")")
  })

  it("failures: no file, no terminals folder, a bad pattern, a reply of the wrong kind", () => {
    const start = Tools.startTool(call({ shell_id: 9 }), context)
    if (start.step._tag !== "Exec") throw new Error("no read")
    assert.include(textOf(Tools.onExecReply(start.step.run, notFound)), "There is no output for shell 9")
    assert.include(textOf(Tools.startTool(call({ shell_id: 9 }), { ...context, terminalsFolder: "" }).step), "did not say where it keeps terminal output")
    assert.include(textOf(Tools.startTool(call({ shell_id: 9, pattern: "(" }), context).step), "pattern is not a valid regular expression")
    const wrong = Tools.onExecReply(start.step.run, { case: "lsResult", value: {} } as never)
    assert.include(textOf(wrong), "unexpected lsResult")
  })
})

describe("Shell with run_in_background", () => {
  const shell = (args: Record<string, unknown>): ToolCall => ({ type: "toolCall", id: "call-bg", name: "Shell", arguments: JSON.stringify(args) })

  it("starts the command in the background at once: the spawn exec, then its shell id for AwaitShell and WriteShellStdin", () => {
    const start = Tools.startTool(shell({ command: "npm run dev", run_in_background: true, description: "dev server" }), context)
    if (start.step._tag !== "Exec" || start.step.exec.case !== "backgroundShellSpawnArgs") throw new Error("no spawn exec")
    assert.deepStrictEqual(
      [start.step.exec.value.command, start.step.exec.value.toolCallId, start.step.exec.value.enableWriteShellStdinTool, start.step.exec.value.description],
      ["npm run dev", "call-bg", true, "dev server"]
    )
    const spawned = Tools.onExecReply(start.step.run, { case: "backgroundShellSpawnResult", value: { result: { case: "success", value: { shellId: 4, pid: 99, command: "npm run dev", workingDirectory: "/w" } } } } as never)
    assert.strictEqual(textOf(spawned), "Started in the background as shell 4 (pid 99). AwaitShell with shell_id 4 waits for it and reads its output; WriteShellStdin with shell_id 4 types into it.")
    if (spawned._tag !== "Done" || spawned.outcome.cursor.tool.case !== "shellToolCall") throw new Error("no shell card")
    assert.isTrue(spawned.outcome.cursor.tool.value.result?.isBackground)
  })

  it("a spawn the client refuses or fails says so, as an error", () => {
    const start = Tools.startTool(shell({ command: "rm -rf /", run_in_background: true }), context)
    if (start.step._tag !== "Exec") throw new Error("no exec")
    const failed = Tools.onExecReply(start.step.run, { case: "backgroundShellSpawnResult", value: { result: { case: "error", value: { command: "rm -rf /", workingDirectory: "", error: "no shell" } } } } as never)
    assert.strictEqual(textOf(failed), "The command did not start: no shell")
    if (failed._tag === "Done") assert.isTrue(failed.outcome.message.isError)
    // Without the flag, the usual streamed run.
    const streamed = Tools.startTool(shell({ command: "ls" }), context)
    if (streamed.step._tag !== "Exec") throw new Error("no exec")
    assert.strictEqual(streamed.step.exec.case, "shellStreamArgs")
  })
})
