/**
 * The `cursor-byok` command line (@effect/cli): `serve` (the default), `setup`, `unsetup`,
 * `doctor`, `ca` and `users` (a team server's users, `cli/Users.ts`). Each command is a small program over the configuration and `BYOK_HOME`;
 * the work is in `Server.ts` and `hookup/`. A failure prints one line saying what to do and
 * exits with status 1 (a failure of several problems, a line each). `--help` pages are
 * `cli/Help.ts`'s.
 */
import * as CliConfig from "@effect/cli/CliConfig"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Cause, Console, Effect, HashMap, Inspectable, Layer, Logger, LogLevel, Option } from "effect"
import * as Help from "./cli/Help.js"
import * as UsersCli from "./cli/Users.js"
import * as Config from "./Config.js"
import * as Ca from "./hookup/Ca.js"
import * as Doctor from "./hookup/Doctor.js"
import * as Setup from "./hookup/Setup.js"
import * as Scheduler from "./internal/Scheduler.js"
import * as Secrets from "./internal/Secrets.js"
import * as Capture from "./replay/Commands.js"
import * as Server from "./Server.js"

const serveProgram = Effect.gen(function*() {
  const source = yield* Config.locate
  const config = yield* Config.loadFrom(source)
  for (const info of config.infos) yield* Effect.logInfo(info)
  for (const notice of config.notices) yield* Effect.logWarning(notice)
  // What it serves, where, and what to do next, is said once every listener is bound (`Ready.ts`).
  // The file is watched: a valid change of the models, providers, aliases, prices, limits or timings applies without a restart.
  // On the server's scheduler: what a client waits on runs first, and sockets are read between slices.
  return yield* Layer.launch(Server.layer(config, source)).pipe(Effect.withScheduler(Scheduler.server))
})

const settingsOption = Options.file("settings").pipe(
  Options.withDescription("Cursor's settings.json (default: the per-OS user settings, or BYOK_CURSOR_SETTINGS)"),
  Options.optional
)

const serve = Command.make("serve", {}, () => serveProgram).pipe(
  Command.withDescription("Start the server (what `npm start` runs)")
)

const setup = Command.make("setup", {
  settings: settingsOption,
  trust: Options.boolean("trust").pipe(Options.withDescription("Also run the commands that make this OS trust the CA")),
  http2: Options.boolean("http2").pipe(Options.withDescription("Leave Cursor on HTTP/2 (cursor.general.disableHttp2 false): its agent runs Run on the TLS listener, which must be on")),
  http1: Options.boolean("http1").pipe(Options.withDescription("The default (cursor.general.disableHttp2 true: the agent on RunSSE + BidiAppend through the proxy); kept for scripts")),
  create: Options.boolean("create").pipe(Options.withDescription("Make the settings file (and its folder) when it does not exist")),
  server: Options.text("server").pipe(Options.withDescription("A team's server (https://host[:port]): Cursor's agent goes there, with --token"), Options.optional),
  token: Options.text("token").pipe(Options.withDescription("Your token on the team's server (from its operator's `cursor-byok users add`)"), Options.optional)
}, ({ settings, trust, http2, http1, create, server, token }) =>
  Option.isSome(server) !== Option.isSome(token)
    ? Effect.fail(new Setup.SetupError({ message: "--server and --token go together: the team's server and your token on it" }))
    : Setup.setup({
      settingsPath: Option.getOrUndefined(settings),
      trust,
      http2,
      http1,
      create,
      team: Option.isSome(server) && Option.isSome(token) ? { server: server.value, token: token.value } : undefined
    })).pipe(
  Command.withDescription("Point Cursor at this server: make the CA, write Cursor's proxy settings and HTTP/1.1 switch (journaled), print how to trust the CA")
)

const unsetup = Command.make("unsetup", { settings: settingsOption }, ({ settings }) =>
  Setup.unsetup({ settingsPath: Option.getOrUndefined(settings) })).pipe(
    Command.withDescription("Restore Cursor's settings.json as it was before setup, and print how to untrust the CA")
  )

const doctor = Command.make("doctor", { settings: settingsOption }, ({ settings }) =>
  Doctor.run({ settingsPath: Option.getOrUndefined(settings) })).pipe(
    Command.withDescription("Check the hookup, one line per check with its fix; exit status 1 when one fails")
  )

const home = Effect.map(Config.load, (config) => config.home)

