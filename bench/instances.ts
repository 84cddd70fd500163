/**
 * Several instances of a team's server on one PostgreSQL database, behind the tests' balancer
 * (each request to the next instance: no affinity, so most appends are forwarded): with one, two
 * and three instances in one run on this machine, the throughput of short turns (50 at once) and
 * the added latency per delta of 50 paced streams; then the failover time, a SIGKILL of the
 * instance holding a streaming turn and the reconnect through the balancer, to the first delta of
 * the call the other instance re-issues. Every row goes through the balancer, one instance's too.
 * The servers run precompiled in child processes (as `npm start`); the cluster is this machine's.
 * Skipped, saying so, where PostgreSQL is not installed.
 *
 *   node_modules/.bin/tsx bench/instances.ts [runs]
 */
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { startServer } from "./support/child.js"
import type { ServerChild } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, percentile, spread } from "./support/stats.js"
import { concurrently, serverStream, keptClients } from "./support/streams.js"
import * as Balancer from "../test/support/Balancer.js"
import { CursorClient } from "../test/support/CursorClient.js"
import { findPgBin, freePort, freshDatabase, startCluster } from "../test/support/Postgres.js"
import { holderAddress } from "../test/support/Registry.js"

const startOn = async (providerBaseUrl: string, database: string): Promise<ServerChild> => {
  const port = await freePort()
  return startServer(providerBaseUrl, { database, env: { BENCH_PORT: String(port) } })
}

export const run = async (options: { readonly runs?: number } = {}) => {
  const runs = options.runs ?? 3
  if (findPgBin() === undefined) return { markdown: "instances: skipped (PostgreSQL is not installed here: `apt-get install postgresql`)" }
  const loadBefore = loadAverage()
  const cluster = await startCluster({ settings: { fsync: "on", synchronous_commit: "off", full_page_writes: "on" } })
  const provider = await Provider.start()
  const database = await freshDatabase(cluster.url, "bench")
  const servers = await Promise.all([0, 1, 2].map(() => startOn(provider.baseUrl, database)))
  const problems: Array<string> = []
  let sequence = 0
  const throughput = new Map<number, Array<number>>()
  const deltas = new Map<number, Array<number>>()
  const failovers: Array<number> = []
  try {
    for (let r = 0; r < runs + 1; r++) {
      for (const n of [1, 2, 3]) {
        const balancer = await Balancer.start(servers.slice(0, n).map((server) => server.baseUrl))
        const clients = keptClients(balancer.baseUrl, 50)
        try {
          const started = performance.now()
          const turns = await concurrently(50, 100, (i) => serverStream(balancer.baseUrl, provider, { id: `i${sequence++}`, deltas: 3, minMs: 0, maxMs: 0 }, { client: clients[i]! }))
          const turnsPerSecond = 50 / ((performance.now() - started) / 1000)
          provider.reset()
          const paced = await concurrently(50, 100, (i) => serverStream(balancer.baseUrl, provider, { id: `i${sequence++}`, deltas: 100, minMs: 5, maxMs: 20 }, { client: clients[i]! }))
          provider.reset()
          problems.push(...[...turns, ...paced].flatMap((result) => result.problems))
          // The first run warms the servers up: not counted.
          if (r === 0) continue
          throughput.set(n, [...(throughput.get(n) ?? []), turnsPerSecond])
          deltas.set(n, [...(deltas.get(n) ?? []), percentile(paced.flatMap((result) => result.latencies), 99)])
        } finally {
          clients.forEach((client) => client.close())
          await balancer.close()
        }
      }
    }
    for (let r = 0; r < runs; r++) failovers.push(await failover(provider, cluster.url, `f${sequence++}`, problems))
  } finally {
    for (const server of servers) await server.dispose()
    await provider.close()
    await cluster.stop()
  }
  const one = median(throughput.get(1)!)
  const markdown = [
    `Instances on one PostgreSQL database behind a balancer with no affinity (${runs} runs after one uncounted, median (min–max)). Load average before: ${loadBefore}, after: ${loadAverage()}.`,
    "",
    "| instances | short turns per second (50 at once) | vs one | added latency per delta, p99 (50 paced streams) |",
    "| ---: | ---: | ---: | ---: |",
    ...[1, 2, 3].map((n) => `| ${n} | ${spread(throughput.get(n)!, 1)} | ${(median(throughput.get(n)!) / one).toFixed(2)}× | ${spread(deltas.get(n)!, 1)} ms |`),
    "",
    `Failover (SIGKILL of the instance holding a streaming turn; the client's reconnect through the balancer → the first delta of the re-issued call), ${runs} runs: ${spread(failovers, 0)} ms.`,
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { throughput, deltas, failovers, markdown }
}

/** Two fresh instances, a streaming turn, its holder killed: ms from the reconnect to the first delta after it. */
const failover = async (provider: Provider.StampedProvider, adminUrl: string, id: string, problems: Array<string>): Promise<number> => {
  const database = await freshDatabase(adminUrl, "failover")
  const pair = await Promise.all([0, 1].map(() => startOn(provider.baseUrl, database)))
  const balancer = await Balancer.start(pair.map((server) => server.baseUrl))
  const client = new CursorClient({ baseUrl: balancer.baseUrl, turnTimeoutMs: 60_000, requestTimeoutMs: 30_000, delivery: { _tag: "sequential" } })
  try {
    const requestId = `req-${id}`
    const turn = client.turn({ conversationId: `conv-${id}`, requestId, text: `Please answer. ${Provider.marker(id, 200, 20, 20)}`, model: "bench-model" })
    await turn.waitFor((frame) => frame.event.kind === "text_delta", 20_000)
    const holder = await holderAddress(database, requestId)
    const dead = pair.find((server) => server.baseUrl === holder)
    if (dead === undefined) throw new Error(`no instance holds ${requestId} (${holder})`)
    turn.disconnect()
    process.kill(dead.pid, "SIGKILL")
    await new Promise((resolve) => setTimeout(resolve, 200))
    const resumedAt = performance.now()
    await turn.reconnect()
    await turn.waitFor((frame) => frame.event.kind === "text_delta" && frame.at > resumedAt, 20_000)
    const ms = performance.now() - resumedAt
    const transcript = await turn.done
    problems.push(...transcript.problems)
    provider.reset()
    return ms
  } finally {
    client.close()
    await balancer.close()
    for (const server of pair) await server.dispose().catch(() => undefined)
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
