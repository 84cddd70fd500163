/**
 * Subagents on the client side of a turn. Cursor runs a parent's Task as a child agent run of
 * its own, carrying `x-parent-request-id` and `x-parent-agent-tool-call-id`: the child's session
 * records that parent (`ParentLink`), its turn's settings name it, and the parent's waiting Task
 * learns the child's conversation (its agent id). The user's `cancel_subagent_action` on the
 * parent cancels that child's turn and ends the parent's Task with a result saying so; a
 * `subagent_result` that comes after (or for no waiting Task) changes nothing.
 */
import { Effect } from "effect"
import * as Dialect from "../Dialect.js"
import * as Tools from "../Tools.js"
import type { Session } from "./Session.js"
import type { SessionsService } from "./Sessions.js"
import { announceRunning, finishOperation } from "./ToolOps.js"
import type { ToolDone } from "./ToolOps.js"

const header = (headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>, name: string): string => {
  const value = headers[name]
  return (typeof value === "string" ? value : value?.[0] ?? "").trim()
}

/** The parent a request's headers name: both headers, or none (one alone names no parent). */
export const parentLinkOf = (headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>): Dialect.ParentLink | undefined => {
  const requestId = header(headers, "x-parent-request-id")
  const toolCallId = header(headers, "x-parent-agent-tool-call-id")
  return requestId !== "" && toolCallId !== "" ? { requestId, toolCallId } : undefined
}

/** The first request of a child run that names its parent sets it on the session. */
export const linkParent = (session: Session, parent: Dialect.ParentLink | undefined): void => {
  if (parent !== undefined && session.parent === undefined) session.parent = parent
}

/**
 * A child's turn starts: the parent's waiting Task learns the child's conversation. A child that
 * names a parent not waiting here (another process, or none) runs as a conversation of its own.
 */
export const attachChild = (sessions: SessionsService, child: Session, conversationId: string): Effect.Effect<void> => {
  const parent = child.parent
  if (parent === undefined) return Effect.void
  const operation = findTask(sessions.get(parent.requestId), parent.toolCallId)
  if (operation === undefined) {
    return Effect.logWarning(
      `transport: ${child.requestId}: a subagent run names parent request ${parent.requestId} and tool call ${parent.toolCallId}, which is not waiting here; it runs as a conversation of its own`
    )
  }
  operation.child = { conversationId, requestId: child.requestId }
  const parentSession = sessions.get(parent.requestId)!
  return Effect.zipRight(
    Effect.logDebug(`transport: subagent ${conversationId} (request ${child.requestId}) runs for ${parent.toolCallId} of ${parent.requestId}`),
    announceRunning(parentSession, operation)
  )
}

const findTask = (session: Session | undefined, toolCallId: string) =>
  session === undefined ? undefined : [...session.operations.values()].find((operation) => operation.toolCallId === toolCallId && operation.run?._tag === "Task")

/** The child sessions running a subagent: by its agent id (the child's conversation). */
const childSessionsOf = (sessions: SessionsService, subagentId: string): ReadonlyArray<Session> =>
  [...sessions.entries()].map(([, session]) => session).filter((session) => session.parent !== undefined && session.state.conversationId === subagentId)

export interface CanceledSubagent {
  /** The parent's Task result to submit (undefined when no Task of this request waits for it). */
  readonly done: ToolDone | undefined
  /** The child conversations to cancel. */
  readonly children: ReadonlyArray<string>
}

/**
 * The user stopped subagent `subagentId` from the parent's request: the child conversations to
 * cancel, and the parent's Task ended with a result saying the user stopped it.
 */
export const cancelSubagent = (sessions: SessionsService, parent: Session, subagentId: string): Effect.Effect<CanceledSubagent> =>
  Effect.gen(function*() {
    const byChild = [...parent.operations.values()].find((operation) => operation.child?.conversationId === subagentId && operation.run?._tag === "Task")
    const children = new Set(childSessionsOf(sessions, subagentId).map((session) => session.state.conversationId!))
    if (byChild?.child !== undefined) children.add(byChild.child.conversationId)
    if (byChild === undefined || byChild.run?._tag !== "Task") {
      if (children.size === 0) yield* Effect.logInfo(`transport: ${parent.requestId}: cancel_subagent_action for ${subagentId}, which does not run here; nothing changed`)
      return { done: undefined, children: [...children] }
    }
    const done = yield* finishOperation(parent, byChild, Tools.onSubagentStopped(byChild.run, subagentId))
    return { done, children: [...children] }
  })
