/**
 * What the start says once every listener is bound and requests are served: the models, where
 * each listener is, the console's address, and the next step (point Cursor here with `setup`
 * when it has not been, else check the hookup with `doctor`).
 */
import { existsSync } from "node:fs"
import * as Os from "node:os"
import type { ServerConfig } from "./Config.js"
import * as CursorSettings from "./hookup/CursorSettings.js"
import * as Store from "./Store.js"

/** The bound ports (an ephemeral one as bound). */
export interface BoundPorts {
  readonly main: number
  readonly cleartext: number | undefined
  readonly tls: number | undefined
  readonly proxy: number | undefined
}

/** True when `setup` has pointed this user's Cursor here (its journal of the settings it changed is there). */
const cursorPointedHere = (): boolean => {
  try {
    const settings = CursorSettings.defaultSettingsPath(process.platform, process.env, Os.homedir())
    return existsSync(CursorSettings.defaultJournalPath(settings))
  } catch {
    return false
  }
}

/** The lines the start logs (one entry each). */
export const readyLines = (config: ServerConfig, ports: BoundPorts, pointedHere: boolean = cursorPointedHere()): ReadonlyArray<string> => {
  const host = config.host.includes(":") ? `[${config.host}]` : config.host
  const models = config.models.map((model) => model.id)
  return [
    `cursor-byok is ready: ${models.length === 0 ? "no models yet (add a provider key or a config file: see the README)" : `${models.length} model${models.length === 1 ? "" : "s"} (${models.join(", ")})`}, history in ${Store.displayDatabase(config.database)}`,
    `listening: RunSSE + BidiAppend and the side calls on http://${host}:${ports.main}` +
      (ports.cleartext === undefined ? "" : `, Run (h2c) on http://${host}:${ports.cleartext}`) +
      (ports.tls === undefined ? "" : `, Run (TLS) on https://${host}:${ports.tls}`) +
      (ports.proxy === undefined ? "" : `, the proxy for Cursor on http://127.0.0.1:${ports.proxy}${config.proxy.offline ? " (offline)" : ""}`),
    `console: http://${host}:${ports.main}/console`,
    config.tab === undefined
      ? "Tab: answered by Cursor (a `tab` section in the configuration answers it from your own model: see the README)"
      : `Tab: ${config.tab.model} (${config.tab.api}${config.tab.chat === undefined ? ` at ${config.tab.target.baseUrl}` : ""}), answered here`,
    pointedHere
      ? "next: `npx cursor-byok doctor` checks that Cursor reaches this server"
      : "next: point Cursor here with `npx cursor-byok setup` (once), then restart Cursor; `npx cursor-byok doctor` checks it"
  ]
}
