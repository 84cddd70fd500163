/**
 * Added latency per delta (DESIGN.md §9: p99 ≤ 1 ms with one stream, ≤ 5 ms with 200), on both
 * of Cursor's wires: RunSSE + BidiAppend (HTTP/1.1) and the HTTP/2 bidi `Run` (h2c).
 *
 * Layout: the server under test runs alone in a child process (`support/serve.ts`:
 * `Server.layer` with its SQLite store and undici client, HTTP/1.1 and h2c listeners on
 * ephemeral ports); the stamped fake provider and all the clients run in this process, so the
 * provider's send stamp and the client's arrival stamp come from the same clock
 * (`performance.now()`), and the clients' work does not steal the server's event loop. The
 * floor is a bare `node:http` pass-through relay (`support/relay.ts`) in its own child process,
 * in the same layout, measured in the same run.
 *
 * Each stream is one turn of `deltas` text deltas spaced like a model (uniformly 5–20 ms
 * apart); streams of a level start staggered over 100 ms. What is timed: for every text
 * delta, its arrival at the client (the read that completed its frame) minus its `write` at
 * the fake provider. The RunSSE client is the reference `CursorClient` (`support/streams.ts`),
 * the Run client a `node:http2` one (`support/run.ts`); both decode every frame and acknowledge
 * the checkpoint's blobs. Run is measured two ways in the same run: "Run (HTTP/2)", each turn
 * on its own HTTP/2 session, as each RunSSE turn has its own `CursorClient` and connections;
 * and "Run, one session", all of a level's streams on one HTTP/2 session kept for the whole
 * run, as one Cursor window keeps one session for all its turns (Node's default client
 * settings; `support/run.ts` says why they do not hold it back). All paths include the same
 * two loopback hops and this process's own delays; a wire's added latency is its figure minus
 * the relay's of the same run. Each run measures relay, RunSSE, Run and Run on one session back
 * to back at each level (rotating which goes first); the table gives medians over runs with the
 * min–max spread, and the share of deltas that reached the client in a socket read together
 * with another delta (batched frames, or frames joined by the server). A second table puts the
 * two Run columns side by side with their ratio, against issue 39's "within 1.5× the
 * session-per-turn figures".
 *
 *   node_modules/.bin/tsx bench/latency.ts [runs]
 */
