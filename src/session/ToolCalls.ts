/**
 * Tool calls on the client: the tool machines of `Tools.ts` carried on the session's state. A
 * dispatched tool call sends its first exec (or is done at once, for the tools the server keeps,
 * such as TodoWrite); each exec answer from the client gives the next exec, a chunk to show,
 * work for the server, or the final result, whose input id is `<operation id>:result`. What a
 * finished call leaves for the turn's checkpoint (its typed result, todos, plans, subagent runs)
 * is kept here too.
 */
import * as Dialect from "../Dialect.js"
import type { ToolResultMessage } from "../Llm.js"
import { mcpToolsOf, modeOfSettings } from "../Loop.js"
import type { DispatchedOperation, TurnRef } from "../Runner.js"
import * as Tools from "../Tools.js"
import type { QueryReply, ToolRun, ToolStep } from "../Tools.js"
import type { Operation, SessionState, Submission } from "./State.js"
import { SessionCommand, type LogLevel } from "./Types.js"

/** A tool call's final result, for the runner; its input id (`<operation id>:result`) is stable across redeliveries. */
export interface ToolDone {
  readonly conversationId: string
  readonly message: ToolResultMessage
  readonly inputId: string
}

/** A step of a tool machine: the state it leaves, and the final result when the call is done. */
export interface Advanced {
  readonly state: SessionState
  readonly done: ToolDone | undefined
}

/** A tool result as the input to submit. */
export const submissionOf = (done: ToolDone): Submission => ({ conversationId: done.conversationId, input: Dialect.toolResultInputOf(done.message), inputId: done.inputId })

export const toolContext = (state: SessionState, turn: TurnRef | undefined, subagentModel?: string): Tools.ToolContext => ({
  mcpTools: state.run?.mcpTools ?? (turn === undefined ? [] : mcpToolsOf(turn.settings)),
  todos: state.todos,
  // The committed settings: an approved SwitchMode is in them from the next tool call on.
  mode: turn === undefined ? "agent" : modeOfSettings(turn.settings),
  terminalsFolder: turn?.settings.workspace?.terminalsFolder ?? state.run?.workspace.terminalsFolder ?? "",
  subagents: {
    subagentModel: subagentModel ?? turn?.settings.model ?? "",
    customSubagents: turn?.settings.subagents ?? [],
    conversationId: turn?.conversationId ?? ""
  }
})

const withOperation = (state: SessionState, operation: Operation): SessionState => {
  const operations = new Map(state.operations)
  operations.set(operation.operationId, operation)
  return { ...state, operations }
}

/**
 * Shows a Task's subagent as running: a checkpoint that is the one the client holds (this
 * stream's last, else the run request's) with the Task pending and its run RUNNING, with the
 * child's agent id once it is known. None without a checkpoint to build on (a turn recovered
 * after a restart): an empty one would erase the client's.
 */
export const announceRunning = (state: SessionState, operation: Operation, commands: Array<SessionCommand>): void => {
  const run = operation.run
  const request = state.run
  if (run?._tag !== "Task" || request === undefined) return
  const base = state.lastCheckpoint ?? request.conversationState
  const checkpoint = Dialect.runningSubagentCheckpoint(base, { call: run.call, title: run.args.description, subagentId: operation.child?.conversationId })
  commands.push(SessionCommand.Write({ messages: [Dialect.encodeCheckpoint(checkpoint)] }))
}

