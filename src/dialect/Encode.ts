/**
 * Encoding server messages: a model call's stream events, tool calls and the execs behind
 * them, heartbeats and notices, and how a turn ends on the wire.
 */
import { create } from "@bufbuild/protobuf"
import { ThinkingStyle, ToolCallSchema } from "../gen/agent/v1/agent_pb.js"
import type { AgentServerMessage, ExecServerMessage, ToolCallDelta } from "../gen/agent/v1/agent_pb.js"
import { addUsage } from "../Llm.js"
import type { ResponseEvent, Usage } from "../Llm.js"
import { partialCursorToolCall } from "../Tools.js"
import type { CursorToolCall, ExecRequest, McpToolDescriptor, QueryRequest } from "../Tools.js"
import { server, update } from "./Correlation.js"
import type { Encoded, PendingQuery, RunningExec, TurnCorrelation } from "./Correlation.js"
import { canceled, EndStream, providerFailure } from "./EndStream.js"

// =============================================================================
// Encoding model events
// =============================================================================

/**
 * Encodes one model stream event of call `callId`. Text and thinking deltas stream as is; a
 * tool call streams as `partial_tool_call` (the empty typed case first, then the argument
 * text deltas); `tool_call_started` comes later, when the tool actually runs
 * (`encodeToolStarted`). `Done` only adds its usage to the sum; `Error` writes nothing (the
 * turn's end-stream reports it). `Start` writes `routed_model` when the router says another model
 * answers and the client shows it.
 */
export const encodeResponseEvent = (
  correlation: TurnCorrelation,
  callId: string,
  event: ResponseEvent,
  options: {
    readonly nowMs: number
    readonly mcpTools: ReadonlyArray<McpToolDescriptor>
    /** The client shows which model answered (`client_supports_routed_model_update`). */
    readonly routedModelUpdates?: boolean | undefined
  }
): Encoded => {
  const current = correlation.modelCallId === callId ? correlation : { ...correlation, modelCallId: callId, toolCalls: [] }
  const none: Encoded = { correlation: current, messages: [] }
  switch (event._tag) {
    case "Start":
      // `routed_model` (24) when the model that answers is not the one picked, to a client that says it shows it.
      return options.routedModelUpdates === true && event.routedModel !== undefined
        ? { correlation: current, messages: [update({ case: "routedModel", value: { displayName: event.routedModel } })] }
        : none
    case "TextStart":
    case "TextEnd":
    case "ToolCallEnd":
    case "Error":
      return none
    case "TextDelta":
      return event.delta === "" ? none : { correlation: current, messages: [update({ case: "textDelta", value: { text: event.delta } })] }
    case "ThinkingStart":
      return { correlation: { ...current, thinkingStartedAtMs: options.nowMs }, messages: [] }
    case "ThinkingDelta":
      return event.delta === ""
        ? none
        : { correlation: current, messages: [update({ case: "thinkingDelta", value: { text: event.delta, thinkingStyle: ThinkingStyle.DEFAULT } })] }
    case "ThinkingEnd": {
      const started = current.thinkingStartedAtMs ?? options.nowMs
      return {
        correlation: { ...current, thinkingStartedAtMs: undefined },
        messages: [update({ case: "thinkingCompleted", value: { thinkingDurationMs: Math.max(0, Math.round(options.nowMs - started)) } })]
      }
    }
    case "ToolCallStart": {
      const toolCalls = [...current.toolCalls.filter((call) => call.index !== event.index), { index: event.index, callId: event.id, name: event.name }]
      return {
        correlation: { ...current, toolCalls },
        messages: [update({
          case: "partialToolCall",
          value: { callId: event.id, toolCall: partialCursorToolCall(event.name, options.mcpTools), modelCallId: callId }
        })]
      }
    }
    case "ToolCallDelta": {
      const call = current.toolCalls.find((known) => known.index === event.index)
      if (call === undefined || event.delta === "") return none
      return {
        correlation: current,
        messages: [update({
          case: "partialToolCall",
          value: { callId: call.callId, toolCall: partialCursorToolCall(call.name, options.mcpTools), argsTextDelta: event.delta, modelCallId: callId }
        })]
      }
    }
    case "Done":
      return { correlation: { ...current, usage: addUsage(current.usage, event.message.usage), lastStopReason: event.reason, toolCalls: [] }, messages: [] }
  }
}

