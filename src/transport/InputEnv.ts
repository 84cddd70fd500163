/** What handing on a client's messages needs beyond the session, as the session modules see it (`ClientInput.ts` makes it). */
import { Effect } from "effect"
import type { Context } from "effect"
import type { ClusterService } from "../Cluster.js"
import type { TurnWebTools } from "../Loop.js"
import type { Runner, StartedTurn } from "../Runner.js"
import type { SessionCommand } from "../Session.js"
import * as Tools from "../Tools.js"
import type { Admission } from "../users/Admit.js"
import type { Session, SessionEnv } from "./Session.js"
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

/** The commands of the session machine carried out by `ClientInput.ts` and `Recovery.ts` (the driver's own are in `Driver.ts`). */
export type EffectCommand = Extract<SessionCommand, { readonly _tag: "StartTurn" | "Deliver" | "Resume" | "End" | "WatchGaps" | "StartWork" | "StopSubagent" }>

/** What the driver needs beyond the session: the runner, the registry, the worker, and the commands carried out elsewhere. */
export interface InputEnv extends SessionEnv {
  readonly runner: Context.Tag.Service<Runner>
  readonly sessions: SessionsService
  readonly worker: ServerWorker
  readonly carryOut: (session: Session, command: EffectCommand) => Effect.Effect<void>
  /** Replays the end of a turn an earlier process ended (`Recovery.replayEnd`). */
  readonly replayEnd: (session: Session, ended: Extract<StartedTurn, { readonly _tag: "Ended" }>) => Effect.Effect<void>
  /** Whether the session's caller may start or resume a turn (`users/Admit.ts`): the refusal, or undefined. */
  readonly admit: Admission
  /** The other instances on the database, if any: where a resumed turn runs (`Resume.ts`). */
  readonly cluster: ClusterService
}

