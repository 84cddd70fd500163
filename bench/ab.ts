/**
 * Server CPU per short turn, two versions side by side: each version's bench server (as
 * `cost.ts` runs it: precompiled, alone in a child process, the flags of `npm start`) runs at
 * the same time, and their rounds alternate (A B, B A, A B, ...), so that what the machine does
 * meanwhile (other tenants, thermal state) weighs on both alike. A round is `turns` short turns
 * at once (3 unpaced deltas each, new connections), as `cost.ts`'s first row; CPU per turn =
 * the child's CPU time over the round / turns. On a shared 2-core VM `cost.ts` run after run
 * moved by ±20% between sittings while this pairing resolved a 10% change.
 *
 * A version is a git revision (built in a temporary worktree that shares this checkout's
 * node_modules) or `.` for the working tree, optionally with Node flags after a `+`
 * (`.+--single-threaded-gc`). `BENCH_WARM=N` runs N uncounted rounds on each server first
 * (default 2): V8 still compiles hot code for the first ~1,000 turns of a process.
 *
 * The shape: `short` (the default) as above; `kept`, the same from clients that keep their
 * connections (as Cursor does); `paced`, CPU per delta of `turns` streams of 200
 * deltas 5-20 ms apart; `mcp`, short turns whose run requests bring 60 MCP tools each
 * (`support/mcp.ts`), as a user with a few MCP servers sends every turn.
 *
 *   node_modules/.bin/tsx bench/ab.ts <revA> [revB = .] [rounds = 12] [turns = 50] [short | kept | paced | mcp]
 */
import { execFileSync } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { repoRoot, startServer } from "./support/child.js"
import type { ServerChild } from "./support/child.js"
import type { CursorClient } from "../test/support/CursorClient.js"
import { mcpToolSet } from "./support/mcp.js"
import * as Provider from "./support/provider.js"
import { median, spread } from "./support/stats.js"
import { concurrently, serverStream, keptClients } from "./support/streams.js"

const git = (...args: ReadonlyArray<string>) => execFileSync("git", args, { cwd: repoRoot, encoding: "utf8" }).trim()

/** The bench server of `version` (`rev[+flag,flag]`) bundled by that revision's own build script: its path, label and flags. */
const versionOf = (version: string): { readonly path: string; readonly label: string; readonly flags: ReadonlyArray<string> } => {
  const [rev = ".", flags = ""] = version.split("+")
  const flagList = flags === "" ? [] : flags.split(",")
  const bundle = bundleOf(rev)
  return { ...bundle, label: [bundle.label, ...flagList].join(" "), flags: flagList }
}

/** The bench server of `rev` bundled by that revision's own build script; returns the bundle's path. */
const bundleOf = (rev: string): { readonly path: string; readonly label: string } => {
  const dir = join(repoRoot, "node_modules", ".cache", "byok-ab")
  mkdirSync(dir, { recursive: true })
  const tsx = join(repoRoot, "node_modules", ".bin", "tsx")
  if (rev === ".") {
    const path = join(dir, "working-tree.mjs")
    execFileSync(tsx, [join(repoRoot, "scripts/build.ts"), join(repoRoot, "bench/support/serve.ts"), path], { cwd: repoRoot, stdio: "inherit" })
    return { path, label: `working tree (${git("rev-parse", "--short", "HEAD")}+)` }
  }
  const sha = git("rev-parse", "--short", rev)
  const path = join(dir, `${sha}.mjs`)
  const tree = mkdtempSync(join(tmpdir(), "byok-ab-"))
  try {
    git("worktree", "add", "--detach", "--force", tree, sha)
    symlinkSync(join(repoRoot, "node_modules"), join(tree, "node_modules"))
    execFileSync(tsx, [join(tree, "scripts/build.ts"), join(tree, "bench/support/serve.ts"), path], { cwd: tree, stdio: "inherit" })
  } finally {
    git("worktree", "remove", "--force", tree)
    rmSync(tree, { recursive: true, force: true })
  }
  return { path, label: sha }
}

export type Shape = "short" | "kept" | "paced" | "mcp"