import * as http from "node:http"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { startRelay, startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { keptRunSession, runStream } from "./support/run.js"
import type { RunSessionOptions } from "./support/run.js"
import { loadAverage, median, percentile, spread, verdict } from "./support/stats.js"
import { concurrently, relayStream, serverStream } from "./support/streams.js"
import type { StreamResult } from "./support/streams.js"

export interface Level {
  readonly streams: number
  readonly deltas: number
  /** Budget on the added p99 (wire − relay), ms; undefined when §9 sets none. */
  readonly budgetP99Ms: number | undefined
}

export const defaultLevels: ReadonlyArray<Level> = [
  { streams: 1, deltas: 300, budgetP99Ms: 1 },
  { streams: 50, deltas: 100, budgetP99Ms: undefined },
  { streams: 200, deltas: 40, budgetP99Ms: 5 }
]

export interface LatencyOptions {
  readonly runs?: number
  readonly levels?: ReadonlyArray<Level>
  readonly minMs?: number
  readonly maxMs?: number
  /** The client settings of the kept session of "Run, one session" (default: Node's). */
  readonly oneSession?: RunSessionOptions
}

/** The measured paths: the relay floor, then the server on each wire (Run with a session per turn, and on one kept session). */
export type Path = "relay" | "sse" | "run" | "runOne"
const PATHS: ReadonlyArray<Path> = ["relay", "sse", "run", "runOne"]
const LABEL: Record<Path, string> = { relay: "relay (floor)", sse: "RunSSE + BidiAppend", run: "Run (HTTP/2)", runOne: "Run, one session" }

/** Issue 39: Run on one session within this factor of Run with a session per turn. */
export const ONE_SESSION_FACTOR = 1.5

interface Round {
  readonly p50: number
  readonly p99: number
  readonly samples: number
  /** Share of the deltas that arrived in a read together with another delta. */
  readonly batched: number
  readonly problems: ReadonlyArray<string>
  /** CPU the measured child used during the round, as a share of one core. */
  readonly childCpu: number
}

const summarize = (results: ReadonlyArray<StreamResult>, cpu: number): Round => {
  const all: Array<number> = []
  let batched = 0
  for (const result of results) {
    for (const latency of result.latencies) all.push(latency)
    batched += result.batched
  }
  return {
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    samples: all.length,
    batched: all.length === 0 ? Number.NaN : batched / all.length,
    problems: results.flatMap((r) => r.problems),
    childCpu: cpu
  }
}

export const run = async (options: LatencyOptions = {}) => {
  const runs = options.runs ?? 5
  const levels = options.levels ?? defaultLevels
  const minMs = options.minMs ?? 5
  const maxMs = options.maxMs ?? 20
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl)
  const relay = await startRelay(provider.baseUrl)
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const kept = keptRunSession(server.h2cUrl, options.oneSession ?? {})
  let sequence = 0
  const measure = async (path: Path, level: Level): Promise<Round> => {
    const child = path === "relay" ? relay : server
    const shared = path === "runOne" ? await kept.get() : undefined
    const cpuStart = child.cpuSeconds()
    const started = performance.now()
    const results = await concurrently(level.streams, 100, () => {
      const spec = { id: `${path}${sequence++}`, deltas: level.deltas, minMs, maxMs }
      switch (path) {
        case "relay":
          return relayStream(relay.baseUrl, provider, spec, agent)
        case "sse":
          return serverStream(server.baseUrl, provider, spec)
        case "run":
          return runStream(server.h2cUrl, provider, spec)
        case "runOne":
          return runStream(server.h2cUrl, provider, spec, { session: shared! })
      }
    })
    const wall = (performance.now() - started) / 1000
    const cpu = (child.cpuSeconds() - cpuStart) / wall
    provider.reset()
    return summarize(results, cpu)
  }
  const rounds = new Map<number, Record<Path, Array<Round>>>()
  let sessionsOpened = 0
  let serverSettings = ""
  try {
    // Warm-up (JIT, SQLite, connection pools), not recorded.
    for (const path of PATHS) await measure(path, { streams: 50, deltas: 40, budgetP99Ms: undefined })
    for (let r = 0; r < runs; r++) {
      for (const level of levels) {
        const entry = rounds.get(level.streams) ?? { relay: [], sse: [], run: [], runOne: [] }
        rounds.set(level.streams, entry)
        // Rotated from run to run, so no path always goes first (or last) at a level.
        const order = PATHS.map((_, i) => PATHS[(i + r) % PATHS.length]!)
        for (const path of order) entry[path].push(await measure(path, level))
      }
    }
    sessionsOpened = kept.opened()
    const settings = (await kept.get()).session.remoteSettings
    serverSettings = `server's SETTINGS: ${settings.maxConcurrentStreams} concurrent streams, ${settings.initialWindowSize} bytes initial stream window`
  } finally {
    await kept.close()
    agent.destroy()
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const rows = levels.flatMap((level) => {
    const entry = rounds.get(level.streams)!
    const relayRounds = entry.relay
    return PATHS.map((path) => {
      const own = entry[path]
      const addedP50 = path === "relay" ? [] : own.map((s, i) => s.p50 - relayRounds[i]!.p50)
      const addedP99 = path === "relay" ? [] : own.map((s, i) => s.p99 - relayRounds[i]!.p99)
      const met = path === "relay" || level.budgetP99Ms === undefined ? undefined : median(addedP99) <= level.budgetP99Ms
      return { level, path, rounds: own, addedP50, addedP99, problems: own.flatMap((round) => round.problems), met }
    })
  })
  const percent = (values: ReadonlyArray<number>) => `${Math.round(median(values) * 100)}%`
  // Run on one kept session beside Run with a session per turn, level by level; ratios are per run (same run's rounds), then the median.
  const sideBySide = levels.map((level) => {
    const entry = rounds.get(level.streams)!
    const ratio = (pick: (round: Round) => number) => median(entry.runOne.map((one, i) => pick(one) / pick(entry.run[i]!)))
    const p50 = ratio((x) => x.p50)
    const p99 = ratio((x) => x.p99)
    const row = (path: Path) => rows.find((r) => r.level === level && r.path === path)!
    return { level, p50, p99, met: p50 <= ONE_SESSION_FACTOR && p99 <= ONE_SESSION_FACTOR, perTurn: row("run"), one: row("runOne") }
  })
  const markdown = [
    `Latency per text delta, provider write → client read, ms; ${runs} runs, median (min–max) over runs; deltas ${minMs}–${maxMs} ms apart; "Run (HTTP/2)" turns each on their own HTTP/2 session, "Run, one session" all of a level's streams on one session kept for the run (${sessionsOpened} opened; ${serverSettings}).`,
    `Server and relay each in a child process; provider and clients in the bench process. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| streams | path | deltas/run | p50 | p99 | added p50 | added p99 | budget (added p99) | verdict | deltas sharing a read | child CPU |",
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ...rows.map((row) =>
      `| ${row.level.streams} | ${LABEL[row.path]} | ${row.rounds[0]?.samples ?? 0} | ${spread(row.rounds.map((x) => x.p50))} | ${spread(row.rounds.map((x) => x.p99))} | ${row.path === "relay" ? "" : spread(row.addedP50)} | ${row.path === "relay" ? "" : spread(row.addedP99)} | ${row.path === "relay" ? "" : row.level.budgetP99Ms === undefined ? "none" : `≤ ${row.level.budgetP99Ms}`} | ${row.met === undefined ? "—" : verdict(row.met)} | ${percent(row.rounds.map((x) => x.batched))} | ${Math.round(median(row.rounds.map((x) => x.childCpu)) * 100)}% |`
    ),
    "",
    `Run, a session per turn beside one session for all (issue 39: within ${ONE_SESSION_FACTOR}× the session-per-turn figures; the ratio is one session / per turn in each run, median over runs, of p50 and p99 provider write → client read):`,
    "",
    "| streams | p50: Run (HTTP/2) | p50: Run, one session | p99: Run (HTTP/2) | p99: Run, one session | added p99: Run (HTTP/2) | added p99: Run, one session | ratio p50 | ratio p99 | within 1.5× |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ...sideBySide.map((x) =>
      `| ${x.level.streams} | ${spread(x.perTurn.rounds.map((r) => r.p50))} | ${spread(x.one.rounds.map((r) => r.p50))} | ${spread(x.perTurn.rounds.map((r) => r.p99))} | ${spread(x.one.rounds.map((r) => r.p99))} | ${spread(x.perTurn.addedP99)} | ${spread(x.one.addedP99)} | ${x.p50.toFixed(2)} | ${x.p99.toFixed(2)} | ${verdict(x.met)} |`
    ),
    ...rows.filter((row) => row.problems.length > 0).map((row) =>
      `\n${row.level.streams} streams, ${LABEL[row.path]}: ${row.problems.length} problems, e.g. ${row.problems.slice(0, 3).join("; ")}`
    )
  ].join("\n")
  return { rows, sideBySide, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
