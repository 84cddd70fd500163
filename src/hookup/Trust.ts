/**
 * Trusting the installation's CA certificate on the OS, so Cursor (Electron/Chromium and its
 * Node side) accepts the proxy's certificates for `*.cursor.sh`. The commands are data: the CLI
 * prints them (`formatCommand`) or runs them (`runCommands`, which never adds sudo), and
 * `isTrusted` checks the result with probes that tests replace.
 */
import * as Command from "@effect/platform/Command"
import * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as FileSystem from "@effect/platform/FileSystem"
import { Effect, Stream } from "effect"
import { X509Certificate } from "node:crypto"

// =============================================================================
// Commands
// =============================================================================

export interface TrustCommand {
  readonly description: string
  /** argv: the program, then its arguments; run without a shell. */
  readonly command: ReadonlyArray<string>
  /** Writes a system-wide store: run it as root (the CLI prints it with sudo). */
  readonly needsAdmin: boolean
}

/** Which system trust store a Linux host has (by which anchors folder exists), or none. */
export type LinuxSystemStore = "debian" | "fedora" | "none"

export const systemStoreFolders = {
  debian: "/usr/local/share/ca-certificates",
  fedora: "/etc/pki/ca-trust/source/anchors"
} as const

/** The Linux system store, from a check for each anchors folder (injected so it is testable). */
export const detectSystemStore = (folderExists: (folder: string) => boolean): LinuxSystemStore =>
  folderExists(systemStoreFolders.debian) ? "debian" : folderExists(systemStoreFolders.fedora) ? "fedora" : "none"

/** `detectSystemStore` on the real file system. */
export const systemStore: Effect.Effect<LinuxSystemStore, never, FileSystem.FileSystem> = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const debian = yield* fs.exists(systemStoreFolders.debian).pipe(Effect.orElseSucceed(() => false))
  const fedora = yield* fs.exists(systemStoreFolders.fedora).pipe(Effect.orElseSucceed(() => false))
  return detectSystemStore((folder) => (folder === systemStoreFolders.debian ? debian : fedora))
})

export interface TrustOptions {
  /** The certificate's common name, e.g. `cursor-byok CA (hostname)`: how removal finds it. */
  readonly commonName: string
  readonly home: string
  /** The NSS database folder (Linux); default `$HOME/.pki/nssdb`, which Electron/Chromium read. */
  readonly nssDb?: string
  /** Linux only; default "none" (NSS only). */
  readonly systemStore?: LinuxSystemStore
}

const loginKeychain = (home: string) => `${home}/Library/Keychains/login.keychain-db`
const nssDbOf = (options: TrustOptions) => `sql:${options.nssDb ?? `${options.home}/.pki/nssdb`}`
const anchorFile = {
  debian: `${systemStoreFolders.debian}/cursor-byok.crt`,
  fedora: `${systemStoreFolders.fedora}/cursor-byok.pem`
} as const
const refreshCommand = { debian: ["update-ca-certificates"], fedora: ["update-ca-trust", "extract"] } as const

/** What makes the OS trust the CA at `caPath`. */
export const trustCommands = (platform: NodeJS.Platform, caPath: string, options: TrustOptions): ReadonlyArray<TrustCommand> => {
  switch (platform) {
    case "darwin":
      return [{
        description: "trust the CA for SSL in your login keychain (macOS asks for your password)",
        command: ["security", "add-trusted-cert", "-r", "trustRoot", "-p", "ssl", "-k", loginKeychain(options.home), caPath],
        needsAdmin: false
      }]
    case "win32":
      return [{ description: "add the CA to your user's Root store", command: ["certutil", "-user", "-addstore", "Root", caPath], needsAdmin: false }]
    default: {
      const nss: TrustCommand = {
        description: "add the CA to your NSS database (Cursor's Chromium reads it)",
        command: ["certutil", "-d", nssDbOf(options), "-A", "-t", "C,,", "-n", options.commonName, "-i", caPath],
        needsAdmin: false
      }
      const store = options.systemStore ?? "none"
      if (store === "none") return [nss]
      return [
        nss,
        { description: "copy the CA into the system anchors", command: ["cp", caPath, anchorFile[store]], needsAdmin: true },
        { description: "rebuild the system CA bundle", command: [...refreshCommand[store]], needsAdmin: true }
      ]
    }
  }
}

