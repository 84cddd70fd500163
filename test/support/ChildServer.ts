/**
 * The server as a separate process, exactly as `npm start` runs it (`node dist/main.js`, the
 * bundle `npm run build` writes; `test/globalSetup.ts` builds it once before the tests), for
 * crash tests: kill it with any signal (SIGKILL included) and restart it on the same database
 * and port.
 *
 *   const child = await ChildServer.start({ config: { providers: [...], models: [...] }, env: { MY_KEY: "..." } })
 *   child.baseUrl                      // http://127.0.0.1:PORT
 *   await child.kill("SIGKILL")        // the whole process group; resolves once it is gone
 *   await child.restart()              // same BYOK_CONFIG, BYOK_DB, BYOK_PORT (+ optional extra env)
 *   child.stdout(), child.stderr()     // everything printed so far, over all runs (diagnostics)
 *   await child.close()                // kills it if running, removes the temp directory
 *
 * The configuration is written to a temp JSON file (`BYOK_CONFIG`); the database defaults to a
 * file in the same temp directory (`BYOK_DB`); the port is a free one picked by binding
 * 127.0.0.1:0 and closing (`BYOK_PORT`). The server is started in a new process group and
 * signals go to the whole group: a SIGKILL cannot leave an orphan holding the port or the database.
 *
 * Plain Promises (no test framework); `make` wraps it for scoped Effect tests.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { startFlags } from "../../scripts/build.js"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import * as Net from "node:net"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Effect, type Scope } from "effect"

export interface ChildServerOptions {
  /** The configuration file's content (JSON); `{}` by default. */
  readonly config?: Record<string, unknown>
  /** The address it listens on (`BYOK_HOST`); 127.0.0.1 by default. */
  readonly host?: string
  /** Extra environment variables (provider keys, test switches...), over `process.env`. */
  readonly env?: Readonly<Record<string, string>>
  /** The database file (default: `byok.sqlite` in the server's temp directory). */
  readonly database?: string
  /** The port (default: a free one). */
  readonly port?: number
  /** Also serve `Run` over h2c on a free port (`h2cUrl`); off by default. */
  readonly h2c?: boolean
  /** The repository root (default: the current directory). */
  readonly cwd?: string
  /** How long to wait for the server to answer `/healthz` (default 30 s). */
  readonly startTimeoutMs?: number
}

export interface Exited {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

export interface ChildServer {
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly baseUrl: string
  /** `http://127.0.0.1:<h2c port>` when `h2c` was asked for. */
  readonly h2cUrl: string | undefined
  readonly database: string
  readonly configPath: string
  /** The temp directory holding the configuration (and the default database). */
  readonly dir: string
  /** The current process id (undefined when not running). */
  readonly pid: () => number | undefined
  readonly running: () => boolean
  /** All output so far, over every run. */
  readonly stdout: () => string
  readonly stderr: () => string
  /** Sends `signal` (default SIGTERM) to the server's process group; resolves once the process has exited. */
  readonly kill: (signal?: NodeJS.Signals, timeoutMs?: number) => Promise<Exited>
  /** Starts the server again (killing it with SIGKILL first if it still runs) on the same database and port. */
  readonly restart: (options?: { readonly env?: Readonly<Record<string, string>> }) => Promise<void>
  /** Resolves when the current process exits (e.g. a crash the test provoked). */
  readonly exited: () => Promise<Exited>
  /** Kills the server if it runs and removes the temp directory (not a database passed in). */
  readonly close: () => Promise<void>
}

export { startFlags }

/** A port that was free a moment ago: bind 127.0.0.1:0, read the port, close. */
export const freePort = (): Promise<number> =>
  new Promise((resolvePort, reject) => {
    const server = Net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as Net.AddressInfo
      server.close(() => resolvePort(port))
    })
  })

const healthy = (port: number): Promise<boolean> =>
  new Promise((resolveHealth) => {
    const request = Http.get({ host: "127.0.0.1", port, path: "/healthz", agent: false, timeout: 1_000 }, (response) => {
      response.resume()
      resolveHealth(response.statusCode === 200)
    })
    request.on("timeout", () => request.destroy())
    request.on("error", () => resolveHealth(false))
  })

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const groupAlive = (pid: number): boolean => {
  try {
    process.kill(-pid, 0)
    return true
  } catch {
    return false
  }
}

