/**
 * The proxy's memory under many intercepted names: CONNECTs to `names` distinct hosts
 * (`n<i>.api5.cursor.sh:443`), each followed by a TLS handshake with that name as SNI, trusting
 * the installation's CA, then dropped (no close_notify, no GOAWAY); 20 at a time. The server
 * (and its proxy) runs alone in a child process, precompiled, with `--expose-gc`; its VmRSS and
 * open file descriptors are read from /proc before (after a warm-up and a full GC), right after
 * the CONNECTs, and after a full GC once the proxy's handshake limit (10 s) has passed, so that
 * every connection a client dropped is closed. Fresh server per run; medians over runs with
 * (min–max).
 *
 * `bundle`: a bench server bundled from another version (as `ab.ts` makes them), instead of
 * the working tree's.
 *
 *   node_modules/.bin/tsx bench/proxyLeaves.ts [runs = 3] [names = 3000] [bundle]
 */
import { NodeContext } from "@effect/platform-node"
import { Effect } from "effect"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import * as Ca from "../src/hookup/Ca.js"
import { tlsVia } from "../test/support/ProxyClient.js"
import { startServer } from "./support/child.js"
import { loadAverage, sleep, spread } from "./support/stats.js"

const MB = 1024 * 1024
const AT_ONCE = 20
/** Past the proxy's handshake limit (`idleHandshakeMs`, 10 s). */
const SETTLE_MS = 11_000

export interface ProxyLeavesOptions {
  readonly runs?: number
  readonly names?: number
  readonly prebuilt?: string
}

interface Sample {
  readonly beforeMb: number
  readonly afterMb: number
  readonly afterGcMb: number
  readonly heapBeforeMb: number
  readonly heapAfterGcMb: number
  readonly fdsBefore: number
  readonly fdsAfter: number
  readonly fdsAfterGc: number
}

const fdsOf = (pid: number) => readdirSync(`/proc/${pid}/fd`).length

/** CONNECT + TLS handshake to each name, `AT_ONCE` at a time; each connection closed once established. */
const handshakes = async (proxyPort: number, ca: string, names: ReadonlyArray<string>) => {
  let next = 0
  const worker = async () => {
    while (next < names.length) {
      const name = names[next++]!
      const socket = await tlsVia(proxyPort, name, 443, [ca], ["h2", "http/1.1"])
      socket.destroy()
    }
  }
  await Promise.all(Array.from({ length: AT_ONCE }, worker))
}

const once = async (names: number, prebuilt: string | undefined): Promise<Sample> => {
  const home = mkdtempSync(join(tmpdir(), "byok-bench-home-"))
  // No turn runs: the provider is never called.
  const server = await startServer("http://127.0.0.1:9", { env: { BENCH_PROXY: "1" }, config: { home }, ...(prebuilt !== undefined ? { prebuilt } : {}) })
  try {
    const ca = (await Effect.runPromise(Ca.load(home).pipe(Effect.provide(NodeContext.layer)))).certPem
    const proxyPort = server.proxyPort!
    // Warm-up: the leaf key, JIT, one endpoint.
    await handshakes(proxyPort, ca, Array.from({ length: 40 }, () => "api2.cursor.sh"))
    await sleep(500)
    const before = await server.gc()
    const beforeMb = server.rss().rss / MB
    const fdsBefore = fdsOf(server.pid)
    await handshakes(proxyPort, ca, Array.from({ length: names }, (_, i) => `n${i}.api5.cursor.sh`))
    await sleep(500)
    const afterMb = server.rss().rss / MB
    const fdsAfter = fdsOf(server.pid)
    await sleep(SETTLE_MS)
    const after = await server.gc()
    await sleep(500)
    return {
      beforeMb,
      afterMb,
      afterGcMb: server.rss().rss / MB,
      heapBeforeMb: before.heapUsed / MB,
      heapAfterGcMb: after.heapUsed / MB,
      fdsBefore,
      fdsAfter,
      fdsAfterGc: fdsOf(server.pid)
    }
  } finally {
    await server.dispose()
    rmSync(home, { recursive: true, force: true })
  }
}

export const run = async (options: ProxyLeavesOptions = {}) => {
  const runs = options.runs ?? 3
  const names = options.names ?? 3_000
  const loadBefore = loadAverage()
  const samples: Array<Sample> = []
  for (let r = 0; r < runs; r++) samples.push(await once(names, options.prebuilt))
  const col = (pick: (s: Sample) => number) => spread(samples.map(pick), 1)
  const fds = (pick: (s: Sample) => number) => spread(samples.map(pick), 0)
  const markdown = [
    `Server RSS around ${names.toLocaleString("en")} CONNECTs to distinct intercepted names (TLS handshake each, then dropped, ${AT_ONCE} at a time), ${runs} runs, median (min–max), MB.`,
    `Server alone in a child process (Node ${process.version}, ${options.prebuilt === undefined ? "precompiled as `npm start` runs it" : `bundle ${options.prebuilt}`}). Load average before: ${loadBefore}, after: ${loadAverage()}.`,
    "",
    "| when | RSS MB | heap used MB | open fds |",
    "| --- | ---: | ---: | ---: |",
    `| before (after a warm-up and a full GC) | ${col((s) => s.beforeMb)} | ${col((s) => s.heapBeforeMb)} | ${fds((s) => s.fdsBefore)} |`,
    `| right after the CONNECTs | ${col((s) => s.afterMb)} | | ${fds((s) => s.fdsAfter)} |`,
    `| ${SETTLE_MS / 1000} s later, after a full GC | ${col((s) => s.afterGcMb)} | ${col((s) => s.heapAfterGcMb)} | ${fds((s) => s.fdsAfterGc)} |`
  ].join("\n")
  return { samples, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [runs, names, prebuilt] = process.argv.slice(2)
  run({
    ...(runs !== undefined ? { runs: Number(runs) } : {}),
    ...(names !== undefined ? { names: Number(names) } : {}),
    ...(prebuilt !== undefined ? { prebuilt } : {})
  }).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
