/**
 * WriteShellStdin as a machine: one write_shell_stdin exec with the shell id and characters,
 * the model's sentence and the typed WriteShellStdinToolCall for each answer, a reply of the
 * wrong kind, a client throw, and bad arguments.
 */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { ShellStreamSchema, WriteShellStdinResultSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { WriteShellStdinToolCall } from "../../src/gen/agent/v1/agent_pb.js"
import { isIdempotent, kindOf, onExecReply, onExecThrow, partialCursorToolCall, startTool } from "../../src/Tools.js"
import type { ToolOutcome } from "../../src/Tools.js"
import { call, context, expectDone, expectExec, reply, textOf } from "./Steps.js"

type ResultInit = NonNullable<MessageInitShape<typeof WriteShellStdinResultSchema>["result"]>

const answer = (result: ResultInit) => reply({ case: "writeShellStdinResult", value: create(WriteShellStdinResultSchema, { result }) })

const typedOf = (outcome: ToolOutcome): WriteShellStdinToolCall => {
  const tool = outcome.cursor.tool
  if (tool.case !== "writeShellStdinToolCall") return assert.fail(`expected a WriteShellStdin call, got ${tool.case}`)
  assert.strictEqual(outcome.cursor.toolCallId, "call_1")
  return tool.value
}

/** Types `chars` into shell `shellId` and answers with `result`. */
const typeInto = (shellId: number, chars: string, result: ResultInit): ToolOutcome =>
  expectDone(onExecReply(expectExec(startTool(call("WriteShellStdin", { shell_id: shellId, chars }), context).step).run, answer(result)))

describe("WriteShellStdin", () => {
  it("sends one write_shell_stdin exec with the shell id and the characters; the typed call carries them", () => {
    const start = startTool(call("WriteShellStdin", { shell_id: 7, chars: "y\n" }), context)
    const started = start.started.tool
    if (started.case !== "writeShellStdinToolCall") return assert.fail("expected a WriteShellStdin call")
    assert.deepStrictEqual([started.value.args?.shellId, started.value.args?.chars], [7, "y\n"])
    assert.isUndefined(started.value.result)
    const { exec, run } = expectExec(start.step)
    if (exec.case !== "writeShellStdinArgs") return assert.fail(`expected write_shell_stdin_args, got ${exec.case}`)
    assert.deepStrictEqual([exec.value.shellId, exec.value.chars], [7, "y\n"])
    const outcome = expectDone(onExecReply(run, answer({ case: "success", value: { shellId: 7, terminalFileLengthBeforeInputWritten: 120 } })))
    assert.strictEqual(textOf(outcome), "Sent 2 characters to shell 7.")
    assert.isFalse(outcome.message.isError)
    assert.strictEqual(outcome.message.toolName, "WriteShellStdin")
    const typed = typedOf(outcome)
    assert.deepStrictEqual([typed.args?.shellId, typed.args?.chars], [7, "y\n"])
    const result = typed.result?.result
    assert.deepStrictEqual(result?.case === "success" ? [result.value.shellId, result.value.terminalFileLengthBeforeInputWritten] : [], [7, 120])
  })

  it("counts characters as written (one for a control character or an emoji), singular for one", () => {
    assert.strictEqual(textOf(typeInto(3, "\u0003", { case: "success", value: { shellId: 3 } })), "Sent 1 character to shell 3.")
    assert.strictEqual(textOf(typeInto(3, "ok 👍\n", { case: "success", value: { shellId: 3 } })), "Sent 5 characters to shell 3.")
  })

  it("the client's error is an error for the model and a typed error for the card", () => {
    const outcome = typeInto(9, "q", { case: "error", value: { error: "Shell 9 is not running" } })
    assert.strictEqual(textOf(outcome), "Could not type into shell 9: Shell 9 is not running")
    assert.isTrue(outcome.message.isError)
    const result = typedOf(outcome).result?.result
    assert.deepStrictEqual(result?.case === "error" ? result.value.error : undefined, "Shell 9 is not running")
    assert.strictEqual(textOf(typeInto(9, "q", { case: "error", value: { error: "" } })), "Could not type into shell 9: the client gave no reason")
  })

  it("an answer with no result is an error, typed as one", () => {
    const outcome = typeInto(4, "x", { case: undefined })
    assert.strictEqual(textOf(outcome), "Could not type into shell 4: the client sent no result")
    assert.isTrue(outcome.message.isError)
    const result = typedOf(outcome).result?.result
    assert.deepStrictEqual(result?.case === "error" ? result.value.error : undefined, "Could not type into shell 4: the client sent no result")
  })

  it("a reply of another kind, or a client throw, ends the call with a typed error", () => {
    const { run } = expectExec(startTool(call("WriteShellStdin", { shell_id: 2, chars: "n\n" }), context).step)
    const wrong = expectDone(onExecReply(run, reply({ case: "shellStream", value: create(ShellStreamSchema, { event: { case: "start", value: {} } }) })))
    assert.strictEqual(textOf(wrong), "The client answered WriteShellStdin with an unexpected shellStream.")
    assert.isTrue(wrong.message.isError)
    const typed = typedOf(wrong)
    assert.deepStrictEqual([typed.args?.shellId, typed.args?.chars, typed.result?.result.case], [2, "n\n", "error"])
    const thrown = expectDone(onExecThrow(run, "no such exec"))
    assert.strictEqual(textOf(thrown), "The client failed to run WriteShellStdin: no such exec")
    assert.strictEqual(typedOf(thrown).result?.result.case, "error")
  })

  it("bad arguments end the call at once: a negative, fractional or string shell id, empty or missing chars", () => {
    for (const args of [{ shell_id: -1, chars: "a" }, { shell_id: 1.5, chars: "a" }, { shell_id: "7", chars: "a" }, { shell_id: 2 ** 32, chars: "a" }, { shell_id: 1, chars: "" }, { shell_id: 1 }]) {
      const outcome = expectDone(startTool(call("WriteShellStdin", args), context).step)
      assert.isTrue(outcome.message.isError, JSON.stringify(args))
      assert.include(textOf(outcome), "Invalid arguments for WriteShellStdin")
      assert.strictEqual(typedOf(outcome).result?.result.case, "error")
    }
    assert.include(textOf(expectDone(startTool(call("WriteShellStdin", { shell_id: 1, chars: "" }), context).step)), "chars must not be empty")
  })

  it("typing twice is not harmless: a restart must not send it again; its card is known from the name alone", () => {
    assert.strictEqual(kindOf("WriteShellStdin", []), "writeShellStdin")
    assert.isFalse(isIdempotent("writeShellStdin"))
    assert.strictEqual(partialCursorToolCall("WriteShellStdin", []).tool.case, "writeShellStdinToolCall")
  })
})