/** Carries a tool machine's step out: an exec or a question to send, a chunk to show, work for the server, or the final result. */
const advance = (state: SessionState, operation: Operation, step: ToolStep, atMs: number, commands: Array<SessionCommand>): Advanced => {
  const ids = { toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }
  switch (step._tag) {
    case "Exec": {
      const running = { ...operation, run: step.run }
      const sent = Dialect.encodeExec(state.correlation, { operationId: operation.operationId, toolCallId: operation.toolCallId, exec: step.exec })
      const next = { ...withOperation(state, running), correlation: sent.correlation }
      commands.push(SessionCommand.Write({ messages: [sent.message] }))
      // A subagent starts: Cursor's card shows it running from the checkpoint.
      if (step.exec.case === "subagentArgs") announceRunning(next, running, commands)
      return { state: next, done: undefined }
    }
    case "Query": {
      const sent = Dialect.encodeQuery(state.correlation, { operationId: operation.operationId, toolCallId: operation.toolCallId, query: step.query })
      commands.push(SessionCommand.Write({ messages: [sent.message] }))
      return { state: { ...withOperation(state, { ...operation, run: step.run }), correlation: sent.correlation }, done: undefined }
    }
    case "Work":
      commands.push(SessionCommand.StartWork({ operationId: operation.operationId, run: step.run, work: step.work }))
      return { state: withOperation(state, { ...operation, run: step.run }), done: undefined }
    case "Continue":
      if (step.delta !== undefined) commands.push(SessionCommand.Write({ messages: [Dialect.encodeToolDelta(ids, step.delta)] }))
      return { state: withOperation(state, { ...operation, run: step.run }), done: undefined }
    case "Done": {
      const { outcome } = step
      const operations = new Map(state.operations)
      operations.delete(operation.operationId)
      const next: SessionState = {
        ...state,
        operations,
        cursorToolCalls: { ...state.cursorToolCalls, [operation.toolCallId]: outcome.cursor },
        todos: outcome.todos ?? state.todos,
        plans: outcome.plan === undefined ? state.plans : [...state.plans.filter((plan) => plan.id !== outcome.plan!.id), outcome.plan],
        subagentRuns: outcome.subagent === undefined ? state.subagentRuns : [...state.subagentRuns, { ...outcome.subagent, completedAtMs: atMs }]
      }
      commands.push(SessionCommand.Write({ messages: [Dialect.encodeToolCompleted(ids, outcome.cursor, { startedAtMs: operation.startedAtMs, completedAtMs: atMs })] }))
      return { state: next, done: resultOf(operation, outcome.message) }
    }
  }
}

const resultOf = (operation: Operation, message: ToolResultMessage): ToolDone => ({
  conversationId: operation.conversationId,
  message,
  inputId: `${operation.operationId}:result`
})

/**
 * Starts a dispatched tool call: its first exec, or its result when the server does it itself
 * (`DoneAtOnce`, for the runner). A tool never starts with the server's work (that follows an approval).
 */
export const dispatch = (state: SessionState, turn: TurnRef, dispatched: DispatchedOperation, atMs: number, subagentModel: string | undefined, commands: Array<SessionCommand>): SessionState => {
  const operation: Operation = {
    operationId: dispatched.operationId,
    conversationId: turn.conversationId,
    toolCallId: dispatched.toolCall.id,
    modelCallId: dispatched.modelCallId,
    startedAtMs: atMs,
    run: undefined
  }
  const { started, step } = Tools.startTool(dispatched.toolCall, toolContext(state, turn, subagentModel))
  commands.push(SessionCommand.Write({ messages: [Dialect.encodeToolStarted({ toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }, started, atMs)] }))
  const advanced = advance(withOperation(state, operation), operation, step, atMs, commands)
  if (advanced.done !== undefined) commands.push(SessionCommand.DoneAtOnce({ message: advanced.done.message }))
  return advanced.state
}

const log = (commands: Array<SessionCommand>, level: LogLevel, message: string): Advanced | undefined => {
  commands.push(SessionCommand.Log({ level, message }))
  return undefined
}

/** An exec answer from the client: the running exec it belongs to, its tool machine's next step (none: dropped, logged). */
export const onExecReply = (
  state: SessionState,
  id: number,
  execId: string | undefined,
  next: (run: ToolRun) => ToolStep,
  finished: boolean,
  atMs: number,
  commands: Array<SessionCommand>
): Advanced | undefined => {
  const exec = Dialect.resolveExec(state.correlation, id, execId)
  const operation = exec === undefined ? undefined : state.operations.get(exec.operationId)
  if (exec === undefined || operation === undefined || operation.run === undefined) {
    return log(commands, "debug", `transport: exec answer for unknown exec ${id}${execId === undefined ? "" : ` (${execId})`} dropped`)
  }
  const completed = finished ? { ...state, correlation: Dialect.completeExec(state.correlation, exec.id) } : state
  // An exec answer may lead to a wait (AwaitShell reads a running shell's output again later).
  return advance(completed, operation, next(operation.run), atMs, commands)
}

/**
 * The client's answer to a question: the waiting question it belongs to, its tool machine's next
 * step. An answer to no waiting question (unknown, answered already, or for an operation that
 * ended), or of another kind than the question, changes nothing: logged, dropped.
 */
