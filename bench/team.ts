/**
 * A team's server on PostgreSQL beside one person's on SQLite: the CPU of a short turn (the
 * server's, and the server's plus PostgreSQL's own processes), in one run, the two servers
 * measured in alternation. DESIGN.md §9's budget: a short turn on PostgreSQL ≤ 1.5× SQLite's
 * CPU. Both servers run alone in child processes (precompiled, as `npm start`), the cluster is
 * this machine's (`initdb` from Debian's `postgresql`), fsync on and commits acknowledged
 * before their WAL is flushed (`synchronous_commit=off`, as SQLite's WAL with
 * `synchronous=NORMAL`). Skipped, saying so, where PostgreSQL is not installed.
 *
 *   node_modules/.bin/tsx bench/team.ts [runs]
 */
import { readdirSync, readFileSync } from "node:fs"
import { pathToFileURL } from "node:url"
import { startServer } from "./support/child.js"
import type { ServerChild } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { loadAverage, median, spread } from "./support/stats.js"
import { concurrently, serverStream, keptClients } from "./support/streams.js"
import { findPgBin, freshDatabase, startCluster } from "../test/support/Postgres.js"

/** CPU seconds of every process whose parent is `pid`, and its own (the postmaster and its backends). */
const treeCpuSeconds = (pid: number): number => {
  let total = 0
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      if (Number(entry) === pid || Number(fields[1]) === pid) total += (Number(fields[11]) + Number(fields[12])) / 100
    } catch {
      // The process ended meanwhile.
    }
  }
  return total
}

export const run = async (options: { readonly runs?: number; readonly turns?: number } = {}) => {
  const runs = options.runs ?? 5
  const turns = options.turns ?? 50
  if (findPgBin() === undefined) return { markdown: "team: skipped (PostgreSQL is not installed here: `apt-get install postgresql`)" }
  const loadBefore = loadAverage()
  const cluster = await startCluster({ settings: { fsync: "on", synchronous_commit: "off", full_page_writes: "on" } })
  const postmaster = Number(readFileSync(`${cluster.dataDir}/postmaster.pid`, "utf8").split("\n")[0])
  const provider = await Provider.start()
  const sqlite = await startServer(provider.baseUrl)
  const postgres = await startServer(provider.baseUrl, { database: await freshDatabase(cluster.url, "bench") })
  const keptOf = (server: ServerChild) => keptClients(server.baseUrl, turns)
  const kept = new Map([[sqlite, keptOf(sqlite)], [postgres, keptOf(postgres)]])
  const problems: Array<string> = []
  let sequence = 0
  /** One round of `turns` short turns on `server` from its kept clients: server CPU and PostgreSQL's per turn (ms). */
  const round = async (server: ServerChild) => {
    const cpu = server.cpuSeconds()
    const pg = treeCpuSeconds(postmaster)
    const clients = kept.get(server)!
    const results = await concurrently(turns, 100, (index) => serverStream(server.baseUrl, provider, { id: `t${sequence++}`, deltas: 3, minMs: 0, maxMs: 0 }, { client: clients[index]! }))
    problems.push(...results.flatMap((r) => r.problems))
    provider.reset()
    return { serverMs: ((server.cpuSeconds() - cpu) * 1000) / turns, pgMs: ((treeCpuSeconds(postmaster) - pg) * 1000) / turns }
  }
  const onSqlite: Array<number> = []
  const onPg: Array<number> = []
  const onPgWithDb: Array<number> = []
  try {
    await round(sqlite)
    await round(postgres)
    for (let r = 0; r < runs; r++) {
      onSqlite.push((await round(sqlite)).serverMs)
      const pg = await round(postgres)
      onPg.push(pg.serverMs)
      onPgWithDb.push(pg.serverMs + pg.pgMs)
    }
  } finally {
    for (const clients of kept.values()) clients.forEach((client) => client.close())
    await sqlite.dispose()
    await postgres.dispose()
    await provider.close()
    await cluster.stop()
  }
  const ratio = median(onPg) / median(onSqlite)
  const markdown = [
    `A short turn's CPU, SQLite and PostgreSQL (${runs} runs of ${turns} turns at once from kept connections, median (min–max), servers alternating). Load average before: ${loadBefore}, after: ${loadAverage()}.`,
    "",
    "| store | server CPU per turn | with PostgreSQL's processes |",
    "| --- | ---: | ---: |",
    `| SQLite (embedded) | ${spread(onSqlite, 1)} ms | — |`,
    `| PostgreSQL 15 (loopback) | ${spread(onPg, 1)} ms | ${spread(onPgWithDb, 1)} ms |`,
    "",
    `PostgreSQL / SQLite, the server's CPU: ${ratio.toFixed(2)}× (budget ≤ 1.5×: ${ratio <= 1.5 ? "met" : "MISSED"}).`,
    ...(problems.length > 0 ? [`\n${problems.length} problems, e.g. ${problems.slice(0, 3).join("; ")}`] : [])
  ].join("\n")
  return { onSqlite, onPg, onPgWithDb, ratio, markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const runs = process.argv[2] !== undefined ? Number(process.argv[2]) : undefined
  run(runs !== undefined ? { runs } : {}).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
