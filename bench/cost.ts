/**
 * Server CPU per unit of work: what saturates the server first, and so what the latency and
 * acknowledgement figures under 200 streams are made of. No budget in DESIGN.md §9 names these
 * directly; they explain the ones that do.
 *
 * The server runs alone in a child process (precompiled, as `npm start` runs it); its CPU time
 * (user + system, all threads, from /proc) is read around each round. After a warm-up round:
 *
 * - a turn: `turns` conversations at once, each one short turn (3 unpaced deltas): RunSSE,
 *   the run request append, two commits, the model call, the checkpoint and its blob
 *   acknowledgements. CPU per turn = round CPU / turns. Measured twice: each turn from a new
 *   client (new connections, as the other benchmarks' turns), and from `turns` clients that
 *   keep their connections from round to round (as Cursor keeps its own).
 * - a paced delta: `streams` turns of `pacedDeltas` deltas 5-20 ms apart, so that nearly every
 *   network read carries one delta (as a model streaming tokens). CPU per delta = (round CPU
 *   − streams × CPU per turn) / deltas.
 * - an unpaced delta: 4 turns of 5,000 deltas written back to back, so that a read carries
 *   hundreds of deltas (the throughput bench's shape).
 * - the floor: the same paced delta through the relay (`support/relay.ts`, a bare `node:http`
 *   pass-through of the provider's SSE bytes, in a child of its own, its keep-alive agent kept):
 *   (round CPU − streams × CPU per 3-delta request) / deltas, as the server's.
 * - the same turn and paced delta on the HTTP/2 `Run` wire (h2c), the turns' streams on one
 *   session kept from round to round (as Cursor keeps its own): a turn's appends (its run
 *   request, its blob acknowledgements) are messages on its stream, not requests.
 *
 *   node_modules/.bin/tsx bench/cost.ts [runs]
 */
import * as http from "node:http"
import { pathToFileURL } from "node:url"
import { startRelay, startServer } from "./support/child.js"
import type { Child } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, spread } from "./support/stats.js"
import type { CursorClient } from "../test/support/CursorClient.js"
import { openRunSession, runStream } from "./support/run.js"
import type { RunSession } from "./support/run.js"
import { concurrently, relayStream, serverStream, keptClients } from "./support/streams.js"
import type { StreamResult, StreamSpec } from "./support/streams.js"

export interface CostOptions {
  readonly runs?: number
  readonly turns?: number
  readonly streams?: number
  readonly pacedDeltas?: number
}

