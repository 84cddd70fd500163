/**
 * Starting the benchmark children (the server of `serve.ts`, the relay of `relay.ts`) as
 * separate Node processes, so that the clients and the fake provider in the benchmark process
 * do not share the event loop being measured; reading their RSS and CPU time from /proc.
 */
import { execFileSync, spawn } from "node:child_process"
import type { ChildProcess } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { primeCodeCache } from "../../scripts/build.js"
import { startFlags } from "../../test/support/ChildServer.js"

const here = dirname(fileURLToPath(import.meta.url))
export const repoRoot = join(here, "..", "..")

export interface Child {
  readonly pid: number
  readonly port: number
  readonly baseUrl: string
  /** The h2c port of `agent.v1.AgentService/Run` (the server only; undefined for the relay). */
  readonly h2cPort: number | undefined
  /** `http://127.0.0.1:<h2c port>` (empty when there is none). */
  readonly h2cUrl: string
  /** The intercepting proxy's port (a server started with `BENCH_PROXY=1`). */
  readonly proxyPort: number | undefined
  /** Last lines the child printed (logs), for diagnostics. */
  readonly output: () => string
  /** Full GC in the child (when it has `--expose-gc`); resolves with its `process.memoryUsage()`. */
  readonly gc: () => Promise<NodeJS.MemoryUsage>
  /** VmRSS and VmHWM of the child from /proc, in bytes. */
  readonly rss: () => { readonly rss: number; readonly peak: number }
  /** User + system CPU seconds the child has used so far (from /proc/<pid>/stat). */
  readonly cpuSeconds: () => number
  /** Starts the V8 CPU profiler in the child (sampling every `intervalUs`). */
  readonly profileStart: (intervalUs?: number) => Promise<void>
  /** Stops it and writes the `.cpuprofile` to `path`. */
  readonly profileStop: (path: string) => Promise<void>
  /** Starts V8's sampling heap profiler in the child (a sample every ~`intervalBytes` allocated, collected objects included). */
  readonly heapStart: (intervalBytes?: number) => Promise<void>
  /** Stops it and writes the `.heapprofile` to `path`. */
  readonly heapStop: (path: string) => Promise<void>
  /** Asks the child to exit (normal exit, so a CPU profile is written); kills it after 5 s. */
  readonly stop: () => Promise<void>
}

export interface ChildOptions {
  readonly env?: Readonly<Record<string, string>>
  /**
   * Run the script precompiled (one bundle of the script, src/ and its packages, made as
   * `scripts/build.ts` makes the server's, under node_modules/.cache) with plain `node`, as
   * `npm start` runs the server (the default);
   * `false` runs it through the tsx loader instead.
   */
  readonly compiled?: boolean
  /** A bundle of the script made already (another version's, `ab.ts`), run as a compiled one is. */
  readonly prebuilt?: string
  /** Extra Node flags, e.g. `--cpu-prof`. */
  readonly nodeFlags?: ReadonlyArray<string>
}

/** User + system CPU seconds process `pid` has used so far (from /proc/<pid>/stat). */
const cpuSecondsOf = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}

/** How many of a child's last output lines are kept (`output()`); BENCH_OUTPUT_LINES to read more (a `--trace-gc` run). */
const outputLines = Number(process.env["BENCH_OUTPUT_LINES"] ?? 40)

const bundled = new Map<string, string>()

/** Bundles a support script as the server's bundle is made (once per process); returns the bundle's path. */
const bundle = (script: string): string => {
  const existing = bundled.get(script)
  if (existing !== undefined) return existing
  const dir = join(repoRoot, "node_modules", ".cache", "byok-bench")
  mkdirSync(dir, { recursive: true })
  const out = join(dir, script.replace(/\.ts$/, ".mjs"))
  // As `npm run build` bundles the server (`scripts/build.ts`).
  execFileSync(join(repoRoot, "node_modules", ".bin", "tsx"), [join(repoRoot, "scripts", "build.ts"), join(here, script), out], { cwd: repoRoot, stdio: "inherit" })
  // Its code cache for the flags the children run with (`launch`), as `npm run build` primes `npm start`'s.
  primeCodeCache(out, ["--expose-gc", ...startFlags(repoRoot)])
  bundled.set(script, out)
  return out
}

