/**
 * `setup` and `unsetup`: the reversible changes that point Cursor at this server. Setup makes the
 * CA (once), writes Cursor's proxy settings and its HTTP/2 switch (off by default: the agent on
 * RunSSE + BidiAppend through the proxy; `--http2` for `Run` on the TLS listener) with a journal
 * of the previous values, and prints (or, with `--trust`, runs) what makes the OS trust the CA.
 * A proxy of the user's own in Cursor's `http.proxy` becomes the server's upstream
 * (`hookup/UserProxy.ts`). A settings file that is not there is refused unless `--create`.
 * unsetup restores the settings (and the configuration's upstream) and prints what removes the
 * CA's trust; with nothing to undo it says so.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Console, Effect, Either } from "effect"
import * as Os from "node:os"
import * as NodePath from "node:path"
import * as Config from "../Config.js"
import type { ServerConfig } from "../Config.js"
import * as Ca from "./Ca.js"
import * as CursorSettings from "./CursorSettings.js"
import * as Trust from "./Trust.js"
import * as UserProxy from "./UserProxy.js"
import { SetupError } from "./SetupError.js"
import * as Team from "./Team.js"

export { SetupError } from "./SetupError.js"

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

/** A settings value as printed; a proxy URL's password is not. */
const show = (value: unknown) => value === undefined ? "(absent)" : JSON.stringify(typeof value === "string" ? UserProxy.shown(value) : value)

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
  /** Make a settings file (and its folder) that does not exist yet. */
  readonly create?: boolean | undefined
  /** A team's server and this developer's token on it (`Team.ts`). */
  readonly team?: { readonly server: string; readonly token: string } | undefined
}

/**
 * A settings file that is not there: `--settings PATH` must name an existing file, the default
 * path an existing folder (Cursor writes the file itself only once a setting changes), unless
 * `--create`.
 */
const checkSettingsPath = (override: string | undefined, settingsPath: string, create: boolean) =>
  Effect.gen(function*() {
    if (create) return
    const fs = yield* FileSystem.FileSystem
    const exists = (path: string) => fs.exists(path).pipe(Effect.orElseSucceed(() => false))
    if (yield* exists(settingsPath)) return
    const folder = NodePath.dirname(settingsPath)
    if (override !== undefined) {
      return yield* new SetupError({
        message: `${settingsPath} does not exist${(yield* exists(folder)) ? "" : ` (nor its folder ${folder})`}: check the path given to --settings, or add --create to make it`
      })
    }
    if (!(yield* exists(folder))) {
      return yield* new SetupError({ message: `${folder} does not exist: is Cursor installed and started once? Name the settings file with --settings PATH, or add --create to make it` })
    }
  })

/** Cursor's `http.proxy` before this setup (undefined when the file or the key is absent, or the file does not parse: setup reports that). */
const existingProxyOf = (settingsPath: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* CursorSettings.readIfExists(fs, settingsPath).pipe(Effect.orElseSucceed(() => undefined))
    const values = CursorSettings.parseSettings(settingsPath, text ?? "")
    return Either.isRight(values) ? values.right["http.proxy"] : undefined
  })

/** One line on what became of the user's own proxy. */
const printAdopted = (adopted: UserProxy.Adopted, env: Readonly<Record<string, string | undefined>>) =>
  Effect.gen(function*() {
    switch (adopted._tag) {
      case "None":
        return
      case "Adopted":
        yield* Console.log(`Your proxy ${UserProxy.shown(adopted.url)} is now the server's upstream (proxy.upstream in ${NodePath.resolve(adopted.configPath)}${adopted.created ? ", created" : ""}; a running server takes it at its restart; \`unsetup\` takes it out)`)
        break
      case "Already":
        yield* Console.log(`Your proxy ${UserProxy.shown(adopted.url)} is the server's upstream already (proxy.upstream in ${NodePath.resolve(adopted.configPath)})`)
        break
      case "Kept":
        return yield* Console.log(`Your Cursor proxy was ${UserProxy.shown(adopted.url)}; the server keeps the upstream ${UserProxy.shown(adopted.current)} that ${NodePath.resolve(adopted.configPath)} names (proxy.upstream, left as it is)`)
      case "Unusable":
        return yield* Console.log(`Your Cursor proxy ${UserProxy.shown(adopted.url)} cannot be the server's upstream (${adopted.why}): set proxy.upstream to an http:// proxy yourself, or Cursor's traffic will go out directly`)
    }
    const override = env["BYOK_UPSTREAM_PROXY"]
    if (override !== undefined && override !== "" && override !== adopted.url) {
      yield* Console.log(`  (BYOK_UPSTREAM_PROXY=${UserProxy.shown(override)} is set here and wins over it while it is)`)
    }
  })

