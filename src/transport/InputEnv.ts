/** What handing on a client's messages needs beyond the session, as the session modules see it (`ClientInput.ts` makes it). */
import { Effect } from "effect"
import type { Context } from "effect"
import type { TurnWebTools } from "../Loop.js"
import type { Runner } from "../Runner.js"
import * as Tools from "../Tools.js"
import type { Session, SessionEnv, Taken } from "./Session.js"
import type { SessionsService } from "./Sessions.js"

/** The web work the server does itself for approved tool calls (search and fetch), and which of it it can do now. */
export interface ServerWorker {
  readonly capabilities: () => TurnWebTools
  readonly perform: (work: WebWork) => Effect.Effect<Tools.WorkResult>
}

/** The work a `ServerWorker` does: all but waiting, which needs no service (`startWork` sleeps itself). */
export type WebWork = Exclude<Tools.ServerWork, { readonly _tag: "Sleep" }>

/** A server that does no work of its own: the web tools are never offered. */
export const noServerWork: ServerWorker = {
  capabilities: () => ({ search: false, fetch: false }),
  perform: () => Effect.succeed(Tools.WorkResult.Failed({ error: "This server does no web work.", refused: true }))
}

/** What handing on a client message needs beyond the session: the runner, the registry, and `handOn` (for `Recovery.ts`). */
export interface InputEnv extends SessionEnv {
  readonly runner: Context.Tag.Service<Runner>
  readonly sessions: SessionsService
  readonly worker: ServerWorker
  readonly handOn: (session: Session, ready: ReadonlyArray<Taken>) => Effect.Effect<void>
}

