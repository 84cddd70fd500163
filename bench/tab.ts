/**
 * Tab's added latency: Cursor's `StreamCpp` answered from a FIM model, at 1 and 8 editors.
 *
 * Layout as `latency.ts`: the server alone in a child process (precompiled, a `tab` section
 * pointing at the fake provider), the stamped fake FIM provider (`support/fimProvider.ts`) and
 * the clients in this process, so every stamp is `performance.now()` on one clock. An editor is
 * a lean Connect client (a `node:http` request with its own keep-alive agent, the request's one
 * envelope written whole, the answer's envelopes split and decoded as they come: the relay
 * client's cost plus the decode, so the table is the server's, not a client library's) sending
 * `StreamCpp` for its own file, one request at a time; `editors` of them run at once. Each request's file carries a marker naming it, so no two prompts are alike
 * (no shared call, no typing through). What is timed:
 *
 * 1. request sent (just before the client's call) → the provider has the upstream request's body;
 * 2. the provider's first token write (head and an event of four lines in one write, the end
 *    `restMs` later) → the client has the first message with suggestion text (the service
 *    streams the lines a later line settles, so this one comes before the answer's end);
 * 3. supersede: an editor's request whose upstream stalls after one token, then, once the
 *    provider has it, a request for the same file with another prompt: from that second
 *    request's send to the provider seeing the first upstream connection close (the abort).
 *
 * The floor for 1 and 2 is the relay (`support/relay.ts`, a bare `node:http` pass-through in a
 * child of its own) in the same run: each relay "editor" posts the exact body the server sends
 * upstream (`Fim.requestOf`) with a keep-alive agent and stamps the first body read holding
 * text. `BENCH_TAB_PROFILE=<file>` writes a CPU profile of the server over the measured rounds. At each level, after a warm-up, relay and server run
 * back to back (which goes first alternates between levels), then the supersede pairs.
 *
 *   node_modules/.bin/tsx bench/tab.ts [requests] [warmup]
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { Redacted } from "effect"
import * as http from "node:http"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { StreamCppRequestSchema, StreamCppResponseSchema } from "../src/gen/aiserver/v1/tab_pb.js"
import { ConnectError, envelope, FLAG_END_STREAM, splitEnvelopes } from "../src/transport/Connect.js"
import type { StreamCppRequest } from "../src/gen/aiserver/v1/tab_pb.js"
import { defaultLimits } from "../src/Tab.js"
import type { TabRequest } from "../src/Tab.js"
import { requestOf } from "../src/tab/Fim.js"
import { promptOf } from "../src/tab/Prompt.js"
import { startRelay, startServer } from "./support/child.js"
import * as Fim from "./support/fimProvider.js"
import { loadAverage, percentile, withTimeout } from "./support/stats.js"

export interface TabOptions {
  /** Measured requests per path and level, shared among the editors (default 200). */
  readonly requests?: number
  /** Requests per path before each level's measured ones (default 20). */
  readonly warmup?: number
  readonly levels?: ReadonlyArray<number>
  /** How long after its first token write the provider ends an answer (default 5 ms). */
  readonly restMs?: number
}

const WAIT_MS = 15_000

/** Editor `editor`'s file, named by request `id`, the cursor on an empty line (3, 2) of a block. */
const tabRequestOf = (editor: number, id: string, stall: boolean): TabRequest => ({
  workspace: "bench",
  path: `src/editor${editor}.ts`,
  languageId: "typescript",
  contents: `// ${Fim.marker(id, stall)}\nexport function total${editor}(items: Array<number>) {\n  let sum = 0\n  \n}\n`,
  line: 3,
  column: 2,
  recentEdits: [],
  otherFiles: [],
  diagnostics: []
})

const streamCppOf = (request: TabRequest): StreamCppRequest =>
  create(StreamCppRequestSchema, {
    currentFile: {
      relativeWorkspacePath: request.path,
      contents: request.contents,
      cursorPosition: { line: request.line, column: request.column },
      languageId: request.languageId
    },
    workspaceId: request.workspace,
    modelName: "bench-fim"
  })

/** The body the server sends upstream for `request` (what the relay editors post). */
const upstreamBodyOf = (request: TabRequest): string =>
  requestOf({
    provider: "bench",
    api: "openai-completions",
    baseUrl: "http://127.0.0.1/v1",
    apiKey: Redacted.make(""),
    headers: {},
    model: "bench-fim",
    timeoutMs: 10_000
  }, promptOf(request, defaultLimits)).body

interface Sample {
  readonly toUpstream: number
  readonly firstText: number
}

