/**
 * WriteShellStdin: types into a command the Shell tool left running in the background (its
 * shell id was in the Shell result). One `write_shell_stdin_args` exec; the client writes the
 * characters to that shell's input and says whether it could.
 */
import { create } from "@bufbuild/protobuf"
import { WriteShellStdinArgsSchema, WriteShellStdinResultSchema, WriteShellStdinToolCallSchema } from "../gen/agent/v1/agent_pb.js"
import type { WriteShellStdinResult } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import { ToolRun, ToolStep } from "./Model.js"
import type { ExecReply, ToolRunOf, ToolStart } from "./Model.js"
import { unexpected } from "./Cards.js"
import { done, resultMessage, withId } from "./Results.js"

export const writeShellStdinArgs = (shellId: number, chars: string) => create(WriteShellStdinArgsSchema, { shellId, chars })

/** Starts WriteShellStdin: the typed call and the exec that types the characters. */
export const startStdin = (call: ToolCall, shellId: number, chars: string): ToolStart => {
  const args = writeShellStdinArgs(shellId, chars)
  return {
    started: withId(call, { case: "writeShellStdinToolCall", value: create(WriteShellStdinToolCallSchema, { args }) }),
    step: ToolStep.Exec({ run: ToolRun.WriteShellStdin({ call, shellId, chars }), exec: { case: "writeShellStdinArgs", value: args } })
  }
}

/** The client's answer: what was typed, or why it could not be. */
export const onStdin = (run: ToolRunOf<"WriteShellStdin">, reply: ExecReply): ToolStep => {
  if (reply.case !== "writeShellStdinResult") return unexpected(run, reply)
  const { call, chars, shellId } = run
  const finish = (result: WriteShellStdinResult, text: string, isError: boolean): ToolStep =>
    done({
      message: resultMessage(call, text, isError),
      cursor: withId(call, { case: "writeShellStdinToolCall", value: create(WriteShellStdinToolCallSchema, { args: writeShellStdinArgs(shellId, chars), result }) })
    })
  const result = reply.value.result
  switch (result.case) {
    case "success": {
      // Characters as the model wrote them (code points), not UTF-16 units or bytes.
      const count = [...chars].length
      return finish(reply.value, `Sent ${count} character${count === 1 ? "" : "s"} to shell ${shellId}.`, false)
    }
    case "error":
      return finish(reply.value, `Could not type into shell ${shellId}: ${result.value.error || "the client gave no reason"}`, true)
    case undefined: {
      const text = `Could not type into shell ${shellId}: the client sent no result`
      return finish(create(WriteShellStdinResultSchema, { result: { case: "error", value: { error: text } } }), text, true)
    }
  }
}