const launch = (script: string, options: ChildOptions): Promise<Child> =>
  new Promise((resolve, reject) => {
    // With its source map, as `npm start` runs the server bundle.
    // With the flags `npm start` gives it (package.json `config.nodeFlags`: source maps, heap sizing).
    // The caller's flags after `npm start`'s: V8 takes the last of a flag given twice (`--max-semi-space-size`).
    const [flags, entry] = options.prebuilt !== undefined
      ? [startFlags(repoRoot), [options.prebuilt]]
      : options.compiled !== false ? [startFlags(repoRoot), [bundle(script)]] : [[], ["--import", "tsx", join(here, script)]]
    const child: ChildProcess = spawn(process.execPath, ["--expose-gc", ...flags, ...(options.nodeFlags ?? []), ...entry], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe", "ipc"],
      env: { ...process.env, ...options.env }
    })
    const lines: Array<string> = []
    let ready = false
    let nextId = 0
    const waiting = new Map<number, (answer: Record<string, unknown>) => void>()
    const ask = (request: Record<string, unknown>): Promise<Record<string, unknown>> =>
      new Promise((done, fail) => {
        const id = nextId++
        const guard = setTimeout(() => fail(new Error(`no answer to ${String(request["op"])} within 30 s`)), 30_000)
        waiting.set(id, (answer) => {
          clearTimeout(guard)
          done(answer)
        })
        child.send({ ...request, id })
      })
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`${script} did not start within 30 s:\n${lines.join("\n")}`))
    }, 30_000)
    const keep = (text: string) => {
      for (const line of text.split("\n")) if (line !== "") lines.push(line)
      if (lines.length > outputLines) lines.splice(0, lines.length - outputLines)
    }
    child.stderr!.setEncoding("utf8").on("data", keep)
    child.stdout!.setEncoding("utf8").on("data", (text: string) => {
      keep(text)
      const match = /READY (\d+) (\d+)(?: (\d+))?(?: (\d+))?/.exec(text)
      if (match === null || ready) return
      ready = true
      clearTimeout(timer)
      const port = Number(match[1])
      const pid = Number(match[2])
      const h2cPort = match[3] !== undefined ? Number(match[3]) : undefined
      const proxyPort = match[4] !== undefined ? Number(match[4]) : undefined
      const exited = new Promise<void>((done) => child.once("exit", () => done()))
      resolve({
        pid,
        port,
        baseUrl: `http://127.0.0.1:${port}`,
        h2cPort,
        h2cUrl: h2cPort !== undefined ? `http://127.0.0.1:${h2cPort}` : "",
        proxyPort,
        output: () => lines.join("\n"),
        gc: () => ask({ op: "gc" }).then((answer) => answer["memory"] as NodeJS.MemoryUsage),
        profileStart: (intervalUs = 200) => ask({ op: "profile-start", intervalUs }).then(() => undefined),
        profileStop: (path) => ask({ op: "profile-stop", path }).then(() => undefined),
        heapStart: (intervalBytes = 4096) => ask({ op: "heap-start", intervalBytes }).then(() => undefined),
        heapStop: (path) => ask({ op: "heap-stop", path }).then(() => undefined),
        rss: () => {
          const status = readFileSync(`/proc/${pid}/status`, "utf8")
          const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN) * 1024
          return { rss: kb("VmRSS"), peak: kb("VmHWM") }
        },
        cpuSeconds: () => cpuSecondsOf(pid),
        stop: async () => {
          if (child.exitCode !== null) return
          if (child.connected) child.send({ op: "exit" })
          const killer = setTimeout(() => child.kill("SIGKILL"), 5_000)
          await exited
          clearTimeout(killer)
        }
      })
    })
    child.on("message", (message: { id: number } & Record<string, unknown>) => {
      waiting.get(message.id)?.(message)
      waiting.delete(message.id)
    })
    child.once("exit", (code) => {
      if (!ready) {
        clearTimeout(timer)
        reject(new Error(`${script} exited with ${code} before it was ready:\n${lines.join("\n")}`))
      }
    })
  })

/** The FileConfig of a server whose one model `bench-model` streams from the fake provider. */
export const benchConfig = (providerBaseUrl: string, database: string, extra: Record<string, unknown> = {}) => ({
  database,
  heartbeatMs: 5_000,
  providers: [{ id: "bench", api: "openai-chat", baseUrl: providerBaseUrl }],
  models: [{ id: "bench-model", provider: "bench", upstreamModel: "bench-model", contextWindow: 200_000 }],
  ...extra
})

export interface ServerChild extends Child {
  /** Stops the server and deletes its database directory. */
  readonly dispose: () => Promise<void>
}

/** The real server (Server.layer) in a child, on a fresh SQLite database in a temp directory. */
export const startServer = async (
  providerBaseUrl: string,
  options: ChildOptions & { readonly config?: Record<string, unknown>; readonly database?: string } = {}
): Promise<ServerChild> => {
  const dir = mkdtempSync(join(tmpdir(), "byok-bench-"))
  const config = benchConfig(providerBaseUrl, options.database ?? join(dir, "bench.sqlite"), options.config)
  const child = await launch("serve.ts", { ...options, env: { ...options.env, BENCH_CONFIG: JSON.stringify(config) } })
  return {
    ...child,
    dispose: async () => {
      await child.stop()
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

/** The pass-through relay in a child, forwarding to the fake provider. */
export const startRelay = (providerBaseUrl: string, options: ChildOptions = {}): Promise<Child> =>
  launch("relay.ts", { ...options, env: { ...options.env, BENCH_UPSTREAM: new URL(providerBaseUrl).origin } })
