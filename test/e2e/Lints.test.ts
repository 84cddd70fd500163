/**
 * ReadLints and WriteShellStdin end to end (real server, SQLite file, fake provider, reference
 * client on a real temp workspace): the model edits a file, is reminded of ReadLints, reads the
 * editor's problems for it (one diagnostics exec per path) and the next request holds the lint
 * lines; a command moves to the background, the model types into it by its shell id, and the
 * next request holds what the client said.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { DiagnosticSeverity } from "../../src/gen/agent/v1/agent_pb.js"
import type { ExecServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import { LINTS_HINT } from "../../src/Tools.js"
import * as AppHarness from "../support/AppHarness.js"
import { LocalWorkspace, scriptedWorkspace } from "../support/CursorClient.js"
import type { ExecAnswer, Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, completedTool, tempDirectory, toolCallOf } from "../support/Transcripts.js"

const { text, toolCall } = FakeProvider.openAiChat

interface ChatBody {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown; readonly tool_call_id?: string }>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string } }>
}
const bodyOf = (app: AppHarness.AppHarness, index: number): ChatBody => JSON.parse(app.provider.requests[index]!.body) as ChatBody
const toolNames = (app: AppHarness.AppHarness, index: number) => (bodyOf(app, index).tools ?? []).map((tool) => tool.function.name)
/** The tool result the model reads in request `index` for the call `toolCallId`. */
const toolResultText = (app: AppHarness.AppHarness, index: number, toolCallId: string): string => {
  const message = bodyOf(app, index).messages.find((m) => m.role === "tool" && m.tool_call_id === toolCallId)
  assert.isDefined(message, `request ${index} has no result for ${toolCallId}`)
  return typeof message!.content === "string" ? message!.content : JSON.stringify(message!.content)
}
const execsOf = (transcript: Transcript): ReadonlyArray<ExecServerMessage["message"]> =>
  transcript.frames.flatMap((frame) => (frame.message.message.case === "execServerMessage" ? [frame.message.message.value.message] : []))

const setup = (workspace: ConstructorParameters<typeof LocalWorkspace>[1] = {}) =>
  Effect.gen(function*() {
    const dir = yield* tempDirectory("cursor-byok-e2e-lints-")
    const local = new LocalWorkspace(dir, workspace)
    const app = yield* AppHarness.make()
    return { app, dir, local }
  })

