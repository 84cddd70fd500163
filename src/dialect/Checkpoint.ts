/**
 * The checkpoint projection: a turn's committed messages as the blobs and the
 * `ConversationStateStructure` checkpoint Cursor keeps (blob id = SHA-256), and the todo list a
 * checkpoint holds.
 */
import { clone, create, fromBinary, toBinary } from "@bufbuild/protobuf"
import type { JsonValue } from "@bufbuild/protobuf"
import {
  AgentConversationTurnStructureSchema,
  ConversationPlanSchema,
  ConversationStateStructureSchema,
  ConversationStepSchema,
  ConversationSummaryArchiveSchema,
  ConversationSummarySchema,
  ConversationTokenDetailsSchema,
  ConversationTurnStructureSchema,
  PlanRegistryEntrySchema,
  SubagentRunStateSchema,
  SubagentRunStatus,
  TodoItemSchema,
  ToolCallSchema,
  UserMessageSchema
} from "../gen/agent/v1/agent_pb.js"
import type { ConversationStateStructure, TodoItem } from "../gen/agent/v1/agent_pb.js"
import type { Message, ToolCall } from "../Llm.js"
import { partialCursorToolCall } from "../Tools.js"
import type { CreatedPlan, CursorMode, CursorToolCall, McpToolDescriptor, SubagentRun } from "../Tools.js"

const SUBAGENT_STATUS: Record<SubagentRun["status"], SubagentRunStatus> = {
  success: SubagentRunStatus.SUCCESS,
  backgrounded: SubagentRunStatus.BACKGROUNDED,
  error: SubagentRunStatus.ERROR,
  aborted: SubagentRunStatus.ABORTED
}
import { bytesToHex, sameBytes, utf8 } from "./Bytes.js"
import { blobOf } from "./Kv.js"
import type { Blob } from "./Kv.js"
import { agentModeOf } from "./Modes.js"

/** A message as AI-SDK-style JSON, the shape Cursor keeps in `root_prompt_messages_json` blobs. */
/**
 * A transcript message's prompt-message blob, computed once per message object: the history
 * never changes, and every turn's checkpoint names all of it (a message with an image is
 * megabytes to serialize and hash).
 */
const promptBlobs = new WeakMap<Message, Blob>()
const promptBlobOf = (message: Message): Blob => {
  const known = promptBlobs.get(message)
  if (known !== undefined) return known
  const blob = blobOf(utf8.encode(promptMessageJson(message)))
  promptBlobs.set(message, blob)
  return blob
}

/** The id (hex) the client knows a history message by: its prompt-message blob's, as checkpoints name it. */
export const promptIdOf = (message: Message): string => bytesToHex(promptBlobOf(message).id)

const promptMessageJson = (message: Message): string => {
  switch (message.role) {
    case "user":
      return JSON.stringify({
        role: "user",
        content: message.content.map((block) =>
          block.type === "text" ? { type: "text", text: block.text } : { type: "image", image: block.data, mediaType: block.mimeType })
      })
    case "assistant":
      return JSON.stringify({
        role: "assistant",
        content: message.content.map((block) => {
          switch (block.type) {
            case "text":
              return { type: "text", text: block.text }
            case "thinking":
              return { type: "reasoning", text: block.redacted === true ? "" : block.thinking }
            case "toolCall":
              return { type: "tool-call", toolCallId: block.id, toolName: block.name, args: parseJsonOr(block.arguments) }
          }
        })
      })
    case "toolResult":
      return JSON.stringify({
        role: "tool",
        content: [{
          type: "tool-result",
          toolCallId: message.toolCallId,
          toolName: message.toolName,
          result: message.content.map((block) => (block.type === "text" ? block.text : "[image]")).join("\n"),
          isError: message.isError
        }]
      })
  }
}

const parseJsonOr = (text: string): unknown => {
  try {
    return JSON.parse(text) as JsonValue
  } catch {
    return text
  }
}

/** The JSON string Cursor expects in `pending_tool_calls` for a tool that is still running. */
const pendingToolCallJson = (call: ToolCall): string =>
  JSON.stringify({
    id: "1",
    role: "assistant",
    content: [{ type: "tool-call", toolCallId: call.id, toolName: call.name, args: parseJsonOr(call.arguments) }]
  })

/** A compaction made in the turn, for the checkpoint's summary fields. */
export interface CheckpointSummary {
  readonly summary: string
  /** The history messages the summary replaced. */
  readonly summarized: ReadonlyArray<Message>
  /** How many of the latest messages follow the summary verbatim. */
  readonly windowTail: number
  /** The new segment's first message, holding the summary. */
  readonly summaryMessage: Message
}