/** What undoes `trustCommands`. */
export const untrustCommands = (platform: NodeJS.Platform, caPath: string, options: TrustOptions): ReadonlyArray<TrustCommand> => {
  switch (platform) {
    case "darwin":
      return [
        { description: "drop the CA's trust settings", command: ["security", "remove-trusted-cert", caPath], needsAdmin: false },
        {
          description: "remove the CA from your login keychain",
          command: ["security", "delete-certificate", "-c", options.commonName, loginKeychain(options.home)],
          needsAdmin: false
        }
      ]
    case "win32":
      return [{ description: "remove the CA from your user's Root store", command: ["certutil", "-user", "-delstore", "Root", options.commonName], needsAdmin: false }]
    default: {
      const nss: TrustCommand = {
        description: "remove the CA from your NSS database",
        command: ["certutil", "-d", nssDbOf(options), "-D", "-n", options.commonName],
        needsAdmin: false
      }
      const store = options.systemStore ?? "none"
      if (store === "none") return [nss]
      return [
        nss,
        { description: "remove the CA from the system anchors", command: ["rm", "-f", anchorFile[store]], needsAdmin: true },
        { description: "rebuild the system CA bundle", command: [...refreshCommand[store]], needsAdmin: true }
      ]
    }
  }
}

const posixQuote = (arg: string) => (arg !== "" && /^[A-Za-z0-9_\-.,:/@%+=]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`)
const windowsQuote = (arg: string) => (arg !== "" && !/[\s"&|<>^]/.test(arg) ? arg : `"${arg.replaceAll("\"", "\\\"")}"`)

/** A line to paste into a shell (POSIX quoting; cmd/PowerShell quoting for win32). */
export const formatCommand = (argv: ReadonlyArray<string>, platform: NodeJS.Platform = "linux"): string =>
  argv.map(platform === "win32" ? windowsQuote : posixQuote).join(" ")

/** What the user runs so Cursor's Node side and the Cursor CLI trust the CA too. */
export const nodeExtraCaCerts = (platform: NodeJS.Platform, caPath: string): { readonly description: string; readonly line: string } => {
  switch (platform) {
    case "darwin":
      return {
        description: "for apps started from the Dock (until logout; then restart Cursor)",
        line: formatCommand(["launchctl", "setenv", "NODE_EXTRA_CA_CERTS", caPath])
      }
    case "win32":
      return { description: "for your user (then restart Cursor)", line: formatCommand(["setx", "NODE_EXTRA_CA_CERTS", caPath], "win32") }
    default:
      return { description: "in your shell profile (~/.profile), then log in again", line: `export NODE_EXTRA_CA_CERTS=${posixQuote(caPath)}` }
  }
}

// =============================================================================
// Running them
// =============================================================================

export type RunResult =
  | { readonly _tag: "Ran"; readonly exitCode: number; readonly stdout: string; readonly stderr: string }
  /** Not run: it writes a system store and we are not root. */
  | { readonly _tag: "NeedsAdmin" }
  /** Could not start (the program is not installed, not executable...). */
  | { readonly _tag: "Failed"; readonly message: string }

export interface CommandOutcome {
  readonly command: TrustCommand
  readonly result: RunResult
}

const isRoot = () => typeof process.getuid === "function" && process.getuid() === 0

const text = <E>(stream: Stream.Stream<Uint8Array, E>) => stream.pipe(Stream.decodeText(), Stream.mkString)

const runArgv = (argv: ReadonlyArray<string>): Effect.Effect<RunResult, never, CommandExecutor.CommandExecutor> => {
  const [program, ...args] = argv
  if (program === undefined) return Effect.succeed({ _tag: "Failed", message: "empty command" })
  // stdin is closed so a command that prompts fails instead of hanging.
  return Effect.scoped(Effect.gen(function*() {
    const child = yield* Command.start(Command.make(program, ...args).pipe(Command.feed("")))
    const [exitCode, stdout, stderr] = yield* Effect.all([child.exitCode, text(child.stdout), text(child.stderr)], { concurrency: "unbounded" })
    return { _tag: "Ran", exitCode, stdout, stderr } satisfies RunResult
  })).pipe(
    Effect.catchAll((error) =>
      Effect.succeed<RunResult>({
        _tag: "Failed",
        message: error._tag === "SystemError" && error.reason === "NotFound" ? `${program} is not installed (not found on PATH)` : `${program} could not run: ${error.message}`
      })
    )
  )
}

