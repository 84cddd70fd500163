/**
 * Start to first answer, as `npm start` starts (without npm's own process): `node
 * scripts/fresh.mjs` (the build only when the sources changed) then `node <flags> dist/main.js`,
 * timed from the spawn to the first `GET /healthz` answered 200. Each run on a fresh database
 * and free ports, the code cache warm (the build primed it); the sources as they are (an
 * unchanged tree: no build). Issue 40's budget: about a second on this machine.
 *
 *   node_modules/.bin/tsx bench/start.ts [runs]
 */
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as Net from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import { startFlags } from "../scripts/build.js"
import { repoRoot } from "./support/child.js"
import { loadAverage, spread } from "./support/stats.js"

const freePort = (): Promise<number> =>
  new Promise((done) => {
    const server = Net.createServer()
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => done(port))
    })
  })

const healthy = (port: number) => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)

/** One start: milliseconds from the spawn to `/healthz` answering. */
const once = async (): Promise<number> => {
  const dir = mkdtempSync(join(tmpdir(), "cursor-byok-start-"))
  writeFileSync(join(dir, "byok.config.json"), "{}")
  const port = await freePort()
  const flags = startFlags().join(" ")
  const started = performance.now()
  const child = spawn("sh", ["-c", `node scripts/fresh.mjs && exec node ${flags} dist/main.js`], {
    cwd: repoRoot,
    stdio: "ignore",
    env: {
      ...process.env,
      BYOK_HOME: join(dir, "home"),
      BYOK_CONFIG: join(dir, "byok.config.json"),
      BYOK_DB: join(dir, "byok.sqlite"),
      BYOK_PORT: String(port),
      BYOK_H2C_PORT: "off",
      BYOK_TLS_PORT: "off",
      BYOK_PROXY_PORT: "off"
    }
  })
  try {
    while (!(await healthy(port))) {
      if (child.exitCode !== null) throw new Error(`the server exited (${child.exitCode}) before answering`)
      await new Promise((r) => setTimeout(r, 5))
    }
    return performance.now() - started
  } finally {
    child.kill("SIGTERM")
    await new Promise((r) => child.once("exit", r))
    rmSync(dir, { recursive: true, force: true })
  }
}

export const run = async (runs = 5) => {
  const loadBefore = loadAverage()
  await once() // a build, when the sources changed, and the code cache written
  const times: Array<number> = []
  for (let i = 0; i < runs; i++) times.push(await once())
  return {
    times,
    markdown: [
      `Start to first answer (\`node scripts/fresh.mjs && node dist/main.js\`, as \`npm start\` without npm; unchanged sources, code cache warm), ${runs} runs after one warm-up, median (min–max). Load average before: ${loadBefore}, after: ${loadAverage()}.`,
      "",
      "| start to `/healthz` 200 |",
      "| ---: |",
      `| ${spread(times, 0)} ms |`
    ].join("\n")
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  run(Number(process.argv[2] ?? 5)).then(({ markdown }) => console.log(markdown)).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
