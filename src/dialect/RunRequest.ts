/**
 * The run request: its action, and the model, mode, MCP tools, workspace and rules of the turn
 * it asks for as the turn's settings; and what to read back from the client's blob store before
 * the turn starts (request-context parts in `ref_only` transport, images named by blob id).
 */
import { clone, create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf"
import { ValueSchema } from "@bufbuild/protobuf/wkt"
import {
  AgentMode,
  ConversationStateStructureSchema,
  RequestContextMcpsPartSchema,
  RequestContextRulesPartSchema,
  RequestContextSchema,
  RequestContextSkillsPartSchema,
  RequestContextSubagentsPartSchema
} from "../gen/agent/v1/agent_pb.js"
import type {
  AgentRunRequest,
  ConversationStateStructure,
  McpToolDefinition,
  RequestContext,
  UserMessage as CursorUserMessage
} from "../gen/agent/v1/agent_pb.js"
import { recentMap } from "../internal/JsonKey.js"
import { sha256Bytes } from "../internal/Sha256.js"
import type { UserContent } from "../Llm.js"
import type { TurnSettings } from "../Loop.js"
import type { CursorMode, McpToolDescriptor } from "../Tools.js"
import { bytesToHex, sameBytes, unknownFields } from "./Bytes.js"
import { RunAction } from "./ClientMessage.js"
import type { ContextPartRef, RunRequest, WorkspaceInfo } from "./ClientMessage.js"
import { attachmentBlobRefsOf } from "./Attachments.js"
import { cursorModeOf, customModeOf, exitModeOf } from "./Modes.js"
import { asyncAnswersMessageOf, backgroundCompletionsMessageOf, executePlanMessageOf } from "./Plans.js"
import { customSubagentsOf, subagentInfosOf, subagentRunOf } from "./Subagents.js"
import { attachedImagesOf, toLlmUserMessage } from "./UserMessage.js"

/**
 * Input schemas by their JSON text, the most recent few hundred: the run request brings every MCP
 * tool's schema again each turn. A parsed schema is a value no one edits (it goes to the model as
 * it is), so turns share it.
 */
const parsedSchemas = recentMap<string, unknown>(512)

const parseSchema = (json: string): unknown => {
  let schema = parsedSchemas.get(json)
  if (schema === undefined) {
    try {
      schema = JSON.parse(json)
    } catch {
      return undefined
    }
    if (schema !== undefined) parsedSchemas.set(json, schema)
  }
  return schema
}

/** The JSON text of a tool's input schema: `input_schema_json` when it parses, else the `Value` form, else none. */
const schemaTextOf = (tool: McpToolDefinition): string => {
  if (tool.inputSchemaJson !== undefined && tool.inputSchemaJson !== "" && parseSchema(tool.inputSchemaJson) !== undefined) {
    return tool.inputSchemaJson
  }
  return tool.inputSchema !== undefined ? JSON.stringify(toJson(ValueSchema, tool.inputSchema)) : ""
}

/** An optional JSON field of a tool definition (`output_schema_json`, `annotations_json`), parsed; none when absent or not JSON. */
const optionalJson = (text: string | undefined): unknown => (text === undefined || text === "" ? undefined : parseSchema(text))

const mcpDescriptor = (tool: McpToolDefinition, schemaText: string): McpToolDescriptor => {
  const outputSchema = optionalJson(tool.outputSchemaJson)
  const annotations = optionalJson(tool.annotationsJson)
  return {
    name: tool.name,
    description: tool.description,
    providerIdentifier: tool.providerIdentifier,
    toolName: tool.toolName,
    inputSchema: (schemaText === "" ? undefined : parseSchema(schemaText)) ?? { type: "object", properties: {} },
    ...(outputSchema !== undefined ? { outputSchema } : {}),
    ...(annotations !== undefined ? { annotations } : {})
  }
}

/**
 * MCP tool lists by what the client said of them, the 16 most recent: the run request brings the
 * same tools turn after turn, and they become the same list object, so what is made of a list
 * once per object (its JSON, the tool catalog, the settings' stored part) is made once, not at
 * every turn.
 */
const mcpLists = recentMap<string, ReadonlyArray<McpToolDescriptor>>(16)

/** The descriptors of MCP tools as the client sent them (the run request's, then the request context's): the first of each. */
const mcpToolsOf = (definitions: ReadonlyArray<McpToolDefinition>): ReadonlyArray<McpToolDescriptor> => {
  if (definitions.length === 0) return []
  const texts = definitions.map(schemaTextOf)
  const key = JSON.stringify(
    definitions.map((tool, i) => [tool.name, tool.description, tool.providerIdentifier, tool.toolName, texts[i], tool.outputSchemaJson ?? "", tool.annotationsJson ?? ""])
  )
  const known = mcpLists.get(key)
  if (known !== undefined) return known
  const tools: Array<McpToolDescriptor> = []
  definitions.forEach((tool, i) => {
    const descriptor = mcpDescriptor(tool, texts[i]!)
    if (!tools.some((t) => t.providerIdentifier === descriptor.providerIdentifier && t.toolName === descriptor.toolName && t.name === descriptor.name)) {
      tools.push(descriptor)
    }
  })
  mcpLists.set(key, tools)
  return tools
}

const workspaceOf = (context: RequestContext | undefined): WorkspaceInfo => {
  const env = context?.env
  return {
    workspacePaths: env?.workspacePaths ?? [],
    projectFolder: env?.projectFolder ?? "",
    osVersion: env?.osVersion ?? "",
    shell: env?.shell ?? "",
    timeZone: env?.timeZone ?? "",
    terminalsFolder: env?.terminalsFolder ?? ""
  }
}

/**
 * What the model should see besides the typed text: file contents the client attached. Rules go
 * to `settings.rules` instead, because they belong in the system prompt, not history.
 */
const contextOf = (context: RequestContext | undefined): Array<UserContent> =>
  Object.entries(context?.fileContents ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([path, content]) => ({ type: "text" as const, text: `<attached_file path="${path}">\n${content}\n</attached_file>` }))

/**
 * The request context a run request carries: inline (legacy and dual transport), else the
 * `dynamic_context` of its part references (ref_only, where rules, skills, subagents and MCP
 * definitions are blobs the client holds), with the parts read back so far (`fetched`).
 */
const requestContextOf = (request: AgentRunRequest): RequestContext | undefined =>
  inlineRequestContextOf(request) ?? request.action?.requestContextParts?.dynamicContext

/** The request context the run request's action carries itself (legacy and dual transport). */
const inlineRequestContextOf = (request: AgentRunRequest): RequestContext | undefined => {
  const action = request.action?.action
  return action?.case === "userMessageAction" || action?.case === "resumeAction" || action?.case === "startPlanAction" || action?.case === "executePlanAction"
    ? action.value.requestContext
    : undefined
}

/** The run request's user message (a new turn's or a plan's), if it has one. */
const runUserMessageOf = (request: AgentRunRequest): CursorUserMessage | undefined => {
  const action = request.action?.action
  switch (action?.case) {
    case "userMessageAction":
    case "startPlanAction":
      return action.value.userMessage
    case "executePlanAction":
      return executePlanMessageOf(action.value)
    case "asyncAskQuestionCompletionAction":
      // The answers continue the conversation in the mode it was in.
      return asyncAnswersMessageOf(action.value, request.conversationState?.mode ?? AgentMode.AGENT)
    case "backgroundTaskCompletionAction":
      return backgroundCompletionsMessageOf(action.value, request.conversationState?.mode ?? AgentMode.AGENT)
    default:
      return undefined
  }
}

/**
 * What to read back: the request-context parts in ref_only transport (no inline context): rules,
 * MCP tools, skills (a custom mode's instructions) and the user's subagents; and attachments named only by blob id (images, then
 * extra context entries, the invocation context, documents) that did not come along in
 * `pre_fetched_blobs`, each blob once.
 */
const contextToFetchOf = (request: AgentRunRequest): ReadonlyArray<ContextPartRef> => {
  const parts = request.action?.requestContextParts
  const refs: Array<ContextPartRef> = []
  if (parts !== undefined && inlineRequestContextOf(request) === undefined) {
    if (parts.rulesBlobId.length > 0) refs.push({ part: "rules", blobId: parts.rulesBlobId, byteLength: parts.rulesByteLength })
    if (parts.mcpsBlobId.length > 0) refs.push({ part: "mcps", blobId: parts.mcpsBlobId, byteLength: parts.mcpsByteLength })
    if (parts.skillsBlobId.length > 0) refs.push({ part: "skills", blobId: parts.skillsBlobId, byteLength: parts.skillsByteLength })
    if (parts.subagentsBlobId.length > 0) refs.push({ part: "subagents", blobId: parts.subagentsBlobId, byteLength: parts.subagentsByteLength })
  }
  const sentAlong = sentAlongOf(request)
  const userMessage = runUserMessageOf(request)
  const attachment = (part: ContextPartRef["part"], blobId: Uint8Array) => {
    if (!sentAlong.has(bytesToHex(blobId)) && !refs.some((ref) => sameBytes(ref.blobId, blobId))) refs.push({ part, blobId, byteLength: 0 })
  }
  for (const image of userMessage === undefined ? [] : attachedImagesOf(userMessage, sentAlong)) {
    if (image.data === undefined && image.blobId !== undefined) attachment("image", image.blobId)
  }
  for (const ref of attachmentBlobRefsOf(userMessage?.selectedContext)) attachment(ref.part, ref.blobId)
  return refs
}

/** The blobs a run request brought along (`pre_fetched_blobs`), by hex id. */
const sentAlongOf = (request: AgentRunRequest): ReadonlyMap<string, Uint8Array> =>
  new Map(request.preFetchedBlobs.map((blob) => [bytesToHex(blob.id), blob.value]))

/**
 * The run request with what was read back from the client (by hex blob id) merged in, as if it
 * had come inline: the request-context parts (rules and MCP tools) and the attachments named by
 * blob id (images, documents, extra context entries, the invocation context). A blob that is
 * missing, does not match its id or length, or does not decode is left out and says so in
 * `problems`: the turn goes on without it rather than failing (an attachment that could not be
 * read becomes a line of text saying so).
 */
export const withContextParts = (
  run: RunRequest,
  fetched: ReadonlyMap<string, Uint8Array>,
  pastChats: ReadonlyMap<string, string> = new Map()
): { readonly run: RunRequest; readonly problems: ReadonlyArray<string> } => {
  const problems: Array<string> = []
  const context = clone(RequestContextSchema, requestContextOf(run.raw) ?? create(RequestContextSchema))
  const attachments = new Map<string, Uint8Array>()
  const whatOf: Record<ContextPartRef["part"], string> = {
    rules: "the rules part of the request context",
    mcps: "the mcps part of the request context",
    skills: "the skills part of the request context",
    subagents: "the subagents part of the request context",
    image: "an attached image",
    document: "an attached document",
    extraContext: "an extra context entry",
    invocationContext: "the invocation context"
  }
  for (const ref of run.contextToFetch) {
    const what = whatOf[ref.part]
    const data = fetched.get(bytesToHex(ref.blobId))
    if (data === undefined) {
      problems.push(`${what} was not read back`)
      continue
    }
    if (sha256Bytes(data) !== bytesToHex(ref.blobId) || (ref.byteLength > 0 && data.length !== ref.byteLength)) {
      problems.push(`${what} does not match its id or length`)
      continue
    }
    try {
      if (ref.part === "rules") {
        const part = fromBinary(RequestContextRulesPartSchema, data)
        context.rules = part.rules
        context.nonFileRules = part.nonFileRules
        if (part.cloudRule !== undefined) context.cloudRule = part.cloudRule
      } else if (ref.part === "mcps") {
        context.tools = fromBinary(RequestContextMcpsPartSchema, data).tools
      } else if (ref.part === "skills") {
        context.agentSkills = fromBinary(RequestContextSkillsPartSchema, data).agentSkills
      } else if (ref.part === "subagents") {
        context.customSubagents = fromBinary(RequestContextSubagentsPartSchema, data).customSubagents
      } else {
        // The user message's renderers look attachments up by blob id (Attachments.ts).
        attachments.set(bytesToHex(ref.blobId), data)
      }
    } catch (cause) {
      problems.push(`${what} does not decode: ${String(cause)}`)
    }
  }
  return { run: { ...decodeRunRequestIn(run.raw, context, attachments, pastChats), contextToFetch: [], pastChatsToRead: [] }, problems }
}

export const decodeRunRequest = (request: AgentRunRequest): RunRequest => decodeRunRequestIn(request, requestContextOf(request), new Map(), new Map())

const decodeRunRequestIn = (
  request: AgentRunRequest,
  requestContext: RequestContext | undefined,
  readBack: ReadonlyMap<string, Uint8Array>,
  pastChats: ReadonlyMap<string, string>
): RunRequest => {
  const action = request.action?.action
  const userMessage = runUserMessageOf(request)
  // Start-plan is a user turn in plan mode, whatever mode the message itself says; a Build runs in
  // the mode it names (its message carries it); leaving a custom mode goes where the exit says.
  const mode: CursorMode = action?.case === "startPlanAction"
    ? "plan"
    : exitModeOf(userMessage) ?? (userMessage !== undefined
      ? cursorModeOf(userMessage.mode)
      : request.conversationState?.mode !== undefined
      ? cursorModeOf(request.conversationState.mode)
      : "agent")
  const customMode = mode === "custom" ? customModeOf(userMessage, requestContext) : undefined
  const customSubagents = customSubagentsOf(requestContext)
  const subagent = subagentRunOf(request, customSubagents)
  const model = request.requestedModel?.modelId || request.modelDetails?.modelId || ""
  // MCP tools come on the run request and again in the request context; keep the first of each.
  const mcpTools = mcpToolsOf([...(request.mcpTools?.mcpTools ?? []), ...(requestContext?.tools ?? [])])
  const workspace = workspaceOf(requestContext)
  const parameters = Object.fromEntries((request.requestedModel?.parameters ?? []).map((p) => [p.id, p.value]))
  const settings: TurnSettings = {
    model,
    mode,
    ...(customMode !== undefined ? { customMode } : {}),
    // What the client allows; the transport keeps only what this server can do (`turnInputOf`).
    webTools: { search: requestContext?.webSearchEnabled !== false, fetch: requestContext?.webFetchEnabled !== false },
    ...(customSubagents.length > 0 ? { subagents: subagentInfosOf(customSubagents) } : {}),
    ...(subagent !== undefined ? { subagent } : {}),
    workspace,
    mcpTools,
    // The workspace's rule files, then the rules that are not files (the user's and the team's).
    rules: [...(requestContext?.rules ?? []), ...(requestContext?.nonFileRules ?? [])].map((rule) => ({ path: rule.fullPath, content: rule.content })),
    modelParameters: parameters,
    maxMode: request.requestedModel?.maxMode ?? request.modelDetails?.maxMode ?? false,
    ...(request.customSystemPrompt !== undefined ? { customSystemPrompt: request.customSystemPrompt } : {}),
    ...newerRunFieldsOf(request),
    // Not for the prompt: what the turn's checkpoint needs when a later process ends it (see `turnUserMessageOf`).
    userMessageId: userMessage?.messageId ?? "",
    ...(request.conversationState !== undefined ? { carriedCheckpoint: carriedCheckpointOption(request.conversationState) } : {})
  }
  let runAction: RunAction
  const summarize = action?.case === "userMessageAction" && userMessage !== undefined ? summarizeRequestOf(userMessage) : undefined
  switch (action?.case) {
    case "summarizeAction":
      runAction = RunAction.Summarize({ settings, instructions: "", userMessageId: "", userMessage: undefined })
      break
    case "userMessageAction":
    case "startPlanAction":
    case "executePlanAction":
    case "asyncAskQuestionCompletionAction":
    case "backgroundTaskCompletionAction":
      runAction = summarize !== undefined && userMessage !== undefined
        ? RunAction.Summarize({ settings, instructions: summarize, userMessageId: userMessage.messageId, userMessage })
        : userMessage === undefined
        ? RunAction.Unsupported({ field: action.case === "userMessageAction" ? 1 : 6 })
        : RunAction.StartTurn({
          start: {
            message: toLlmUserMessage(
              userMessage,
              new Map([...sentAlongOf(request), ...readBack]),
              new Set(Object.keys(requestContext?.fileContents ?? {})),
              pastChats
            ),
            context: contextOf(requestContext),
            settings
          },
          userMessageId: userMessage.messageId,
          userMessage
        })
      break
    case "resumeAction":
      runAction = RunAction.Resume({ settings })
      break
    case "cancelAction":
      runAction = RunAction.Unsupported({ field: 3 })
      break
    case "cancelSubagentAction":
    case "backgroundShellAction":
    case "backgroundSubagentAction":
      runAction = RunAction.Unsupported({ field: action.case === "cancelSubagentAction" ? 10 : action.case === "backgroundShellAction" ? 13 : 14 })
      break
    case undefined:
      runAction = RunAction.Unsupported({ field: request.action === undefined ? 0 : unknownFields(request.action)[0] ?? 0 })
      break
  }
  return {
    conversationId: request.conversationId,
    action: runAction,
    model,
    mode,
    mcpTools,
    workspace,
    conversationState: request.conversationState,
    requestContextParts: request.action?.requestContextParts,
    contextToFetch: contextToFetchOf(request),
    pastChatsToRead: (runUserMessageOf(request)?.selectedContext?.pastChats ?? []).map((chat) => chat.agentId).filter((id) => id !== ""),
    raw: request
  }
}

/**
 * What newer clients add to the run request (fields 26, 28, 29): the client's system prompt spec,
 * its agent session id (kept), and whether it shows the model that answered.
 */
const newerRunFieldsOf = (request: AgentRunRequest): Partial<TurnSettings> => {
  const spec = request.systemPromptSpec?.spec
  return {
    ...(spec?.case === "replace" || spec?.case === "append" ? { systemPromptSpec: { mode: spec.case, text: spec.value } } : {}),
    ...(request.agentSessionId !== undefined && request.agentSessionId !== "" ? { agentSessionId: request.agentSessionId } : {}),
    ...(request.clientSupportsRoutedModelUpdate === true ? { routedModelUpdates: true } : {})
  }
}

/** Cursor's own summarize command, as the slash command it sends when the user picks it. */
export const SUMMARIZE_COMMAND = "glass-action-summarize"

/**
 * What a user message asks of a summary when it asks for one: `/summarize [instructions]`
 * typed as the message, or Cursor's summarize command picked (its text is then the
 * instructions). Undefined for any other message.
 */
const summarizeRequestOf = (message: CursorUserMessage): string | undefined => {
  if (message.selectedContext?.cursorCommands.some((command) => command.name === SUMMARIZE_COMMAND) === true) {
    return message.text.trim()
  }
  const typed = /^\/summarize(?:\s+([\s\S]*))?$/.exec(message.text.trim())
  return typed === null ? undefined : (typed[1] ?? "").trim()
}

/**
 * Of the client's checkpoint, what the turn's own checkpoint carries over and a process without
 * the run request (one that recovers or replays the turn after a restart) could not know
 * otherwise: the earlier turns' blob ids and the todos, as base64 protobuf. Small on purpose:
 * settings are rewritten with the state at every commit. Summaries, plans, file states and the
 * other fields the client keeps are not carried, so a checkpoint projected without the run
 * request lacks them.
 */
const carriedCheckpointOption = (checkpoint: ConversationStateStructure): string =>
  Buffer.from(toBinary(
    ConversationStateStructureSchema,
    create(ConversationStateStructureSchema, { turns: checkpoint.turns, todos: checkpoint.todos })
  )).toString("base64")
