/**
 * A real PostgreSQL server for the tests: a throwaway cluster in a temp directory, on a free
 * loopback port, with durability off (fsync, synchronous_commit, full_page_writes) for speed.
 * `test/globalSetup.ts` starts one for the whole run and provides its URL as `postgresUrl`;
 * a test file takes a database of its own on it:
 *
 *   const url = postgresUrl()                        // undefined: no PostgreSQL, skip
 *   const db = await freshDatabase(url!, "store")    // postgres://postgres@127.0.0.1:PORT/store_1f2e...
 *   ...
 *   await dropDatabase(db)
 *
 * Tests that stop and start the server (a restart under load) start a cluster of their own:
 *
 *   const cluster = await startCluster()
 *   await restart(cluster)                           // pg_ctl stop -m fast, then start, same port
 *   await restart(cluster, "immediate")              // a crash (see ClusterOptions.settings)
 *   await cluster.stop()                             // stops it and removes the directory
 *
 * The binaries are `PG_BIN`, or initdb/pg_ctl on PATH, or the newest
 * `/usr/lib/postgresql/<version>/bin` (Debian's package puts them there only). initdb and
 * postgres refuse to run as root: under root they run as the `postgres` system user
 * (`runuser -u postgres --`), which owns the temp directory.
 *
 * Plain Promises (no test framework), but for `postgresUrl`, which reads vitest's `inject` (and
 * so works in test files only, not in `globalSetup`).
 */
import { execFile, execFileSync } from "node:child_process"
import { accessSync, chownSync, constants, existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from "node:fs"
import * as Net from "node:net"
import { tmpdir } from "node:os"
import { delimiter, dirname, join } from "node:path"
import { randomBytes } from "node:crypto"
import pg from "pg"

declare module "vitest" {
  export interface ProvidedContext {
    /** The admin URL of the run's PostgreSQL cluster (`test/globalSetup.ts`); undefined when there is none. */
    postgresUrl: string | undefined
  }
}

// "vitest" cannot be imported where `test/globalSetup.ts` runs (the main process: its module
// throws there), so it is imported only in a test worker, which vitest marks with VITEST_WORKER_ID.
const vitest = process.env["VITEST_WORKER_ID"] === undefined ? undefined : await import("vitest")

/** The URL of the run's cluster (database `postgres`, user `postgres`), or undefined when the run has none. */
export const postgresUrl = (): string | undefined => {
  if (vitest === undefined) throw new Error("postgresUrl() reads vitest's inject: call it from a test file")
  return vitest.inject("postgresUrl")
}

/** A node-postgres client, as the tests use it. */
export type PgClient = pg.Client

/** A connected node-postgres client (errors after the connection is up are swallowed: end it yourself). */
export const connect = async (url: string): Promise<PgClient> => {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 })
  client.on("error", () => {})
  await client.connect()
  return client
}

const withClient = async <A>(url: string, f: (client: PgClient) => Promise<A>): Promise<A> => {
  const client = await connect(url)
  try {
    return await f(client)
  } finally {
    await client.end().catch(() => {})
  }
}

// ---------------------------------------------------------------------------------------------
// Binaries

const executable = (path: string): boolean => {
  try {
    accessSync(path, constants.X_OK)
    return true
  } catch {
    return false
  }
}

const hasBoth = (dir: string): boolean => executable(join(dir, "initdb")) && executable(join(dir, "pg_ctl"))

/**
 * The directory holding initdb and pg_ctl: `PG_BIN`, else the first PATH entry with both (its
 * symlinks resolved), else the highest version under `/usr/lib/postgresql/<version>/bin`.
 */
export const findPgBin = (): string | undefined => {
  const fromEnv = process.env["PG_BIN"]
  if (fromEnv !== undefined && fromEnv !== "") return hasBoth(fromEnv) ? fromEnv : undefined
  for (const entry of (process.env["PATH"] ?? "").split(delimiter)) {
    if (entry === "" || !hasBoth(entry)) continue
    // /usr/local/bin/initdb may be a symlink into /usr/lib/postgresql/<v>/bin: use the real directory
    // when pg_ctl lives there too, so both come from the same installation.
    const real = dirname(realpathSync(join(entry, "initdb")))
    return hasBoth(real) ? real : entry
  }
  const root = "/usr/lib/postgresql"
  let versions: Array<string> = []
  try {
    versions = readdirSync(root)
  } catch {
    return undefined
  }
  const found = versions
    .filter((v) => /^\d+(\.\d+)?$/.test(v) && hasBoth(join(root, v, "bin")))
    .sort((a, b) => Number(b) - Number(a))
  return found[0] === undefined ? undefined : join(root, found[0], "bin")
}

// ---------------------------------------------------------------------------------------------
// Cluster

export interface Cluster {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication). */
  readonly url: string
  /** The temp directory: `data/` (the cluster), `log` (the server's log), the Unix socket. */
  readonly dir: string
  readonly dataDir: string
  readonly logFile: string
  readonly port: number
  /** The directory of initdb/pg_ctl used. */
  readonly bin: string
  /** Stops the server (immediate shutdown) and removes the directory; idempotent. */
  readonly stop: () => Promise<void>
}