const describeCa = (authority: Ca.Authority) =>
  Console.log(
    [
      `CA         ${authority.certPath}`,
      `name       ${authority.commonName}`,
      `sha256     ${authority.fingerprint256}`,
      `expires    ${authority.notAfter.toISOString()}`,
      `may sign   ${[...Ca.permitted.dns, ...Ca.permitted.ip].join(", ")} (and nothing else: X.509 name constraints)`
    ].join("\n")
  )

const showCa = Effect.flatMap(home, (dir) => Effect.flatMap(Ca.load(dir), describeCa))

const caShow = Command.make("show", {}, () => showCa).pipe(
  Command.withDescription("Show the installation's CA")
)
const caCreate = Command.make("create", {}, () => Effect.flatMap(home, (dir) => Effect.flatMap(Ca.ensure(dir), describeCa))).pipe(
  Command.withDescription("Make the CA if there is none (an existing one is kept)")
)
const caRenew = Command.make("renew", {}, () =>
  Effect.gen(function*() {
    const authority = yield* Ca.renew(yield* home)
    yield* describeCa(authority)
    yield* Console.log("The old files were moved aside (.bak). Trust the new CA: `cursor-byok setup --trust` (and remove the old one from the OS store).")
  })).pipe(Command.withDescription("Replace the CA (the old files are kept as .bak); trust the new one afterwards"))

const ca = Command.make("ca", {}, () => showCa).pipe(
  Command.withDescription("The installation's CA: show (default), create, renew"),
  Command.withSubcommands([caShow, caCreate, caRenew])
)

const root = Command.make("cursor-byok", {}, () => serveProgram).pipe(
  Command.withDescription("A server for Cursor's agent protocol that calls the LLM provider you choose, with your own key"),
  Command.withSubcommands([serve, setup, unsetup, doctor, ca, UsersCli.users, Capture.capture, Capture.replay])
)

const program = { name: "cursor-byok", version: "0.1.0" }

const cli = Command.run(root, program)

/** The `--help` pages (`cli/Help.ts`); a command missing here gets @effect/cli's own page. */
const pages: ReadonlyArray<Help.Page> = [
  { path: [], command: root, subcommands: true },
  { path: ["serve"], command: serve, more: Help.serveMore },
  { path: ["setup"], command: setup },
  { path: ["unsetup"], command: unsetup },
  { path: ["doctor"], command: doctor },
  { path: ["capture"], command: Capture.capture },
  { path: ["replay"], command: Capture.replay },
  { path: ["ca"], command: ca, subcommands: true },
  { path: ["ca", "show"], command: caShow },
  { path: ["ca", "create"], command: caCreate },
  { path: ["ca", "renew"], command: caRenew },
  { path: ["users"], command: UsersCli.users, subcommands: true },
  { path: ["users", "add"], command: UsersCli.subcommands.add },
  { path: ["users", "list"], command: UsersCli.subcommands.list },
  { path: ["users", "remove"], command: UsersCli.subcommands.remove },
  { path: ["users", "token"], command: UsersCli.subcommands.token }
]

/** `--help`: the command's page (`cli/Help.ts`); anything else, the command line. */
const helpOr = (argv: ReadonlyArray<string>): ReturnType<typeof cli> => {
  const args = argv.slice(2)
  const page = Help.requested(args) ? Help.pageFor(pages, args) : undefined
  if (page === undefined) return cli(argv).pipe(Effect.provide(CliConfig.layer({ showBuiltIns: false })))
  return Console.log(Help.render(program, page, Help.colourOn(process.stdout, process.env)).trimEnd())
}

const LEVELS: Record<string, LogLevel.LogLevel> = {
  all: LogLevel.All, trace: LogLevel.Trace, debug: LogLevel.Debug, info: LogLevel.Info,
  warning: LogLevel.Warning, warn: LogLevel.Warning, error: LogLevel.Error, fatal: LogLevel.Fatal, none: LogLevel.None
}

const FORMATS: Record<string, Logger.Logger<unknown, void>> = {
  pretty: Logger.prettyLoggerDefault,
  logfmt: Logger.withConsoleLog(Logger.logfmtLogger),
  json: Logger.withConsoleLog(Logger.jsonLogger)
}

/** A logged value with the secrets replaced: a string redacted, another value replaced by its redacted text when that held one. */
const redactedValue = (value: unknown): unknown => {
  if (typeof value === "string") return Secrets.redact(value)
  if (value === null || typeof value !== "object") return value
  const text = value instanceof Error ? `${value.stack ?? value.name}\n${value.message}` : Inspectable.toStringUnknown(value)
  const clean = Secrets.redact(text)
  return clean === text ? value : value instanceof Error ? Secrets.redact(value.stack ?? `${value.name}: ${value.message}`) : clean
}

