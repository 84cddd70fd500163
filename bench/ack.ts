/**
 * How fast the server reacts to a client message while 200 streams run (DESIGN.md §9: a
 * BidiAppend acknowledgement p99 ≤ 5 ms), on both of Cursor's wires.
 *
 * Same layout as `latency.ts`: server and relay each in a child process, the fake provider and
 * the clients in this process. A round is 200 turns on one wire (RunSSE + BidiAppend with the
 * reference `CursorClient`, or the HTTP/2 `Run` with `support/run.ts`, one HTTP/2 session per
 * turn as each RunSSE turn has its own client), streaming paced deltas (50 each, 5–20 ms apart)
 * at once, staggered over 100 ms; each client sends a `client_heartbeat` every second besides
 * its run request and its blob acknowledgements, as Cursor does during a turn. 20 of the 200
 * turns (every tenth) are cancel probes: once 5 to 24 of their deltas arrived (spread evenly
 * over the probes, so they cancel while the other turns still stream) the client sends
 * `conversation_action.cancel_action`; a probe's model would go on for 2,000 deltas (~25 s), so
 * its turn cannot end on its own before the cancel takes effect. What is timed, in each round:
 *
 * - RunSSE only, the acknowledgement: each BidiAppend POST from the moment the client starts it
 *   to the end of its response (`AppendRecord.sentAt` → `answeredAt`), over every append of
 *   every turn (run requests, heartbeats, blob acknowledgements, the probes' cancels).
 * - Both wires, stop → stopped: on each probe, from the cancel (Run: just before its envelope
 *   is written on the stream; RunSSE: just before the client starts its BidiAppend POST) to the
 *   read that completed the end-stream `canceled`. `Run` has no per-message acknowledgements, so this is its closest equivalent
 *   that a user feels (pressing stop); the cancel goes through the same path an append's
 *   acknowledgement waits for (handed on in order, committed), then ends the turn.
 * - Both wires, blob acknowledgement → checkpoint: on each turn that ended normally, from its
 *   last `set_blob` acknowledgement (written / POSTed) to the read of the checkpoint frame that
 *   the server sends once every blob is acknowledged. These turn ends come while the other
 *   turns finish too, so under a falling load.
 *
 * The floor, in the same run: while 200 relay streams run, the same number of unary POSTs to
 * the relay's `/ack` (which answers at once) on the same schedule, so the figure shows how much
 * of the time is this process's own event loop and the loopback. There is no HTTP/2 floor.
 * With 20 probes a run, a run's p99 of stop → stopped is its slowest probe.
 *
 *   node_modules/.bin/tsx bench/ack.ts [runs]
 */
