/**
 * Server CPU per short turn by thread: the main thread (JavaScript, SQLite, sockets), V8's
 * helpers (GC, TurboFan), libuv's pool. Reads /proc/<pid>/task/<tid>/{comm,stat} around rounds
 * of `turns` short turns from kept connections. Not part of `npm run bench`.
 *
 *   node_modules/.bin/tsx bench/threads.ts [rounds = 12] [turns = 50] [extra node flags...]
 */
import { readdirSync, readFileSync } from "node:fs"
import { loadavg } from "node:os"
import { startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { median, spread } from "./support/stats.js"
import { concurrently, serverStream, keptClients } from "./support/streams.js"

const threadCpu = (pid: number): Map<string, number> => {
  const byName = new Map<string, number>()
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const name = tid === String(pid) ? "main" : readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim()
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8")
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      byName.set(name, (byName.get(name) ?? 0) + (Number(fields[11]) + Number(fields[12])) * 10)
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return byName
}

const main = async () => {
  const [roundsArg, turnsArg, ...flags] = process.argv.slice(2)
  const rounds = Number(roundsArg ?? 12)
  const turns = Number(turnsArg ?? 50)
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl, { nodeFlags: flags })
  const kept = keptClients(server.baseUrl, turns)
  let sequence = 0
  const samples = new Map<string, Array<number>>()
  try {
    for (let round = -3; round < rounds; round++) {
      const before = threadCpu(server.pid)
      await concurrently(turns, 100, (index) => serverStream(server.baseUrl, provider, { id: `t${sequence++}`, deltas: 3, minMs: 0, maxMs: 0 }, { client: kept[index]! }))
      provider.reset()
      if (round < 0) continue
      const after = threadCpu(server.pid)
      let total = 0
      for (const [name, ms] of after) {
        const perTurn = (ms - (before.get(name) ?? 0)) / turns
        total += perTurn
        samples.set(name, [...(samples.get(name) ?? []), perTurn])
      }
      samples.set("(all)", [...(samples.get("(all)") ?? []), total])
      console.error(`round ${round}: ${total.toFixed(2)} ms a turn (main ${(((after.get("main") ?? 0) - (before.get("main") ?? 0)) / turns).toFixed(2)}), RSS ${(server.rss().rss / 2 ** 20).toFixed(0)} MB, load ${loadavg()[0]!.toFixed(2)}`)
    }
  } finally {
    kept.forEach((client) => client.close())
    await server.dispose()
    await provider.close()
  }
  console.log(`Server CPU per short turn by thread (${rounds} rounds of ${turns} at once, kept connections; flags: ${flags.join(" ") || "none"}), median (min–max), ms.\n`)
  console.log("| thread | CPU per turn |\n| --- | ---: |")
  for (const [name, values] of [...samples].sort((a, b) => median(b[1]) - median(a[1]))) {
    if (median(values) === 0 && Math.max(...values) === 0) continue
    console.log(`| ${name} | ${spread(values, 2)} |`)
  }
}

main().catch((error) => {
  console.error(error)
  process.exitCode = 1
})
