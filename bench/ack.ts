/**
 * How fast the server reacts to a client message while 1, 50 and 200 streams run (DESIGN.md
 * §9: a BidiAppend acknowledgement p99 ≤ 5 ms under 200), on both of Cursor's wires, `Run` two
 * ways.
 *
 * Same layout as `latency.ts`: server and relay each in a child process, the fake provider and
 * the clients in this process. A round is N turns (N the level: 1, 50, 200) on one wire: RunSSE
 * + BidiAppend with the reference `CursorClient`; the HTTP/2 `Run` with `support/run.ts`, one
 * HTTP/2 session per turn as each RunSSE turn has its own client ("Run"); or `Run` with all of
 * the round's turns on one HTTP/2 session kept for the whole bench, as one Cursor window keeps
 * one session for all its turns ("Run, one session"). The turns stream paced deltas (50 each,
 * 5–20 ms apart) at once, staggered over 100 ms; each client sends a `client_heartbeat` every
 * second besides its run request and its blob acknowledgements, as Cursor does during a turn.
 * A tenth of the turns (every tenth: 20 of 200, 5 of 50) are cancel probes: once 5 to 24 of
 * their deltas arrived (spread evenly over the probes, so they cancel while the other turns
 * still stream) the client sends `conversation_action.cancel_action`; a probe's model would go
 * on for 2,000 deltas (~25 s), so its turn cannot end on its own before the cancel takes
 * effect. Below 10 streams a round is two batches back to back, the first with no probe and
 * the second all probes (at 1 stream: one turn to its end, then one canceled after 5 deltas).
 * What is timed, in each round:
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
 * The floor, in the same run: while as many relay streams run, the same number of unary POSTs
 * to the relay's `/ack` (which answers at once) on the same schedule, so the figure shows how
 * much of the time is this process's own event loop and the loopback. There is no HTTP/2 floor.
 * With 20 probes a run, a run's p99 of stop → stopped is its slowest probe (with 5 or 1, too).
 * A second table puts the two `Run` columns side by side with their ratio, against issue 39's
 * "within 1.5× the session-per-turn figures".
 *
 *   node_modules/.bin/tsx bench/ack.ts [runs]
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
import type { StreamResult, StreamSpec } from "./support/streams.js"

export const BUDGET_P99_MS = 5

/** What a probe's model would stream if nothing stopped it: about 25 s of deltas. */
const PROBE_DELTAS = 2_000

/** Issue 39: Run on one session within this factor of Run with a session per turn. */
export const ONE_SESSION_FACTOR = 1.5

export interface AckOptions {
  readonly runs?: number
  /** Streams at once in a round, one level after the other (default 1, 50, 200). */
  readonly levels?: ReadonlyArray<number>
  readonly deltas?: number
  readonly heartbeatMs?: number
  /** The client settings of the kept session of "Run, one session" (default: Node's). */
  readonly oneSession?: RunSessionOptions
}

/** The budget on the BidiAppend acknowledgement is set under 200 streams. */
const BUDGET_STREAMS = 200