const asRoot = (): boolean => typeof process.getuid === "function" && process.getuid() === 0

/** The environment the binaries run in: without the PG* variables, which could point them elsewhere. */
const binEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("PG")) env[key] = value
  return env
}

interface RunResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs one of the binaries, as the `postgres` user under root, in `cwd` (which that user can enter). */
const runBin = (bin: string, name: string, args: ReadonlyArray<string>, cwd: string): Promise<RunResult> => {
  const program = join(bin, name)
  const [command, argv] = asRoot() ? ["runuser", ["-u", "postgres", "--", program, ...args]] : [program, [...args]]
  return new Promise((resolve) => {
    execFile(command, argv, { cwd, env: binEnv(), timeout: 120_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
      resolve({ code, stdout: String(stdout), stderr: String(stderr) + (error !== null && typeof error.code !== "number" ? `\n${error.message}` : "") })
    })
  })
}

const logTail = (logFile: string, lines = 40): string => {
  try {
    return readFileSync(logFile, "utf8").trimEnd().split("\n").slice(-lines).join("\n")
  } catch {
    return "(no log file)"
  }
}

/** A free TCP port on 127.0.0.1: bind port 0, read it, close. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = Net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => (port > 0 ? resolve(port) : reject(new Error("no port from listen(0)"))))
    })
  })

const postgresUid = (): { uid: number; gid: number } => {
  const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim())
  const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim())
  if (!Number.isInteger(uid) || !Number.isInteger(gid)) throw new Error("cannot find the postgres user's uid/gid")
  return { uid, gid }
}

const shellQuote = (s: string): string => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`)

/** The server settings by default: speed over durability (a test cluster outlives no machine crash). */
const defaultSettings: Readonly<Record<string, string | number>> = {
  listen_addresses: "127.0.0.1",
  fsync: "off",
  synchronous_commit: "off",
  full_page_writes: "off",
  max_connections: 200
}

const serverOptions = (dir: string, port: number, settings: Readonly<Record<string, string | number>>): string =>
  [
    `-p ${port}`,
    `-k ${shellQuote(dir)}`,
    ...Object.entries(settings).map(([name, value]) => `-c ${shellQuote(`${name}=${value}`)}`)
  ].join(" ")

/** Mutable state behind a `Cluster` (its port is fixed once started). */
interface State {
  readonly bin: string
  readonly dir: string
  readonly dataDir: string
  readonly logFile: string
  readonly settings: Readonly<Record<string, string | number>>
  port: number
  running: boolean
}

const states = new WeakMap<Cluster, State>()
const stateOf = (cluster: Cluster): State => {
  const state = states.get(cluster)
  if (state === undefined) throw new Error("not a cluster made by startCluster")
  return state
}

const start = async (state: State): Promise<void> => {
  const { code, stdout, stderr } = await runBin(
    state.bin,
    "pg_ctl",
    ["start", "-D", state.dataDir, "-l", state.logFile, "-w", "-t", "30", "-o", serverOptions(state.dir, state.port, state.settings)],
    state.dir
  )
  if (code !== 0) {
    throw new Error(
      `PostgreSQL did not start (pg_ctl exit ${code}, port ${state.port}, ${state.dataDir}):\n${stdout}${stderr}\n--- ${state.logFile} (tail) ---\n${logTail(state.logFile)}`
    )
  }
  state.running = true
}

const stopWith = async (state: State, mode: "smart" | "fast" | "immediate"): Promise<void> => {
  const { code, stdout, stderr } = await runBin(state.bin, "pg_ctl", ["stop", "-D", state.dataDir, "-m", mode, "-w", "-t", "30"], state.dir)
  if (code !== 0) {
    throw new Error(`pg_ctl stop failed (exit ${code}):\n${stdout}${stderr}\n--- ${state.logFile} (tail) ---\n${logTail(state.logFile)}`)
  }
  state.running = false
}

/**
 * Kills the postmaster synchronously with SIGQUIT (an immediate shutdown; its children follow):
 * the last resort at process exit, where nothing asynchronous runs.
 */
const killNow = (state: State): void => {
  try {
    const pid = Number(readFileSync(join(state.dataDir, "postmaster.pid"), "utf8").split("\n")[0])
    if (Number.isInteger(pid) && pid > 0) process.kill(pid, "SIGQUIT")
  } catch {
    // not running
  }
  rmSync(state.dir, { recursive: true, force: true })
}

export interface ClusterOptions {
  /** The directory of initdb/pg_ctl (default: `findPgBin()`). */
  readonly bin?: string
  /**
   * Server settings (`-c name=value`) over the defaults: listen_addresses=127.0.0.1, fsync=off,
   * synchronous_commit=off, full_page_writes=off, max_connections=200. With synchronous_commit
   * off, an immediate stop (a crash) loses the commits of the last few hundred milliseconds: a
   * test that kills the server and counts on every acknowledged commit wants
   * `{ synchronous_commit: "on" }` (fsync=off alone loses nothing when only the server dies).
   */
  readonly settings?: Readonly<Record<string, string | number>>
}

