/**
 * Tool calls on the client: the tool machines of `Tools.ts` carried out on a session. A
 * dispatched tool call sends its first exec (or is done at once, for the tools the server keeps,
 * such as TodoWrite); each exec answer from the client gives the next exec, a chunk to show, or
 * the final result. A final result is returned as the `ToolResult` input for the runner, never
 * submitted from here: the session needs no runner. Its input id is `<operation id>:result`.
 */
import { Clock, Effect } from "effect"
import * as Dialect from "../Dialect.js"
import type { ToolResultMessage } from "../Llm.js"
import { mcpToolsOf, modeOfSettings } from "../Loop.js"
import type { DispatchedOperation, TurnRef } from "../Runner.js"
import * as Tools from "../Tools.js"
import type { QueryReply, ServerWork, ToolRun, ToolStep } from "../Tools.js"
import { write } from "./Session.js"
import type { RunningOperation, Session } from "./Session.js"

/**
 * Shows a Task's subagent as running: a checkpoint that is the one the client holds (this
 * stream's last, else the run request's) with the Task pending and its run RUNNING, with the
 * child's agent id once it is known. None without a checkpoint to build on (a turn recovered
 * after a restart): an empty one would erase the client's.
 */
export const announceRunning = (session: Session, operation: RunningOperation): Effect.Effect<void> => {
  const run = operation.run
  // A new chat's run request holds no checkpoint: the running one starts from an empty state, as the client's does.
  const request = session.state.run
  if (run?._tag !== "Task" || request === undefined) return Effect.void
  const base = session.lastCheckpoint ?? request.conversationState
  const checkpoint = Dialect.runningSubagentCheckpoint(base, { call: run.call, title: run.args.description, subagentId: operation.child?.conversationId })
  return write(session, [Dialect.encodeCheckpoint(checkpoint)])
}

/** A tool call's final result, for the runner. */
export interface ToolDone {
  readonly conversationId: string
  readonly message: ToolResultMessage
  /** Stable across redeliveries: the runner applies it once. */
  readonly inputId: string
}

/** Work the server is to do for a tool call the client approved (a web search or fetch): the caller runs it off the request's lock. */
export interface WorkToDo {
  readonly _tag: "Work"
  readonly operation: RunningOperation
  readonly run: ToolRun
  readonly work: ServerWork
}

export const isWork = (step: ToolDone | WorkToDo | undefined): step is WorkToDo => step !== undefined && "work" in step

/** Only a final result: exec answers and the work's own end never lead to more work. */
const doneOnly = (step: ToolDone | WorkToDo | undefined): ToolDone | undefined => (isWork(step) ? undefined : step)

export const toolContext = (session: Session, turn: TurnRef | undefined, subagentModel?: string): Tools.ToolContext => ({
  mcpTools: session.state.run?.mcpTools ?? (turn === undefined ? [] : mcpToolsOf(turn.settings)),
  todos: session.todos,
  // The committed settings: an approved SwitchMode is in them from the next tool call on.
  mode: turn === undefined ? "agent" : modeOfSettings(turn.settings),
  terminalsFolder: turn?.settings.workspace?.terminalsFolder ?? session.state.run?.workspace.terminalsFolder ?? "",
  subagents: {
    subagentModel: subagentModel ?? turn?.settings.model ?? "",
    customSubagents: turn?.settings.subagents ?? [],
    conversationId: turn?.conversationId ?? ""
  }
})

/** Carries a tool machine's step out: an exec or a question to send, a chunk to show, work for the server, or the final result (returned). */
const advance = (session: Session, operation: RunningOperation, step: ToolStep): Effect.Effect<ToolDone | WorkToDo | undefined> =>
  Effect.gen(function*() {
    const ids = { toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }
    switch (step._tag) {
      case "Exec": {
        operation.run = step.run
        const sent = Dialect.encodeExec(session.correlation, { operationId: operation.operationId, toolCallId: operation.toolCallId, exec: step.exec })
        session.correlation = sent.correlation
        yield* write(session, [sent.message])
        // A subagent starts: Cursor's card shows it running from the checkpoint.
        if (step.exec.case === "subagentArgs") yield* announceRunning(session, operation)
        return undefined
      }
      case "Query": {
        operation.run = step.run
        const sent = Dialect.encodeQuery(session.correlation, { operationId: operation.operationId, toolCallId: operation.toolCallId, query: step.query })
        session.correlation = sent.correlation
        yield* write(session, [sent.message])
        return undefined
      }
      case "Work": {
        operation.run = step.run
        return { _tag: "Work", operation, run: step.run, work: step.work } satisfies WorkToDo
      }
      case "Continue": {
        operation.run = step.run
        if (step.delta !== undefined) yield* write(session, [Dialect.encodeToolDelta(ids, step.delta)])
        return undefined
      }
      case "Done": {
        const completedAtMs = yield* Clock.currentTimeMillis
        const { outcome } = step
        session.cursorToolCalls[operation.toolCallId] = outcome.cursor
        if (outcome.todos !== undefined) session.todos = outcome.todos
        if (outcome.plan !== undefined) session.plans = [...session.plans.filter((plan) => plan.id !== outcome.plan!.id), outcome.plan]
        if (outcome.subagent !== undefined) session.subagentRuns.push({ ...outcome.subagent, completedAtMs })
        session.operations.delete(operation.operationId)
        yield* write(session, [Dialect.encodeToolCompleted(ids, outcome.cursor, { startedAtMs: operation.startedAtMs, completedAtMs })])
        return {
          conversationId: operation.conversationId,
          message: outcome.message,
          inputId: `${operation.operationId}:result`
        }
      }
    }
  })

