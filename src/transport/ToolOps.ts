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
import type { DispatchedOperation, TurnRef } from "../Runner.js"
import * as Tools from "../Tools.js"
import type { ToolRun, ToolStep } from "../Tools.js"
import { write } from "./Session.js"
import type { RunningOperation, Session } from "./Session.js"

/** A tool call's final result, for the runner. */
export interface ToolDone {
  readonly conversationId: string
  readonly message: ToolResultMessage
  /** Stable across redeliveries: the runner applies it once. */
  readonly inputId: string
}

export const toolContext = (session: Session, turn: TurnRef | undefined): Tools.ToolContext => ({
  mcpTools: session.run?.mcpTools ?? (turn === undefined ? [] : Dialect.mcpToolsOf(turn.settings)),
  todos: session.todos
})

/** Carries a tool machine's step out: an exec to send, a chunk to show, or the final result (returned). */
const advance = (session: Session, operation: RunningOperation, step: ToolStep): Effect.Effect<ToolDone | undefined> =>
  Effect.gen(function*() {
    const ids = { toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }
    switch (step._tag) {
      case "Exec": {
        operation.run = step.run
        const sent = Dialect.encodeExec(session.correlation, { operationId: operation.operationId, toolCallId: operation.toolCallId, exec: step.exec })
        session.correlation = sent.correlation
        yield* write(session, [sent.message])
        return undefined
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

/** Starts a dispatched tool call on the session: its first exec, or its result when the server does it itself. */
export const startOperation = (session: Session, turn: TurnRef, dispatched: DispatchedOperation) =>
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
    const { started, step } = Tools.startTool(dispatched.toolCall, toolContext(session, turn))
    yield* write(session, [Dialect.encodeToolStarted({ toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }, started, startedAtMs)])
    return yield* advance(session, operation, step)
  })

/** An exec answer from the client: the running exec it belongs to, its tool machine's next step. */
export const onExecReply = (
  session: Session,
  id: number,
  execId: string | undefined,
  next: (run: ToolRun) => ToolStep,
  finished: boolean
): Effect.Effect<ToolDone | undefined> =>
  Effect.gen(function*() {
    const exec = Dialect.resolveExec(session.correlation, id, execId)
    const operation = exec === undefined ? undefined : session.operations.get(exec.operationId)
    if (exec === undefined || operation === undefined || operation.run === undefined) {
      yield* Effect.logDebug(`transport: exec answer for unknown exec ${id}${execId === undefined ? "" : ` (${execId})`} dropped`)
      return undefined
    }
    if (finished) session.correlation = Dialect.completeExec(session.correlation, exec.id)
    return yield* advance(session, operation, next(operation.run))
  })