export interface CheckpointInput {
  /** The checkpoint the client sent with the run request (its `turns` are the earlier turns). */
  readonly previous: ConversationStateStructure | undefined
  readonly requestId: string
  /**
   * The Cursor user message that started this turn (kept as its own blob); none for a turn
   * that only summarized (`summarize_action`), which adds no turn.
   */
  readonly userMessage: { readonly text: string; readonly messageId: string; readonly mode: CursorMode } | undefined
  /** The compactions made in this turn, oldest first. */
  readonly summaries?: ReadonlyArray<CheckpointSummary>
  /** The messages committed in this turn after the user message: assistant messages and tool results. */
  readonly turnMessages: ReadonlyArray<Message>
  /** The whole model history, for `root_prompt_messages_json`. */
  readonly transcript: ReadonlyArray<Message>
  /** Typed completed tool calls by tool call id, as the UI saw them; others get an empty typed call. */
  readonly cursorToolCalls: Readonly<Record<string, CursorToolCall>>
  /** Thinking durations by assistant content position `"<message index>:<block index>"`, when known. */
  readonly thinkingDurationsMs?: Readonly<Record<string, number>>
  readonly pendingToolCalls: ReadonlyArray<ToolCall>
  readonly todos: ReadonlyArray<TodoItem>
  /** The plans CreatePlan made in this turn, oldest first: the latest is the conversation's `plan`. */
  readonly plans?: ReadonlyArray<CreatedPlan>
  /** The subagents the turn's Tasks ran, in the order they ended. */
  readonly subagentRuns?: ReadonlyArray<SubagentRun>
  /** The mode the conversation is in at the end of the turn (an approved SwitchMode changed it); else the user message's. */
  readonly mode?: CursorMode
  readonly usedTokens: number
  readonly maxTokens: number
  readonly workspaceUris: ReadonlyArray<string>
  readonly mcpTools: ReadonlyArray<McpToolDescriptor>
}

export interface Checkpoint {
  /**
   * The blobs to send before the checkpoint, children before parents: every blob it names
   * except those the client's previous checkpoint already names (the client holds those).
   */
  readonly blobs: ReadonlyArray<Blob>
  readonly checkpoint: ConversationStateStructure
}

/**
 * Projects a turn into Cursor's blob structures: a UserMessage blob, one ConversationStep blob
 * per assistant block (text, thinking, typed tool call), a ConversationTurnStructure naming them,
 * the transcript's prompt-message blobs, and the checkpoint naming all of it. Deterministic:
 * equal input gives equal bytes and blob ids, so re-publishing is harmless.
 *
 * Only new blobs are sent: a prompt message or turn the previous checkpoint already names is
 * a blob the client stores, so a turn sends its own few blobs rather than the whole transcript
 * again (which grew the set_blob burst, and its acknowledgements, with every turn).
 */
