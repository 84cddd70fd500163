/**
 * The Shell tool's replies: the stream of one command (start, stdout and stderr chunks shown
 * as they come, then its exit, backgrounding or refusal), or a whole `ShellResult`.
 */
import { create } from "@bufbuild/protobuf"
import { ShellArgsSchema, ShellResultSchema, ShellToolCallSchema, ToolCallDeltaSchema } from "../gen/agent/v1/agent_pb.js"
import type { ShellStream } from "../gen/agent/v1/agent_pb.js"
import { ToolRun, ToolStep } from "./Model.js"
import type { ExecReply, ShellOutput, ToolRunOf } from "./Model.js"
import { unexpected } from "./Cards.js"
import { clip, describeFailure, done, resultMessage, withId } from "./Results.js"

const appendShell = (output: ShellOutput, stream: "stdout" | "stderr", data: string): ShellOutput => ({
  stdout: stream === "stdout" ? output.stdout + data : output.stdout,
  stderr: stream === "stderr" ? output.stderr + data : output.stderr,
  interleaved: output.interleaved + data
})

/** What the model can do with a command in the background. */
const backgroundHelp = (shellId: number) =>
  `AwaitShell with shell_id ${shellId} waits for it and reads its output; WriteShellStdin with shell_id ${shellId} types into it.`

export const onShell = (shell: ToolRunOf<"Shell">, reply: ExecReply): ToolStep => {
  const { call, command, description, output, workingDirectory } = shell
  const args = create(ShellArgsSchema, { command, workingDirectory, toolCallId: call.id, description })
  const finish = (result: import("../gen/agent/v1/agent_pb.js").ShellResult, text: string, isError: boolean): ToolStep =>
    done({
      message: resultMessage(call, text, isError),
      cursor: withId(call, { case: "shellToolCall", value: create(ShellToolCallSchema, { args, result, description }) })
    })
  if (reply.case === "shellResult") {
    // A client may answer a stream request with a whole ShellResult (the non-streaming shape).
    const result = reply.value.result
    if (result.case === "success" || result.case === "failure") {
      const v = result.value
      return finish(reply.value, shellText(v.exitCode, v.stdout, v.stderr, v.interleavedOutput ?? ""), result.case === "failure")
    }
    return finish(reply.value, `The command did not run: ${describeFailure(result)}`, true)
  }
  if (reply.case === "backgroundShellSpawnResult") {
    // Started in the background at once (`run_in_background`): its shell id, for AwaitShell and WriteShellStdin.
    const spawned = reply.value.result
    if (spawned.case === "success") {
      const { pid, shellId } = spawned.value
      const result = create(ShellResultSchema, {
        isBackground: true,
        ...(pid !== undefined ? { pid } : {}),
        result: { case: "success", value: { command, workingDirectory: spawned.value.workingDirectory || workingDirectory, shellId, ...(pid !== undefined ? { pid } : {}) } }
      })
      return finish(result, `Started in the background as shell ${shellId}${pid !== undefined ? ` (pid ${pid})` : ""}. ${backgroundHelp(shellId)}`, false)
    }
    const why = spawned.case === "error" ? spawned.value.error : describeFailure(spawned)
    return finish(create(ShellResultSchema, { result: { case: "spawnError", value: { error: why } } }), `The command did not start: ${why}`, true)
  }
  if (reply.case !== "shellStream") return unexpected(shell, reply)
  const event: ShellStream["event"] = reply.value.event
  switch (event.case) {
    case "start":
    case undefined:
      return ToolStep.Continue({ run: shell, delta: undefined })
    case "stdout":
    case "stderr": {
      const data = event.value.data
      const delta = create(ToolCallDeltaSchema, {
        delta: {
          case: "shellToolCallDelta",
          value: { delta: event.case === "stdout" ? { case: "stdout", value: { content: data } } : { case: "stderr", value: { content: data } } }
        }
      })
      return ToolStep.Continue({ run: ToolRun.Shell({ ...shell, output: appendShell(output, event.case, data) }), delta })
    }
    case "exit": {
      const { aborted, code, cwd } = event.value
      const common = {
        command,
        workingDirectory: cwd || workingDirectory,
        exitCode: code,
        stdout: output.stdout,
        stderr: output.stderr,
        interleavedOutput: output.interleaved,
        ...(event.value.localExecutionTimeMs !== undefined ? { localExecutionTimeMs: event.value.localExecutionTimeMs } : {})
      }
      const ok = code === 0 && !aborted
      const result = create(ShellResultSchema, {
        result: ok
          ? { case: "success", value: common }
          : { case: "failure", value: { ...common, aborted, ...(event.value.abortReason !== undefined ? { abortReason: event.value.abortReason } : {}) } }
      })
      const text = shellText(code, output.stdout, output.stderr, output.interleaved) + (aborted ? "\n(the command was aborted)" : "")
      return finish(result, text, !ok)
    }
    case "backgrounded": {
      const b = event.value
      const result = create(ShellResultSchema, {
        isBackground: true,
        result: {
          case: "success",
          value: {
            command,
            workingDirectory: b.workingDirectory || workingDirectory,
            stdout: output.stdout,
            stderr: output.stderr,
            interleavedOutput: output.interleaved,
            shellId: b.shellId,
            ...(b.pid !== undefined ? { pid: b.pid } : {}),
            ...(b.reason !== undefined ? { backgroundReason: b.reason } : {})
          }
        }
      })
      const text = `The command is still running in the background (shell id ${b.shellId}). ${backgroundHelp(b.shellId)} Output so far:\n${
        clip(output.interleaved) || "(none)"
      }`
      return finish(result, text, false)
    }
    case "rejected":
      return finish(
        create(ShellResultSchema, { result: { case: "rejected", value: event.value } }),
        `The user rejected the command${event.value.reason ? `: ${event.value.reason}` : "."}`,
        true
      )
    case "permissionDenied":
      return finish(
        create(ShellResultSchema, { result: { case: "permissionDenied", value: event.value } }),
        `Permission denied: ${event.value.error || command}`,
        true
      )
    case "sandboxUnsupported":
      return finish(
        create(ShellResultSchema, { result: { case: "spawnError", value: { command, workingDirectory, error: "the sandbox is not supported on this machine" } } }),
        "The command could not run: the sandbox is not supported on this machine.",
        true
      )
  }
}

const shellText = (code: number, stdout: string, stderr: string, interleaved: string): string => {
  const body = interleaved !== "" ? interleaved : stdout + stderr
  return `Exit code: ${code}\n${body === "" ? "(no output)" : clip(body)}`
}
