/**
 * The `cursor-byok` command as a user runs it (a child process of the built bundle, through the
 * package's `bin`): setup then unsetup gives Cursor's settings.json (and the configuration file,
 * where setup put the user's proxy as the upstream) back byte for byte, doctor exits 1 naming
 * what is down, and a corrupt CA stops `serve` and `ca` with the fix while its
 * files stay as they were.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile, spawn } from "node:child_process"
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
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

/** Runs the command with its stdout and stderr both written to a file (not a terminal, not a pipe); the file's text. */
const cliToFile = (dir: string, args: ReadonlyArray<string>, env: Readonly<Record<string, string>> = {}) =>
  Effect.promise(() =>
    new Promise<Ran>((done) => {
      const path = join(dir, "output.txt")
      const fd = openSync(path, "w")
      const child = spawn(process.execPath, [BIN, ...args], {
        stdio: ["ignore", fd, fd],
        env: { PATH: process.env["PATH"] ?? "", HOME: dir, BYOK_HOME: join(dir, "home"), BYOK_CONFIG: join(dir, "byok.config.json"), BYOK_DB: join(dir, "byok.sqlite"), ...env }
      })
      child.on("exit", (code) => {
        closeSync(fd)
        done({ code, output: readFileSync(path, "utf8") })
      })
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
      const configText = readFileSync(join(dir, "byok.config.json"), "utf8")
      writeFileSync(join(dir, "settings.json"), SETTINGS)
      const setup = yield* cli(dir, ["setup"])
      assert.strictEqual(setup.code, 0, setup.output)
      const written = readFileSync(join(dir, "settings.json"), "utf8")
      assert.include(written, "\"http.proxy\": \"http://127.0.0.1:18788\"")
      // The corporate proxy Cursor went through is now the server's way out.
      assert.include(setup.output, "Your proxy http://corp-proxy:3128 is now the server's upstream")
      assert.strictEqual(JSON.parse(readFileSync(join(dir, "byok.config.json"), "utf8")).proxy.upstream, "http://corp-proxy:3128")
      assert.include(written, "\"cursor.general.disableHttp2\": true")
      assert.include(written, "/* keep me */")
      assert.include(setup.output, "NODE_EXTRA_CA_CERTS")
      assert.include(readFileSync(join(dir, "home", "ca.pem"), "utf8"), "BEGIN CERTIFICATE")

      const unsetup = yield* cli(dir, ["unsetup"])
      assert.strictEqual(unsetup.code, 0, unsetup.output)
      assert.strictEqual(readFileSync(join(dir, "settings.json"), "utf8"), SETTINGS)
      assert.strictEqual(readFileSync(join(dir, "byok.config.json"), "utf8"), configText)
      const again = yield* cli(dir, ["unsetup"])
      assert.strictEqual(again.code, 0, again.output)
      assert.include(again.output, "Nothing to undo")
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

  it.scopedLive("doctor exits 1 and names the checks that fail when nothing runs: the server once, the table first", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-cli-")
      const [port, proxyPort] = yield* Effect.promise(() => Promise.all([freePort(), freePort()]))
      withConfig(dir, { port, proxy: { port: proxyPort }, http2: { cleartextPort: null, tls: null } })
      const doctor = yield* cli(dir, ["doctor"])
      assert.strictEqual(doctor.code, 1, doctor.output)
      assert.match(doctor.output, /^FAIL\s+configuration\s+0 models/)
      assert.match(doctor.output, /FAIL\s+server reachable\s+the server is not running/)
      assert.notMatch(doctor.output, /proxy listening/)
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

  it.scopedLive("a configuration with several problems, written to a file, is one line per problem, each naming its field and fix", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-cli-")
      const provider = { id: "ds", api: "openai-chat", baseUrl: "https://api.deepseek.com/v1" }
      const lines = (output: string) => output.split("\n").filter((line) => line.includes("byok.config.json: "))
      // Fields the schema refuses: each its own line, in any log format.
      withConfig(dir, { port: -1, heartbeatMs: 0, retry: { maxRetries: -1 }, providers: [{ ...provider, baseUrl: "api.deepseek.com/v1" }] })
      for (const format of ["logfmt", "json", "pretty"]) {
        const decoding = yield* cliToFile(dir, ["serve"], { BYOK_LOG_FORMAT: format })
        assert.strictEqual(decoding.code, 1, decoding.output)
        assert.notInclude(decoding.output, "\\n", decoding.output)
        const found = lines(decoding.output)
        assert.strictEqual(found.length, 4, decoding.output)
        for (const [i, field] of ["port: expected", "heartbeatMs: expected", "retry.maxRetries: expected", "providers[0].baseUrl: expected an http or https URL"].entries()) {
          assert.include(found[i], field, decoding.output)
        }
      }
      // The model table's references: refused before anything starts, every hole at once.
      withConfig(dir, { providers: [provider, provider], models: [{ id: "m", provider: "dsx", upstreamModel: "u" }], defaultModel: "deepseek-chat", aliases: { auto: "mm" } })
      const references = yield* cliToFile(dir, ["serve"])
      assert.strictEqual(references.code, 1, references.output)
      assert.notInclude(references.output, "\\n", references.output)
      const found = lines(references.output)
      assert.strictEqual(found.length, 4, references.output)
      for (const [i, fragment] of [
        "providers[1].id: \\\"ds\\\" is providers[0].id too: give each provider its own id",
        "models[0].provider: names provider \\\"dsx\\\", which is not configured: name one of providers[].id (ds)",
        "aliases.auto: names model \\\"mm\\\", which is not configured: name one of models[].id (m)",
        "defaultModel: names model \\\"deepseek-chat\\\", which is not configured"
      ].entries()) {
        assert.include(found[i], fragment, references.output)
      }
    }))

  it.scopedLive("partial nested objects are taken with their other fields defaulted", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-cli-")
      withConfig(dir, { retry: { maxRetries: 1 }, limits: { appendWindow: 8 }, compaction: { threshold: 0.5 }, http2: { tls: { port: 9443 } }, proxy: { offline: true } })
      // `ca create` loads the configuration as serve does.
      const create = yield* cli(dir, ["ca", "create"])
      assert.strictEqual(create.code, 0, create.output)
      assert.notInclude(create.output, "byok.config.json:", create.output)
      assert.include(create.output, "sha256")
    }))

  describe("--help", () => {
    /** The BYOK_ variables the configuration and the logging read (the crash-test faults and setup's settings path aside). */
    const variables = () => {
      const sources = [...readdirSync("src/config").map((name) => join("src/config", name)), "src/Cli.ts"].filter((path) => path.endsWith(".ts"))
      const names = new Set(sources.flatMap((path) => [...readFileSync(path, "utf8").matchAll(/BYOK_[A-Z0-9_]*[A-Z0-9]/g)].map((m) => m[0])))
      return [...names].filter((name) => !name.startsWith("BYOK_FAULT") && name !== "BYOK_CURSOR_SETTINGS").sort()
    }

    it.scopedLive("each page's usage line has the program's name, its options only, and no escape codes off a terminal", () =>
      Effect.gen(function*() {
        const dir = yield* tempDirectory("cursor-byok-cli-")
        const root = yield* cli(dir, ["--help"])
        assert.strictEqual(root.code, 0, root.output)
        assert.match(root.output, /^\$ cursor-byok \[command\]/m)
        assert.include(root.output, "--version")
        for (const [args, usage] of [[["serve", "--help"], "$ cursor-byok serve"], [["setup", "-h"], "$ cursor-byok setup [--settings file]"], [["ca", "renew", "--help"], "$ cursor-byok ca renew"]] as const) {
          const page = yield* cli(dir, args)
          assert.strictEqual(page.code, 0, page.output)
          assert.notInclude(page.output, "\x1b", page.output)
          assert.strictEqual(page.output.split("\n").filter((line) => line.startsWith("$ ")).length, 1, page.output)
          assert.include(page.output, usage, page.output)
          for (const builtIn of ["--completions", "--wizard", "--log-level", "--version"]) assert.notInclude(page.output, builtIn, page.output)
        }
        assert.include((yield* cli(dir, ["setup", "--help"])).output, "--trust")
        const toFile = yield* cliToFile(dir, ["serve", "--help"])
        assert.notInclude(toFile.output, "\x1b", toFile.output)
        assert.include(toFile.output, "$ cursor-byok serve")
      }))

    it.scopedLive("serve --help names where the configuration file is looked for, every variable and the ports with their defaults", () =>
      Effect.gen(function*() {
        const dir = yield* tempDirectory("cursor-byok-cli-")
        const help = (yield* cli(dir, ["serve", "--help"])).output
        assert.include(help, "./byok.config.json")
        assert.include(help, "BYOK_CONFIG names it")
        const names = variables()
        assert.isAbove(names.length, 15, names.join(" "))
        for (const name of names) assert.match(help, new RegExp(`^  ${name} `, "m"), `${name} is not in serve --help`)
        for (const [port, variable] of [["8787", "BYOK_PORT"], ["8788", "BYOK_PROXY_PORT"], ["8789", "BYOK_H2C_PORT"], ["8790", "BYOK_TLS_PORT"]]) {
          assert.match(help, new RegExp(`^  ${port}  .*${variable}$`, "m"), help)
        }
      }))
  })
})