import * as http from "node:http"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { startRelay, startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { runStream } from "./support/run.js"
import { loadAverage, median, percentile, spread, verdict } from "./support/stats.js"
import { concurrently, relayStream, serverStream } from "./support/streams.js"
import type { StreamResult, StreamSpec } from "./support/streams.js"

export const BUDGET_P99_MS = 5

/** What a probe's model would stream if nothing stopped it: about 25 s of deltas. */
const PROBE_DELTAS = 2_000

export interface AckOptions {
  readonly runs?: number
  readonly streams?: number
  readonly deltas?: number
  readonly heartbeatMs?: number
  /** Turns of a round that are cancel probes (default: a tenth). */
  readonly probes?: number
}

interface Round {
  readonly p50: number
  readonly p99: number
  readonly count: number
  readonly failed: number
}

const roundOf = (times: ReadonlyArray<number>, failed: number): Round => ({
  p50: percentile(times, 50),
  p99: percentile(times, 99),
  count: times.length,
  failed
})

/** A server round's figures: the BidiAppend acknowledgement (RunSSE only), stop → stopped, blob ack → checkpoint. */
interface WireRound {
  readonly ack: Round | undefined
  readonly cancel: Round
  readonly checkpoint: Round
  readonly problems: ReadonlyArray<string>
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
  const probes = Math.min(streams, options.probes ?? Math.floor(streams / 10))
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl)
  const relay = await startRelay(provider.baseUrl)
  const relayUrl = new URL(relay.baseUrl)
  const streamAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const ackAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  let sequence = 0
  /** Turn `index` of `count`: every (count / probes)-th is a probe, canceling after 5 to 24 deltas. */
  const specOf = (index: number, count: number, probeCount: number, deltaCount: number): StreamSpec => {
    const every = probeCount === 0 ? Infinity : count / probeCount
    const probe = Math.floor(index / every)
    const isProbe = probeCount > 0 && index === Math.floor(probe * every) && probe < probeCount
    const base = { id: `a${sequence++}`, deltas: deltaCount, minMs: 5, maxMs: 20 }
    // A probe's model would stream on long after the cancel (PROBE_DELTAS): only the cancel ends its turn in time.
    return isProbe ? { ...base, deltas: PROBE_DELTAS, cancelAfterDeltas: 5 + Math.floor((20 * probe) / probeCount) } : base
  }
  const wireRound = async (wire: "sse" | "run", count: number, deltaCount: number, probeCount: number): Promise<WireRound> => {
    const results: Array<StreamResult> = await concurrently(count, 100, (index) => {
      const spec = specOf(index, count, probeCount, deltaCount)
      return wire === "sse" ? serverStream(server.baseUrl, provider, spec, { heartbeatMs }) : runStream(server.h2cUrl, provider, spec, { heartbeatMs })
    })
    provider.reset()
    const probed = results.filter((r) => r.reactions.cancelEnd !== undefined)
    const cancels = probed.flatMap((r) => (r.reactions.cancelEnd === "canceled" && r.reactions.cancelToEndMs !== undefined ? [r.reactions.cancelToEndMs] : []))
    const unprobed = results.filter((r) => r.reactions.cancelEnd === undefined)
    const checkpoints = unprobed.flatMap((r) => (r.reactions.blobAckToCheckpointMs !== undefined ? [r.reactions.blobAckToCheckpointMs] : []))
    const appends = results.flatMap((r) => r.appends)
    const acked = appends.filter((a) => a.status === 200).map((a) => a.answeredAt - a.sentAt)
    return {
      ack: wire === "sse" ? roundOf(acked, appends.length - acked.length) : undefined,
      cancel: roundOf(cancels, probed.length - cancels.length),
      checkpoint: roundOf(checkpoints, unprobed.length - checkpoints.length),
      problems: results.flatMap((r) => r.problems)
    }
  }
  const relayRound = async (count: number, deltaCount: number): Promise<Round> => {
    const times: Array<number> = []
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
    return roundOf(ok, times.length - ok.length)
  }
  const sseRounds: Array<WireRound> = []
  const runRounds: Array<WireRound> = []
  const relayRounds: Array<Round> = []
  try {
    // Warm-up, not recorded.
    await relayRound(50, 40)
    await wireRound("sse", 50, 40, 5)
    await wireRound("run", 50, 40, 5)
    for (let r = 0; r < runs; r++) {
      // Rotated from run to run, so no path always goes first.
      const steps = [
        async () => void relayRounds.push(await relayRound(streams, deltas)),
        async () => void sseRounds.push(await wireRound("sse", streams, deltas, probes)),
        async () => void runRounds.push(await wireRound("run", streams, deltas, probes))
      ]
      for (let i = 0; i < steps.length; i++) await steps[(i + r) % steps.length]!()
    }
  } finally {
    streamAgent.destroy()
    ackAgent.destroy()
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const ackRounds = sseRounds.map((r) => r.ack!)
  const p99 = median(ackRounds.map((r) => r.p99))
  const line = (what: string, wire: string, rounds: ReadonlyArray<Round>, budget = "", verdictText = "") =>
    `| ${what} | ${wire} | ${Math.round(median(rounds.map((r) => r.count)))} | ${spread(rounds.map((r) => r.p50))} | ${spread(rounds.map((r) => r.p99))} | ${budget} | ${verdictText} |`
  const failed = (name: string, rounds: ReadonlyArray<Round>) => rounds.some((r) => r.failed > 0) ? [`${name} ${rounds.map((r) => r.failed).join(", ")}`] : []
  const failures = [
    ...failed("relay /ack", relayRounds),
    ...failed("BidiAppend", ackRounds),
    ...failed("RunSSE probes", sseRounds.map((r) => r.cancel)),
    ...failed("Run probes", runRounds.map((r) => r.cancel)),
    ...failed("RunSSE checkpoints", sseRounds.map((r) => r.checkpoint)),
    ...failed("Run checkpoints", runRounds.map((r) => r.checkpoint))
  ]
  const problems = [...sseRounds.flatMap((r) => r.problems.map((p) => `RunSSE: ${p}`)), ...runRounds.flatMap((r) => r.problems.map((p) => `Run: ${p}`))]
  const markdown = [
    `Reaction to a client message while ${streams} streams run (${deltas} deltas each, 5–20 ms apart; a client heartbeat every ${heartbeatMs} ms per stream; ${probes} of the turns cancel after 5–24 deltas), ms, ${runs} runs, median (min–max).`,
    `Server and relay each in a child process; provider and clients in the bench process; one HTTP/2 session per Run turn. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| measure | wire | samples per run | p50 | p99 | budget (p99) | verdict |",
    "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    line(`unary POST to the relay's \`/ack\` (floor), under ${streams} relay streams`, "HTTP/1.1", relayRounds),
    line("BidiAppend acknowledgement: POST started → response read", "RunSSE", ackRounds, `≤ ${BUDGET_P99_MS}`, verdict(p99 <= BUDGET_P99_MS)),
    line("stop → stopped: cancel sent → end-stream `canceled` read", "RunSSE", sseRounds.map((r) => r.cancel)),
    line("stop → stopped: cancel sent → end-stream `canceled` read", "Run", runRounds.map((r) => r.cancel)),
    line("last set_blob acknowledgement sent → checkpoint read", "RunSSE", sseRounds.map((r) => r.checkpoint)),
    line("last set_blob acknowledgement sent → checkpoint read", "Run", runRounds.map((r) => r.checkpoint)),
    ...(failures.length > 0 ? [`\nnot measured per run (failed call, probe not canceled, turn without checkpoint): ${failures.join("; ")}`] : []),
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { sseRounds, runRounds, relayRounds, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
