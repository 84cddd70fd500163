/**
 * Which connections the proxy decrypts, and where each decrypted request goes. Only Cursor's
 * API hosts are decrypted; of their procedures, those this server owns are answered here and
 * the rest reach Cursor unchanged (or, offline, are answered here too).
 */
import { isCursorHost, isTabHost } from "../../transport/Policy.js"
import { RUN_PATH } from "../../transport/Run.js"
import { BIDI_APPEND_PATH, RUN_SSE_PATH } from "../../transport/Service.js"
import { canonicalName } from "./Leaves.js"

/**
 * Cursor's API hosts, however a CONNECT spells them (the same names the request policy lets in
 * from the proxy); Tab's own hosts only while Tab is answered here (`tab`).
 */
export const isInterceptedHost = (host: string, tab: boolean) => {
  const name = canonicalName(host)
  return isTabHost(name) ? tab : isCursorHost(name)
}

/** The agent procedures: the turn itself, on either wire. */
export const agentProcedures: ReadonlyArray<string> = [RUN_PATH, RUN_SSE_PATH, BIDI_APPEND_PATH]

/** A request target's path, without its query. */
export const pathOf = (url: string): string => url.split("?")[0] ?? url

export interface RoutingTable {
  /** Answered here even with a Cursor account. */
  readonly local: ReadonlySet<string>
  /** No Cursor account: every procedure is answered here (the account calls by a local identity). */
  readonly offline: boolean
  /** Tab is answered here (its hosts decrypted, its procedures in `local`); off when absent. */
  readonly tab?: boolean
}

export type Route = "local" | "origin"

export const routeOf = (table: RoutingTable, url: string): Route => {
  const path = pathOf(url)
  if (table.offline || table.local.has(path) || agentProcedures.includes(path)) return "local"
  return "origin"
}
