/**
 * First contact, through the real command line in process (`Cli.run`, a real configuration
 * file, CA home and settings.json in a temp folder): `setup` keeps the user's own proxy as the
 * server's upstream (`proxy.upstream` in the configuration file `serve` reads) and `unsetup`
 * takes it out again; a settings file that is not there is refused unless `--create`; a second
 * `unsetup` says there is nothing to undo and succeeds; `doctor` names a key variable that is
 * not set and prints nothing before its table (the providers' retry lines are not printed).
 */
import { NodeContext } from "@effect/platform-node"
import { afterEach, assert, beforeEach, describe, it } from "@effect/vitest"
import { Console, Effect, Logger, LogLevel } from "effect"
import * as Jsonc from "jsonc-parser"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Cli from "../../src/Cli.js"
import * as Config from "../../src/Config.js"
import { freePort } from "../support/ChildServer.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { tempDirectory } from "../support/Transcripts.js"

const saved = { ...process.env }
beforeEach(() => {
  for (const name of Object.keys(process.env)) if (name.startsWith("BYOK_") || /_PROXY$/i.test(name)) delete process.env[name]
})
afterEach(() => {
  for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name]
  Object.assign(process.env, saved)
})

interface Ran {
  readonly ok: boolean
  /** Every line printed (the console and the log, in order), then the failure's message. */
  readonly lines: ReadonlyArray<string>
  readonly output: string
}

/** Runs `cursor-byok ...args` in process on `dir`'s configuration and CA home; its log (info and up) is printed as lines too. */
const cli = (dir: string, args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    process.env["BYOK_CONFIG"] = join(dir, "byok.config.json")
    process.env["BYOK_HOME"] = join(dir, "home")
    const lines: Array<string> = []
    const current = yield* Effect.console
    const console: Console.Console = { ...current, log: (...parts) => Effect.sync(() => void lines.push(parts.join(" "))) }
    const logger = Logger.make(({ logLevel, message }) => void lines.push(`[log ${logLevel.label}] ${Array.isArray(message) ? message.join(" ") : String(message)}`))
    const result = yield* Cli.run(["node", "cursor-byok", ...args]).pipe(
      Effect.withConsole(console),
      Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
      Effect.provide(Logger.minimumLogLevel(LogLevel.Info)),
      Effect.provide(NodeContext.layer),
      Effect.either
    )
    const failure = result._tag === "Left" && typeof result.left === "object" && result.left !== null && "message" in result.left ? String(result.left.message) : ""
    return { ok: result._tag === "Right", lines, output: [...lines, failure].join("\n") } satisfies Ran
  })

const read = (path: string) => readFileSync(path, "utf8")
const valuesOf = (path: string) => Jsonc.parse(read(path), [], { allowTrailingComma: true }) as Record<string, unknown>

const USER_SETTINGS = [
  "// mine",
  "{",
  "\t\"editor.fontSize\": 13,",
  "\t\"http.proxy\": \"http://corp:3128\",",
  "}",
  ""
].join("\n")

/** A folder with a configuration file (proxy on a free port, no TLS listener) and Cursor's settings.json (null: none). */
const folder = (settings: string | null = USER_SETTINGS) =>
  Effect.gen(function*() {
    const dir = yield* tempDirectory("cursor-byok-first-")
    const [port, proxyPort] = yield* Effect.promise(() => Promise.all([freePort(), freePort()]))
    const configText = `${JSON.stringify({ port, models: [], proxy: { port: proxyPort }, http2: { cleartextPort: null, tls: null } }, null, 2)}\n`
    writeFileSync(join(dir, "byok.config.json"), configText)
    const settingsPath = join(dir, "settings.json")
    if (settings !== null) writeFileSync(settingsPath, settings)
    process.env["BYOK_CURSOR_SETTINGS"] = settingsPath
    return { dir, settingsPath, configPath: join(dir, "byok.config.json"), configText, proxyPort }
  })

/** The configuration as `serve` would load it from the folder. */
const loaded = (dir: string) =>
  Effect.gen(function*() {
    process.env["BYOK_CONFIG"] = join(dir, "byok.config.json")
    process.env["BYOK_HOME"] = join(dir, "home")
    return yield* Config.load.pipe(Effect.provide(NodeContext.layer), Effect.orDie)
  })

