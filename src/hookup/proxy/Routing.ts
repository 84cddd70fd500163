/**
 * Which connections the proxy decrypts, and where each decrypted request goes. Only Cursor's
 * API hosts are decrypted; of their procedures, those this server owns are answered here and
 * the rest reach Cursor unchanged (or, offline, are answered here too).
 */
import { RUN_PATH } from "../../transport/Run.js"

/** Cursor's API hosts: api2 and api3, and the agent hosts under api5 (`agent.api5.cursor.sh`, `agentn.api5.cursor.sh`). */
export const isInterceptedHost = (host: string) => {
  const name = host.toLowerCase().replace(/\.$/, "")
  return name === "api2.cursor.sh" || name === "api3.cursor.sh" || name === "api5.cursor.sh" || name.endsWith(".api5.cursor.sh")
}

/** The agent procedures: the turn itself, on either wire. */
export const agentProcedures: ReadonlyArray<string> = [RUN_PATH, "/agent.v1.AgentService/RunSSE", "/aiserver.v1.BidiService/BidiAppend"]

/** A request target's path, without its query. */
export const pathOf = (url: string): string => url.split("?")[0] ?? url

export interface RoutingTable {
  /** Answered here even with a Cursor account. */
  readonly local: ReadonlySet<string>
  /** No Cursor account: every procedure is answered here (the account calls by a local identity). */
  readonly offline: boolean
}

export type Route = "local" | "origin"

export const routeOf = (table: RoutingTable, url: string): Route => {
  const path = pathOf(url)
  if (table.offline || table.local.has(path) || agentProcedures.includes(path)) return "local"
  return "origin"
}