export const projectCheckpoint = (input: CheckpointInput): Checkpoint => {
  // Ids the client holds or that are already queued to send (hex).
  const named = new Set([...(input.previous?.rootPromptMessagesJson ?? []), ...(input.previous?.turns ?? [])].map(bytesToHex))
  const blobs: Array<Blob> = []
  const add = (data: Uint8Array | Blob): Uint8Array => {
    const blob = data instanceof Uint8Array ? blobOf(data) : data
    const id = bytesToHex(blob.id)
    if (!named.has(id)) {
      named.add(id)
      blobs.push(blob)
    }
    return blob.id
  }
  const steps: Array<Uint8Array> = []
  input.turnMessages.forEach((message, messageIndex) => {
    if (message.role !== "assistant") return
    message.content.forEach((block, blockIndex) => {
      let step: Parameters<typeof create<typeof ConversationStepSchema>>[1]
      switch (block.type) {
        case "text":
          if (block.text === "") return
          step = { message: { case: "assistantMessage", value: { text: block.text } } }
          break
        case "thinking":
          // Encrypted reasoning has no text to show; never invent one.
          if (block.redacted === true || block.thinking === "") return
          step = {
            message: {
              case: "thinkingMessage",
              value: { text: block.thinking, durationMs: input.thinkingDurationsMs?.[`${messageIndex}:${blockIndex}`] ?? 0 }
            }
          }
          break
        case "toolCall":
          step = {
            message: {
              case: "toolCall",
              value: input.cursorToolCalls[block.id] ??
                create(ToolCallSchema, { ...partialCursorToolCall(block.name, input.mcpTools), toolCallId: block.id })
            }
          }
          break
      }
      steps.push(add(toBinary(ConversationStepSchema, create(ConversationStepSchema, step))))
    })
  })
  const userMessage = input.userMessage
  let turnIds: Array<Uint8Array> = []
  if (userMessage !== undefined) {
    const userMessageId = add(toBinary(UserMessageSchema, create(UserMessageSchema, {
      text: userMessage.text,
      messageId: userMessage.messageId,
      mode: agentModeOf(userMessage.mode)
    })))
    const turn = create(ConversationTurnStructureSchema, {
      turn: {
        case: "agentConversationTurn",
        value: create(AgentConversationTurnStructureSchema, { userMessage: userMessageId, steps, requestId: input.requestId })
      }
    })
    turnIds = [add(toBinary(ConversationTurnStructureSchema, turn))]
  }
  const roots = input.transcript.map((message) => add(promptBlobOf(message)))
  const previousTurns = (input.previous?.turns ?? []).filter((id) => !turnIds.some((turnId) => sameBytes(id, turnId)))
  // Each compaction: a ConversationSummary blob and an archive naming the prompt messages it replaced.
  const summaries = (input.summaries ?? []).map((made) => ({
    summary: add(toBinary(ConversationSummarySchema, create(ConversationSummarySchema, { summary: made.summary }))),
    archive: add(toBinary(ConversationSummaryArchiveSchema, create(ConversationSummaryArchiveSchema, {
      summarizedMessages: made.summarized.map((message) => promptBlobOf(message).id),
      summary: made.summary,
      windowTail: made.windowTail,
      summaryMessage: add(promptBlobOf(made.summaryMessage))
    })))
  }))
  // Fields we do not manage (file states, subagents...) carry over from the client's checkpoint.
  const checkpoint = input.previous === undefined
    ? create(ConversationStateStructureSchema)
    : clone(ConversationStateStructureSchema, input.previous)
  checkpoint.rootPromptMessagesJson = roots
  checkpoint.turns = [...previousTurns, ...turnIds]
  const latest = summaries[summaries.length - 1]
  if (latest !== undefined) {
    checkpoint.summary = latest.summary
    checkpoint.summaryArchive = latest.archive
    checkpoint.summaryArchives = [...checkpoint.summaryArchives, ...summaries.map((made) => made.archive)]
    checkpoint.selfSummaryCount = checkpoint.selfSummaryCount + summaries.length
  }
  checkpoint.todos = input.todos.map((todo) => toBinary(TodoItemSchema, todo))
  checkpoint.pendingToolCalls = input.pendingToolCalls.map(pendingToolCallJson)
  checkpoint.tokenDetails = create(ConversationTokenDetailsSchema, { usedTokens: input.usedTokens, maxTokens: input.maxTokens })
  const mode = input.mode ?? userMessage?.mode
  if (mode !== undefined) checkpoint.mode = agentModeOf(mode)
  // A run an earlier turn left RUNNING (that turn was canceled or failed) is not running any more.
  for (const state of Object.values(checkpoint.subagentRunsByParentToolCallId)) {
    if (state.status === SubagentRunStatus.RUNNING) state.status = SubagentRunStatus.ABORTED
  }
  for (const run of input.subagentRuns ?? []) {
    checkpoint.subagentRunsByParentToolCallId[run.toolCallId] = create(SubagentRunStateSchema, {
      parentToolCallId: run.toolCallId,
      // The Task's agent_id: the subagent links in the parent's replies point at this card.
      ...(run.agentId !== "" ? { subagentId: run.agentId } : {}),
      status: SUBAGENT_STATUS[run.status],
      title: run.title,
      completedTimestampMs: BigInt(run.completedAtMs)
    })
  }
  for (const plan of input.plans ?? []) {
    checkpoint.plan = add(toBinary(ConversationPlanSchema, create(ConversationPlanSchema, { plan: plan.plan })))
    checkpoint.plans[plan.id] = create(PlanRegistryEntrySchema, { id: plan.id, path: plan.uri })
  }
  checkpoint.previousWorkspaceUris = [...input.workspaceUris]
  // Cursor stops returning conversation_state unless these are set (TS++ finding).
  checkpoint.agentType = checkpoint.agentType ?? "ide"
  return { blobs, checkpoint }
}

/** Todo items kept in a checkpoint (`todos` holds serialized TodoItems); unreadable ones are skipped. */
export const todosOf = (checkpoint: ConversationStateStructure | undefined): ReadonlyArray<TodoItem> =>
  (checkpoint?.todos ?? []).flatMap((bytes) => {
    try {
      return [fromBinary(TodoItemSchema, bytes)]
    } catch {
      return []
    }
  })

/**
 * The checkpoint while a subagent runs: the one the client holds, with the Task pending and its
 * run RUNNING (with the subagent's id once its child run opened), so Cursor shows the card as
 * running. It names no new blob: everything in it the client has already.
 */
export const runningSubagentCheckpoint = (
  base: ConversationStateStructure | undefined,
  task: { readonly call: ToolCall; readonly title: string; readonly subagentId: string | undefined }
): ConversationStateStructure => {
  const checkpoint = base === undefined ? create(ConversationStateStructureSchema) : clone(ConversationStateStructureSchema, base)
  checkpoint.pendingToolCalls = [pendingToolCallJson(task.call)]
  checkpoint.subagentRunsByParentToolCallId[task.call.id] = create(SubagentRunStateSchema, {
    parentToolCallId: task.call.id,
    ...(task.subagentId !== undefined && task.subagentId !== "" ? { subagentId: task.subagentId } : {}),
    status: SubagentRunStatus.RUNNING,
    title: task.title
  })
  checkpoint.agentType = checkpoint.agentType ?? "ide"
  return checkpoint
}
