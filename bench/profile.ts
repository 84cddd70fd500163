/**
 * Profiles the server child under a benchmark load: starts `support/serve.ts`, runs `streams` concurrent turns of `deltas` deltas (`min`–`max` ms apart; 0 0
 * for unpaced) after a warm-up round that the profile (V8's, started over IPC) leaves out, and prints the
 * top functions by self time and the files by self time. Not part of `npm run bench`.
 *
 *   node_modules/.bin/tsx bench/profile.ts [streams] [deltas] [minMs] [maxMs] [rounds]
 *
 * BENCH_WARM=N starts the profile after N rounds; BENCH_KEPT=1 keeps each client's connections.
 */
import { existsSync, mkdtempSync, readFileSync } from "node:fs"
import { SourceMap } from "node:module"
import { tmpdir } from "node:os"
import { join, relative } from "node:path"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { repoRoot, startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { concurrently, serverStream, keptClients } from "./support/streams.js"

interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number; readonly columnNumber: number }
  readonly hitCount?: number
  readonly children?: ReadonlyArray<number>
}

/** Top functions and files by self time of a `.cpuprofile`. */
export const summarizeProfile = (path: string, top = 30): string => {
  const profile = JSON.parse(readFileSync(path, "utf8")) as { nodes: Array<ProfileNode>; startTime: number; endTime: number }
  const total = profile.nodes.reduce((n, node) => n + (node.hitCount ?? 0), 0)
  const byFunction = new Map<string, number>()
  const byFile = new Map<string, number>()
  // A bundle's frames named by their sources through its source map (`serve.bundle.cjs.map`).
  const maps = new Map<string, SourceMap | undefined>()
  const mapOf = (url: string): SourceMap | undefined => {
    if (!maps.has(url)) {
      const path = url.startsWith("file://") ? new URL(url).pathname : url
      maps.set(url, existsSync(`${path}.map`) ? new SourceMap(JSON.parse(readFileSync(`${path}.map`, "utf8"))) : undefined)
    }
    return maps.get(url)
  }
  const original = (frame: ProfileNode["callFrame"]): { readonly url: string; readonly line: number } => {
    const entry = (frame.url.includes(".bundle.") ? mapOf(frame.url)?.findEntry(frame.lineNumber, frame.columnNumber) : undefined) as
      | { readonly originalSource?: string; readonly originalLine?: number }
      | undefined
    return entry?.originalSource !== undefined
      ? { url: entry.originalSource, line: entry.originalLine ?? 0 }
      : { url: frame.url, line: frame.lineNumber }
  }
  const short = (url: string) => {
    const file = url.startsWith("file://") ? relative(repoRoot, new URL(url).pathname) : url
    return file.replace(/^(\.\.\/)+/, "").replace(/^node_modules\/\.pnpm\/[^/]+\/node_modules\//, "node_modules/")
  }
  for (const node of profile.nodes) {
    const hits = node.hitCount ?? 0
    if (hits === 0) continue
    const at = original(node.callFrame)
    const file = short(at.url) || "(native)"
    const key = `${node.callFrame.functionName || "(anonymous)"} ${file}:${at.line + 1}`
    byFunction.set(key, (byFunction.get(key) ?? 0) + hits)
    const fileKey = file.replace(/^(node_modules\/(@[^/]+\/)?[^/]+)\/(dist\/(cjs|esm)\/)?(internal\/)?([^/]+).*$/, "$1 $5$6")
    byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + hits)
  }
  // Inclusive time: each sample counts once for every distinct function on its stack.
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const parent = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id)
  const keyOf = (node: ProfileNode) => {
    const at = original(node.callFrame)
    return `${node.callFrame.functionName || "(anonymous)"} ${short(at.url) || "(native)"}:${at.line + 1}`
  }
  const inclusive = new Map<string, number>()
  for (const node of profile.nodes) {
    const hits = node.hitCount ?? 0
    if (hits === 0) continue
    const seen = new Set<string>()
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const current = byId.get(id)!
      // The server runs as one bundle (`byok-bench/serve.mjs`) or from its sources (`/src/`).
      if (!original(current.callFrame).url.includes("/src/")) continue
      const key = keyOf(current)
      if (seen.has(key)) continue
      seen.add(key)
      inclusive.set(key, (inclusive.get(key) ?? 0) + hits)
    }
  }
  const pct = (hits: number) => `${((hits / total) * 100).toFixed(1)}%`
  const rows = (map: Map<string, number>, n: number) =>
    [...map].sort((a, b) => b[1] - a[1]).slice(0, n).map(([key, hits]) => `| ${pct(hits)} | \`${key}\` |`)
  return [
    `${total} samples over ${((profile.endTime - profile.startTime) / 1e6).toFixed(1)} s`,
    "",
    "| self | function |",
    "| ---: | --- |",
    ...rows(byFunction, top),
    "",
    "| total | function in src/ (inclusive) |",
    "| ---: | --- |",
    ...rows(inclusive, top * 2),
    "",
    "| self | file or package |",
    "| ---: | --- |",
    ...rows(byFile, 40)
  ].join("\n")
}

const main = async () => {
  const [streams = 50, deltas = 150, minMs = 5, maxMs = 20, rounds = 3] = process.argv.slice(2).map(Number)
  const dir = mkdtempSync(join(tmpdir(), "byok-prof-"))
  const provider = await Provider.start()
  // Under tsx (BENCH_TSX=1) the profile names src/ files and lines (and includes tsx's own costs).
  const server = await startServer(provider.baseUrl, { compiled: process.env["BENCH_TSX"] !== "1" })
  const path = join(dir, "server.cpuprofile")
  let sequence = 0
  // BENCH_KEPT=1: clients that keep their connections from round to round, as Cursor does.
  const kept = process.env["BENCH_KEPT"] === "1"
    ? keptClients(server.baseUrl, streams)
    : []
  try {
    for (let round = 0; round <= rounds; round++) {
      // BENCH_WARM=N: the profile starts after N rounds (V8 compiles hot code for the first ~1,000 turns).
      if (round === Math.max(1, Number(process.env["BENCH_WARM"] ?? 1))) await server.profileStart()
      const started = performance.now()
      const cpuStart = server.cpuSeconds()
      const results = await concurrently(streams, 100, (index) =>
        serverStream(server.baseUrl, provider, { id: `p${sequence++}`, deltas, minMs, maxMs }, kept[index] !== undefined ? { client: kept[index] } : {})
      )
      const problems = results.flatMap((r) => r.problems)
      const seconds = (performance.now() - started) / 1000
      console.error(`round ${round}: ${results.reduce((n, r) => n + r.deltas, 0)} deltas in ${seconds.toFixed(2)} s, server CPU ${(server.cpuSeconds() - cpuStart).toFixed(2)} s, ${problems.length} problems ${problems.slice(0, 2).join("; ")}`)
      provider.reset()
    }
    await server.profileStop(path)
  } finally {
    kept.forEach((client) => client.close())
    await server.dispose()
    await provider.close()
  }
  console.log(`profile: ${path} (${streams} streams × ${deltas} deltas, ${minMs}–${maxMs} ms, ${rounds + 1} rounds incl. warm-up)\n`)
  console.log(summarizeProfile(path))
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
