/**
 * Subagents on the client side of a turn. Cursor runs a parent's Task as a child agent run of
 * its own, carrying `x-parent-request-id` and `x-parent-agent-tool-call-id`: the child's session
 * records that parent (`ParentLink`), its turn's settings name it, and the parent's waiting Task
 * learns the child's conversation (its agent id). The user's `cancel_subagent_action` on the
 * parent cancels that child's turn and ends the parent's Task with a result saying so
 * (`session/ToolCalls.ts`, `ClientInput.ts`); a `subagent_result` that comes after (or for no
 * waiting Task) changes nothing.
 */
import { Effect } from "effect"
import * as Dialect from "../Dialect.js"
import { findTask, SessionInput, sessionTransition } from "../Session.js"
import { write } from "./Session.js"
import type { Session } from "./Session.js"
import type { SessionsService } from "./Sessions.js"

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
 * A child's turn starts: the parent's waiting Task learns the child's conversation (the
 * machine's `ChildAttached` on the parent's session). A child that names a parent not waiting
 * here (another process, or none) runs as a conversation of its own.
 */
export const attachChild = (sessions: SessionsService, child: Session, conversationId: string): Effect.Effect<void> => {
  const parent = child.parent
  if (parent === undefined) return Effect.void
  const parentSession = sessions.get(parent.requestId)
  if (parentSession === undefined || findTask(parentSession.state, parent.toolCallId) === undefined) {
    return Effect.logWarning(
      `transport: ${child.requestId}: a subagent run names parent request ${parent.requestId} and tool call ${parent.toolCallId}, which is not waiting here; it runs as a conversation of its own`
    )
  }
  const step = sessionTransition(parentSession.state, SessionInput.ChildAttached({ toolCallId: parent.toolCallId, child: { conversationId, requestId: child.requestId } }))
  parentSession.state = step.state
  const messages = step.commands.flatMap((command) => (command._tag === "Write" ? command.messages : []))
  return Effect.zipRight(
    Effect.logDebug(`transport: subagent ${conversationId} (request ${child.requestId}) runs for ${parent.toolCallId} of ${parent.requestId}`),
    write(parentSession, messages)
  )
}

/** The child conversations of this process running subagent `subagentId` (its agent id is the child's conversation). */
export const childSessionsOf = (sessions: SessionsService, subagentId: string): ReadonlyArray<string> =>
  [...sessions.entries()].flatMap(([, session]) => (session.parent !== undefined && session.state.conversationId === subagentId ? [subagentId] : []))