// =============================================================================
// Encoding tool calls and execs
// =============================================================================

export interface ToolCallIds {
  /** The model's tool call id (Cursor's `call_id`). */
  readonly toolCallId: string
  /** The model call that produced it (Cursor's `model_call_id`). */
  readonly modelCallId: string
}

/** `tool_call_started` with the typed args (from `Tools.startTool`). */
export const encodeToolStarted = (ids: ToolCallIds, started: CursorToolCall, startedAtMs: number): AgentServerMessage =>
  update({
    case: "toolCallStarted",
    value: {
      callId: ids.toolCallId,
      toolCall: create(ToolCallSchema, { ...started, toolCallId: ids.toolCallId, startedAtMs: BigInt(Math.max(0, Math.floor(startedAtMs))) }),
      modelCallId: ids.modelCallId
    }
  })

/** `tool_call_delta` (shell output, edit streaming) from a `ToolStep.Continue`. */
export const encodeToolDelta = (ids: ToolCallIds, delta: ToolCallDelta): AgentServerMessage =>
  update({ case: "toolCallDelta", value: { callId: ids.toolCallId, toolCallDelta: delta, modelCallId: ids.modelCallId } })

/** `tool_call_completed` with args, the typed result and both times (without them the card keeps spinning). */
export const encodeToolCompleted = (
  ids: ToolCallIds,
  cursor: CursorToolCall,
  times: { readonly startedAtMs: number; readonly completedAtMs: number }
): AgentServerMessage =>
  update({
    case: "toolCallCompleted",
    value: {
      callId: ids.toolCallId,
      toolCall: create(ToolCallSchema, {
        ...cursor,
        toolCallId: ids.toolCallId,
        startedAtMs: BigInt(Math.max(0, Math.floor(times.startedAtMs))),
        completedAtMs: BigInt(Math.max(0, Math.floor(times.completedAtMs)))
      }),
      modelCallId: ids.modelCallId
    }
  })

/** The exec id string sent beside the numeric id: unique per request, derived from it. */
export const execIdOf = (id: number, toolCallId: string): string => `exec-${id}-${toolCallId}`

/** Allocates the next exec id and encodes the `exec_server_message` for a tool machine's request. */
export const encodeExec = (
  correlation: TurnCorrelation,
  request: { readonly operationId: string; readonly toolCallId: string; readonly exec: ExecRequest }
): { readonly correlation: TurnCorrelation; readonly exec: RunningExec; readonly message: AgentServerMessage } => {
  const id = correlation.nextExecId
  const exec: RunningExec = { id, execId: execIdOf(id, request.toolCallId), operationId: request.operationId, toolCallId: request.toolCallId }
  const value: ExecServerMessage["message"] = request.exec
  return {
    correlation: { ...correlation, nextExecId: id + 1, execs: [...correlation.execs, exec] },
    exec,
    message: server({ message: { case: "execServerMessage", value: { id, execId: exec.execId, message: value } } })
  }
}

/** A question to the client for a tool call: the `InteractionQuery` with the request's next query id. */
export const encodeQuery = (
  correlation: TurnCorrelation,
  request: { readonly operationId: string; readonly toolCallId: string; readonly query: QueryRequest }
): { readonly correlation: TurnCorrelation; readonly query: PendingQuery; readonly message: AgentServerMessage } => {
  const id = correlation.nextQueryId
  const query: PendingQuery = { id, operationId: request.operationId, toolCallId: request.toolCallId }
  return {
    correlation: { ...correlation, nextQueryId: id + 1, queries: [...correlation.queries, query] },
    query,
    message: server({ message: { case: "interactionQuery", value: { id, query: request.query } } })
  }
}

/** The question an `InteractionResponse` answers, if it is still waiting. */
export const resolveQuery = (correlation: TurnCorrelation, id: number): PendingQuery | undefined =>
  correlation.queries.find((query) => query.id === id)