/** An error that renders as `text` (a cause's rendering, redacted): its first line's name and message, `text` as its stack. */
const renderedAs = (text: string): Error => {
  const first = text.split("\n", 1)[0]!
  const colon = first.indexOf(": ")
  const error = new Error(colon < 0 ? first : first.slice(colon + 2))
  error.name = colon < 0 ? "Error" : first.slice(0, colon)
  error.stack = text
  return error
}

const redactedCause = (cause: Cause.Cause<unknown>): Cause.Cause<unknown> => {
  if (Cause.isEmpty(cause)) return cause
  const text = Cause.pretty(cause, { renderErrorCause: true })
  const clean = Secrets.redact(text)
  return clean === text ? cause : Cause.die(renderedAs(clean))
}

const redactedAnnotations = (annotations: HashMap.HashMap<string, unknown>) => {
  for (const [, value] of annotations) if (redactedValue(value) !== value) return HashMap.map(annotations, redactedValue)
  return annotations
}

/** `logger` writing every entry's message, cause and annotations with the configuration's secrets replaced (`internal/Secrets.ts`). */
export const redacting = <A>(logger: Logger.Logger<unknown, A>): Logger.Logger<unknown, A> =>
  Logger.mapInputOptions(logger, (options) => ({
    ...options,
    message: Array.isArray(options.message) ? options.message.map(redactedValue) : redactedValue(options.message),
    cause: redactedCause(options.cause),
    annotations: redactedAnnotations(options.annotations)
  }))

/**
 * The logger, with the configuration's secrets replaced in every entry (`redacting`):
 * `BYOK_LOG_FORMAT=json` for one JSON object per line (log shippers), `logfmt` for one
 * `key=value` line per entry, `pretty` for the console logger (an entry over several lines,
 * its annotations indented); by default pretty on a terminal and logfmt otherwise (a pipe, a
 * file, a service manager). The pretty logger writes each line of an entry on its own (a
 * finished turn's line is ~16 writes, ~0.6 ms of a short turn's CPU under load, measured), where
 * the other formats write an entry once. `BYOK_LOG_LEVEL` (trace, debug, info, warning, error,
 * none) for the minimum level, info by default. An unknown value is refused with the values it
 * takes.
 */
export const logging = (
  env: Readonly<Record<string, string | undefined>>,
  terminal: boolean = process.stdout.isTTY === true
): Layer.Layer<never> | string => {
  const format = env["BYOK_LOG_FORMAT"] ?? (terminal ? "pretty" : "logfmt")
  const levelText = env["BYOK_LOG_LEVEL"]
  const logger = FORMATS[format]
  if (logger === undefined) return `BYOK_LOG_FORMAT must be one of ${Object.keys(FORMATS).join(", ")}, got ${format}`
  const level = levelText === undefined ? LogLevel.Info : LEVELS[levelText.toLowerCase()]
  if (level === undefined) return `BYOK_LOG_LEVEL must be one of ${Object.keys(LEVELS).join(", ")}, got ${levelText}`
  return Layer.merge(Logger.replace(Logger.defaultLogger, redacting(logger)), Logger.minimumLogLevel(level))
}

/** Runs the command line; a typed failure is one readable line and exit status 1. */
export const run = (argv: ReadonlyArray<string>) =>
  helpOr(argv).pipe(
    Effect.catchAll((error: unknown) =>
      Effect.gen(function*() {
        const message = typeof error === "object" && error !== null && "message" in error && typeof error.message === "string" && error.message !== ""
          ? error.message
          : undefined
        // @effect/cli has printed its own validation errors (with the help text) already.
        // One entry per line: a logfmt or JSON logger would write a multi-line message as one line with `\n`s.
        if (message !== undefined) for (const line of message.split("\n")) yield* Effect.logError(line)
        return yield* Effect.fail(error)
      })
    ),
    // Never an exit without a word: a defect says what it was.
    Effect.catchAllDefect((defect) =>
      Effect.zipRight(
        Effect.logError(`cursor-byok stopped on an unexpected error: ${defect instanceof Error ? defect.message : String(defect)}`),
        Effect.die(defect)
      )),
    // No escape codes where they would be noise: a pipe, a file, NO_COLOR.
    Help.plainly
  )
