/**
 * The command line's `--help` (`Cli.ts`): one page per command, rendered here rather than by
 * @effect/cli's built-in help, whose usage line for a subcommand reads `$ serve` (its own name
 * without the program's) and whose every page repeats the built-in options. A page is the
 * program and version, one usage line with the command's real name (`$ cursor-byok serve`),
 * @effect/cli's own description, options and subcommands of that command (built-ins hidden:
 * they are listed once, on the root page), and for `serve` where the configuration file is
 * looked for, the environment variables and the ports with their defaults. Colour only on a
 * terminal without `NO_COLOR`; the console the rest of the command line writes through (its
 * validation errors) drops escape codes the same way (`plainConsole`).
 */
import * as CliConfig from "@effect/cli/CliConfig"
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Usage from "@effect/cli/Usage"
import { type Console, Effect } from "effect"

/** A command the help knows: its words after the program's name (`["ca", "renew"]`) and what else its page says. */
export interface Page {
  readonly path: ReadonlyArray<string>
  readonly command: Command.Command<any, any, any, any>
  /** Takes a subcommand (its usage line ends `[command]`). */
  readonly subcommands?: boolean
  /** Sections after @effect/cli's, plain text (headers in capitals). */
  readonly more?: string
}

const ESCAPE = /\x1b\[[0-9;]*[A-Za-z]/g

/** The text without ANSI escape codes. */
export const strip = (text: string): string => text.replace(ESCAPE, "")

/** Colour on this stream: a terminal, and `NO_COLOR` unset or empty (no-color.org). */
export const colourOn = (stream: { readonly isTTY?: boolean }, env: Readonly<Record<string, string | undefined>>): boolean =>
  stream.isTTY === true && (env["NO_COLOR"] ?? "") === ""

/** `--help` or `-h` among the arguments (after the program's). */
export const requested = (args: ReadonlyArray<string>): boolean => args.includes("--help") || args.includes("-h")

/**
 * The page of the longest command path the arguments' leading words start with: the root's for
 * none; undefined for a command no page knows (@effect/cli's own help then answers).
 */
export const pageFor = (pages: ReadonlyArray<Page>, args: ReadonlyArray<string>): Page | undefined => {
  const end = args.findIndex((arg) => arg.startsWith("-"))
  const words = end < 0 ? args : args.slice(0, end)
  let best: Page | undefined
  for (const page of pages) {
    const matches = page.path.length <= words.length && page.path.every((word, i) => words[i] === word)
    if (matches && (best === undefined || page.path.length > best.path.length)) best = page
  }
  return best !== undefined && best.path.length === 0 && words.length > 0 ? undefined : best
}

const config = CliConfig.make({ showBuiltIns: false })

/** The built-in options, said once on the root page. */
const GLOBAL_OPTIONS = `GLOBAL OPTIONS

  -h, --help                   this help; after a command, that command's
  --version                    the version
  --log-level <level>          the minimum log level (or BYOK_LOG_LEVEL)
  --completions <shell>        a completion script: sh, bash, fish or zsh
`

/** One command's page; escape codes only when `colour`. */
export const render = (program: { readonly name: string; readonly version: string }, page: Page, colour: boolean): string => {
  const usage = strip(HelpDoc.toAnsiText(Usage.getHelp(Command.getUsage(page.command)))).trim()
  const words = page.path.length === 0 ? [program.name] : [program.name, ...page.path.slice(0, -1), usage]
  const line = `$ ${words.join(" ")}${page.subcommands === true ? " [command]" : ""}${page.path.length === 0 ? " [options]   (no command: serve)" : ""}`
  const bold = (text: string) => (colour ? `\x1b[1m${text}\x1b[0m` : text)
  const body = HelpDoc.toAnsiText(Command.getHelp(page.command, config)).trimEnd()
  const more = [page.more, page.path.length === 0 ? GLOBAL_OPTIONS : undefined]
    .filter((text): text is string => text !== undefined)
    .map((text) => text.replace(/^[A-Z]{3,}[A-Z ]*(?: \(.*\))?$/gm, bold).trimEnd())
  const text = [`${program.name} ${program.version}`, `${bold("USAGE")}\n\n${line}`, body, ...more].join("\n\n") + "\n"
  return colour ? text : strip(text)
}

/** `serve`'s page: where the file is looked for, the variables and the ports, with their defaults. */
export const serveMore = `CONFIGURATION FILE

  BYOK_CONFIG names it (then it must exist); else ./byok.config.json in the
  directory serve starts in, when there is one. Without a file: the defaults
  below, and providers from OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY
  and DEEPSEEK_API_KEY. A bad file stops serve with one line per problem.

PORTS (on host 127.0.0.1: "host", BYOK_HOST)

  8787  RunSSE + BidiAppend, /healthz, /metrics, /console  port, BYOK_PORT
  8788  the proxy Cursor's http.proxy points at            proxy.port, BYOK_PROXY_PORT
  8789  Run over cleartext HTTP/2 (h2c)                     http2.cleartextPort, BYOK_H2C_PORT
  8790  Run over TLS (HTTP/2)                               http2.tls.port, BYOK_TLS_PORT
  (each but the first: null in the file, or off in its variable, turns it off)

ENVIRONMENT (each over the file's key)

  BYOK_CONFIG          the configuration file (./byok.config.json)
  BYOK_HOST            the address to listen on (127.0.0.1)
  BYOK_PORT            RunSSE + BidiAppend's port (8787)
  BYOK_PROXY_PORT      the proxy's port, or off (8788)
  BYOK_H2C_PORT        the h2c listener's port, or off (8789)
  BYOK_TLS_PORT        the TLS listener's port, or off (8790)
  BYOK_TLS_CERT        PEM certificate for the TLS listener, with BYOK_TLS_KEY (the CA's leaf)
  BYOK_TLS_KEY         PEM key for the TLS listener, with BYOK_TLS_CERT
  BYOK_DB              the SQLite file, or a postgres:// URL (./data/byok.sqlite)
  BYOK_ADVERTISE       where instances sharing a postgres:// database reach this one (http://host:port)
  BYOK_HOME            where the CA and its key live (~/.cursor-byok)
  BYOK_OFFLINE         1: no Cursor account, every Cursor procedure answered here (0)
  BYOK_UPSTREAM_PROXY  your proxy for outgoing connections (HTTPS_PROXY)
  BYOK_NO_PROXY        hosts reached directly (NO_PROXY)
  BYOK_UPSTREAM_SERVER a team's server Cursor's agent goes to (none: this server)
  BYOK_UPSTREAM_TOKEN  your token on it
  BYOK_ALLOWED_HOSTS   other host names requests may be addressed to, comma-separated (none)
  BYOK_CONSOLE_TOKEN   the token every request but /healthz needs off loopback (none)
  BYOK_COMPACTION      on or off: automatic compaction (on)
  BYOK_WEB_SEARCH      searxng=<url>, brave, tavily or off (off)
  BYOK_LOG_FORMAT      pretty, logfmt or json (pretty on a terminal, else logfmt)
  BYOK_LOG_LEVEL       trace, debug, info, warning, error or none (info)
`

const plainArgs = (args: ReadonlyArray<unknown>): ReadonlyArray<unknown> =>
  args.some((arg) => typeof arg === "string" && arg.includes("\x1b")) ? args.map((arg) => (typeof arg === "string" ? strip(arg) : arg)) : args

/** `base` with escape codes dropped from what goes to stdout (log, info) unless `stdout`, and to stderr (error, warn) unless `stderr`. */
export const plainConsole = (base: Console.Console, colour: { readonly stdout: boolean; readonly stderr: boolean }): Console.Console => {
  const out = (args: ReadonlyArray<unknown>) => (colour.stdout ? args : plainArgs(args))
  const err = (args: ReadonlyArray<unknown>) => (colour.stderr ? args : plainArgs(args))
  return {
    ...base,
    log: (...args) => base.log(...out(args)),
    info: (...args) => base.info(...out(args)),
    error: (...args) => base.error(...err(args)),
    warn: (...args) => base.warn(...err(args)),
    unsafe: {
      ...base.unsafe,
      log: (...args) => base.unsafe.log(...out(args)),
      info: (...args) => base.unsafe.info(...out(args)),
      error: (...args) => base.unsafe.error(...err(args)),
      warn: (...args) => base.unsafe.warn(...err(args))
    }
  }
}

/** `effect` writing through `plainConsole`: colour on stdout and stderr only where `colourOn` says so. */
export const plainly = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.consoleWith((base) =>
    Effect.withConsole(effect, plainConsole(base, { stdout: colourOn(process.stdout, process.env), stderr: colourOn(process.stderr, process.env) }))
  )
