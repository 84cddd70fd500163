/**
 * `setup` and `unsetup`: the reversible changes that point Cursor at this server. Setup makes the
 * CA (once), writes Cursor's proxy settings and its HTTP/2 switch (off by default: the agent on
 * RunSSE + BidiAppend through the proxy; `--http2` for `Run` on the TLS listener) with a journal
 * of the previous values, and prints (or, with `--trust`, runs) what makes the OS trust the CA;
 * unsetup restores the settings and prints what removes the CA's trust.
 */
import { Console, Effect, Schema } from "effect"
import * as Os from "node:os"
import * as Config from "../Config.js"
import type { ServerConfig } from "../Config.js"
import * as Ca from "./Ca.js"
import * as CursorSettings from "./CursorSettings.js"
import * as Trust from "./Trust.js"

export class SetupError extends Schema.TaggedError<SetupError>("cursor-byok/SetupError")("SetupError", {
  message: Schema.String
}) {}

export const settingsPathOf = (override: string | undefined) =>
  override ?? CursorSettings.defaultSettingsPath(process.platform, process.env, Os.homedir())

/** The proxy's URL as Cursor's `http.proxy` holds it (loopback for a wildcard host). */
export const proxyUrlFor = (config: ServerConfig) =>
  `http://${config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host}:${config.proxy.port ?? 8788}`

/**
 * What setup writes into Cursor's settings: by default `cursor.general.disableHttp2: true`, so
 * Cursor runs its agent on RunSSE + BidiAppend through the proxy; `http2` (`setup --http2`)
 * writes `false`, so Cursor's HTTP/2 client runs `Run` on the TLS listener.
 */
export const desiredFor = (config: ServerConfig, path: CursorSettings.AgentPath = "http1") =>
  CursorSettings.desired({ proxyUrl: proxyUrlFor(config), disableHttp2: path === "http1" })

/** One line naming a path and where this configuration serves it. */
export const describePath = (config: ServerConfig, path: CursorSettings.AgentPath) =>
  path === "http1"
    ? `HTTP/1.1: the agent on RunSSE + BidiAppend through the proxy (${proxyUrlFor(config)})`
    : `HTTP/2: the agent on Run at the TLS listener (${config.http2.tls === undefined ? "off: http2.tls is null" : `https://${config.host}:${config.http2.tls.port}`})`

/** The path `setup`'s flags ask for, or why they cannot be had with this configuration. */
const pathOf = (config: ServerConfig, flags: { readonly http1?: boolean | undefined; readonly http2?: boolean | undefined }) => {
  if (flags.http1 === true && flags.http2 === true) return Effect.fail(new SetupError({ message: "--http1 and --http2 exclude each other (HTTP/1.1 is the default)" }))
  if (flags.http2 !== true) return Effect.succeed<CursorSettings.AgentPath>("http1")
  return config.http2.tls === undefined
    ? Effect.fail(new SetupError({ message: "--http2 needs the TLS listener (http2.tls is null): Cursor's HTTP/2 agent client ignores http.proxy. Turn http2.tls on, or run `setup` without --http2" }))
    : Effect.succeed<CursorSettings.AgentPath>("http2")
}

const show = (value: unknown) => value === undefined ? "(absent)" : JSON.stringify(value)

const printSummary = (summary: CursorSettings.Summary) =>
  Effect.gen(function*() {
    yield* Console.log(`Cursor settings: ${summary.settingsPath} (${summary.file})`)
    for (const change of summary.changes) yield* Console.log(`  ${change.key}: ${show(change.before)} -> ${show(change.after)}`)
    for (const left of summary.leftAlone) yield* Console.log(`  ${left.key}: left as ${show(left.current)} (changed since setup)`)
  })

const trustOptions = (authority: Ca.Authority) =>
  Effect.map(Trust.systemStore, (systemStore): Trust.TrustOptions => ({ commonName: authority.commonName, home: Os.homedir(), systemStore }))

