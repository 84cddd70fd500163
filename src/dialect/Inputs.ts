/**
 * The loop's inputs from the client's messages: the start of a run request's turn, a follow-up
 * message, a cancel, a tool call's result; and the run request a prewarmed request stands for.
 */
import { create } from "@bufbuild/protobuf"
import { AgentRunRequestSchema } from "../gen/agent/v1/agent_pb.js"
import type { PrewarmRequest, UserMessage as CursorUserMessage } from "../gen/agent/v1/agent_pb.js"
import type { ToolResultMessage } from "../Llm.js"
import { Input } from "../Loop.js"
import type { ClientHistory, TurnSettings, TurnWebTools } from "../Loop.js"
import { bytesToHex } from "./Bytes.js"
import type { ClientMessage, RunRequest } from "./ClientMessage.js"
import { decodeRunRequest } from "./RunRequest.js"
import { withRequestId } from "./Settings.js"

/**
 * The input that starts a run request's turn (a user turn or a summarize), its settings naming
 * the Cursor request it belongs to, with what the client's checkpoint says it holds of the
 * history (so that an edited earlier message or a restored checkpoint rewinds it). Undefined
 * for a run request that starts no turn.
 */
export const turnInputOf = (
  run: RunRequest,
  requestId: string,
  server: TurnWebTools = NO_WEB_TOOLS,
  parent?: ParentLink,
  childModel?: (requested: string) => string
): Input | undefined => {
  const action = run.action
  const clientHistory = clientHistoryOf(run)
  const history = clientHistory === undefined ? {} : { clientHistory }
  const settingsOf = (settings: TurnSettings) => {
    const child = withParent(withServerTools(withRequestId(settings, requestId), server), parent)
    // A subagent's run may name one of Cursor's hosted models: it runs on one configured here.
    return child.subagent === undefined || childModel === undefined ? child : { ...child, model: childModel(child.model) }
  }
  switch (action._tag) {
    case "StartTurn":
      return Input.Start({ ...action.start, settings: settingsOf(action.start.settings), ...history })
    case "Summarize":
      // The summary call sends the conversation's own tools (the cache key): the same as its turns'.
      return Input.Summarize({ instructions: action.instructions, settings: settingsOf(action.settings), ...history })
    case "Resume":
    case "Unsupported":
      return undefined
  }
}

const NO_WEB_TOOLS: TurnWebTools = { search: false, fetch: false }

/** The parent a child run names (Cursor's `x-parent-request-id` and `x-parent-agent-tool-call-id`). */
export interface ParentLink {
  readonly requestId: string
  readonly toolCallId: string
}

/** A child run's settings name its parent; a run that names a parent without saying it is a subagent is one of the general kind. */
const withParent = (settings: TurnSettings, parent: ParentLink | undefined): TurnSettings => {
  if (parent === undefined) return settings
  const subagent = settings.subagent ?? { type: "generalPurpose", instructions: "", tools: [], readonly: false }
  return { ...settings, subagent: { ...subagent, parentRequestId: parent.requestId, parentToolCallId: parent.toolCallId } }
}

/** The web tools a turn offers: those the client allows (its settings) that this server can do (`server`). */
const withServerTools = (settings: TurnSettings, server: TurnWebTools): TurnSettings => {
  const client = settings.webTools ?? NO_WEB_TOOLS
  return { ...settings, webTools: { search: client.search && server.search, fetch: client.fetch && server.fetch } }
}

/**
 * The history the client's checkpoint names: its prompt-message blob ids (see
 * `Checkpoint.promptIdOf`), none included (the state before a first turn). No checkpoint at all
 * (the field absent, which protobuf-es decodes as `undefined`, unlike an empty message) names no
 * history: the stored one continues.
 */
const clientHistoryOf = (run: RunRequest): ClientHistory | undefined =>
  run.conversationState === undefined ? undefined : { promptIds: run.conversationState.rootPromptMessagesJson.map(bytesToHex) }

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
