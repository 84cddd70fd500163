/**
 * Store commit cost against history length: the budget (DESIGN.md §9) is that a commit at a
 * history of 2,000 messages costs at most 1.5× a commit at 20, because a commit writes only
 * its new messages and never reads or re-hashes old ones.
 *
 * Each run opens a fresh SQLite file (WAL, synchronous=NORMAL, as in production) with ten
 * conversations of the given length, then commits one step to each in turn: a realistic step
 * appends one message of about 1 KB and plans a model call (whose request references the
 * whole history) or a client operation. Only `commitInput` is timed, and a lookup of an input
 * that was never applied (`findInputCommit`, as the runner asks before each client input). The
 * table gives the median over runs of each run's median, on the Store's direct way (the
 * server's: `store/Connection.ts`) and, for comparison, on the client's way (the same database
 * behind a bare `SqlClient`, as the Store runs on any other client).
 *
 *   node_modules/.bin/tsx bench/store.ts
 */
import { NodeContext } from "@effect/platform-node"
import { FileSystem, Path } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { emptyMessagesHash, extendMessagesHash, messageHash, requestHash } from "../src/Llm.js"
import type { Message, RequestMessages, ToolDefinition } from "../src/Llm.js"
import { initialConversation } from "../src/Loop.js"
import type { ConversationState } from "../src/Loop.js"
import * as Store from "../src/Store.js"
import { findPgBin, freshDatabase, startCluster } from "../test/support/Postgres.js"

const LENGTHS = [20, 200, 2_000] as const
const CONVERSATIONS = 10
const WARMUP_ROUNDS = 2
const MEASURED_ROUNDS = 10
const BUILD_BATCH = 250

// =============================================================================
// Deterministic content
// =============================================================================

const makeText = (seed: number, length: number): string => {
  const words = ["const", "value", "return", "await", "function", "import", "export", "the", "file", "é", "🚀", "\n"]
  let state = seed * 2654435761 >>> 0
  let out = ""
  while (out.length < length) {
    state = (state * 1664525 + 1013904223) >>> 0
    out += words[state % words.length]! + " "
  }
  return out.slice(0, length)
}

/** Message `index` of a history: assistant steps with a tool call, each answered by a ~1 KB tool result. */
const messageAt = (index: number): Message => {
  if (index === 0) return { role: "user", content: [{ type: "text", text: makeText(0, 300) }] }
  if (index % 2 === 1) {
    return {
      role: "assistant",
      content: [
        { type: "thinking", thinking: makeText(index, 200), signature: `sig-${index}` },
        { type: "text", text: makeText(index + 1, 200) },
        { type: "toolCall", id: `call_${index}`, name: "read", arguments: `{"path":"src/file${index}.ts"}` }
      ],
      api: "openai-chat",
      provider: "bench",
      model: "bench-model",
      usage: { input: 1000 + index, output: 120, cacheRead: 900, cacheWrite: 0, reasoning: 40 },
      stopReason: "toolUse"
    }
  }
  return {
    role: "toolResult",
    toolCallId: `call_${index - 1}`,
    toolName: "read",
    content: [{ type: "text", text: makeText(index, 1000) }],
    isError: false
  }
}

const systemPrompt = makeText(7, 6_000)
const tools: ReadonlyArray<ToolDefinition> = Array.from({ length: 12 }, (_, i) => ({
  name: `tool_${i}`,
  description: makeText(100 + i, 300),
  parameters: { type: "object", properties: { path: { type: "string", description: makeText(200 + i, 80) } } }
}))

/** A shared pool of messages and their chained hashes, so states of any length cost nothing to build. */
export const makePool = (size: number) => {
  const messages: Array<Message> = []
  const chain: Array<string> = [emptyMessagesHash]
  for (let i = 0; i < size; i++) {
    const message = messageAt(i)
    messages.push(message)
    chain.push(extendMessagesHash(chain[i]!, messageHash(message)))
  }
  return { messages, chain }
}

