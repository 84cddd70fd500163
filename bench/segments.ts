/**
 * What a compaction buys a long conversation in the store: loading it (a restart, a state
 * evicted from the runner's cache) reads and verifies the current segment only, and the model
 * sees only that segment. A conversation of 2,000 messages (~1 KB each, the store bench's
 * histories) is loaded, then compacted to [a summary, the last 20 messages] by one commit that
 * appends the new segment at the end of the journal, and loaded again.
 *
 * Each run uses a fresh SQLite file (WAL, as in production); the table gives medians over runs
 * of each run's median load (10 loads) and the compaction commit's time.
 *
 *   node_modules/.bin/tsx bench/segments.ts
 */
import { NodeContext } from "@effect/platform-node"
import { FileSystem, Path } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { messagesHash, serializeMessage } from "../src/Llm.js"
import { summaryMessage } from "../src/Loop.js"
import type { ConversationState } from "../src/Loop.js"
import * as Store from "../src/Store.js"
import { makePool, median, stateOf } from "./store.js"

const LENGTH = 2_000
const TAIL = 20
const LOADS = 10
const BUILD_BATCH = 250

interface RunResult {
  readonly fullLoadMs: number
  readonly segmentLoadMs: number
  readonly compactMs: number
  readonly fullBytes: number
  readonly segmentBytes: number
}

const oneRun = (pool: ReturnType<typeof makePool>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-bench-segments-" })
    const filename = path.join(directory, "store.db")
    const layer = Store.layerSql.pipe(Layer.provideMerge(Store.layerSqliteClient({ filename })))
    return yield* Effect.gen(function*() {
      const store = yield* Store.Store
      const id = "bench-long"
      let version = 0
      for (let built = 0; built < LENGTH;) {
        const upTo = Math.min(LENGTH, built + BUILD_BATCH)
        version = yield* store.commitInput({ conversationId: id, inputId: `build-${upTo}`, expectedVersion: version, next: stateOf(pool, id, upTo), result: null })
        built = upTo
      }
      const timedLoads = Effect.gen(function*() {
        const samples: Array<number> = []
        let loaded: ConversationState | undefined
        for (let i = 0; i < LOADS; i++) {
          const started = performance.now()
          loaded = Option.getOrThrow(yield* store.load(id)).state
          samples.push(performance.now() - started)
        }
        return { ms: median(samples), bytes: loaded!.messages.reduce((sum, m) => sum + serializeMessage(m).length, 0) }
      })
      const full = yield* timedLoads

      const before = stateOf(pool, id, LENGTH)
      const summary = summaryMessage(`The user and the agent read ${LENGTH / 2} files; what matters is summarized here.`)
      const messages = [summary, ...before.messages.slice(LENGTH - TAIL)]
      const compacted: ConversationState = {
        ...before,
        segment: { start: LENGTH, kind: "compaction", turnId: before.turnId, summaryCallId: `${id}/t1/c0`, replaced: LENGTH - TAIL, kept: TAIL },
        messages,
        messagesHash: messagesHash(messages)
      }
      const started = performance.now()
      yield* store.commitInput({ conversationId: id, inputId: "compact", expectedVersion: version, next: compacted, result: null })
      const compactMs = performance.now() - started
      const segment = yield* timedLoads
      return { fullLoadMs: full.ms, segmentLoadMs: segment.ms, compactMs, fullBytes: full.bytes, segmentBytes: segment.bytes } satisfies RunResult
    }).pipe(Effect.provide(layer))
  }).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

export const run = async (options: { readonly runs?: number } = {}): Promise<{ readonly markdown: string }> => {
  const pool = makePool(LENGTH)
  const results: Array<RunResult> = []
  for (let i = 0; i < (options.runs ?? 5); i++) results.push(await Effect.runPromise(oneRun(pool)))
  const m = (pick: (r: RunResult) => number) => median(results.map(pick))
  const kb = (bytes: number) => `${Math.round(bytes / 1024)} KB`
  const markdown = [
    `| a conversation of ${LENGTH} messages | messages the model sees | bytes loaded | load (median) |`,
    "| --- | ---: | ---: | ---: |",
    `| before compaction | ${LENGTH} | ${kb(m((r) => r.fullBytes))} | ${m((r) => r.fullLoadMs).toFixed(1)} ms |`,
    `| after compaction (summary + ${TAIL}) | ${TAIL + 1} | ${kb(m((r) => r.segmentBytes))} | ${m((r) => r.segmentLoadMs).toFixed(2)} ms |`,
    "",
    `The compaction commit itself (${TAIL + 1} rows appended, the old ${LENGTH} kept): ${m((r) => r.compactMs).toFixed(2)} ms (median of ${results.length} runs).`
  ].join("\n")
  return { markdown }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log((await run()).markdown)
}
