/**
 * A soak (DESIGN.md §9: no drift in a 10-minute soak): 200 streams for `minutes` minutes, half
 * on RunSSE + BidiAppend and half on the HTTP/2 `Run`, each a lane of back-to-back turns (100
 * text deltas 5–20 ms apart, ~1.25 s a turn), so that 200 streams are open at all times.
 *
 * Same layout as `latency.ts`: the server alone in a child process (precompiled), the stamped
 * fake provider and the clients in this process. RunSSE lanes each keep one `CursorClient` (its
 * connections) from turn to turn and Run lanes one HTTP/2 session, as one Cursor window does;
 * every turn is a new conversation. Per minute of the soak: the p50 / p99 of every text delta's
 * latency (provider write → client read; there is no relay floor here, so these are whole-path
 * figures, loopback and this process's own delays included) by the minute it arrived, the
 * deltas and turns that completed, the turns that went wrong (lost frames: a turn that did not
 * deliver every delta it was sent, or did not end `ok`), the server's CPU share and its RSS at
 * the minute's end. Before the first minute (after a warm-up turn per lane) and after the last
 * turn ended, a full GC in the child gives its heap and RSS: their difference is the drift.
 *
 *   node_modules/.bin/tsx bench/soak.ts [minutes] [streams]
 */
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { CursorClient } from "../test/support/CursorClient.js"
import { startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { openRunSession, runStream } from "./support/run.js"
import type { RunSession } from "./support/run.js"
import { loadAverage, percentile } from "./support/stats.js"
import { serverStream } from "./support/streams.js"
import type { StreamResult } from "./support/streams.js"

export interface SoakOptions {
  readonly minutes?: number
  readonly streams?: number
  readonly deltas?: number
}

type Wire = "sse" | "run"

interface Minute {
  readonly latencies: Record<Wire, Array<number>>
  turns: number
  deltas: number
  failedTurns: number
  cpu: number
  rssMb: number
}

const mb = (bytes: number) => bytes / (1024 * 1024)

export const run = async (options: SoakOptions = {}) => {
  const minutes = options.minutes ?? 10
  const streams = options.streams ?? 200
  const deltas = options.deltas ?? 100
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl)
  const lanes = Array.from({ length: streams }, (_, i): Wire => (i % 2 === 0 ? "sse" : "run"))
  const clients = lanes.map((wire) => (wire === "sse" ? new CursorClient({ baseUrl: server.baseUrl, turnTimeoutMs: 120_000, requestTimeoutMs: 60_000 }) : undefined))
  const sessions: Array<RunSession | undefined> = []
  const problems: Array<string> = []
  const buckets: Array<Minute> = Array.from({ length: minutes }, () => ({ latencies: { sse: [], run: [] }, turns: 0, deltas: 0, failedTurns: 0, cpu: 0, rssMb: 0 }))
  let sequence = 0
  let startedAt = 0
  let endAt = Number.POSITIVE_INFINITY
  const turn = async (lane: number): Promise<StreamResult> => {
    const spec = { id: `s${sequence++}`, deltas, minMs: 5, maxMs: 20 }
    if (lanes[lane] === "sse") return serverStream(server.baseUrl, provider, spec, { client: clients[lane]! })
    let session = sessions[lane]
    if (session === undefined || session.session.closed || session.session.destroyed) {
      session = await openRunSession(server.h2cUrl)
      sessions[lane] = session
    }
    return runStream(server.h2cUrl, provider, spec, { session })
  }
  const record = (lane: number, result: StreamResult) => {
    const wire = lanes[lane]!
    const minute = Math.floor((performance.now() - startedAt) / 60_000)
    const bucket = buckets[Math.min(minutes - 1, Math.max(0, minute))]!
    bucket.turns++
    bucket.deltas += result.deltas
    if (result.problems.length > 0) {
      bucket.failedTurns++
      if (problems.length < 20) problems.push(`${wire} lane ${lane}: ${result.problems.join(", ")}`)
    }
    // Each delta by the minute it arrived (frames carry their read time as `firstAt`..`lastAt`; spread evenly is close enough within a turn).
    const span = Math.max(0, result.lastAt - result.firstAt)
    result.latencies.forEach((latency, index) => {
      const at = result.latencies.length <= 1 ? result.firstAt : result.firstAt + (span * index) / (result.latencies.length - 1)
      const m = Math.floor((at - startedAt) / 60_000)
      if (m < 0 || m >= minutes) return
      buckets[m]!.latencies[wire].push(latency)
    })
  }
  const laneLoop = async (lane: number) => {
    // Staggered over the first second, so the lanes do not move in step.
    await new Promise((resolve) => setTimeout(resolve, (lane / streams) * 1000))
    while (performance.now() < endAt) {
      try {
        record(lane, await turn(lane))
      } catch (error) {
        if (problems.length < 20) problems.push(`lane ${lane}: ${(error as Error).message}`)
      }
    }
  }
  let before: { heapMb: number; rssMb: number } = { heapMb: 0, rssMb: 0 }
  let after: { heapMb: number; rssMb: number } = { heapMb: 0, rssMb: 0 }
  let peakMb = 0
  try {
    // Warm-up: one turn per lane, unrecorded.
    // (The provider's send stamps are kept for the whole soak: a reset would orphan the turns in flight.)
    await Promise.all(lanes.map((_, lane) => turn(lane).catch(() => undefined)))
    const warm = await server.gc()
    before = { heapMb: mb(warm.heapUsed), rssMb: mb(server.rss().rss) }
    startedAt = performance.now()
    endAt = startedAt + minutes * 60_000
    let cpuMark = server.cpuSeconds()
    const ticker = setInterval(() => {
      const minute = Math.round((performance.now() - startedAt) / 60_000) - 1
      const bucket = buckets[minute]
      if (bucket === undefined) return
      const cpu = server.cpuSeconds()
      bucket.cpu = (cpu - cpuMark) / 60
      cpuMark = cpu
      const rss = server.rss()
      bucket.rssMb = mb(rss.rss)
      peakMb = Math.max(peakMb, mb(rss.peak))
    }, 60_000)
    try {
      await Promise.all(lanes.map((_, lane) => laneLoop(lane)))
    } finally {
      clearInterval(ticker)
    }
    const done = await server.gc()
    after = { heapMb: mb(done.heapUsed), rssMb: mb(server.rss().rss) }
  } finally {
    clients.forEach((client) => client?.close())
    await Promise.all(sessions.map((session) => session?.close()))
    await server.dispose()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const fmt = (values: ReadonlyArray<number>, p: number) => (values.length === 0 ? "n/a" : percentile(values, p).toFixed(1))
  const lost = buckets.reduce((n, b) => n + b.failedTurns, 0)
  const markdown = [
    `Soak: ${streams} streams (${streams / 2} RunSSE + BidiAppend, ${streams / 2} Run) for ${minutes} minutes, lanes of back-to-back turns of ${deltas} deltas 5–20 ms apart; latency per text delta, provider write → client read, ms (whole path, no relay floor). Server alone in a child process, precompiled. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| minute | turns | deltas | turns that lost frames | RunSSE p50 / p99 | Run p50 / p99 | server CPU | RSS MB |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...buckets.map((b, i) =>
      `| ${i + 1} | ${b.turns} | ${b.deltas} | ${b.failedTurns} | ${fmt(b.latencies.sse, 50)} / ${fmt(b.latencies.sse, 99)} | ${fmt(b.latencies.run, 50)} / ${fmt(b.latencies.run, 99)} | ${Math.round(b.cpu * 100)}% | ${b.rssMb.toFixed(0)} |`
    ),
    "",
    `After a full GC: heap ${before.heapMb.toFixed(1)} MB and RSS ${before.rssMb.toFixed(0)} MB before the first minute, heap ${after.heapMb.toFixed(1)} MB and RSS ${after.rssMb.toFixed(0)} MB after the last turn (drift: heap ${(after.heapMb - before.heapMb).toFixed(1)} MB, RSS ${(after.rssMb - before.rssMb).toFixed(0)} MB); peak RSS ${peakMb.toFixed(0)} MB. Turns that lost frames: ${lost}.`,
    ...(problems.length > 0 ? [`\nproblems, e.g. ${problems.slice(0, 5).join("; ")}`] : [])
  ].join("\n")
  return { buckets, before, after, lost, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const minutes = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  const streams = process.argv[3] !== undefined ? Number(process.argv[3]) : undefined
  run({ ...(minutes !== undefined ? { minutes } : {}), ...(streams !== undefined ? { streams } : {}) }).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
