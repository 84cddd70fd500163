/**
 * What every tool's outcome is made of: the result message for the model, the typed call with
 * its id, the typed case as soon as the tool name is known, an error outcome in the tool's own
 * typed shape (so the card never spins), a reply of the wrong kind, and the text helpers
 * (failure descriptions, output clipped for the model).
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
  ToolCallSchema,
  UpdateTodosResultSchema,
  UpdateTodosToolCallSchema,
  WriteShellStdinResultSchema,
  WriteShellStdinToolCallSchema
} from "../gen/agent/v1/agent_pb.js"
import type { ToolCall as CursorToolCall } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall, ToolResultMessage } from "../Llm.js"
import { grepArgs, mcpArgs, readToolArgs } from "./Arguments.js"
import { kindOf } from "./Kinds.js"
import type { McpToolDescriptor } from "./Kinds.js"
import { ToolRun, ToolStep } from "./Model.js"
import type { ToolOutcome } from "./Model.js"
import { failedCase, startedOf as queryStartedOf } from "./Queries.js"
import { taskCard } from "./Task.js"
import { awaitStartedOf } from "./Await.js"

/** Output kept for the model from one command; the middle is elided beyond this. */
export const MODEL_OUTPUT_LIMIT = 30_000

export const resultMessage = (call: ToolCall, text: string, isError: boolean): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: call.id,
  toolName: call.name,
  content: [{ type: "text", text }],
  isError
})

export const withId = (call: ToolCall, tool: CursorToolCall["tool"]): CursorToolCall =>
  create(ToolCallSchema, { tool, toolCallId: call.id })

/** The typed case with empty args: what `partial_tool_call` carries as soon as the tool name is known. */
export const partialCursorToolCall = (name: string, mcpTools: ReadonlyArray<McpToolDescriptor>): CursorToolCall => {
  switch (kindOf(name, mcpTools)) {
    case "shell":
      return create(ToolCallSchema, { tool: { case: "shellToolCall", value: {} } })
    case "read":
      return create(ToolCallSchema, { tool: { case: "readToolCall", value: {} } })
    case "write":
    case "edit":
      return create(ToolCallSchema, { tool: { case: "editToolCall", value: {} } })
    case "delete":
      return create(ToolCallSchema, { tool: { case: "deleteToolCall", value: {} } })
    case "grep":
      return create(ToolCallSchema, { tool: { case: "grepToolCall", value: {} } })
    case "glob":
      return create(ToolCallSchema, { tool: { case: "globToolCall", value: {} } })
    case "ls":
      return create(ToolCallSchema, { tool: { case: "lsToolCall", value: {} } })
    case "readLints":
      return create(ToolCallSchema, { tool: { case: "readLintsToolCall", value: {} } })
    case "writeShellStdin":
      return create(ToolCallSchema, { tool: { case: "writeShellStdinToolCall", value: {} } })
    case "task":
      return create(ToolCallSchema, { tool: { case: "taskToolCall", value: {} } })
    case "awaitShell":
      return create(ToolCallSchema, { tool: { case: "awaitToolCall", value: {} } })
    case "mcp":
      return create(ToolCallSchema, { tool: { case: "mcpToolCall", value: {} } })
    case "todoWrite":
      return create(ToolCallSchema, { tool: { case: "updateTodosToolCall", value: {} } })
    case "createPlan":
      return create(ToolCallSchema, { tool: { case: "createPlanToolCall", value: {} } })
    case "askQuestion":
      return create(ToolCallSchema, { tool: { case: "askQuestionToolCall", value: {} } })
    case "switchMode":
      return create(ToolCallSchema, { tool: { case: "switchModeToolCall", value: {} } })
    case "webSearch":
      return create(ToolCallSchema, { tool: { case: "webSearchToolCall", value: {} } })
    case "webFetch":
      return create(ToolCallSchema, { tool: { case: "webFetchToolCall", value: {} } })
    case undefined:
      return create(ToolCallSchema, {})
  }
}

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

export const done = (outcome: ToolOutcome): ToolStep => ToolStep.Done({ outcome })

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

/** The name of a failed result case, plus its error text when it has one. */
export const describeFailure = (result: { readonly case: string | undefined; readonly value?: unknown }): string => {
  const value = result.value as Record<string, unknown> | undefined
  const detail = value?.["error"] ?? value?.["reason"] ?? value?.["errorMessage"]
  const name = result.case === undefined ? "no result" : result.case.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`)
  return typeof detail === "string" && detail !== "" ? `${name}: ${detail}` : name
}

export const clip = (text: string): string => {
  if (text.length <= MODEL_OUTPUT_LIMIT) return text
  const half = MODEL_OUTPUT_LIMIT / 2
  return `${text.slice(0, half)}\n... (${text.length - MODEL_OUTPUT_LIMIT} characters elided) ...\n${text.slice(-half)}`
}