describe("setup keeps the user's route", () => {
  it.scopedLive("a corporate http.proxy becomes the server's upstream; unsetup gives both files back byte for byte", () =>
    Effect.gen(function*() {
      const f = yield* folder()
      const setup = yield* cli(f.dir, ["setup"])
      assert.isTrue(setup.ok, setup.output)
      assert.include(setup.output, "Your proxy http://corp:3128 is now the server's upstream")
      assert.strictEqual(valuesOf(f.settingsPath)["http.proxy"], `http://127.0.0.1:${f.proxyPort}`)
      assert.strictEqual((valuesOf(f.configPath)["proxy"] as Record<string, unknown>)["upstream"], "http://corp:3128")
      assert.strictEqual((yield* loaded(f.dir)).proxy.upstream, "http://corp:3128")
      // Setup again: http.proxy is ours now, nothing about the upstream changes.
      const again = yield* cli(f.dir, ["setup"])
      assert.isTrue(again.ok, again.output)
      assert.notInclude(again.output, "upstream")
      assert.strictEqual((valuesOf(f.configPath)["proxy"] as Record<string, unknown>)["upstream"], "http://corp:3128")

      const unsetup = yield* cli(f.dir, ["unsetup"])
      assert.isTrue(unsetup.ok, unsetup.output)
      assert.strictEqual(read(f.settingsPath), USER_SETTINGS)
      assert.strictEqual(read(f.configPath), f.configText)
      assert.include(unsetup.output, "The server's upstream http://corp:3128 (set by setup) is out of")
      assert.isUndefined((yield* loaded(f.dir)).proxy.upstream)
    }))

  it.scopedLive("unsetup after the user edited the configuration removes only proxy.upstream; a password is not printed", () =>
    Effect.gen(function*() {
      const f = yield* folder(USER_SETTINGS.replace("http://corp:3128", "http://me:s3cret@corp:3128"))
      const setup = yield* cli(f.dir, ["setup"])
      assert.isTrue(setup.ok, setup.output)
      assert.include(setup.output, "Your proxy http://me:***@corp:3128 is now the server's upstream")
      assert.notInclude(setup.output, "s3cret")
      writeFileSync(f.configPath, read(f.configPath).replace("\"models\": []", "\"models\": [], \"heartbeatMs\": 4000"))
      assert.isTrue((yield* cli(f.dir, ["unsetup"])).ok)
      const config = valuesOf(f.configPath)
      assert.strictEqual(config["heartbeatMs"], 4000)
      assert.deepStrictEqual(config["proxy"], { port: f.proxyPort })
      assert.strictEqual(valuesOf(f.settingsPath)["http.proxy"], "http://me:s3cret@corp:3128")
    }))

  it.scopedLive("an http.proxy that is already ours, or none, changes nothing in the configuration", () =>
    Effect.gen(function*() {
      for (const settings of [USER_SETTINGS.replace("http://corp:3128", "http://localhost:PORT"), "{ \"editor.fontSize\": 13 }\n"]) {
        const f = yield* folder()
        writeFileSync(f.settingsPath, settings.replace("PORT", String(f.proxyPort)))
        const setup = yield* cli(f.dir, ["setup"])
        assert.isTrue(setup.ok, setup.output)
        assert.notInclude(setup.output, "upstream")
        assert.strictEqual(read(f.configPath), f.configText)
        assert.isTrue((yield* cli(f.dir, ["unsetup"])).ok)
        assert.strictEqual(read(f.configPath), f.configText)
      }
    }))

  it.scopedLive("a configuration that names its own upstream keeps it, and says so", () =>
    Effect.gen(function*() {
      const f = yield* folder()
      const own = f.configText.replace(`"port": ${f.proxyPort}`, `"port": ${f.proxyPort}, "upstream": "http://mine:8080"`)
      writeFileSync(f.configPath, own)
      const setup = yield* cli(f.dir, ["setup"])
      assert.isTrue(setup.ok, setup.output)
      assert.include(setup.output, "the server keeps the upstream http://mine:8080")
      assert.strictEqual(read(f.configPath), own)
    }))
})