type Wire = "sse" | "run" | "runOne"
const WIRE: Record<Wire, string> = { sse: "RunSSE", run: "Run", runOne: "Run, one session" }

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
  const levels = options.levels ?? [1, 50, 200]
  const deltas = options.deltas ?? 50
  const heartbeatMs = options.heartbeatMs ?? 1_000
  const probesAt = (streams: number) => Math.floor(streams / 10)
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl)
  const relay = await startRelay(provider.baseUrl)
  const relayUrl = new URL(relay.baseUrl)
  const streamAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const ackAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const kept = keptRunSession(server.h2cUrl, options.oneSession ?? {})
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
  /** A round's batches: one with its probes; below 10 streams, one without probes and then one of probes only. */
  const batchesOf = (count: number): ReadonlyArray<number> => probesAt(count) > 0 ? [probesAt(count)] : [0, count]
  const wireRound = async (wire: Wire, count: number, deltaCount: number): Promise<WireRound> => {
    const session = wire === "runOne" ? await kept.get() : undefined
    const results: Array<StreamResult> = []
    for (const probeCount of batchesOf(count)) {
      results.push(...await concurrently(count, 100, (index) => {
        const spec = specOf(index, count, probeCount, deltaCount)
        return wire === "sse"
          ? serverStream(server.baseUrl, provider, spec, { heartbeatMs })
          : runStream(server.h2cUrl, provider, spec, session !== undefined ? { heartbeatMs, session } : { heartbeatMs })
      }))
      provider.reset()
    }
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
    // As many batches as the server's rounds have at this level.
    for (const _ of batchesOf(count)) {
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
    }
    const ok = times.filter((t) => !Number.isNaN(t))
    return roundOf(ok, times.length - ok.length)
  }
  interface Level {
    readonly relay: Array<Round>
    readonly sse: Array<WireRound>
    readonly run: Array<WireRound>
    readonly runOne: Array<WireRound>
  }
  const measured = new Map<number, Level>(levels.map((streams) => [streams, { relay: [], sse: [], run: [], runOne: [] }]))
  let sessionsOpened = 0
  let serverSettings = ""
  try {
    // Warm-up, not recorded.
    await relayRound(50, 40)
    for (const wire of ["sse", "run", "runOne"] as const) await wireRound(wire, 50, 40)
    for (let r = 0; r < runs; r++) {
      for (const streams of levels) {
        const level = measured.get(streams)!
        // Rotated from run to run, so no path always goes first.
        const steps = [
          async () => void level.relay.push(await relayRound(streams, deltas)),
          async () => void level.sse.push(await wireRound("sse", streams, deltas)),
          async () => void level.run.push(await wireRound("run", streams, deltas)),
          async () => void level.runOne.push(await wireRound("runOne", streams, deltas))
        ]
        for (let i = 0; i < steps.length; i++) await steps[(i + r) % steps.length]!()
      }
    }
    sessionsOpened = kept.opened()
    const settings = (await kept.get()).session.remoteSettings
    serverSettings = `server's SETTINGS: ${settings.maxConcurrentStreams} concurrent streams, ${settings.initialWindowSize} bytes initial stream window`
  } finally {
    await kept.close()
    streamAgent.destroy()
    ackAgent.destroy()
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const line = (streams: number, what: string, wire: string, rounds: ReadonlyArray<Round>, budget = "", verdictText = "") =>
    `| ${streams} | ${what} | ${wire} | ${Math.round(median(rounds.map((r) => r.count)))} | ${spread(rounds.map((r) => r.p50))} | ${spread(rounds.map((r) => r.p99))} | ${budget} | ${verdictText} |`
  const failed = (name: string, rounds: ReadonlyArray<Round>) => rounds.some((r) => r.failed > 0) ? [`${name} ${rounds.map((r) => r.failed).join(", ")}`] : []
  const STOP = "stop → stopped: cancel sent → end-stream `canceled` read"
  const CHECKPOINT = "last set_blob acknowledgement sent → checkpoint read"
  const wires = ["sse", "run", "runOne"] as const
  const tables = levels.map((streams) => {
    const level = measured.get(streams)!
    const ackRounds = level.sse.map((r) => r.ack!)
    const p99 = median(ackRounds.map((r) => r.p99))
    const budgeted = streams === BUDGET_STREAMS
    const lines = [
      line(streams, `unary POST to the relay's \`/ack\` (floor), under ${streams} relay streams`, "HTTP/1.1", level.relay),
      line(streams, "BidiAppend acknowledgement: POST started → response read", "RunSSE", ackRounds, budgeted ? `≤ ${BUDGET_P99_MS}` : "", budgeted ? verdict(p99 <= BUDGET_P99_MS) : ""),
      ...wires.map((wire) => line(streams, STOP, WIRE[wire], level[wire].map((r) => r.cancel))),
      ...wires.map((wire) => line(streams, CHECKPOINT, WIRE[wire], level[wire].map((r) => r.checkpoint)))
    ]
    const failures = [
      ...failed("relay /ack", level.relay),
      ...failed("BidiAppend", ackRounds),
      ...wires.flatMap((wire) => failed(`${WIRE[wire]} probes`, level[wire].map((r) => r.cancel))),
      ...wires.flatMap((wire) => failed(`${WIRE[wire]} checkpoints`, level[wire].map((r) => r.checkpoint)))
    ].map((text) => `${streams} streams: ${text}`)
    const problems = wires.flatMap((wire) => level[wire].flatMap((r) => r.problems.map((p) => `${streams} streams, ${WIRE[wire]}: ${p}`)))
    // Run on one kept session beside Run with a session per turn; ratios per run (same run's rounds), then the median.
    const compare = (what: string, pick: (round: WireRound) => Round) => {
      const perTurn = level.run.map(pick)
      const one = level.runOne.map(pick)
      const ratio = (value: (round: Round) => number) => median(one.map((x, i) => value(x) / value(perTurn[i]!)))
      const p50Ratio = ratio((x) => x.p50)
      const p99Ratio = ratio((x) => x.p99)
      const met = p50Ratio <= ONE_SESSION_FACTOR && p99Ratio <= ONE_SESSION_FACTOR
      return {
        streams,
        what,
        p50Ratio,
        p99Ratio,
        met,
        markdown: `| ${streams} | ${what} | ${spread(perTurn.map((x) => x.p50))} | ${spread(one.map((x) => x.p50))} | ${spread(perTurn.map((x) => x.p99))} | ${spread(one.map((x) => x.p99))} | ${p50Ratio.toFixed(2)} | ${p99Ratio.toFixed(2)} | ${verdict(met)} |`
      }
    }
    const comparisons = [compare("stop → stopped", (r) => r.cancel), compare("last blob acknowledgement → checkpoint", (r) => r.checkpoint)]
    return { lines, failures, problems, comparisons }
  })
  const failures = tables.flatMap((t) => t.failures)
  const problems = tables.flatMap((t) => t.problems)
  const sideBySide = tables.flatMap((t) => t.comparisons)
  const markdown = [
    `Reaction to a client message while ${levels.join(", ")} streams run (${deltas} deltas each, 5–20 ms apart; a client heartbeat every ${heartbeatMs} ms per stream; a tenth of the turns cancel after 5–24 deltas, below 10 streams a second batch of probes), ms, ${runs} runs, median (min–max).`,
    `Server and relay each in a child process; provider and clients in the bench process; "Run" one HTTP/2 session per turn, "Run, one session" all of a round's turns on one session kept for the bench (${sessionsOpened} opened; ${serverSettings}). Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| streams | measure | wire | samples per run | p50 | p99 | budget (p99) | verdict |",
    "| ---: | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ...tables.flatMap((t) => t.lines),
    "",
    `Run, a session per turn beside one session for all (issue 39: within ${ONE_SESSION_FACTOR}× the session-per-turn figures; the ratio is one session / per turn in each run, median over runs):`,
    "",
    "| streams | measure | p50: Run | p50: Run, one session | p99: Run | p99: Run, one session | ratio p50 | ratio p99 | within 1.5× |",
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ...sideBySide.map((x) => x.markdown),
    ...(failures.length > 0 ? [`\nnot measured per run (failed call, probe not canceled, turn without checkpoint): ${failures.join("; ")}`] : []),
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { measured, sideBySide, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