/** Runs the commands in order; one that needs admin is reported, not run, unless we are root. */
export const runCommands = (
  commands: ReadonlyArray<TrustCommand>,
  options: { readonly admin?: boolean } = {}
): Effect.Effect<ReadonlyArray<CommandOutcome>, never, CommandExecutor.CommandExecutor> => {
  const admin = options.admin ?? isRoot()
  return Effect.forEach(commands, (command) =>
    Effect.map(
      command.needsAdmin && !admin ? Effect.succeed<RunResult>({ _tag: "NeedsAdmin" }) : runArgv(command.command),
      (result): CommandOutcome => ({ command, result })
    ))
}

// =============================================================================
// Checking
// =============================================================================

export type TrustState = "trusted" | "untrusted" | "unknown"

/** How `isTrusted` looks at the machine. */
export interface Probes {
  /** The file's text; undefined when it is missing or unreadable. */
  readonly readFile: (path: string) => Effect.Effect<string | undefined>
  /** The command's exit status; undefined when it could not run. */
  readonly exitCode: (argv: ReadonlyArray<string>) => Effect.Effect<number | undefined>
}

/** Probes on the real file system and processes. */
export const liveProbes: Effect.Effect<Probes, never, FileSystem.FileSystem | CommandExecutor.CommandExecutor> = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const executor = yield* CommandExecutor.CommandExecutor
  return {
    readFile: (path) => fs.readFileString(path).pipe(Effect.orElseSucceed(() => undefined)),
    exitCode: (argv) =>
      runArgv(argv).pipe(
        Effect.map((result) => (result._tag === "Ran" ? result.exitCode : undefined)),
        Effect.provideService(CommandExecutor.CommandExecutor, executor)
      )
  }
})

/** Where Debian/Ubuntu and Fedora/RHEL keep the system bundle. */
export const linuxBundles: ReadonlyArray<string> = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]

const certificateOf = (pem: string) => {
  try {
    return new X509Certificate(pem)
  } catch {
    return undefined
  }
}

/** Whether a PEM bundle holds this certificate (the same DER, not just the same name). */
export const bundleContains = (bundle: string, der: Uint8Array): boolean => {
  for (const block of bundle.matchAll(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g)) {
    const certificate = certificateOf(block[0])
    if (certificate !== undefined && Buffer.compare(certificate.raw, der) === 0) return true
  }
  return false
}

/** Best effort: whether the OS trusts the CA (`ca.path` holds `ca.pem`). */
export const isTrusted = (
  platform: NodeJS.Platform,
  ca: { readonly path: string; readonly pem: string },
  probes: Probes,
  options: { readonly bundles?: ReadonlyArray<string> } = {}
): Effect.Effect<TrustState> =>
  Effect.gen(function*() {
    const certificate = certificateOf(ca.pem)
    if (certificate === undefined) return "unknown"
    const byExit = (code: number | undefined): TrustState => (code === undefined ? "unknown" : code === 0 ? "trusted" : "untrusted")
    switch (platform) {
      case "darwin":
        return byExit(yield* probes.exitCode(["security", "verify-cert", "-c", ca.path, "-p", "ssl"]))
      case "win32":
        return byExit(yield* probes.exitCode(["certutil", "-user", "-verifystore", "Root", certificate.serialNumber]))
      default: {
        let readAny = false
        for (const path of options.bundles ?? linuxBundles) {
          const bundle = yield* probes.readFile(path)
          if (bundle === undefined) continue
          readAny = true
          if (bundleContains(bundle, certificate.raw)) return "trusted"
        }
        return readAny ? "untrusted" : "unknown"
      }
    }
  })
