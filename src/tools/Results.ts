/**
 * What every tool's outcome is made of: the result message for the model, the typed call with
 * its id, the typed case as soon as the tool name is known, and the text helpers (failure
 * descriptions, output clipped for the model). The cards of each kind of run are `Cards.ts`.
 */
import { create } from "@bufbuild/protobuf"
import { ToolCallSchema } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall as CursorToolCall } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall, ToolResultMessage } from "../Llm.js"
import { kindOf } from "./Kinds.js"
import type { McpToolDescriptor } from "./Kinds.js"
import { ToolStep } from "./Model.js"
import type { ToolOutcome } from "./Model.js"

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

export const done = (outcome: ToolOutcome): ToolStep => ToolStep.Done({ outcome })

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