const printCommands = (title: string, commands: ReadonlyArray<Trust.TrustCommand>) =>
  Effect.gen(function*() {
    yield* Console.log(title)
    for (const command of commands) {
      yield* Console.log(`  # ${command.description}`)
      yield* Console.log(`  ${command.needsAdmin && process.platform !== "win32" ? "sudo " : ""}${Trust.formatCommand(command.command, process.platform)}`)
    }
  })

export interface SetupOptions {
  readonly settingsPath: string | undefined
  readonly trust: boolean
  /** HTTP/2 `Run` on the TLS listener instead of the default HTTP/1.1 through the proxy. */
  readonly http2?: boolean | undefined
  /** The default, accepted for the scripts that pass it. */
  readonly http1?: boolean | undefined
}

export const setup = (options: SetupOptions) =>
  Effect.gen(function*() {
    const config = yield* Config.load
    if (config.proxy.port === undefined) {
      return yield* new SetupError({ message: "the proxy is off (proxy.port is null or BYOK_PROXY_PORT=off): setup points Cursor at the proxy, so turn it on first" })
    }
    const path = yield* pathOf(config, options)
    const authority = yield* Ca.ensure(config.home)
    const settingsPath = settingsPathOf(options.settingsPath)
    const summary = yield* CursorSettings.setup(settingsPath, CursorSettings.defaultJournalPath(settingsPath), desiredFor(config, path))
    yield* printSummary(summary)
    yield* Console.log(`Cursor's agent: ${describePath(config, path)}${path === "http1" ? " (`setup --http2` for HTTP/2)" : " (`setup` without --http2 for HTTP/1.1)"}`)
    yield* Console.log(`CA: ${authority.certPath} (${authority.commonName}; it may sign only ${[...Ca.permitted.dns, ...Ca.permitted.ip].join(", ")})`)
    const commands = Trust.trustCommands(process.platform, authority.certPath, yield* trustOptions(authority))
    const extra = Trust.nodeExtraCaCerts(process.platform, authority.certPath)
    if (options.trust) {
      const outcomes = yield* Trust.runCommands(commands)
      let failed = 0
      for (const outcome of outcomes) {
        const result = outcome.result
        const line = result._tag === "Ran"
          ? result.exitCode === 0 ? "done" : `failed (exit ${result.exitCode}): ${result.stderr.trim()}`
          : result._tag === "NeedsAdmin"
          ? `needs admin rights: run it yourself: sudo ${Trust.formatCommand(outcome.command.command, process.platform)}`
          : `failed: ${result.message}`
        if (line !== "done") failed++
        yield* Console.log(`  ${outcome.command.description}: ${line}`)
      }
      if (failed > 0) yield* Console.log(`${failed} of ${outcomes.length} trust steps did not complete (see above)`)
    } else {
      yield* printCommands("Trust the CA on this machine (or run `cursor-byok setup --trust`):", commands)
    }
    yield* Console.log(`For Cursor's Node processes and the Cursor CLI: ${extra.description}\n  ${extra.line}`)
    yield* Console.log("Then start the server (`cursor-byok serve`, or `npm start`), restart Cursor, and check with `cursor-byok doctor`. `cursor-byok unsetup` undoes the settings.")
  })

export const unsetup = (options: { readonly settingsPath: string | undefined }) =>
  Effect.gen(function*() {
    const config = yield* Config.load
    const settingsPath = settingsPathOf(options.settingsPath)
    const summary = yield* CursorSettings.unsetup(settingsPath, CursorSettings.defaultJournalPath(settingsPath))
    yield* printSummary(summary)
    const authority = yield* Ca.load(config.home).pipe(Effect.option)
    if (authority._tag === "Some") {
      yield* printCommands(
        "To stop trusting the CA as well (it can sign only Cursor's and loopback names, so keeping it is safe):",
        Trust.untrustCommands(process.platform, authority.value.certPath, yield* trustOptions(authority.value))
      )
    }
  })
