/**
 * What an idle conversation keeps in memory: heap snapshots of the server child (started with
 * `--heapsnapshot-signal`) with `base` and with `base + extra` idle conversations (one short
 * turn each, as `memory.ts` makes them), and the difference by constructor / type, per
 * conversation. Not part of `npm run bench`.
 *
 *   node_modules/.bin/tsx bench/heapdiff.ts [extra] [outdir]
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { startServer } from "./support/child.js"
import * as Provider from "./support/provider.js"
import { sleep } from "./support/stats.js"
import { concurrently, serverStream } from "./support/streams.js"

interface Snapshot {
  readonly snapshot: { readonly meta: { readonly node_fields: ReadonlyArray<string>; readonly node_types: ReadonlyArray<ReadonlyArray<string>> } }
  readonly nodes: ReadonlyArray<number>
  readonly strings: ReadonlyArray<string>
}

/** Self size by type:constructor. */
const sizes = (path: string): Map<string, { size: number; count: number }> => {
  const snap = JSON.parse(readFileSync(path, "utf8")) as Snapshot
  const fields = snap.snapshot.meta.node_fields
  const types = snap.snapshot.meta.node_types[0]!
  const width = fields.length
  const iType = fields.indexOf("type")
  const iName = fields.indexOf("name")
  const iSize = fields.indexOf("self_size")
  const out = new Map<string, { size: number; count: number }>()
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + iType]!]!
    const name = type === "string" || type === "concatenated string" || type === "sliced string" || type === "number" ? "" : snap.strings[snap.nodes[i + iName]!]!.slice(0, 50)
    const key = `${type}:${name}`
    const entry = out.get(key) ?? { size: 0, count: 0 }
    entry.size += snap.nodes[i + iSize]!
    entry.count++
    out.set(key, entry)
  }
  return out
}

export const run = async (extra = 500, outdir = process.cwd()) => {
  const provider = await Provider.start()
  const server = await startServer(provider.baseUrl, { nodeFlags: ["--heapsnapshot-signal=SIGUSR2", `--diagnostic-dir=${outdir}`] })
  const snap = async () => {
    await server.gc()
    const before = new Set(readdirSync(outdir))
    process.kill(server.pid, "SIGUSR2")
    for (let i = 0; i < 600; i++) {
      await sleep(100)
      const found = readdirSync(outdir).find((f) => f.endsWith(".heapsnapshot") && !before.has(f))
      if (found !== undefined) {
        // Written in pieces: done once its size stops changing.
        const path = join(outdir, found)
        let size = -1
        while (size <= 0 || statSync(path).size !== size) {
          size = statSync(path).size
          await sleep(1500)
        }
        return path
      }
    }
    throw new Error("no heap snapshot")
  }
  let sequence = 0
  const conversations = (n: number) => concurrently(n, 0, () => serverStream(server.baseUrl, provider, { id: `h${sequence++}`, deltas: 3, minMs: 1, maxMs: 2 }))
  try {
    await conversations(20)
    const a = await snap()
    for (let done = 0; done < extra; done += 50) await conversations(Math.min(50, extra - done))
    const b = await snap()
    const sa = sizes(a)
    const sb = sizes(b)
    const rows = [...sb].map(([key, v]) => {
      const w = sa.get(key) ?? { size: 0, count: 0 }
      return { key, size: v.size - w.size, count: v.count - w.count }
    }).sort((x, y) => y.size - x.size)
    const total = rows.reduce((n, r) => n + r.size, 0)
    return [
      `Heap growth for ${extra} idle conversations: ${(total / 1024 / extra).toFixed(1)} KB each (${a} → ${b})`,
      "",
      "| type:constructor | KB per conversation | objects per conversation |",
      "| --- | ---: | ---: |",
      ...rows.slice(0, 40).map((r) => `| \`${r.key}\` | ${(r.size / 1024 / extra).toFixed(2)} | ${(r.count / extra).toFixed(1)} |`)
    ].join("\n")
  } finally {
    await server.dispose()
    await provider.close()
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  run(process.argv[2] !== undefined ? Number(process.argv[2]) : undefined, process.argv[3]).then(console.log).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