export const run = async (options: CostOptions = {}) => {
  const runs = options.runs ?? 3
  const turns = options.turns ?? 50
  const streams = options.streams ?? 50
  const pacedDeltas = options.pacedDeltas ?? 200
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl)
  let sequence = 0
  const problems: Array<string> = []
  const kept = keptClients(server.baseUrl, turns)
  /** A round of `count` streams of `deltas` deltas each through `stream`, and the CPU `child` used meanwhile. */
  const measure = async (child: Child, count: number, deltas: number, minMs: number, maxMs: number, staggerMs: number, stream: (spec: StreamSpec, index: number) => Promise<StreamResult>) => {
    const cpuStart = child.cpuSeconds()
    const results = await concurrently(count, staggerMs, (index) => stream({ id: `c${sequence++}`, deltas, minMs, maxMs }, index))
    problems.push(...results.flatMap((r) => r.problems))
    provider.reset()
    return { cpuMs: (child.cpuSeconds() - cpuStart) * 1000, deltas: results.reduce((n, r) => n + r.deltas, 0) }
  }
  const round = (count: number, deltas: number, minMs: number, maxMs: number, staggerMs: number, clients?: ReadonlyArray<CursorClient>) =>
    measure(server, count, deltas, minMs, maxMs, staggerMs, (spec, index) =>
      serverStream(server.baseUrl, provider, spec, clients !== undefined ? { client: clients[index]! } : {}))
  let relay: Child | undefined
  const relayAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const roundRelay = (count: number, deltas: number, minMs: number, maxMs: number, staggerMs: number) =>
    measure(relay!, count, deltas, minMs, maxMs, staggerMs, (spec) => relayStream(relay!.baseUrl, provider, spec, relayAgent))
  let runSession: RunSession | undefined
  const roundRun = (count: number, deltas: number, minMs: number, maxMs: number, staggerMs: number) =>
    measure(server, count, deltas, minMs, maxMs, staggerMs, (spec) =>
      runStream(server.h2cUrl, provider, spec, { session: runSession!, timeoutMs: 120_000 }))
  const perTurn: Array<number> = []
  const perTurnKept: Array<number> = []
  const perPaced: Array<number> = []
  const perUnpaced: Array<number> = []
  const perTurnRun: Array<number> = []
  const perPacedRun: Array<number> = []
  const perPacedRelay: Array<number> = []
  try {
    runSession = await openRunSession(server.h2cUrl)
    relay = await startRelay(provider.baseUrl)
    await roundRelay(turns, 3, 0, 0, 100)
    await round(turns, 3, 0, 0, 100)
    await round(turns, 3, 0, 0, 100, kept)
    await roundRun(turns, 3, 0, 0, 100)
    for (let r = 0; r < runs; r++) {
      const turn = (await round(turns, 3, 0, 0, 100)).cpuMs / turns
      perTurn.push(turn)
      perTurnKept.push((await round(turns, 3, 0, 0, 100, kept)).cpuMs / turns)
      const paced = await round(streams, pacedDeltas, 5, 20, 100)
      perPaced.push(((paced.cpuMs - streams * turn) * 1000) / paced.deltas)
      const unpaced = await round(4, 5_000, 0, 0, 0)
      perUnpaced.push(((unpaced.cpuMs - 4 * turn) * 1000) / unpaced.deltas)
      const turnRun = (await roundRun(turns, 3, 0, 0, 100)).cpuMs / turns
      perTurnRun.push(turnRun)
      const pacedRun = await roundRun(streams, pacedDeltas, 5, 20, 100)
      perPacedRun.push(((pacedRun.cpuMs - streams * turnRun) * 1000) / pacedRun.deltas)
      const relayRequest = (await roundRelay(turns, 3, 0, 0, 100)).cpuMs / turns
      const pacedRelay = await roundRelay(streams, pacedDeltas, 5, 20, 100)
      perPacedRelay.push(((pacedRelay.cpuMs - streams * relayRequest) * 1000) / pacedRelay.deltas)
    }
  } finally {
    await relay?.stop()
    relayAgent.destroy()
    await runSession?.close()
    kept.forEach((client) => client.close())
    await server.dispose()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const pacedUs = median(perPaced)
  const markdown = [
    `Server CPU (all threads) per unit of work, ${runs} runs, median (min–max). Server alone in a child process, precompiled. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| unit | server CPU |",
    "| --- | ---: |",
    `| one short turn (${turns} at once; setup, 2 commits, model call, checkpoint, blob acks) | ${spread(perTurn, 1)} ms |`,
    `| the same, from clients that keep their connections between turns (as Cursor does) | ${spread(perTurnKept, 1)} ms |`,
    `| one delta, paced 5–20 ms (about one delta per network read; ${streams} streams) | ${spread(perPaced, 0)} µs |`,
    `| one delta, unpaced (hundreds per network read; 4 streams × 5,000) | ${spread(perUnpaced, 0)} µs |`,
    `| the floor: one paced delta through the relay (a bare \`node:http\` pass-through, ${streams} streams) | ${spread(perPacedRelay, 0)} µs |`,
    `| one short turn on \`Run\` (HTTP/2, ${turns} at once on one kept session) | ${spread(perTurnRun, 1)} ms |`,
    `| one delta on \`Run\`, paced 5–20 ms (${streams} streams) | ${spread(perPacedRun, 0)} µs |`,
    "",
    `At ${pacedUs.toFixed(0)} µs per paced delta one core carries about ${Math.round(1e6 / pacedUs / 1000 * 10) / 10}k paced deltas/s; 200 streams at 5–20 ms ask for about 16k/s.`,
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { perTurn, perTurnKept, perPaced, perUnpaced, perTurnRun, perPacedRun, perPacedRelay, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