export const stateOf = (pool: ReturnType<typeof makePool>, conversationId: string, length: number): ConversationState => ({
  ...initialConversation(conversationId),
  status: "waitingLlm",
  turnSeq: 1,
  turnId: `${conversationId}/t1`,
  settings: { model: "bench-model", mode: "agent" },
  llmCallSeq: length,
  activeCallId: `${conversationId}/t1/c${length}`,
  messages: pool.messages.slice(0, length),
  messagesHash: pool.chain[length]!
})

// =============================================================================
// One run
// =============================================================================

export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

/** Which way the Store's statements take: the server's direct way, the `SqlClient`'s alone, or PostgreSQL (a fresh database on `pgAdminUrl`). */
type Way = "direct" | "client" | "postgres"

/** The admin URL of the PostgreSQL cluster the run started, when the machine has PostgreSQL. */
let pgAdminUrl: string | undefined

interface RunResult {
  readonly medianMs: number
  readonly lookupMs: number
  /** One `load` of a conversation (decode and verify every message), for scale. */
  readonly loadMs: number
  readonly bytesPerMessage: number
  readonly jsonBytesPerMessage: number
}

const oneRun = (length: number, pool: ReturnType<typeof makePool>, way: Way) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-bench-" })
    const filename = path.join(directory, "store.db")
    const connection = Store.layerSqliteClient({ filename })
    const postgres = way === "postgres" ? Store.layerPostgresClient({ url: yield* Effect.promise(() => freshDatabase(pgAdminUrl!, "bench")) }) : undefined
    // The client's way: the same connection as a bare `SqlClient` (the Store finds no `Direct`).
    const layer = Store.layerSql.pipe(Layer.provideMerge(
      postgres ?? (way === "direct" ? connection : Layer.effect(SqlClient.SqlClient, SqlClient.SqlClient).pipe(Layer.provide(connection)))
    ))
    return yield* Effect.gen(function*() {
      const store = yield* Store.Store
      const sql = yield* SqlClient.SqlClient
      const ids = Array.from({ length: CONVERSATIONS }, (_, i) => `bench-${i}`)
      const versions = new Map<string, number>()
      const lengths = new Map<string, number>()

      // Build the histories in large commits (not timed).
      for (const id of ids) {
        let version = 0
        for (let built = 0; built < length;) {
          const upTo = Math.min(length, built + BUILD_BATCH)
          version = yield* store.commitInput({
            conversationId: id,
            inputId: `build-${upTo}`,
            expectedVersion: version,
            next: stateOf(pool, id, upTo),
            result: null
          })
          built = upTo
        }
        versions.set(id, version)
        lengths.set(id, length)
      }

      const samples: Array<number> = []
      const lookups: Array<number> = []
      for (let round = 0; round < WARMUP_ROUNDS + MEASURED_ROUNDS; round++) {
        for (const id of ids) {
          const count = lengths.get(id)! + 1
          const next = stateOf(pool, id, count)
          const request: RequestMessages = { systemPrompt, messages: next.messages, tools }
          const callId = `${id}/t1/c${count}`
          // Alternate the two step kinds the runner commits: a planned model call, a planned client operation.
          const plan: Partial<Store.CommitInput> = round % 2 === 0
            ? {
              llmCall: {
                callId,
                conversationId: id,
                turnId: next.turnId,
                model: "bench-model",
                request,
                messagesHash: next.messagesHash,
                requestHash: requestHash("bench-model", request, next.messagesHash, count),
                segmentStart: 0,
                detached: false
              }
            }
            : {
              clientOperations: [{
                operationId: `${callId}/0:call`,
                conversationId: id,
                turnId: next.turnId,
                toolCallId: `call_${count}`,
                toolIndex: 0,
                kind: "read",
                idempotent: true,
                request: { path: `src/file${count}.ts` }
              }]
            }
          const asked = performance.now()
          yield* store.findInputCommit(id, `step-${count}`)
          if (round >= WARMUP_ROUNDS) lookups.push(performance.now() - asked)
          const started = performance.now()
          const version = yield* store.commitInput({
            conversationId: id,
            inputId: `step-${count}`,
            expectedVersion: versions.get(id)!,
            next,
            result: { command: "CallLlm" },
            ...plan
          })
          const elapsed = performance.now() - started
          if (round >= WARMUP_ROUNDS) samples.push(elapsed)
          versions.set(id, version)
          lengths.set(id, count)
        }
      }

      const loadStarted = performance.now()
      yield* store.load(ids[0]!)
      const loadMs = performance.now() - loadStarted

      if (way === "postgres") {
        const totals = yield* sql<{ n: number; bytes: number; size: number }>`
          SELECT count(*) AS n, sum(octet_length(message_json)) AS bytes, pg_total_relation_size('messages') AS size FROM messages`
        const { bytes, n, size } = totals[0]!
        return { medianMs: median(samples), lookupMs: median(lookups), loadMs, bytesPerMessage: size / n, jsonBytesPerMessage: bytes / n } satisfies RunResult
      }
      // Fold the WAL into the database file before measuring its size.
      yield* sql.unsafe("PRAGMA wal_checkpoint(TRUNCATE)")
      const pages = yield* sql<{ page_count: number }>`PRAGMA page_count`
      const pageSize = yield* sql<{ page_size: number }>`PRAGMA page_size`
      const totals = yield* sql<{ n: number; bytes: number }>`
        SELECT count(*) AS n, sum(length(CAST(message_json AS BLOB))) AS bytes FROM messages`
      const messages = totals[0]!.n
      return {
        medianMs: median(samples),
        lookupMs: median(lookups),
        loadMs,
        bytesPerMessage: (pages[0]!.page_count * pageSize[0]!.page_size) / messages,
        jsonBytesPerMessage: totals[0]!.bytes / messages
      } satisfies RunResult
    }).pipe(Effect.provide(layer))
  }).pipe(Effect.scoped)

