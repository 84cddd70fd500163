/**
 * Added latency per delta (DESIGN.md §9: p99 ≤ 1 ms with one stream, ≤ 5 ms with 200).
 *
 * Layout: the server under test runs alone in a child process (`support/serve.ts`:
 * `Server.layer` with its SQLite store and undici client); the stamped fake provider and all
 * the clients run in this process, so the provider's send stamp and the client's arrival stamp
 * come from the same clock (`performance.now()`), and the clients' work does not steal the
 * server's event loop. The floor is a bare `node:http` pass-through relay (`support/relay.ts`)
 * in its own child process, in the same layout, measured in the same run.
 *
 * Each stream is one turn of `deltas` text deltas spaced like a model (uniformly 5–20 ms
 * apart); streams of a level start staggered over 100 ms. What is timed: for every text
 * delta, its arrival at the client (the frame's last byte read) minus its `write` at the fake
 * provider. Both paths include the same two loopback hops and this process's own delays; the
 * server's added latency is the server figure minus the relay figure of the same run. Each
 * run measures relay and server back to back at each level (alternating which goes first);
 * the table gives medians over runs with the min–max spread.
 *
 *   node_modules/.bin/tsx bench/latency.ts [runs]
 */
import * as http from "node:http"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { startRelay, startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, percentile, spread, verdict } from "./support/stats.js"
import { concurrently, relayStream, serverStream } from "./support/streams.js"
import type { StreamResult } from "./support/streams.js"

export interface Level {
  readonly streams: number
  readonly deltas: number
  /** Budget on the added p99 (server − relay), ms; undefined when §9 sets none. */
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
}

interface Round {
  readonly p50: number
  readonly p99: number
  readonly samples: number
  readonly problems: ReadonlyArray<string>
  /** CPU the measured child used during the round, as a share of one core. */
  readonly childCpu: number
}

const summarize = (results: ReadonlyArray<StreamResult>, cpu: number): Round => {
  const all: Array<number> = []
  for (const result of results) for (const latency of result.latencies) all.push(latency)
  return {
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    samples: all.length,
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
  let sequence = 0
  const measure = async (path: "relay" | "server", level: Level): Promise<Round> => {
    const child = path === "relay" ? relay : server
    const cpuStart = child.cpuSeconds()
    const started = performance.now()
    const results = await concurrently(level.streams, 100, () => {
      const spec = { id: `${path}${sequence++}`, deltas: level.deltas, minMs, maxMs }
      return path === "relay" ? relayStream(relay.baseUrl, provider, spec, agent) : serverStream(server.baseUrl, provider, spec)
    })
    const wall = (performance.now() - started) / 1000
    provider.reset()
    return summarize(results, (child.cpuSeconds() - cpuStart) / wall)
  }
  const rounds = new Map<number, { relay: Array<Round>; server: Array<Round> }>()
  try {
    // Warm-up (JIT, SQLite, connection pools), not recorded.
    for (const path of ["relay", "server"] as const) await measure(path, { streams: 50, deltas: 40, budgetP99Ms: undefined })
    for (let r = 0; r < runs; r++) {
      for (const level of levels) {
        const entry = rounds.get(level.streams) ?? { relay: [], server: [] }
        rounds.set(level.streams, entry)
        const order = r % 2 === 0 ? (["relay", "server"] as const) : (["server", "relay"] as const)
        for (const path of order) entry[path].push(await measure(path, level))
      }
    }
  } finally {
    agent.destroy()
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const rows = levels.map((level) => {
    const { relay: relayRounds, server: serverRounds } = rounds.get(level.streams)!
    const addedP50 = serverRounds.map((s, i) => s.p50 - relayRounds[i]!.p50)
    const addedP99 = serverRounds.map((s, i) => s.p99 - relayRounds[i]!.p99)
    const problems = [...relayRounds, ...serverRounds].flatMap((round) => round.problems)
    const met = level.budgetP99Ms === undefined ? undefined : median(addedP99) <= level.budgetP99Ms
    return { level, relayRounds, serverRounds, addedP50, addedP99, problems, met }
  })
  const markdown = [
    `Latency per text delta, provider write → client read, ms; ${runs} runs, median (min–max) over runs; deltas ${minMs}–${maxMs} ms apart.`,
    `Server and relay each in a child process; provider and clients in the bench process. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| streams | deltas/run | relay p50 | relay p99 | server p50 | server p99 | added p50 | added p99 | budget (added p99) | verdict | server CPU |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ...rows.map((row) =>
      `| ${row.level.streams} | ${row.serverRounds[0]?.samples ?? 0} | ${spread(row.relayRounds.map((x) => x.p50))} | ${spread(row.relayRounds.map((x) => x.p99))} | ${spread(row.serverRounds.map((x) => x.p50))} | ${spread(row.serverRounds.map((x) => x.p99))} | ${spread(row.addedP50)} | ${spread(row.addedP99)} | ${row.level.budgetP99Ms === undefined ? "none" : `≤ ${row.level.budgetP99Ms}`} | ${row.met === undefined ? "—" : verdict(row.met)} | ${Math.round(median(row.serverRounds.map((x) => x.childCpu)) * 100)}% |`
    ),
    ...rows.filter((row) => row.problems.length > 0).map((row) =>
      `\n${row.level.streams} streams: ${row.problems.length} problems, e.g. ${row.problems.slice(0, 3).join("; ")}`
    )
  ].join("\n")
  return { rows, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
