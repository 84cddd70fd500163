/**
 * Memory of idle conversations (DESIGN.md §9: 1,000 open idle conversations in ≤ 400 MB RSS).
 *
 * The server runs alone in a child process started with `--expose-gc`. A conversation here is
 * one that had one short turn (a user message, a three-delta answer streamed by the fake
 * provider, the checkpoint and its blobs acknowledged by the reference client) and is now
 * idle: its RunSSE has ended, as between two turns in Cursor. Conversations are added 50 at a
 * time until 1, 100 and 1,000 exist; at each level, after a full GC in the child (over IPC),
 * the child's VmRSS is read from /proc/<pid>/status. The measurement is taken within the
 * transport's 30 s retention of finished requests, so each request's output backlog is still
 * held: the worst case of "idle". Each run uses a fresh server and database; the table gives
 * medians over runs with the min–max spread, and the peak RSS (VmHWM) seen.
 *
 * The server runs precompiled, as `npm start` runs it (an esbuild bundle run by plain node);
 * `tsxRuns` more runs measure it under the tsx loader (whose loader thread, transpiled sources
 * and source maps are a fixed part of the RSS) to show that part.
 *
 *   node_modules/.bin/tsx bench/memory.ts [runs] [sweep]
 */
import { randomUUID } from "node:crypto"
import { pathToFileURL } from "node:url"
import { startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, sleep, spread, verdict } from "./support/stats.js"
import { concurrently, serverStream } from "./support/streams.js"

export const BUDGET_MB = 400
export const LEVELS = [1, 100, 1_000] as const

export interface MemoryOptions {
  readonly runs?: number
  /** Runs of the server under the tsx loader instead of precompiled: how much of the RSS a loader costs (default 0). */
  readonly tsxRuns?: number
  readonly levels?: ReadonlyArray<number>
  /**
   * In the last precompiled run, wait past the transport's retention of finished requests (30 s,
   * swept every 10 s) and sample once more: the conversations without their turns' output
   * backlogs (default false: it adds 45 s; `tsx bench/memory.ts 3 sweep` turns it on).
   */
  readonly afterSweep?: boolean
}

/** The transport forgets a finished request 30 s after its end, sweeping every 10 s. */
const SWEEP_WAIT_MS = 45_000

interface Sample {
  readonly conversations: number
  readonly rssMb: number
  readonly heapUsedMb: number
  readonly peakMb: number
}

const MB = 1024 * 1024

export const run = async (options: MemoryOptions = {}) => {
  const runs = options.runs ?? 3
  const levels = options.levels ?? LEVELS
  const loadBefore = loadAverage()
  const provider = await Provider.start()
  const tsxRuns = options.tsxRuns ?? 0
  const samples: Array<Array<Sample>> = []
  const tsxSamples: Array<Array<Sample>> = []
  let swept: Sample | undefined
  const problems: Array<string> = []
  let sequence = 0
  try {
    for (let r = 0; r < runs + tsxRuns; r++) {
      const compiled = r < runs
      const server = await startServer(provider.baseUrl, { compiled })
      const measured: Array<Sample> = []
      const sample = async (conversations: number) => {
        await sleep(500)
        const memory = await server.gc()
        const { rss, peak } = server.rss()
        measured.push({ conversations, rssMb: rss / MB, heapUsedMb: memory.heapUsed / MB, peakMb: peak / MB })
      }
      try {
        await sample(0)
        let open = 0
        for (const level of levels) {
          while (open < level) {
            const batch = Math.min(50, level - open)
            const results = await concurrently(batch, 20, () =>
              serverStream(server.baseUrl, provider, { id: `m${sequence++}`, deltas: 3, minMs: 1, maxMs: 2 }, { conversationId: randomUUID() }))
            problems.push(...results.flatMap((result) => result.problems))
            open += batch
            provider.reset()
          }
          await sample(level)
        }
        if ((options.afterSweep ?? false) && r === runs - 1) {
          await sleep(SWEEP_WAIT_MS)
          await sample(-1)
          swept = measured[measured.length - 1]
        }
      } finally {
        await server.dispose()
      }
      ;(compiled ? samples : tsxSamples).push(measured)
    }
  } finally {
    await provider.close()
  }
  const loadAfter = loadAverage()
  const points = [0, ...levels]
  const at = (conversations: number, pick: (s: Sample) => number, from: ReadonlyArray<ReadonlyArray<Sample>> = samples) =>
    from.map((run) => pick(run.find((s) => s.conversations === conversations)!))
  const top = levels[levels.length - 1]!
  const rssTop = median(at(top, (s) => s.rssMb))
  const perConversationKb = median(samples.map((run) => {
    const first = run.find((s) => s.conversations === levels[0])!
    const last = run.find((s) => s.conversations === top)!
    return ((last.rssMb - first.rssMb) * 1024) / (top - levels[0]!)
  }))
  const markdown = [
    `Server RSS after a forced GC, by idle conversations (each had one short turn; its RunSSE has ended), ${runs} runs, median (min–max), MB.`,
    `Server alone in a child process (Node ${process.version}, precompiled as \`npm start\` runs it). Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| conversations | RSS MB | heap used MB | peak RSS MB | budget | verdict |",
    "| ---: | ---: | ---: | ---: | ---: | --- |",
    ...points.map((n) =>
      `| ${n} | ${spread(at(n, (s) => s.rssMb), 1)} | ${spread(at(n, (s) => s.heapUsedMb), 1)} | ${spread(at(n, (s) => s.peakMb), 1)} | ${n === 1_000 ? `≤ ${BUDGET_MB}` : ""} | ${n === 1_000 ? verdict(median(at(n, (s) => s.rssMb)) <= BUDGET_MB) : ""} |`
    ),
    ...(tsxSamples.length > 0
      ? [
        "",
        `The same server under the tsx loader (its loader thread, transpiled sources and source maps in memory), ${tsxSamples.length} run(s):`,
        "",
        "| conversations | RSS MB | heap used MB | peak RSS MB | budget | verdict |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
        ...points.map((n) =>
          `| ${n} | ${spread(at(n, (s) => s.rssMb, tsxSamples), 1)} | ${spread(at(n, (s) => s.heapUsedMb, tsxSamples), 1)} | ${spread(at(n, (s) => s.peakMb, tsxSamples), 1)} | ${n === 1_000 ? `≤ ${BUDGET_MB}` : ""} | ${n === 1_000 ? verdict(median(at(n, (s) => s.rssMb, tsxSamples)) <= BUDGET_MB) : ""} |`
        )
      ]
      : []),
    ...(swept !== undefined
      ? ["", `Last precompiled run, ${SWEEP_WAIT_MS / 1000} s later (finished requests' output backlogs swept; the runner's state cache and the SQLite connection remain): ${swept.rssMb.toFixed(1)} MB RSS, ${swept.heapUsedMb.toFixed(1)} MB heap used, with ${top} idle conversations: about ${(((swept.rssMb - samples[samples.length - 1]![0]!.rssMb) * 1024) / top).toFixed(0)} KB of RSS each over the same run's RSS with none (DESIGN.md §9: ≤ 64 KB).`]
      : []),
    "",
    `Growth from ${levels[0]} to ${top} conversations: about ${perConversationKb.toFixed(0)} KB of RSS per idle conversation (median over runs); ${top} conversations: ${rssTop.toFixed(0)} MB.`,
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { samples, tsxSamples, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run({ ...(runs !== undefined ? { runs } : {}), afterSweep: process.argv[3] === "sweep" }).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