// =============================================================================
// Entry point
// =============================================================================

export interface StoreBenchRow {
  readonly historyLength: number
  readonly medianCommitMs: number
  readonly commitsPerSecond: number
  /** A lookup of an input never applied. */
  readonly lookupMs: number
  /** The same commit and lookup on the client's way. */
  readonly clientCommitMs: number
  readonly clientLookupMs: number
  /** The same on PostgreSQL (NaN without it): commit, lookup, load, table bytes per message. */
  readonly pgCommitMs: number
  readonly pgLookupMs: number
  readonly pgLoadMs: number
  readonly pgBytesPerMessage: number
  readonly loadMs: number
  readonly bytesPerMessage: number
  readonly jsonBytesPerMessage: number
}

export interface StoreBenchResult {
  readonly rows: ReadonlyArray<StoreBenchRow>
  /** Median commit at 2,000 over median commit at 20; the budget is ≤ 1.5. */
  readonly ratio: number
  readonly withinBudget: boolean
  readonly markdown: string
}

/** Runs the benchmark (`runs` fresh databases per history length) and prints its table; PostgreSQL too when the machine has it. */
export const run = async (options: { readonly runs?: number; readonly print?: boolean } = {}): Promise<StoreBenchResult> => {
  // PostgreSQL as a team would run it (fsync on; commits acknowledged before their WAL is flushed, as SQLite's WAL with synchronous=NORMAL).
  const cluster = findPgBin() === undefined ? undefined : await startCluster({ settings: { fsync: "on", synchronous_commit: "off", full_page_writes: "on" } })
  pgAdminUrl = cluster?.url
  try {
    return await measure(options, cluster === undefined ? ["direct", "client"] : ["direct", "client", "postgres"])
  } finally {
    await cluster?.stop()
  }
}