describe("setup's settings file and unsetup's second run", () => {
  it.scopedLive("--settings naming a missing file or folder is refused with one line, and --create makes it", () =>
    Effect.gen(function*() {
      const f = yield* folder(null)
      for (const missing of [join(f.dir, "settings.json"), join(f.dir, "no", "such", "settings.json")]) {
        const refused = yield* cli(f.dir, ["setup", "--settings", missing])
        assert.isFalse(refused.ok, refused.output)
        assert.include(refused.output, `${missing} does not exist`)
        assert.include(refused.output, "--create")
        assert.isFalse(existsSync(missing))
        assert.isFalse(existsSync(join(f.dir, "home", "ca.pem")))
      }
      const created = join(f.dir, "no", "such", "settings.json")
      const setup = yield* cli(f.dir, ["setup", "--settings", created, "--create"])
      assert.isTrue(setup.ok, setup.output)
      assert.strictEqual(valuesOf(created)["http.proxy"], `http://127.0.0.1:${f.proxyPort}`)
    }))

  it.scopedLive("the default settings path in a folder that does not exist is refused unless --create", () =>
    Effect.gen(function*() {
      const f = yield* folder(null)
      const absent = join(f.dir, "Cursor", "User", "settings.json")
      process.env["BYOK_CURSOR_SETTINGS"] = absent
      const refused = yield* cli(f.dir, ["setup"])
      assert.isFalse(refused.ok)
      assert.include(refused.output, `${join(f.dir, "Cursor", "User")} does not exist: is Cursor installed`)
      assert.isTrue((yield* cli(f.dir, ["setup", "--create"])).ok)
      assert.isTrue(existsSync(absent))
      // The folder there, the file not: made (Cursor writes the file only once a setting changes).
      mkdirSync(join(f.dir, "Other"))
      process.env["BYOK_CURSOR_SETTINGS"] = join(f.dir, "Other", "settings.json")
      assert.isTrue((yield* cli(f.dir, ["setup"])).ok)
    }))

  it.scopedLive("unsetup with nothing to undo says so and succeeds", () =>
    Effect.gen(function*() {
      const f = yield* folder()
      assert.isTrue((yield* cli(f.dir, ["setup"])).ok)
      assert.isTrue((yield* cli(f.dir, ["unsetup"])).ok)
      const again = yield* cli(f.dir, ["unsetup"])
      assert.isTrue(again.ok, again.output)
      assert.include(again.output, "Nothing to undo")
      assert.strictEqual(read(f.settingsPath), USER_SETTINGS)
    }))
})

describe("doctor from the command line", () => {
  it.scopedLive("a key variable not set fails with its name; nothing is printed before the table", () =>
    Effect.gen(function*() {
      const fake = yield* FakeProvider.make
      // Every call fails retryably: the router logs a retry line (info) for each.
      fake.setFallback(() => FakeProvider.status(503, { error: { message: "busy" } }))
      const f = yield* folder()
      const config = JSON.parse(f.configText) as Record<string, unknown>
      writeFileSync(f.configPath, JSON.stringify({
        ...config,
        retry: { maxRetries: 2, initialDelayMs: 5, maxDelayMs: 20, maxRetryAfterMs: 2000, jitter: 0, idleTimeoutMs: 2000 },
        providers: [
          { id: "keyless", api: "openai-chat", baseUrl: fake.baseUrl, apiKeyEnv: "BYOK_TEST_NEVER_SET_KEY" },
          { id: "keyed", api: "openai-chat", baseUrl: fake.baseUrl, apiKeyEnv: "BYOK_TEST_SET_KEY" }
        ],
        models: [
          { id: "m1", provider: "keyless", upstreamModel: "u1", contextWindow: 1000 },
          { id: "m2", provider: "keyed", upstreamModel: "u2", contextWindow: 1000 }
        ]
      }))
      process.env["BYOK_TEST_SET_KEY"] = "sk-set"
      const doctor = yield* cli(f.dir, ["doctor"])
      assert.isFalse(doctor.ok)
      assert.match(doctor.lines[0]!, /^(ok|FAIL|WARN|off)\s+configuration\s/, doctor.output)
      assert.match(doctor.output, /FAIL\s+provider keys\s+BYOK_TEST_NEVER_SET_KEY \(keyless\) is not set/)
      assert.notInclude(doctor.output, "BYOK_TEST_SET_KEY (keyed)")
      assert.notInclude(doctor.output, "retrying in")
      assert.isAbove(fake.requests.length, 2)
      // The one line after the table: how many checks failed (the command's failure).
      assert.notInclude(doctor.lines.slice(0, -1).join("\n"), "[log")
    }))
})
