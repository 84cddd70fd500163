/**
 * Relay throughput (DESIGN.md §9: the full pipeline ≥ 50% of a minimal pass-through relay
 * measured in the same run).
 *
 * Same layout as `latency.ts`: server and relay each in a child process, the fake provider and
 * the clients in this process. Each round runs `streams` concurrent turns of `deltas` text
 * deltas written back to back (one `write` per SSE event, waiting for `drain` when the socket
 * pushes back). Through the server every delta goes through SSE decoding, the adapter and loop
 * transition, the Dialect's protobuf encoding, Connect framing and the RunSSE socket, and the
 * reference client decodes every frame; through the relay the bytes are forwarded unchanged
 * and the client parses every SSE event's JSON. What is timed: deltas received by the clients
 * divided by the time from the first request to the last delta's arrival. Turn set-up and
 * the checkpoint after the last delta are outside the window's end but its start includes
 * the server's turn start (a few ms against seconds of streaming).
 *
 *   node_modules/.bin/tsx bench/throughput.ts [runs]
 */
import * as http from "node:http"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { startRelay, startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, spread, verdict } from "./support/stats.js"
import { concurrently, relayStream, serverStream } from "./support/streams.js"

export interface ThroughputOptions {
  readonly runs?: number
  readonly streams?: number
  readonly deltas?: number
}

interface Round {
  readonly deltasPerSecond: number
  readonly childCpu: number
  readonly problems: ReadonlyArray<string>
}

/** Met and kept (DESIGN.md §9), and the next target. */
export const BUDGET_RATIO = 0.5
export const TARGET_RATIO = 0.7

export const run = async (options: ThroughputOptions = {}) => {
  const runs = options.runs ?? 5
  const streams = options.streams ?? 4
  const deltas = options.deltas ?? 5_000
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl)
  const relay = await startRelay(provider.baseUrl)
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  let sequence = 0
  const measure = async (path: "relay" | "server", count: number): Promise<Round> => {
    const child = path === "relay" ? relay : server
    const cpuStart = child.cpuSeconds()
    const started = performance.now()
    const results = await concurrently(streams, 0, () => {
      const spec = { id: `${path}${sequence++}`, deltas: count, minMs: 0, maxMs: 0 }
      return path === "relay" ? relayStream(relay.baseUrl, provider, spec, agent) : serverStream(server.baseUrl, provider, spec)
    })
    const received = results.reduce((n, r) => n + r.deltas, 0)
    const lastAt = Math.max(...results.map((r) => r.lastAt))
    const wall = (lastAt - started) / 1000
    const cpu = (child.cpuSeconds() - cpuStart) / ((performance.now() - started) / 1000)
    provider.reset()
    return { deltasPerSecond: received / wall, childCpu: cpu, problems: results.flatMap((r) => r.problems) }
  }
  const relayRounds: Array<Round> = []
  const serverRounds: Array<Round> = []
  try {
    for (const path of ["relay", "server"] as const) await measure(path, 1_000)
    for (let r = 0; r < runs; r++) {
      const order = r % 2 === 0 ? (["relay", "server"] as const) : (["server", "relay"] as const)
      for (const path of order) (path === "relay" ? relayRounds : serverRounds).push(await measure(path, deltas))
    }
  } finally {
    agent.destroy()
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const ratios = serverRounds.map((s, i) => s.deltasPerSecond / relayRounds[i]!.deltasPerSecond)
  const ratio = median(ratios)
  const problems = [...relayRounds, ...serverRounds].flatMap((round) => round.problems)
  const thousands = (values: ReadonlyArray<number>) => spread(values.map((v) => v / 1000), 1)
  const markdown = [
    `Throughput, ${streams} concurrent unpaced streams × ${deltas} deltas per round, ${runs} runs, median (min–max); deltas/s in thousands.`,
    `Server and relay each in a child process; provider and clients in the bench process. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| path | k deltas/s | child CPU (share of a core) |",
    "| --- | ---: | ---: |",
    `| pass-through relay | ${thousands(relayRounds.map((r) => r.deltasPerSecond))} | ${Math.round(median(relayRounds.map((r) => r.childCpu)) * 100)}% |`,
    `| full pipeline (server) | ${thousands(serverRounds.map((r) => r.deltasPerSecond))} | ${Math.round(median(serverRounds.map((r) => r.childCpu)) * 100)}% |`,
    "",
    "| ratio server / relay | budget | verdict |",
    "| ---: | ---: | --- |",
    `| ${spread(ratios.map((x) => x * 100), 1)} % | ≥ ${BUDGET_RATIO * 100} % (kept) | ${verdict(ratio >= BUDGET_RATIO)} |`,
    `| | ≥ ${TARGET_RATIO * 100} % (target) | ${verdict(ratio >= TARGET_RATIO)} |`,
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { relayRounds, serverRounds, ratios, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
