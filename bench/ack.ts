/**
 * BidiAppend acknowledgement while 200 streams run (DESIGN.md §9: p99 ≤ 5 ms).
 *
 * Same layout as `latency.ts`: server and relay each in a child process, the fake provider and
 * the reference clients in this process. 200 turns stream paced deltas (5–20 ms apart) at
 * once, staggered over 100 ms; each client sends a `client_heartbeat` append every second
 * besides its run request and its blob acknowledgements, as Cursor does during a turn. What
 * is timed: each BidiAppend POST from the moment the client starts it to the end of its
 * response (`AppendRecord.sentAt` → `answeredAt`), over every append of every turn. The
 * floor, in the same run: while 200 relay streams run, the same number of unary POSTs to the
 * relay's `/ack` (which answers at once) on the same schedule, so the figure shows how much
 * of the time is this process's own event loop and the loopback.
 *
 *   node_modules/.bin/tsx bench/ack.ts [runs]
 */
import * as http from "node:http"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { startRelay, startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, percentile, spread, verdict } from "./support/stats.js"
import { concurrently, relayStream, serverStream } from "./support/streams.js"

export const BUDGET_P99_MS = 5

export interface AckOptions {
  readonly runs?: number
  readonly streams?: number
  readonly deltas?: number
  readonly heartbeatMs?: number
}

interface Round {
  readonly p50: number
  readonly p99: number
  readonly count: number
  readonly failed: number
}

/** A unary POST to the relay's `/ack`; resolves with its duration in ms (NaN on failure). */
const postAck = (baseUrl: URL, agent: http.Agent): Promise<number> =>
  new Promise((resolve) => {
    const started = performance.now()
    const body = Buffer.alloc(64)
    const request = http.request({
      host: baseUrl.hostname,
      port: baseUrl.port,
      path: "/ack",
      method: "POST",
      agent,
      headers: { "content-type": "application/proto", "content-length": String(body.length) }
    }, (response) => {
      response.resume()
      response.on("end", () => resolve(performance.now() - started))
      response.on("error", () => resolve(Number.NaN))
    })
    request.setTimeout(30_000, () => request.destroy())
    request.on("error", () => resolve(Number.NaN))
    request.end(body)
  })

export const run = async (options: AckOptions = {}) => {
  const runs = options.runs ?? 3
  const streams = options.streams ?? 200
  const deltas = options.deltas ?? 50
  const heartbeatMs = options.heartbeatMs ?? 1_000
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl)
  const relay = await startRelay(provider.baseUrl)
  const relayUrl = new URL(relay.baseUrl)
  const streamAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const ackAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  let sequence = 0
  const serverRound = async (count: number, deltaCount: number): Promise<Round> => {
    const results = await concurrently(count, 100, () =>
      serverStream(server.baseUrl, provider, { id: `a${sequence++}`, deltas: deltaCount, minMs: 5, maxMs: 20 }, { heartbeatMs }))
    provider.reset()
    const appends = results.flatMap((r) => r.appends)
    const times = appends.filter((a) => a.status === 200).map((a) => a.answeredAt - a.sentAt)
    return { p50: percentile(times, 50), p99: percentile(times, 99), count: times.length, failed: appends.length - times.length }
  }
  const relayRound = async (count: number, deltaCount: number): Promise<Round> => {
    const times: Array<number> = []
    let failed = 0
    await concurrently(count, 100, async () => {
      const pending: Array<Promise<void>> = [postAck(relayUrl, ackAgent).then((ms) => void times.push(ms))]
      const timer = setInterval(() => pending.push(postAck(relayUrl, ackAgent).then((ms) => void times.push(ms))), heartbeatMs)
      try {
        await relayStream(relay.baseUrl, provider, { id: `b${sequence++}`, deltas: deltaCount, minMs: 5, maxMs: 20 }, streamAgent)
      } finally {
        clearInterval(timer)
      }
      await Promise.all(pending)
    })
    provider.reset()
    const ok = times.filter((t) => !Number.isNaN(t))
    failed += times.length - ok.length
    return { p50: percentile(ok, 50), p99: percentile(ok, 99), count: ok.length, failed }
  }
  const serverRounds: Array<Round> = []
  const relayRounds: Array<Round> = []
  try {
    await relayRound(50, 40)
    await serverRound(50, 40)
    for (let r = 0; r < runs; r++) {
      if (r % 2 === 0) {
        relayRounds.push(await relayRound(streams, deltas))
        serverRounds.push(await serverRound(streams, deltas))
      } else {
        serverRounds.push(await serverRound(streams, deltas))
        relayRounds.push(await relayRound(streams, deltas))
      }
    }
  } finally {
    streamAgent.destroy()
    ackAgent.destroy()
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const p99 = median(serverRounds.map((r) => r.p99))
  const markdown = [
    `BidiAppend acknowledgement while ${streams} streams run (${deltas} deltas each, 5–20 ms apart; a client heartbeat append every ${heartbeatMs} ms per stream), ms, ${runs} runs, median (min–max).`,
    `Server and relay each in a child process; provider and clients in the bench process. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| unary call | acks per run | p50 | p99 | budget (p99) | verdict |",
    "| --- | ---: | ---: | ---: | ---: | --- |",
    `| relay \`/ack\` (floor), under ${streams} relay streams | ${Math.round(median(relayRounds.map((r) => r.count)))} | ${spread(relayRounds.map((r) => r.p50))} | ${spread(relayRounds.map((r) => r.p99))} | | |`,
    `| server BidiAppend, under ${streams} turns | ${Math.round(median(serverRounds.map((r) => r.count)))} | ${spread(serverRounds.map((r) => r.p50))} | ${spread(serverRounds.map((r) => r.p99))} | ≤ ${BUDGET_P99_MS} | ${verdict(p99 <= BUDGET_P99_MS)} |`,
    ...([...serverRounds, ...relayRounds].some((r) => r.failed > 0)
      ? [`\nfailed calls per run: server ${serverRounds.map((r) => r.failed).join(", ")}; relay ${relayRounds.map((r) => r.failed).join(", ")}`]
      : [])
  ].join("\n")
  return { serverRounds, relayRounds, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