export const onQueryReply = (state: SessionState, id: number, reply: QueryReply | undefined, atMs: number, commands: Array<SessionCommand>): Advanced | undefined => {
  const query = Dialect.resolveQuery(state.correlation, id)
  const operation = query === undefined ? undefined : state.operations.get(query.operationId)
  if (query === undefined || operation === undefined || operation.run === undefined) {
    return log(commands, "info", `transport: ${state.requestId}: an answer to interaction query ${id}, which is not waiting; acknowledged, nothing changed`)
  }
  const run = operation.run
  if (reply === undefined && Tools.isQueryRun(run)) {
    // A kind of answer this server does not know (a newer client): the question fails, the model is told; never a wait.
    log(commands, "warning", `transport: ${state.requestId}: interaction query ${id} (${run.call.name}) answered with an unknown case; the call fails`)
    return advance({ ...state, correlation: Dialect.completeQuery(state.correlation, id) }, operation, Tools.onUnknownReply(run), atMs, commands)
  }
  if (reply === undefined || !Tools.isQueryRun(run) || !Tools.acceptsReply(run, reply)) {
    return log(commands, "warning", `transport: ${state.requestId}: interaction query ${id} (${run.call.name}) answered with ${reply?.case ?? "an unknown case"}; acknowledged, still waiting`)
  }
  return advance({ ...state, correlation: Dialect.completeQuery(state.correlation, id) }, operation, Tools.onQueryReply(run, reply), atMs, commands)
}

/** What the server's work gave, for the operation that asked for it; nothing when the operation moved on (the turn was canceled or ended meanwhile). */
export const onWorkDone = (state: SessionState, operationId: string, run: ToolRun, result: Tools.WorkResult, atMs: number, commands: Array<SessionCommand>): Advanced | undefined => {
  const operation = state.operations.get(operationId)
  if (operation === undefined || operation.run !== run) {
    return log(commands, "debug", `transport: ${state.requestId}: ${run.call.name} finished after its turn moved on; dropped`)
  }
  switch (run._tag) {
    case "WebSearch":
    case "WebFetch":
      return advance(state, operation, Tools.onWorkDone(run, result), atMs, commands)
    case "AwaitShell":
      return advance(state, operation, Tools.onAwaitSlept(run, result), atMs, commands)
    default:
      return log(commands, "warning", `transport: ${state.requestId}: work done for ${run.call.name}, which does none; dropped`)
  }
}

/** The Task waiting for the subagent run `toolCallId` names (a child's `x-parent-agent-tool-call-id`). */
export const findTask = (state: SessionState, toolCallId: string): Operation | undefined => {
  for (const operation of state.operations.values()) if (operation.toolCallId === toolCallId && operation.run?._tag === "Task") return operation
  return undefined
}

/** A child run opened for the Task `toolCallId`: the Task learns its conversation, and Cursor's card shows it running. */
export const childAttached = (state: SessionState, toolCallId: string, child: { readonly conversationId: string; readonly requestId: string }, commands: Array<SessionCommand>): SessionState => {
  const task = findTask(state, toolCallId)
  if (task === undefined) return state
  const attached = { ...task, child }
  const next = withOperation(state, attached)
  announceRunning(next, attached, commands)
  return next
}

/**
 * The user stopped subagent `subagentId` from this (the parent's) request: the Task that ran it
 * ends with a result saying so; its child conversation is named for the driver to cancel.
 */
export const stopSubagent = (state: SessionState, subagentId: string, atMs: number, commands: Array<SessionCommand>): { readonly state: SessionState; readonly done: ToolDone | undefined; readonly child: string | undefined } => {
  let task: Operation | undefined
  for (const operation of state.operations.values()) if (operation.child?.conversationId === subagentId && operation.run?._tag === "Task") task = operation
  if (task === undefined || task.run?._tag !== "Task") return { state, done: undefined, child: undefined }
  const advanced = advance(state, task, Tools.onSubagentStopped(task.run, subagentId), atMs, commands)
  return { state: advanced.state, done: advanced.done, child: task.child?.conversationId }
}

/** The runner aborted the turn's tool calls: the client's execs are told to stop, and no machine runs on. */
export const abortAll = (state: SessionState, commands: Array<SessionCommand>): SessionState => {
  const aborted = Dialect.encodeAbortAll(state.correlation)
  commands.push(SessionCommand.Write({ messages: aborted.messages }))
  return { ...state, correlation: aborted.correlation, operations: new Map() }
}