export const setup = (options: SetupOptions) =>
  Effect.gen(function*() {
    const source = yield* Config.locate
    const config = yield* Config.loadFrom(source)
    if (config.proxy.port === undefined) {
      return yield* new SetupError({ message: "the proxy is off (proxy.port is null or BYOK_PROXY_PORT=off): setup points Cursor at the proxy, so turn it on first" })
    }
    const path = yield* pathOf(config, options)
    const settingsPath = settingsPathOf(options.settingsPath)
    yield* checkSettingsPath(options.settingsPath, settingsPath, options.create === true)
    const authority = yield* Ca.ensure(config.home)
    if (options.team !== undefined) {
      const pointed = yield* Team.pointAtTeam({ ...options.team, configPath: source.path })
      yield* Console.log(`Cursor's agent goes to the team's server ${pointed.server} with your token (proxy.upstreamServer and proxy.upstreamToken in ${NodePath.resolve(pointed.configPath)}${pointed.created ? ", created" : ""}; kept private); a running server takes it at its restart`)
    }
    // The user's route first: Cursor's proxy is replaced by ours only once the server goes out through it.
    const adopted = yield* UserProxy.adopt({ settingsPath, configPath: source.path, existing: yield* existingProxyOf(settingsPath), proxyPort: config.proxy.port })
    const summary = yield* CursorSettings.setup(settingsPath, CursorSettings.defaultJournalPath(settingsPath), desiredFor(config, path))
    yield* printSummary(summary)
    yield* printAdopted(adopted, source.env)
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

const printReleased = (released: UserProxy.Released) => {
  switch (released._tag) {
    case "Nothing":
      return Effect.void
    case "Removed":
      return Console.log(`The server's upstream ${UserProxy.shown(released.value)} (set by setup) is out of ${NodePath.resolve(released.configPath)} (${released.file}); Cursor goes through it directly again`)
    case "LeftAlone":
      return Console.log(`proxy.upstream in ${NodePath.resolve(released.configPath)} changed since setup set it to ${UserProxy.shown(released.value)}: left as ${released.current}`)
  }
}

export const unsetup = (options: { readonly settingsPath: string | undefined }) =>
  Effect.gen(function*() {
    const config = yield* Config.load
    const settingsPath = settingsPathOf(options.settingsPath)
    const summary = yield* CursorSettings.unsetup(settingsPath, CursorSettings.defaultJournalPath(settingsPath)).pipe(
      Effect.map((summary) => summary as CursorSettings.Summary | undefined),
      Effect.catchIf((error) => error._tag === "JournalError" && error.reason === "Missing", () => Effect.succeed(undefined))
    )
    if (summary !== undefined) yield* printSummary(summary)
    const released = yield* UserProxy.release(settingsPath)
    yield* printReleased(released)
    if (summary === undefined && released._tag === "Nothing") {
      return yield* Console.log(`Nothing to undo: setup has not been run for ${settingsPath} (or unsetup already ran)`)
    }
    const authority = yield* Ca.load(config.home).pipe(Effect.option)
    if (authority._tag === "Some") {
      yield* printCommands(
        "To stop trusting the CA as well (it can sign only Cursor's and loopback names, so keeping it is safe):",
        Trust.untrustCommands(process.platform, authority.value.certPath, yield* trustOptions(authority.value))
      )
    }
  })
