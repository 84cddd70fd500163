/**
 * The `cursor-byok` command as a user runs it (a child process of the built bundle, through the
 * package's `bin`): setup then unsetup gives Cursor's settings.json back byte for byte, doctor
 * exits 1 naming what is down, and a corrupt CA stops `serve` and `ca` with the fix while its
 * files stay as they were.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { freePort } from "../support/ChildServer.js"
import { tempDirectory } from "../support/Transcripts.js"

const BIN = resolve("bin/cursor-byok.js")

interface Ran {
  readonly code: number | null
  readonly output: string
}

/** Runs the command with a home, a configuration and a settings file of the test's own. */
const cli = (dir: string, args: ReadonlyArray<string>, env: Readonly<Record<string, string>> = {}) =>
  Effect.promise(() =>
    new Promise<Ran>((done) => {
      const child = execFile(process.execPath, [BIN, ...args], {
        env: {
          PATH: process.env["PATH"] ?? "",
          HOME: dir,
          BYOK_HOME: join(dir, "home"),
          BYOK_CONFIG: join(dir, "byok.config.json"),
          BYOK_CURSOR_SETTINGS: join(dir, "settings.json"),
          BYOK_DB: join(dir, "byok.sqlite"),
          ...env
        },
        timeout: 60_000
      }, (error, stdout, stderr) => done({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, output: `${stdout}${stderr}` }))
      child.stdin?.end()
    })
  )

const SETTINGS = `// Cursor user settings
{
\t"editor.fontSize": 14, /* keep me */
\t"http.proxy": "http://corp-proxy:3128",
\t// trailing comma below
\t"workbench.colorTheme": "Default Dark+",
}
`

const withConfig = (dir: string, config: Record<string, unknown>) => writeFileSync(join(dir, "byok.config.json"), JSON.stringify(config))

describe("the cursor-byok command", () => {
  it.scopedLive("setup writes Cursor's proxy settings and makes the CA; unsetup restores settings.json byte for byte", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-cli-")
      withConfig(dir, { proxy: { port: 18788 }, http2: { tls: null } })
      writeFileSync(join(dir, "settings.json"), SETTINGS)
      const setup = yield* cli(dir, ["setup"])
      assert.strictEqual(setup.code, 0, setup.output)
      const written = readFileSync(join(dir, "settings.json"), "utf8")
      assert.include(written, "\"http.proxy\": \"http://127.0.0.1:18788\"")
      assert.include(written, "\"cursor.general.disableHttp2\": true")
      assert.include(written, "/* keep me */")
      assert.include(setup.output, "NODE_EXTRA_CA_CERTS")
      assert.include(readFileSync(join(dir, "home", "ca.pem"), "utf8"), "BEGIN CERTIFICATE")

      const unsetup = yield* cli(dir, ["unsetup"])
      assert.strictEqual(unsetup.code, 0, unsetup.output)
      assert.strictEqual(readFileSync(join(dir, "settings.json"), "utf8"), SETTINGS)
      const again = yield* cli(dir, ["unsetup"])
      assert.strictEqual(again.code, 1)
      assert.include(again.output, "nothing to undo")
    }))

  it.scopedLive("with the TLS listener on, setup keeps Cursor on HTTP/1.1; setup --http2 leaves HTTP/2 to it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-cli-")
      withConfig(dir, { proxy: { port: 18788 } })
      const plain = yield* cli(dir, ["setup"])
      assert.strictEqual(plain.code, 0, plain.output)
      assert.include(readFileSync(join(dir, "settings.json"), "utf8"), "\"cursor.general.disableHttp2\": true")
      const http2 = yield* cli(dir, ["setup", "--http2"])
      assert.strictEqual(http2.code, 0, http2.output)
      assert.include(readFileSync(join(dir, "settings.json"), "utf8"), "\"cursor.general.disableHttp2\": false")
      assert.strictEqual((yield* cli(dir, ["unsetup"])).code, 0)
      assert.throws(() => readFileSync(join(dir, "settings.json")), /ENOENT/)
    }))

  it.scopedLive("doctor exits 1 and names the checks that fail when nothing runs", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-cli-")
      const [port, proxyPort] = yield* Effect.promise(() => Promise.all([freePort(), freePort()]))
      withConfig(dir, { port, proxy: { port: proxyPort }, http2: { cleartextPort: null, tls: null } })
      const doctor = yield* cli(dir, ["doctor"])
      assert.strictEqual(doctor.code, 1, doctor.output)
      assert.match(doctor.output, /FAIL\s+server reachable/)
      assert.match(doctor.output, /FAIL\s+CA valid and name-constrained/)
      assert.match(doctor.output, /FAIL\s+Cursor settings applied/)
      assert.match(doctor.output, /FAIL\s+Cursor agent path\s+HTTP\/2: /)
      assert.match(doctor.output, /off\s+HTTP\/2 listener/)
    }))

  it.scopedLive("a corrupt CA stops serve and ca with the fix, once, and its files are left as they were", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-cli-")
      const [port, proxyPort] = yield* Effect.promise(() => Promise.all([freePort(), freePort()]))
      withConfig(dir, { port, proxy: { port: proxyPort }, http2: { cleartextPort: null } })
      mkdirSync(join(dir, "home"))
      writeFileSync(join(dir, "home", "ca.pem"), "garbage")
      writeFileSync(join(dir, "home", "ca-key.pem"), "garbage")
      const serve = yield* cli(dir, ["serve"])
      assert.strictEqual(serve.code, 1, serve.output)
      assert.strictEqual(serve.output.split("cursor-byok ca renew").length - 1, 1, serve.output)
      const ca = yield* cli(dir, ["ca"])
      assert.strictEqual(ca.code, 1)
      assert.include(ca.output, "cannot be read as a certificate")
      assert.strictEqual(readFileSync(join(dir, "home", "ca.pem"), "utf8"), "garbage")
      assert.strictEqual(readFileSync(join(dir, "home", "ca-key.pem"), "utf8"), "garbage")
    }))
})