interface Editor {
  readonly baseUrl: string
  readonly agent: http.Agent
}

/** One `StreamCpp` on `editor`'s connection: resolves at its end with when its first suggestion text came (NaN: none). */
const streamCpp = (editor: Editor, request: StreamCppRequest): Promise<number> =>
  new Promise((resolve, reject) => {
    const body = envelope(0, toBinary(StreamCppRequestSchema, request))
    const call = http.request(`${editor.baseUrl}/aiserver.v1.AiService/StreamCpp`, {
      method: "POST",
      agent: editor.agent,
      headers: { "content-type": "application/connect+proto", "connect-protocol-version": "1", "content-length": body.length }
    }, (response) => {
      let firstTextAt = Number.NaN
      let rest: Uint8Array = new Uint8Array(0)
      response.on("data", (chunk: Buffer) => {
        const split = splitEnvelopes(rest.length === 0 ? chunk : Buffer.concat([rest, chunk]), 1 << 20)
        if (split instanceof ConnectError) return reject(split)
        rest = split.rest
        for (const { flags, payload } of split.envelopes) {
          if ((flags & FLAG_END_STREAM) !== 0) {
            const end = JSON.parse(Buffer.from(payload).toString("utf8")) as { error?: { message: string } }
            if (end.error !== undefined) reject(new Error(`StreamCpp: ${end.error.message}`))
          } else if (Number.isNaN(firstTextAt) && fromBinary(StreamCppResponseSchema, payload).text !== "") {
            firstTextAt = performance.now()
          }
        }
      })
      response.on("end", () => resolve(firstTextAt))
      response.on("error", reject)
    })
    call.on("error", reject)
    call.end(body)
  })

/** `editors` loops at once, each `ceil(total / editors)` calls of `run` one after another. */
const byEditors = async <A>(editors: number, total: number, run: (editor: number, index: number) => Promise<A>): Promise<Array<A>> => {
  const each = Math.ceil(total / editors)
  const loops = Array.from({ length: editors }, async (_, editor) => {
    const out: Array<A> = []
    for (let index = 0; index < each; index++) out.push(await run(editor, index))
    return out
  })
  return (await Promise.all(loops)).flat()
}

/** One `StreamCpp` through the server, and the provider's stamps of its call. */
const serverCall = async (provider: Fim.FimProvider, editor: Editor, file: number, id: string): Promise<Sample> => {
  const request = streamCppOf(tabRequestOf(file, id, false))
  const sentAt = performance.now()
  const firstTextAt = await streamCpp(editor, request)
  const stamps = provider.stamps(id)
  if (stamps === undefined) throw new Error(`server: the provider never got ${id}`)
  if (Number.isNaN(firstTextAt)) throw new Error(`server: ${id} had no suggestion text`)
  return { toUpstream: stamps.receivedAt - sentAt, firstText: firstTextAt - stamps.firstWriteAt }
}

/** The same call's upstream body through the relay, its first text read. */
const relayCall = (provider: Fim.FimProvider, relayUrl: string, agent: http.Agent, file: number, id: string): Promise<Sample> =>
  new Promise((resolve, reject) => {
    const body = upstreamBodyOf(tabRequestOf(file, id, false))
    const sentAt = performance.now()
    const request = http.request(`${relayUrl}/v1/completions`, {
      method: "POST",
      agent,
      headers: { "content-type": "application/json", accept: "text/event-stream", "content-length": Buffer.byteLength(body) }
    }, (response) => {
      let firstTextAt = Number.NaN
      response.on("data", (chunk: Buffer) => {
        if (Number.isNaN(firstTextAt) && /"text":"[^"]/.test(chunk.toString("utf8"))) firstTextAt = performance.now()
      })
      response.on("end", () => {
        const stamps = provider.stamps(id)
        if (stamps === undefined || Number.isNaN(firstTextAt)) return reject(new Error(`relay: ${id} had no text`))
        resolve({ toUpstream: stamps.receivedAt - sentAt, firstText: firstTextAt - stamps.firstWriteAt })
      })
      response.on("error", reject)
    })
    request.on("error", reject)
    request.end(body)
  })

/** A stalled request, then one superseding it: the second's send → the first upstream connection closed. */
const supersede = async (provider: Fim.FimProvider, editor: Editor, file: number, id: string): Promise<number> => {
  const first = streamCpp(editor, streamCppOf(tabRequestOf(file, `${id}a`, true)))
  await withTimeout(provider.received(`${id}a`), WAIT_MS, `supersede ${id}: the stalled request`)
  const aborted = provider.aborted(`${id}a`)
  const sentAt = performance.now()
  const second = streamCpp(editor, streamCppOf(tabRequestOf(file, `${id}b`, false)))
  const stamps = await withTimeout(aborted, WAIT_MS, `supersede ${id}: the first call's abort`)
  await withTimeout(Promise.all([first, second]), WAIT_MS, `supersede ${id}: both streams' end`)
  return stamps.closedAt - sentAt
}

