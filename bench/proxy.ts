/**
 * What the IDE hookup costs: the same calls direct to the server and through its intercepting
 * proxy, as Cursor makes them (CONNECT api2.cursor.sh:443, TLS with a leaf from the
 * installation's CA, HTTP/1.1 on a kept-alive connection).
 *
 * - unary: `AiService/AvailableModels`, sequential calls on one kept-alive connection, µs;
 * - new connection: a fresh connection and its first call (direct: TCP; proxied: TCP, CONNECT,
 *   the TLS handshake, and the leaf, cached after the first), ms;
 * - per delta: a RunSSE turn's text deltas, provider write → client read (as `latency.ts`),
 *   direct and through the proxy, at 1 and 50 concurrent streams; the proxy's added latency is
 *   the difference within a run.
 *
 * The server (and its proxy) runs alone in a child process; the fake provider and the clients
 * run here. Medians over runs with (min–max).
 *
 *   node_modules/.bin/tsx bench/proxy.ts [runs]
 */
import { create, toBinary } from "@bufbuild/protobuf"
import { NodeContext } from "@effect/platform-node"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import * as http from "node:http"
import type * as https from "node:https"
import { request as httpsRequest } from "node:https"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { AvailableModelsRequestSchema } from "../src/gen/aiserver/v1/aiserver_pb.js"
import * as Ca from "../src/hookup/Ca.js"
import { CursorClient } from "../test/support/CursorClient.js"
import { proxyAgent } from "../test/support/ProxyClient.js"
import { startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, percentile, spread } from "./support/stats.js"
import { concurrently, serverStream } from "./support/streams.js"

const PATH = "/aiserver.v1.AiService/AvailableModels"
const BODY = Buffer.from(toBinary(AvailableModelsRequestSchema, create(AvailableModelsRequestSchema, {})))

/** One unary POST; resolves with its duration in ms. */
const unary = (request: typeof http.request, options: http.RequestOptions) =>
  new Promise<number>((resolve, reject) => {
    const started = performance.now()
    const outgoing = request({ ...options, method: "POST", path: PATH, headers: { "content-type": "application/proto", "content-length": String(BODY.length) } }, (response) => {
      response.resume()
      response.on("end", () => (response.statusCode === 200 ? resolve(performance.now() - started) : reject(new Error(`HTTP ${response.statusCode}`))))
    })
    outgoing.on("error", reject)
    outgoing.end(BODY)
  })

export const run = async (options: { readonly runs?: number } = {}) => {
  const runs = options.runs ?? 3
  const loadBefore = loadAverage()
  const home = mkdtempSync(join(tmpdir(), "byok-bench-home-"))
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl, { env: { BENCH_PROXY: "1" }, config: { home } })
  const ca = await Effect.runPromise(Ca.load(home).pipe(Effect.provide(NodeContext.layer)))
  const proxyPort = server.proxyPort!
  const direct = { host: "127.0.0.1", port: server.port }
  const proxied = { host: "api2.cursor.sh", port: 443 }
  const results = { unaryDirect: [] as Array<number>, unaryProxy: [] as Array<number>, newDirect: [] as Array<number>, newProxy: [] as Array<number> }
  const deltas = new Map<string, Array<{ readonly p50: number; readonly p99: number }>>()
  const record = (key: string, values: ReadonlyArray<number>) => {
    const entry = deltas.get(key) ?? []
    entry.push({ p50: percentile(values, 50), p99: percentile(values, 99) })
    deltas.set(key, entry)
  }
  try {
    const keptDirect = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const keptProxy: https.Agent = proxyAgent(proxyPort, [ca.certPem])
    // Warm-up: JIT, the leaf for api2.cursor.sh, SQLite.
    for (let i = 0; i < 50; i++) {
      await unary(http.request, { ...direct, agent: keptDirect })
      await unary(httpsRequest, { ...proxied, agent: keptProxy })
    }
    for (let r = 0; r < runs; r++) {
      const sample = async (go: () => Promise<number>, count: number) => {
        const times: Array<number> = []
        for (let i = 0; i < count; i++) times.push(await go())
        return times
      }
      results.unaryDirect.push(median(await sample(() => unary(http.request, { ...direct, agent: keptDirect }), 300)) * 1000)
      results.unaryProxy.push(median(await sample(() => unary(httpsRequest, { ...proxied, agent: keptProxy }), 300)) * 1000)
      results.newDirect.push(median(await sample(() => unary(http.request, { ...direct, agent: false }), 40)))
      results.newProxy.push(median(await sample(async () => {
        const fresh = proxyAgent(proxyPort, [ca.certPem])
        try {
          return await unary(httpsRequest, { ...proxied, agent: fresh })
        } finally {
          fresh.destroy()
        }
      }, 40)))
      for (const streams of [1, 50]) {
        for (const via of r % 2 === 0 ? ["direct", "proxy"] as const : ["proxy", "direct"] as const) {
          const outcome = await concurrently(streams, 100, () => {
            const client = via === "direct"
              ? undefined
              : new CursorClient({ baseUrl: "https://api2.cursor.sh", agent: proxyAgent(proxyPort, [ca.certPem]), turnTimeoutMs: 120_000, requestTimeoutMs: 60_000 })
            const spec = { id: `${via}${streams}-${r}-${Math.random().toString(36).slice(2, 8)}`, deltas: streams === 1 ? 300 : 100, minMs: 5, maxMs: 20 }
            return serverStream(server.baseUrl, provider, spec, client === undefined ? {} : { client }).finally(() => client?.close())
          })
          const problems = outcome.flatMap((o) => o.problems)
          if (problems.length > 0) throw new Error(`${via}, ${streams} streams: ${problems.slice(0, 3).join("; ")}`)
          record(`${via}|${streams}`, outcome.flatMap((o) => o.latencies))
          provider.reset()
        }
      }
    }
    keptDirect.destroy()
    keptProxy.destroy()
  } finally {
    await server.dispose()
    await provider.close()
    rmSync(home, { recursive: true, force: true })
  }
  const row = (streams: number, pick: "p50" | "p99") => {
    const d = deltas.get(`direct|${streams}`)!.map((x) => x[pick])
    const p = deltas.get(`proxy|${streams}`)!.map((x) => x[pick])
    return `${spread(d)} | ${spread(p)} | ${spread(p.map((v, i) => v - d[i]!))}`
  }
  const markdown = [
    `The IDE hookup's cost, direct vs through the proxy (CONNECT + TLS with the CA's leaf); ${runs} runs, median (min–max) over runs. Load average before: ${loadBefore}, after: ${loadAverage()}.`,
    "",
    "| measure | direct | through the proxy | added |",
    "| --- | ---: | ---: | ---: |",
    `| unary AvailableModels on a kept-alive connection, µs (median of 300) | ${spread(results.unaryDirect, 0)} | ${spread(results.unaryProxy, 0)} | ${spread(results.unaryProxy.map((v, i) => v - results.unaryDirect[i]!), 0)} |`,
    `| a new connection and its first call, ms (median of 40) | ${spread(results.newDirect)} | ${spread(results.newProxy)} | ${spread(results.newProxy.map((v, i) => v - results.newDirect[i]!))} |`,
    `| RunSSE text delta, 1 stream, p50 ms | ${row(1, "p50")} |`,
    `| RunSSE text delta, 1 stream, p99 ms | ${row(1, "p99")} |`,
    `| RunSSE text delta, 50 streams, p50 ms | ${row(50, "p50")} |`,
    `| RunSSE text delta, 50 streams, p99 ms | ${row(50, "p99")} |`
  ].join("\n")
  return { markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