const mcpTools = mcpToolSet()

export const run = async (revA: string, revB = ".", rounds = 12, turns = 50, shape: Shape = "short"): Promise<string> => {
  const versions = [versionOf(revA), versionOf(revB)]
  const provider = await Provider.start()
  const servers: Array<ServerChild> = []
  let kept: ReadonlyArray<ReadonlyArray<CursorClient>> = []
  try {
    for (const version of versions) servers.push(await startServer(provider.baseUrl, { prebuilt: version.path, nodeFlags: version.flags }))
    let sequence = 0
    // `kept`: each server's clients keep their connections from round to round, as Cursor does.
    kept = servers.map((server) =>
      keptClients(server.baseUrl, shape === "kept" ? turns : 0)
    )
    const round = async (server: ServerChild) => {
      const before = server.cpuSeconds()
      const spec = shape === "paced" ? { deltas: 200, minMs: 5, maxMs: 20 } : { deltas: 3, minMs: 0, maxMs: 0 }
      const clients = kept[servers.indexOf(server)]!
      const options = (index: number) => shape === "mcp" ? { mcpTools } : shape === "kept" ? { client: clients[index]! } : {}
      const results = await concurrently(turns, 100, (index) => serverStream(server.baseUrl, provider, { id: `ab${sequence++}`, ...spec }, options(index)))
      provider.reset()
      const cpuMs = (server.cpuSeconds() - before) * 1000
      // Per turn in ms, or per delta in µs.
      return shape === "paced" ? (cpuMs * 1000) / results.reduce((n, r) => n + r.deltas, 0) : cpuMs / turns
    }
    // Warm-up, not counted: two rounds each unless BENCH_WARM says otherwise.
    const warm = Number(process.env["BENCH_WARM"] ?? 2)
    for (let i = 0; i < warm; i++) for (const server of servers) await round(server)
    const perTurn: [Array<number>, Array<number>] = [[], []]
    for (let r = 0; r < rounds; r++) {
      for (const i of r % 2 === 0 ? [0, 1] : [1, 0]) perTurn[i as 0 | 1].push(await round(servers[i]!))
    }
    const ratio = median(perTurn[1].map((b, k) => b / perTurn[0][k]!))
    const [what, unit] = shape === "paced"
      ? [`per paced delta (${turns} streams of 200 deltas 5-20 ms apart, the turns' own cost included)`, "µs"]
      : [`per short turn (${turns} at once, ${shape === "kept" ? "kept" : "new"} connections${shape === "mcp" ? ", 60 MCP tools in each run request" : ""})`, "ms"]
    return [
      `Server CPU ${what}, two versions at once, ${rounds} rounds each alternated after ${Number(process.env["BENCH_WARM"] ?? 2)} uncounted, median (min–max).`,
      "",
      `| version | server CPU ${shape === "paced" ? "per delta" : "per turn"} |`,
      "| --- | ---: |",
      `| A: ${versions[0]!.label} | ${spread(perTurn[0], 1)} ${unit} |`,
      `| B: ${versions[1]!.label} | ${spread(perTurn[1], 1)} ${unit} |`,
      "",
      `B / A, median over the rounds' pairs: ${ratio.toFixed(3)}`
    ].join("\n")
  } finally {
    for (const client of kept.flat()) client.close()
    for (const server of servers) await server.dispose()
    await provider.close()
  }
}

const [revA, revB, rounds, turns, shape] = process.argv.slice(2)
if (revA === undefined || (shape !== undefined && shape !== "short" && shape !== "kept" && shape !== "paced" && shape !== "mcp")) {
  console.error("usage: node_modules/.bin/tsx bench/ab.ts <revA> [revB = .] [rounds = 12] [turns = 50] [short | kept | paced | mcp]")
  process.exitCode = 2
} else {
  run(revA, revB, rounds === undefined ? undefined : Number(rounds), turns === undefined ? undefined : Number(turns), shape as Shape | undefined)
    .then((table) => console.log(table))
    .catch((error) => {
      console.error(error)
      process.exitCode = 1
    })
}
