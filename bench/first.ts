/**
 * Added time to first delta (DESIGN.md §9: p99 ≤ 0.5 ms at one stream): from the provider's
 * first byte to the client's first frame, on both of Cursor's wires, against the relay floor.
 *
 * Same layout as `latency.ts` (server and relay each alone in a child process, the stamped fake
 * provider and the clients in this process, one clock). Each turn asks the provider for a
 * `lead` answer: the first write of its response body carries the role chunk and text delta 0
 * together, stamped just before that write, so the stamp is the provider's first byte. What is
 * timed is the read that completed the client's frame holding delta 0, minus that stamp: the
 * server receives the response head and first bytes, opens the answer (Start), streams the
 * first delta through the loop and encodes it, all on that one read. Turns run one at a time
 * (one stream), `turns` per path and run, rotating which path goes first; RunSSE turns share one
 * kept-alive `CursorClient` and Run turns one HTTP/2 session (as Cursor keeps its connections). A path's added figure is its p50 / p99 minus the relay's of the same run.
 *
 *   node_modules/.bin/tsx bench/first.ts [runs] [turns]
 */
import * as http from "node:http"
import { pathToFileURL } from "node:url"
import { CursorClient } from "../test/support/CursorClient.js"
import { startRelay, startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { openRunSession, runStream } from "./support/run.js"
import { loadAverage, median, percentile, spread, verdict } from "./support/stats.js"
import { relayStream, serverStream } from "./support/streams.js"
import type { StreamResult, StreamSpec } from "./support/streams.js"

export const BUDGET_P99_MS = 0.5

type Path = "relay" | "sse" | "run"
const PATHS: ReadonlyArray<Path> = ["relay", "sse", "run"]
const LABEL: Record<Path, string> = { relay: "relay (floor)", sse: "RunSSE + BidiAppend", run: "Run (HTTP/2)" }

export interface FirstOptions {
  readonly runs?: number
  readonly turns?: number
}

export const run = async (options: FirstOptions = {}) => {
  const runs = options.runs ?? 3
  const turns = options.turns ?? 60
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  // No grace after turn_ended (the stream otherwise stays open 1.5 s for a queued message): the
  // turns run back to back, and nothing in the first delta's path changes.
  const server = await startServer(provider.baseUrl, { config: { queuedMessageGraceMs: 0 } })
  const relay = await startRelay(provider.baseUrl)
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const client = new CursorClient({ baseUrl: server.baseUrl, turnTimeoutMs: 60_000, requestTimeoutMs: 30_000 })
  const session = await openRunSession(server.h2cUrl)
  const problems: Array<string> = []
  let sequence = 0
  const turn = (path: Path): Promise<StreamResult> => {
    const spec: StreamSpec = { id: `f${path}${sequence++}`, deltas: 3, minMs: 5, maxMs: 10, lead: true }
    switch (path) {
      case "relay":
        return relayStream(relay.baseUrl, provider, spec, agent)
      case "sse":
        return serverStream(server.baseUrl, provider, spec, { client })
      case "run":
        return runStream(server.h2cUrl, provider, spec, { session })
    }
  }
  /** The first delta's latency of each of `count` turns, one at a time. */
  const measure = async (path: Path, count: number): Promise<Array<number>> => {
    const firsts: Array<number> = []
    for (let i = 0; i < count; i++) {
      const result = await turn(path)
      problems.push(...result.problems.map((p) => `${LABEL[path]}: ${p}`))
      const first = result.latencies[0]
      if (first !== undefined) firsts.push(first)
    }
    provider.reset()
    return firsts
  }
  const rounds: Record<Path, Array<{ p50: number; p99: number }>> = { relay: [], sse: [], run: [] }
  try {
    for (const path of PATHS) await measure(path, 10)
    for (let r = 0; r < runs; r++) {
      const order = PATHS.map((_, i) => PATHS[(i + r) % PATHS.length]!)
      for (const path of order) {
        const firsts = await measure(path, turns)
        rounds[path].push({ p50: percentile(firsts, 50), p99: percentile(firsts, 99) })
      }
    }
  } finally {
    client.close()
    await session.close()
    agent.destroy()
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const rows = PATHS.map((path) => {
    const own = rounds[path]
    const addedP50 = path === "relay" ? [] : own.map((s, i) => s.p50 - rounds.relay[i]!.p50)
    const addedP99 = path === "relay" ? [] : own.map((s, i) => s.p99 - rounds.relay[i]!.p99)
    return { path, own, addedP50, addedP99, met: path === "relay" ? undefined : median(addedP99) <= BUDGET_P99_MS }
  })
  const markdown = [
    `Time to first delta at one stream: provider's first byte (delta 0 in the body's first write) → the client's read of its frame, ms; ${runs} runs of ${turns} turns per path, median (min–max) over runs. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| path | p50 | p99 | added p50 | added p99 | budget (added p99) | verdict |",
    "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ...rows.map((row) =>
      `| ${LABEL[row.path]} | ${spread(row.own.map((x) => x.p50))} | ${spread(row.own.map((x) => x.p99))} | ${row.path === "relay" ? "" : spread(row.addedP50)} | ${row.path === "relay" ? "" : spread(row.addedP99)} | ${row.path === "relay" ? "" : `≤ ${BUDGET_P99_MS}`} | ${row.met === undefined ? "—" : verdict(row.met)} |`
    ),
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { rows, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  const turns = process.argv[3] !== undefined ? Number(process.argv[3]) : undefined
  run({ ...(runs !== undefined ? { runs } : {}), ...(turns !== undefined ? { turns } : {}) }).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