const measure = async (options: { readonly runs?: number; readonly print?: boolean }, ways: ReadonlyArray<Way>): Promise<StoreBenchResult> => {
  const runs = options.runs ?? 5
  const pool = makePool(LENGTHS[LENGTHS.length - 1]! + WARMUP_ROUNDS + MEASURED_ROUNDS + 2)
  const once = (length: number, way: Way) => Effect.runPromise(oneRun(length, pool, way).pipe(Effect.provide(NodeContext.layer)))
  // One unrecorded pass so that the first length measured does not pay for the JIT warming up.
  for (const length of LENGTHS) await once(length, "direct")
  if (ways.includes("postgres")) await once(LENGTHS[0]!, "postgres")
  const results = new Map<string, Array<RunResult>>()
  // Lengths and ways interleaved within each run, so drift over time (GC, WAL growth, CPU) hits them alike.
  for (let i = 0; i < runs; i++) {
    for (const length of LENGTHS) {
      for (const way of ways) {
        const key = `${way}/${length}`
        results.set(key, [...(results.get(key) ?? []), await once(length, way)])
      }
    }
  }
  const rows: Array<StoreBenchRow> = LENGTHS.map((length) => {
    const measured = results.get(`direct/${length}`)!
    const client = results.get(`client/${length}`)!
    const pg = results.get(`postgres/${length}`) ?? []
    const medianCommitMs = median(measured.map((r) => r.medianMs))
    return {
      historyLength: length,
      medianCommitMs,
      commitsPerSecond: 1000 / medianCommitMs,
      lookupMs: median(measured.map((r) => r.lookupMs)),
      clientCommitMs: median(client.map((r) => r.medianMs)),
      clientLookupMs: median(client.map((r) => r.lookupMs)),
      pgCommitMs: pg.length === 0 ? NaN : median(pg.map((r) => r.medianMs)),
      pgLookupMs: pg.length === 0 ? NaN : median(pg.map((r) => r.lookupMs)),
      pgLoadMs: pg.length === 0 ? NaN : median(pg.map((r) => r.loadMs)),
      pgBytesPerMessage: pg.length === 0 ? NaN : median(pg.map((r) => r.bytesPerMessage)),
      loadMs: median(measured.map((r) => r.loadMs)),
      bytesPerMessage: median(measured.map((r) => r.bytesPerMessage)),
      jsonBytesPerMessage: median(measured.map((r) => r.jsonBytesPerMessage))
    }
  })
  const first = rows[0]!
  const last = rows[rows.length - 1]!
  const ratio = last.medianCommitMs / first.medianCommitMs
  const format = (value: number, digits: number) => value.toFixed(digits)
  const markdown = [
    `Store commit cost (${runs} runs × ${CONVERSATIONS * MEASURED_ROUNDS} commits per history length; medians)`,
    "",
    "| history length | commit (ms) | commits/s | lookup (µs) | client's way: commit (ms) / lookup (µs) | DB bytes / message | message JSON bytes | load (ms) | PostgreSQL: commit (ms) / lookup (µs) / load (ms) / table bytes per message |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((row) =>
      `| ${row.historyLength.toLocaleString("en-US")} | ${format(row.medianCommitMs, 3)} | ${
        Math.round(row.commitsPerSecond).toLocaleString("en-US")
      } | ${format(row.lookupMs * 1000, 0)} | ${format(row.clientCommitMs, 3)} / ${format(row.clientLookupMs * 1000, 0)} | ${
        Math.round(row.bytesPerMessage)
      } | ${Math.round(row.jsonBytesPerMessage)} | ${format(row.loadMs, 1)} | ${
        Number.isNaN(row.pgCommitMs) ? "no PostgreSQL here" : `${format(row.pgCommitMs, 3)} / ${format(row.pgLookupMs * 1000, 0)} / ${format(row.pgLoadMs, 1)} / ${Math.round(row.pgBytesPerMessage)}`
      } |`
    ),
    "",
    `ratio 2,000 / 20: ${format(ratio, 2)}× (budget ≤ 1.5×: ${ratio <= 1.5 ? "met" : "MISSED"})`
  ].join("\n")
  if (options.print !== false) console.log(markdown)
  return { rows, ratio, withinBudget: ratio <= 1.5, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await run()
}