/** The question is answered: a second answer to it matches nothing. */
export const completeQuery = (correlation: TurnCorrelation, id: number): TurnCorrelation => ({
  ...correlation,
  queries: correlation.queries.filter((query) => query.id !== id)
})

/**
 * The running exec a client message belongs to: by numeric `id` (the IDE never echoes
 * `exec_id`), or by `exec_id` when only that is set. Undefined for an unknown exec: drop it.
 */
export const resolveExec = (correlation: TurnCorrelation, id: number, execId: string | undefined): RunningExec | undefined => {
  if (id !== 0) {
    const byId = correlation.execs.find((exec) => exec.id === id)
    if (byId !== undefined && (execId === undefined || execId === byId.execId)) return byId
    if (byId !== undefined) return undefined
  }
  return execId === undefined ? undefined : correlation.execs.find((exec) => exec.execId === execId)
}

/** Forgets a finished exec (its result was taken, or it was aborted). */
export const completeExec = (correlation: TurnCorrelation, id: number): TurnCorrelation => ({
  ...correlation,
  execs: correlation.execs.filter((exec) => exec.id !== id)
})

/** `exec_server_control_message.abort` for every running exec (cancel), and forgets them. */
export const encodeAbortAll = (correlation: TurnCorrelation): Encoded => ({
  correlation: { ...correlation, execs: [] },
  messages: correlation.execs.map((exec) => server({ message: { case: "execServerControlMessage", value: { message: { case: "abort", value: { id: exec.id } } } } }))
})

// =============================================================================
// Heartbeat, notices, turn end
// =============================================================================

/** `interaction_update.heartbeat`: the transport sends one every 5 s while the stream is open. */
export const encodeHeartbeat = (): AgentServerMessage => update({ case: "heartbeat", value: {} })

/** A visible notice from the server (never used for errors: those end the stream). */
export const encodeServerNotice = (text: string): AgentServerMessage =>
  update({ case: "textDelta", value: { text, isServerNotice: true } })

/** `summary_started`: the client shows that the conversation is being summarized. */
export const encodeSummaryStarted = (): AgentServerMessage => update({ case: "summaryStarted", value: {} })

/** `summary`: the summary's text, whole (sent once, when it is complete). */
export const encodeSummary = (summary: string): AgentServerMessage => update({ case: "summary", value: { summary } })

/** `summary_completed`: the summarizing display ends. */
export const encodeSummaryCompleted = (): AgentServerMessage => update({ case: "summaryCompleted", value: {} })

/** `turn_ended` with the usage summed over every model call of the request. */
const encodeTurnEnded = (usage: Usage): AgentServerMessage =>
  update({
    case: "turnEnded",
    value: {
      inputTokens: BigInt(usage.input),
      outputTokens: BigInt(usage.output),
      cacheReadTokens: BigInt(usage.cacheRead),
      cacheWriteTokens: BigInt(usage.cacheWrite),
      reasoningTokens: BigInt(usage.reasoning)
    }
  })

export const LENGTH_NOTICE = "\n\n(The answer was cut off at the model's output token limit.)"

/**
 * How a turn ends on the wire, from the loop's final command. `messages` go out first; the
 * transport then publishes the final checkpoint (after its blobs are acknowledged) and
 * finally the end-stream frame `end`. A cancel aborts the running execs and sends neither
 * `turn_ended` nor a checkpoint; a failure sends no `turn_ended`.
 */
export const encodeTurnEnd = (
  correlation: TurnCorrelation,
  command:
    | { readonly _tag: "Final"; readonly reason: "stop" | "length" }
    | { readonly _tag: "Failed"; readonly error: string; readonly retryable: boolean }
    | { readonly _tag: "Canceled"; readonly reason: string }
): Encoded & { readonly end: EndStream } => {
  switch (command._tag) {
    case "Final": {
      const notice = command.reason === "length" ? [encodeServerNotice(LENGTH_NOTICE)] : []
      return { correlation, messages: [...notice, encodeTurnEnded(correlation.usage)], end: EndStream.Ok() }
    }
    case "Failed":
      return { correlation, messages: [], end: providerFailure(command.error) }
    case "Canceled": {
      const aborted = encodeAbortAll(correlation)
      return { ...aborted, end: canceled(command.reason) }
    }
  }
}