/** Ends an operation with a step the server decided (the user stopped a subagent): its final result, if it is one. */
export const finishOperation = (session: Session, operation: RunningOperation, step: ToolStep): Effect.Effect<ToolDone | undefined> =>
  Effect.map(advance(session, operation, step), doneOnly)

/** Starts a dispatched tool call on the session: its first exec, or its result when the server does it itself. */
export const startOperation = (session: Session, turn: TurnRef, dispatched: DispatchedOperation, subagentModel?: string) =>
  Effect.gen(function*() {
    const startedAtMs = yield* Clock.currentTimeMillis
    const operation: RunningOperation = {
      operationId: dispatched.operationId,
      conversationId: turn.conversationId,
      toolCallId: dispatched.toolCall.id,
      modelCallId: dispatched.modelCallId,
      startedAtMs,
      run: undefined
    }
    session.operations.set(operation.operationId, operation)
    const { started, step } = Tools.startTool(dispatched.toolCall, toolContext(session, turn, subagentModel))
    yield* write(session, [Dialect.encodeToolStarted({ toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }, started, startedAtMs)])
    // A tool starts with an exec, a question or its result; never with the server's work (that follows an approval).
    return doneOnly(yield* advance(session, operation, step))
  })

/** An exec answer from the client: the running exec it belongs to, its tool machine's next step. */
export const onExecReply = (
  session: Session,
  id: number,
  execId: string | undefined,
  next: (run: ToolRun) => ToolStep,
  finished: boolean
): Effect.Effect<ToolDone | WorkToDo | undefined> =>
  Effect.gen(function*() {
    const exec = Dialect.resolveExec(session.correlation, id, execId)
    const operation = exec === undefined ? undefined : session.operations.get(exec.operationId)
    if (exec === undefined || operation === undefined || operation.run === undefined) {
      yield* Effect.logDebug(`transport: exec answer for unknown exec ${id}${execId === undefined ? "" : ` (${execId})`} dropped`)
      return undefined
    }
    if (finished) session.correlation = Dialect.completeExec(session.correlation, exec.id)
    // An exec answer may lead to a wait (AwaitShell reads a running shell's output again later).
    return yield* advance(session, operation, next(operation.run))
  })

/**
 * The client's answer to a question: the waiting question it belongs to, its tool machine's next
 * step. An answer to no waiting question (unknown, answered already, or for an operation that
 * ended), or of another kind than the question, changes nothing: logged, dropped.
 */
export const onQueryReply = (session: Session, id: number, reply: QueryReply | undefined): Effect.Effect<ToolDone | WorkToDo | undefined> =>
  Effect.gen(function*() {
    const query = Dialect.resolveQuery(session.correlation, id)
    const operation = query === undefined ? undefined : session.operations.get(query.operationId)
    if (query === undefined || operation === undefined || operation.run === undefined) {
      yield* Effect.logInfo(`transport: ${session.requestId}: an answer to interaction query ${id}, which is not waiting; acknowledged, nothing changed`)
      return undefined
    }
    const run = operation.run
    if (reply === undefined || !Tools.isQueryRun(run) || !Tools.acceptsReply(run, reply)) {
      yield* Effect.logWarning(`transport: ${session.requestId}: interaction query ${id} (${run.call.name}) answered with ${reply?.case ?? "an unknown case"}; acknowledged, still waiting`)
      return undefined
    }
    session.correlation = Dialect.completeQuery(session.correlation, id)
    return yield* advance(session, operation, Tools.onQueryReply(run, reply))
  })

/**
 * What the server's work gave, for the operation that asked for it: its final result. Nothing
 * when the operation is gone (the turn was canceled or ended meanwhile).
 */
export const onWorkDone = (session: Session, todo: WorkToDo, result: Tools.WorkResult): Effect.Effect<ToolDone | WorkToDo | undefined> =>
  Effect.gen(function*() {
    const operation = session.operations.get(todo.operation.operationId)
    const run = operation?.run
    if (operation === undefined || run !== todo.run) {
      yield* Effect.logDebug(`transport: ${session.requestId}: ${todo.run.call.name} finished after its turn moved on; dropped`)
      return undefined
    }
    switch (run._tag) {
      case "WebSearch":
      case "WebFetch":
        return yield* advance(session, operation, Tools.onWorkDone(run, result))
      case "AwaitShell":
        return yield* advance(session, operation, Tools.onAwaitSlept(run, result))
      default:
        yield* Effect.logWarning(`transport: ${session.requestId}: work done for ${run.call.name}, which does none; dropped`)
        return undefined
    }
  })