const p = (values: ReadonlyArray<number>, at: number) => (values.length === 0 ? "n/a" : percentile(values, at).toFixed(2))

export const run = async (options: TabOptions = {}) => {
  const requests = options.requests ?? 200
  const warmup = options.warmup ?? 20
  const levels = options.levels ?? [1, 8]
  const loadBefore = loadAverage()
  const provider = await Fim.start({ restMs: options.restMs ?? 5 })
  // Under tsx (BENCH_TSX=1) a profile names src/ files and lines.
  const server = await startServer(provider.baseUrl, { config: { tab: { provider: "bench", model: "bench-fim" } }, compiled: process.env["BENCH_TSX"] !== "1" })
  const relay = await startRelay(provider.baseUrl)
  const opened: Array<http.Agent> = []
  const editorsOf = (count: number): Array<Editor> =>
    Array.from({ length: count }, () => {
      const agent = new http.Agent({ keepAlive: true })
      opened.push(agent)
      return { agent, baseUrl: server.baseUrl }
    })
  let sequence = 0
  const rows: Array<{ editors: number; server: Array<Sample>; relay: Array<Sample>; supersede: Array<number> }> = []
  try {
    for (const [level, count] of levels.entries()) {
      const editors = editorsOf(count)
      const onServer = (total: number) => byEditors(count, total, (e) => serverCall(provider, editors[e]!, e, `t${sequence++}`))
      const onRelay = (total: number) => byEditors(count, total, (e) => relayCall(provider, relay.baseUrl, editors[e]!.agent, e, `r${sequence++}`))
      const superseding = (total: number) => byEditors(count, total, (e) => supersede(provider, editors[e]!, e, `s${sequence++}`))
      await onRelay(warmup)
      await onServer(warmup)
      await superseding(warmup)
      provider.reset()
      const profile = process.env["BENCH_TAB_PROFILE"]
      if (profile !== undefined && level === levels.length - 1) await server.profileStart()
      const serverFirst = level % 2 === 1
      const a = serverFirst ? await onServer(requests) : await onRelay(requests)
      const b = serverFirst ? await onRelay(requests) : await onServer(requests)
      const superseded = await superseding(requests)
      if (profile !== undefined && level === levels.length - 1) await server.profileStop(profile)
      provider.reset()
      rows.push({ editors: count, server: serverFirst ? a : b, relay: serverFirst ? b : a, supersede: superseded })
    }
  } finally {
    opened.forEach((agent) => agent.destroy())
    await server.dispose()
    await relay.stop()
    await provider.close()
  }
  const loadAfter = loadAverage()
  const line = (editors: number, what: string, serverValues: ReadonlyArray<number>, relayValues: ReadonlyArray<number> | undefined) =>
    `| ${editors} | ${what} | ${serverValues.length} | ${p(serverValues, 50)} | ${p(serverValues, 99)} | ${relayValues === undefined ? "—" : p(relayValues, 50)} | ${relayValues === undefined ? "—" : p(relayValues, 99)} |`
  const markdown = [
    `Tab (\`StreamCpp\`, Connect over HTTP/1.1) on a fake FIM provider, ms; ${requests} requests per path and level after ${warmup} warm-up ones, shared among the editors, each editor one request at a time on its own file. Server and relay each in a child process (server precompiled); provider and clients in the bench process. Load average before: ${loadBefore}, after: ${loadAfter}.`,
    "",
    "| editors | measure | samples | server p50 | server p99 | relay p50 | relay p99 |",
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ...rows.flatMap((row) => [
      line(row.editors, "(1) request sent → upstream request received", row.server.map((s) => s.toUpstream), row.relay.map((s) => s.toUpstream)),
      line(row.editors, "(2) first token written → first suggestion text at the client", row.server.map((s) => s.firstText), row.relay.map((s) => s.firstText)),
      line(row.editors, "(3) superseding request sent → first upstream call closed", row.supersede, undefined)
    ])
  ].join("\n")
  return { rows, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const requests = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  const warmup = process.argv[3] !== undefined ? Number(process.argv[3]) : undefined
  run({ ...(requests !== undefined ? { requests } : {}), ...(warmup !== undefined ? { warmup } : {}) }).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
