/**
 * Whose a request's session is: the caller of its first request (the door's, `Door.callerOf`)
 * owns it; on a team's server another user's append, reader or resume of it is refused. The
 * operator's token and one person's server (`Local`) are refused nothing.
 */
import type { Caller } from "../Users.js"
import { ConnectError } from "./Connect.js"
import type { Session } from "./Session.js"

/** Whether `caller` may act on a session opened by `owner`. */
export const mayAct = (owner: Caller | undefined, caller: Caller | undefined): boolean =>
  owner === undefined || caller === undefined || owner._tag !== "User" || caller._tag !== "User" || owner.user.userId === caller.user.userId

/** The refusal of `caller` acting on `session` (none: no session yet), or undefined. */
export const callerRefusal = (session: Session | undefined, caller: Caller | undefined): ConnectError | undefined =>
  session === undefined || mayAct(session.caller, caller) ? undefined : new ConnectError("permission_denied", "this request belongs to another user's session")

/** Records the session's first caller; a refusal when `caller` is another user than the one who opened it. */
export const linkCaller = (session: Session, caller: Caller | undefined): ConnectError | undefined => {
  const refused = callerRefusal(session, caller)
  if (refused === undefined && caller !== undefined && (session.caller === undefined || (session.caller._tag !== "User" && caller._tag === "User"))) {
    session.caller = caller
  }
  return refused
}