export const start = async (options: ChildServerOptions = {}): Promise<ChildServer> => {
  const dir = mkdtempSync(join(tmpdir(), "cursor-byok-child-"))
  const configPath = join(dir, "byok.config.json")
  writeFileSync(configPath, JSON.stringify(options.config ?? {}, null, 2))
  const database = options.database ?? join(dir, "byok.sqlite")
  const port = options.port ?? await freePort()
  const h2cPort = options.h2c === true ? await freePort() : undefined
  const cwd = options.cwd ?? process.cwd()
  const bundle = resolve(cwd, "dist/main.js")
  let out = ""
  let err = ""
  let child: ChildProcess | undefined
  let exit: Promise<Exited> = Promise.resolve({ code: null, signal: null })
  let alive = false

  const launch = async (extraEnv: Readonly<Record<string, string>> = {}) => {
    const spawned = spawn(process.execPath, [...startFlags(cwd), bundle], {
      cwd,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        // No proxy or TLS listener (fixed ports), and a CA home of its own, unless a test asks.
        BYOK_PROXY_PORT: "off",
        BYOK_TLS_PORT: "off",
        BYOK_HOME: join(dir, "home"),
        ...options.env,
        ...extraEnv,
        BYOK_CONFIG: configPath,
        BYOK_DB: database,
        BYOK_PORT: String(port),
        BYOK_H2C_PORT: h2cPort === undefined ? "off" : String(h2cPort),
        BYOK_HOST: options.host ?? "127.0.0.1"
      }
    })
    child = spawned
    alive = true
    let listening = false
    spawned.stdout!.setEncoding("utf8").on("data", (data: string) => {
      out += data
      if (data.includes("Listening on")) listening = true
    })
    spawned.stderr!.setEncoding("utf8").on("data", (data: string) => {
      err += data
    })
    exit = new Promise<Exited>((done) => {
      spawned.once("exit", (code, signal) => {
        alive = false
        done({ code, signal })
      })
    })
    const deadline = Date.now() + (options.startTimeoutMs ?? 30_000)
    while (Date.now() < deadline) {
      if (!alive) {
        // It listened and was stopped since (a test that ended meanwhile): not a failed start.
        if (listening) return
        const exited = await exit
        throw new Error(`the server exited before it listened (code ${exited.code}, signal ${exited.signal})\nstdout:\n${out}\nstderr:\n${err}`)
      }
      if (listening || await healthy(port)) {
        // "Listening on" can precede the first accepted request by a tick: confirm with /healthz.
        if (await healthy(port)) return
      }
      await sleep(50)
    }
    await kill("SIGKILL")
    throw new Error(`the server did not answer /healthz on port ${port} within ${options.startTimeoutMs ?? 30_000} ms\nstdout:\n${out}\nstderr:\n${err}`)
  }

  const kill = async (signal: NodeJS.Signals = "SIGTERM", timeoutMs = 10_000): Promise<Exited> => {
    const current = child
    if (current === undefined || current.pid === undefined) return { code: null, signal: null }
    const pid = current.pid
    if (alive) {
      try {
        process.kill(-pid, signal)
      } catch {
        // Already gone.
      }
    }
    const exited = await Promise.race([exit, sleep(timeoutMs).then(() => undefined)])
    if (exited === undefined) throw new Error(`the server (pid ${pid}) did not exit within ${timeoutMs} ms of ${signal}`)
    // Anything the server started is in the same group: wait until the whole group is gone.
    if (signal === "SIGKILL") {
      for (let waited = 0; groupAlive(pid) && waited < timeoutMs; waited += 20) await sleep(20)
    } else {
      for (let waited = 0; groupAlive(pid) && waited < timeoutMs; waited += 20) await sleep(20)
      if (groupAlive(pid)) process.kill(-pid, "SIGKILL")
    }
    return exited
  }

  const handle: ChildServer = {
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    h2cUrl: h2cPort === undefined ? undefined : `http://127.0.0.1:${h2cPort}`,
    database,
    configPath,
    dir,
    pid: () => (alive ? child?.pid : undefined),
    running: () => alive,
    stdout: () => out,
    stderr: () => err,
    kill,
    restart: async (restartOptions) => {
      if (alive) await kill("SIGKILL")
      await launch(restartOptions?.env)
    },
    exited: () => exit,
    close: async () => {
      if (alive) await kill("SIGKILL").catch(() => undefined)
      rmSync(dir, { recursive: true, force: true })
    }
  }
  try {
    await launch()
  } catch (error) {
    rmSync(dir, { recursive: true, force: true })
    throw error
  }
  return handle
}

/** Starts the server for the life of the current scope. */
export const make = (options: ChildServerOptions = {}): Effect.Effect<ChildServer, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => start(options)),
    (child) => Effect.promise(() => child.close())
  )
