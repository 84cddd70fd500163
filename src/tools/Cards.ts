/**
 * The typed card of each kind of run: as `startTool` announced it, and an error outcome in the
 * tool's own typed shape (so the card never spins), for an error or a reply of the wrong kind.
 */
import { create } from "@bufbuild/protobuf"
import {
  DeleteResultSchema,
  DeleteToolCallSchema,
  EditResultSchema,
  EditToolCallSchema,
  GlobToolCallSchema,
  GlobToolResultSchema,
  GrepResultSchema,
  GrepToolCallSchema,
  LsResultSchema,
  LsToolCallSchema,
  McpToolCallSchema,
  McpToolResultSchema,
  ReadLintsToolCallSchema,
  ReadLintsToolResultSchema,
  ReadToolCallSchema,
  ReadToolResultSchema,
  ShellResultSchema,
  ShellToolCallSchema,
  TaskToolCallSchema,
  AwaitToolCallSchema,
  UpdateTodosResultSchema,
  UpdateTodosToolCallSchema,
  WriteShellStdinResultSchema,
  WriteShellStdinToolCallSchema
} from "../gen/agent/v1/agent_pb.js"
import type { ToolCall as CursorToolCall } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import { grepArgs, mcpArgs, readToolArgs } from "./Arguments.js"
import { ToolRun } from "./Model.js"
import type { ToolStep } from "./Model.js"
import type { ToolOutcome } from "./Model.js"
import { failedCase, startedOf as queryStartedOf } from "./Queries.js"
import { taskCard } from "./Task.js"
import { awaitStartedOf } from "./Await.js"

import { done, partialCursorToolCall, resultMessage, withId } from "./Results.js"

/** An error outcome in the typed shape the UI expects for this tool (so the card never spins). */
export const failed = (call: ToolCall, text: string, started?: CursorToolCall): ToolOutcome => {
  const base = started ?? withId(call, partialCursorToolCall(call.name, []).tool)
  const tool = base.tool
  let typed: CursorToolCall["tool"] = tool
  switch (tool.case) {
    case "shellToolCall":
      typed = { case: "shellToolCall", value: create(ShellToolCallSchema, { ...tool.value, result: create(ShellResultSchema, { result: { case: "spawnError", value: { error: text } } }) }) }
      break
    case "readToolCall":
      typed = { case: "readToolCall", value: create(ReadToolCallSchema, { ...tool.value, result: create(ReadToolResultSchema, { result: { case: "error", value: { errorMessage: text } } }) }) }
      break
    case "editToolCall":
      typed = { case: "editToolCall", value: create(EditToolCallSchema, { ...tool.value, result: create(EditResultSchema, { result: { case: "error", value: { error: text, modelVisibleError: text } } }) }) }
      break
    case "deleteToolCall":
      typed = { case: "deleteToolCall", value: create(DeleteToolCallSchema, { ...tool.value, result: create(DeleteResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "grepToolCall":
      typed = { case: "grepToolCall", value: create(GrepToolCallSchema, { ...tool.value, result: create(GrepResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "globToolCall":
      typed = { case: "globToolCall", value: create(GlobToolCallSchema, { ...tool.value, result: create(GlobToolResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "lsToolCall":
      typed = { case: "lsToolCall", value: create(LsToolCallSchema, { ...tool.value, result: create(LsResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "readLintsToolCall":
      typed = {
        case: "readLintsToolCall",
        value: create(ReadLintsToolCallSchema, { ...tool.value, result: create(ReadLintsToolResultSchema, { result: { case: "error", value: { errorMessage: text } } }) })
      }
      break
    case "writeShellStdinToolCall":
      typed = {
        case: "writeShellStdinToolCall",
        value: create(WriteShellStdinToolCallSchema, { ...tool.value, result: create(WriteShellStdinResultSchema, { result: { case: "error", value: { error: text } } }) })
      }
      break
    case "mcpToolCall":
      typed = { case: "mcpToolCall", value: create(McpToolCallSchema, { ...tool.value, result: create(McpToolResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "awaitToolCall":
      typed = { case: "awaitToolCall", value: create(AwaitToolCallSchema, { args: tool.value.args, result: { result: { case: "error", value: { error: text } } } }) }
      break
    case "taskToolCall":
      typed = { case: "taskToolCall", value: create(TaskToolCallSchema, { args: tool.value.args, result: { result: { case: "error", value: { error: text } } } }) }
      break
    case "updateTodosToolCall":
      typed = { case: "updateTodosToolCall", value: create(UpdateTodosToolCallSchema, { ...tool.value, result: create(UpdateTodosResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    default:
      typed = failedCase(tool, text)
      break
  }
  return { message: resultMessage(call, text, true), cursor: withId(call, typed) }
}

/** The typed call with args only, as `startTool` announced it. */
export const startedOf = (run: ToolRun): CursorToolCall =>
  ToolRun.$match(run, {
    Shell: ({ call, command, description, workingDirectory }) =>
      withId(call, { case: "shellToolCall", value: create(ShellToolCallSchema, { args: { command, workingDirectory, toolCallId: call.id }, description }) }),
    Read: (read) => withId(read.call, { case: "readToolCall", value: create(ReadToolCallSchema, { args: readToolArgs(read) }) }),
    Edit: ({ call, path }) => withId(call, { case: "editToolCall", value: create(EditToolCallSchema, { args: { path } }) }),
    Delete: ({ call, path }) => withId(call, { case: "deleteToolCall", value: create(DeleteToolCallSchema, { args: { path, toolCallId: call.id } }) }),
    Grep: ({ call, input }) => withId(call, { case: "grepToolCall", value: create(GrepToolCallSchema, { args: grepArgs(call, input) }) }),
    Glob: ({ call, directory, pattern }) =>
      withId(call, { case: "globToolCall", value: create(GlobToolCallSchema, { args: { globPattern: pattern, targetDirectory: directory } }) }),
    Ls: ({ call, ignore, path }) => withId(call, { case: "lsToolCall", value: create(LsToolCallSchema, { args: { path, ignore: [...ignore], toolCallId: call.id } }) }),
    Mcp: ({ args, call, tool }) => withId(call, { case: "mcpToolCall", value: create(McpToolCallSchema, { args: mcpArgs(call, tool, args) }) }),
    ReadLints: ({ call, paths }) => withId(call, { case: "readLintsToolCall", value: create(ReadLintsToolCallSchema, { args: { paths: [...paths] } }) }),
    WriteShellStdin: ({ call, chars, shellId }) =>
      withId(call, { case: "writeShellStdinToolCall", value: create(WriteShellStdinToolCallSchema, { args: { shellId, chars } }) }),
    Task: ({ args, call }) => taskCard(call, args),
    AwaitShell: awaitStartedOf,
    CreatePlan: queryStartedOf,
    AskQuestion: queryStartedOf,
    SwitchMode: queryStartedOf,
    WebSearch: queryStartedOf,
    WebFetch: queryStartedOf
  })

export const unexpected = (run: ToolRun, reply: { readonly case: string }): ToolStep =>
  done(failed(run.call, `The client answered ${run.call.name} with an unexpected ${reply.case}.`, startedOf(run)))

