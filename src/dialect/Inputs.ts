/**
 * The loop's inputs from the client's messages: the start of a run request's turn, a follow-up
 * message, a cancel, a tool call's result; and the run request a prewarmed request stands for.
 */
import { create } from "@bufbuild/protobuf"
import { AgentRunRequestSchema } from "../gen/agent/v1/agent_pb.js"
import type { PrewarmRequest, UserMessage as CursorUserMessage } from "../gen/agent/v1/agent_pb.js"
import type { ToolResultMessage } from "../Llm.js"
import { Input } from "../Loop.js"
import type { ClientMessage, RunAction, RunRequest } from "./ClientMessage.js"
import { decodeRunRequest } from "./RunRequest.js"
import { withRequestId } from "./Settings.js"

/** The input that starts a run request's turn, its settings naming the Cursor request it belongs to. */
export const startInputOf = (action: Extract<RunAction, { _tag: "StartTurn" }>, requestId: string): Input => {
  const { start } = action
  return Input.Start({ ...start, settings: withRequestId(start.settings, requestId) })
}

/** A follow-up message on a live request (queued by the loop while a turn runs, or the next turn between turns). */
export const followUpInputOf = (message: Extract<ClientMessage, { _tag: "UserMessage" }>): Input => Input.UserMessage({ message: message.message })

export const cancelInputOf = (message: Extract<ClientMessage, { _tag: "Cancel" }>): Input => Input.Cancel({ reason: message.reason })

/** A tool call's final result, from its machine (`Tools.ts`), for the model. */
export const toolResultInputOf = (message: ToolResultMessage): Input => Input.ToolResult({ message })

/**
 * The run request a prewarmed request stands for once its user message arrives: the prewarm's
 * model, conversation, checkpoint, MCP tools and system prompt, with that message as its
 * `user_message_action`.
 */
export const runRequestOfPrewarm = (prewarm: PrewarmRequest, userMessage: CursorUserMessage): RunRequest =>
  decodeRunRequest(create(AgentRunRequestSchema, {
    ...(prewarm.modelDetails !== undefined ? { modelDetails: prewarm.modelDetails } : {}),
    ...(prewarm.requestedModel !== undefined ? { requestedModel: prewarm.requestedModel } : {}),
    ...(prewarm.conversationId !== undefined ? { conversationId: prewarm.conversationId } : {}),
    ...(prewarm.conversationState !== undefined ? { conversationState: prewarm.conversationState } : {}),
    ...(prewarm.mcpTools !== undefined ? { mcpTools: prewarm.mcpTools } : {}),
    ...(prewarm.customSystemPrompt !== undefined ? { customSystemPrompt: prewarm.customSystemPrompt } : {}),
    action: { action: { case: "userMessageAction", value: { userMessage } } }
  }))