/**
 * A new cluster in a temp directory: `initdb -A trust -U postgres --no-sync -E UTF8 --locale=C`,
 * then `pg_ctl start -w` on a free port of 127.0.0.1 (Unix socket in the temp directory). Throws
 * with the log's tail when the server does not come up.
 */
export const startCluster = async (options: ClusterOptions = {}): Promise<Cluster> => {
  const bin = options.bin ?? findPgBin()
  if (bin === undefined) throw new Error("PostgreSQL's initdb/pg_ctl not found (PG_BIN, PATH, /usr/lib/postgresql/*/bin)")
  const dir = mkdtempSync(join(tmpdir(), "byok-pg-"))
  if (asRoot()) {
    const { gid, uid } = postgresUid()
    chownSync(dir, uid, gid)
  }
  const state: State = {
    bin,
    dir,
    dataDir: join(dir, "data"),
    logFile: join(dir, "log"),
    settings: { ...defaultSettings, ...options.settings },
    port: 0,
    running: false
  }
  const onExit = () => killNow(state)
  process.once("exit", onExit)
  const cleanup = () => {
    process.removeListener("exit", onExit)
    killNow(state)
  }
  try {
    const init = await runBin(
      bin,
      "initdb",
      ["-D", state.dataDir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"],
      dir
    )
    if (init.code !== 0) throw new Error(`initdb failed (exit ${init.code}) in ${state.dataDir}:\n${init.stdout}${init.stderr}`)
    // A free port can be taken between the check and postgres' bind: try another one then.
    for (let attempt = 1;; attempt++) {
      state.port = await freePort()
      try {
        await start(state)
        break
      } catch (error) {
        if (attempt >= 3 || !/already in use/i.test(logTail(state.logFile, 20))) throw error
      }
    }
  } catch (error) {
    cleanup()
    throw error
  }
  const cluster: Cluster = {
    url: `postgres://postgres@127.0.0.1:${state.port}/postgres`,
    dir,
    dataDir: state.dataDir,
    logFile: state.logFile,
    port: state.port,
    bin,
    stop: async () => {
      if (!existsSync(dir)) return
      if (state.running) await stopWith(state, "immediate").catch(() => {})
      cleanup()
    }
  }
  states.set(cluster, state)
  return cluster
}

/** Stops the cluster's server (the data directory stays; `startServer` brings it back on the same port). */
export const stopServer = (cluster: Cluster, mode: "smart" | "fast" | "immediate" = "fast"): Promise<void> =>
  stopWith(stateOf(cluster), mode)

/** Starts the cluster's server again, on the same data directory and port. */
export const startServer = (cluster: Cluster): Promise<void> => start(stateOf(cluster))

/** `pg_ctl stop` (fast by default) or `pg_ctl start` on the cluster (same data directory, same port). */
export const pgCtl = (cluster: Cluster, action: "stop" | "start", mode: "smart" | "fast" | "immediate" = "fast"): Promise<void> =>
  action === "stop" ? stopServer(cluster, mode) : startServer(cluster)

/**
 * Stops the server and starts it again on the same port. "fast" (the default) ends the sessions,
 * rolls back open transactions and keeps every commit; "immediate" is a crash as far as clients
 * and the data can tell (see `ClusterOptions.settings` about synchronous_commit).
 */
export const restart = async (cluster: Cluster, mode: "smart" | "fast" | "immediate" = "fast"): Promise<void> => {
  await stopServer(cluster, mode)
  await startServer(cluster)
}

// ---------------------------------------------------------------------------------------------
// Databases

const withDatabase = (url: string, database: string): string => {
  const parsed = new URL(url)
  parsed.pathname = `/${encodeURIComponent(database)}`
  return parsed.toString()
}

const quoteIdent = (name: string): string => `"${name.replace(/"/g, `""`)}"`

/** `CREATE DATABASE <prefix>_<random hex>` on the server `adminUrl` names; the new database's URL. */
export const freshDatabase = async (adminUrl: string, prefix = "t"): Promise<string> => {
  if (!/^[a-z_][a-z0-9_]{0,40}$/.test(prefix)) throw new Error(`bad database prefix ${JSON.stringify(prefix)}`)
  const name = `${prefix}_${randomBytes(8).toString("hex")}`
  await withClient(adminUrl, (client) => client.query(`CREATE DATABASE ${quoteIdent(name)}`))
  return withDatabase(adminUrl, name)
}

/** Drops the database `url` names (its sessions ended too, PostgreSQL 13+); best effort, never throws. */
export const dropDatabase = async (url: string): Promise<void> => {
  try {
    const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ""))
    if (name === "" || name === "postgres") return
    await withClient(withDatabase(url, "postgres"), async (client) => {
      const { rows } = await client.query<{ v: string }>("SELECT current_setting('server_version_num') AS v")
      const force = Number(rows[0]?.v ?? 0) >= 130000 ? " WITH (FORCE)" : ""
      await client.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)}${force}`)
    })
  } catch {
    // best effort
  }
}