describe("ReadLints and WriteShellStdin end to end", () => {
  it.scopedLive("an edit, then ReadLints: one diagnostics exec per path in order, the lint lines (errors first, 1-based) in the next request, a typed card", () =>
    Effect.gen(function*() {
      const { app, dir, local } = yield* setup({
        diagnostics: {
          "b.ts": [
            { severity: DiagnosticSeverity.WARNING, range: { start: { line: 0, column: 6 }, end: { line: 0, column: 14 } }, message: "'greeting' is never reassigned.", source: "eslint", code: "prefer-const" },
            { severity: DiagnosticSeverity.ERROR, range: { start: { line: 1, column: 12 }, end: { line: 1, column: 19 } }, message: "Cannot find name 'greting'.", source: "ts", code: "2552" }
          ]
        }
      })
      writeFileSync(join(dir, "b.ts"), "let greeting = \"hello\"\nconsole.log(greeting)\n")
      app.provider.enqueue(
        FakeProvider.sse(toolCall("call-edit", "StrReplace", JSON.stringify({ path: "b.ts", old_string: "log(greeting)", new_string: "log(greting)" }))),
        FakeProvider.sse(toolCall("call-lints", "ReadLints", JSON.stringify({ paths: ["b.ts", "missing.ts"] }))),
        FakeProvider.sse(text("There is a typo on line 2."))
      )
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000, workspace: local })
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-lints", text: "rename the call and check it" }))
      assertCleanOk(turn)
      assert.strictEqual(readFileSync(join(dir, "b.ts"), "utf8"), "let greeting = \"hello\"\nconsole.log(greting)\n")
      assert.include(toolNames(app, 0), "ReadLints")

      // The edit's result reminds the model of ReadLints.
      assert.strictEqual(toolResultText(app, 1, "call-edit"), `Edited b.ts (+1 -1). ${LINTS_HINT}`)

      // Read, write, then one diagnostics exec per path, in the order given, each naming the call.
      const execs = execsOf(turn)
      assert.deepStrictEqual(execs.map((exec) => exec.case), ["readArgs", "writeArgs", "diagnosticsArgs", "diagnosticsArgs"])
      assert.deepStrictEqual(
        execs.flatMap((exec) => (exec.case === "diagnosticsArgs" ? [[exec.value.path, exec.value.toolCallId]] : [])),
        [["b.ts", "call-lints"], ["missing.ts", "call-lints"]]
      )

      // The model reads the problems: the error first, positions 1-based; the missing file in place.
      assert.strictEqual(
        toolResultText(app, 2, "call-lints"),
        "b.ts:2:13 error Cannot find name 'greting'. (ts 2552)\nb.ts:1:7 warning 'greeting' is never reassigned. (eslint prefer-const)\nFile not found: missing.ts"
      )
      assert.strictEqual(turn.text, "There is a typo on line 2.")

      // The card: the paths asked, the one file checked with its two problems in the IDE's own positions.
      const tool = toolCallOf(completedTool(turn, "call-lints"))
      if (tool.case !== "readLintsToolCall") return assert.fail(`expected a ReadLints card, got ${tool.case}`)
      assert.deepStrictEqual(tool.value.args?.paths, ["b.ts", "missing.ts"])
      const result = tool.value.result?.result
      if (result?.case !== "success") return assert.fail("expected a typed success")
      assert.deepStrictEqual([result.value.totalFiles, result.value.totalDiagnostics], [1, 2])
      assert.deepStrictEqual(
        result.value.fileDiagnostics[0]?.diagnostics.map((item) => [item.severity, item.range?.start?.line, item.range?.start?.column, item.message]),
        [[DiagnosticSeverity.ERROR, 1, 12, "Cannot find name 'greting'."], [DiagnosticSeverity.WARNING, 0, 6, "'greeting' is never reassigned."]]
      )
    }))

  it.scopedLive("a command moves to the background, the model types into it by its shell id: the exec carries id and characters, the client's answer is the next request's tool result", () =>
    Effect.gen(function*() {
      const { app, local } = yield* setup({ runningShells: [7] })
      // The command asks a question and is still waiting when block_until_ms runs out: the client backgrounds it as shell 7.
      const workspace = scriptedWorkspace(async (exec, signal): Promise<ReadonlyArray<ExecAnswer>> => {
        if (exec.message.case === "shellStreamArgs") {
          return [
            { case: "shellStream", value: { event: { case: "start", value: {} } } },
            { case: "shellStream", value: { event: { case: "stdout", value: { data: "Proceed? (y/n) " } } } },
            { case: "shellStream", value: { event: { case: "backgrounded", value: { shellId: 7, command: exec.message.value.command } } } }
          ]
        }
        const answers: Array<ExecAnswer> = []
        for await (const answer of local.answer(exec, signal)) answers.push(answer)
        return answers
      })
      app.provider.enqueue(
        FakeProvider.sse(toolCall("call-shell", "Shell", JSON.stringify({ command: "./setup.sh", block_until_ms: 1000 }))),
        FakeProvider.sse(toolCall("call-type", "WriteShellStdin", JSON.stringify({ shell_id: 7, chars: "y\n" }))),
        FakeProvider.sse(toolCall("call-stray", "WriteShellStdin", JSON.stringify({ shell_id: 8, chars: "y\n" }))),
        FakeProvider.sse(text("Answered the prompt."))
      )
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000, workspace })
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-stdin", text: "run the setup and say yes" }))
      assertCleanOk(turn)
      assert.include(toolNames(app, 0), "WriteShellStdin")

      // The backgrounded result names the shell and the tool that types into it.
      assert.strictEqual(
        toolResultText(app, 1, "call-shell"),
        "The command is still running in the background (shell id 7). AwaitShell with shell_id 7 waits for it and reads its output; WriteShellStdin with shell_id 7 types into it. Output so far:\nProceed? (y/n) "
      )

      const stdin = execsOf(turn).flatMap((exec) => (exec.case === "writeShellStdinArgs" ? [[exec.value.shellId, exec.value.chars]] : []))
      assert.deepStrictEqual(stdin, [[7, "y\n"], [8, "y\n"]])
      assert.deepStrictEqual(local.stdinWrites, [{ shellId: 7, chars: "y\n" }])
      assert.strictEqual(toolResultText(app, 2, "call-type"), "Sent 2 characters to shell 7.")
      assert.strictEqual(toolResultText(app, 3, "call-stray"), "Could not type into shell 8: no shell 8 is running")

      const typed = toolCallOf(completedTool(turn, "call-type"))
      if (typed.case !== "writeShellStdinToolCall") return assert.fail(`expected a WriteShellStdin card, got ${typed.case}`)
      assert.deepStrictEqual([typed.value.args?.shellId, typed.value.args?.chars, typed.value.result?.result.case], [7, "y\n", "success"])
      const stray = toolCallOf(completedTool(turn, "call-stray"))
      assert.strictEqual(stray.case === "writeShellStdinToolCall" ? stray.value.result?.result.case : undefined, "error")
    }))
})
