/**
 * `setup`'s choice of Cursor's agent path, through the real command line in process (`Cli.run`,
 * a real configuration file, CA home and settings.json in a temp folder): by default
 * `cursor.general.disableHttp2: true` (the agent on RunSSE + BidiAppend through the proxy) even
 * with the TLS listener on; `--http2` writes `false` instead and needs the TLS listener;
 * `unsetup` gives back the value the user had (absent, false, or true set by hand), byte for
 * byte or key by key after an edit; `doctor` names the path the settings select.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { isolateByokEnv } from "../support/ByokEnv.js"
import { Console, Effect, Logger, LogLevel } from "effect"
import * as Jsonc from "jsonc-parser"
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Cli from "../../src/Cli.js"
import { freePort } from "../support/ChildServer.js"
import { tempDirectory } from "../support/Transcripts.js"

const KEY = "cursor.general.disableHttp2"

isolateByokEnv()

interface Ran {
  readonly ok: boolean
  readonly output: string
}

/** Runs `cursor-byok ...args` in process on `dir`'s configuration, CA home and settings.json; what it printed. */
const cli = (dir: string, args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    process.env["BYOK_CONFIG"] = join(dir, "byok.config.json")
    process.env["BYOK_HOME"] = join(dir, "home")
    process.env["BYOK_CURSOR_SETTINGS"] = join(dir, "settings.json")
    const lines: Array<string> = []
    const current = yield* Effect.console
    const console: Console.Console = { ...current, log: (...parts) => Effect.sync(() => void lines.push(parts.join(" "))) }
    const result = yield* Cli.run(["node", "cursor-byok", ...args]).pipe(
      Effect.withConsole(console),
      Effect.provide(Logger.minimumLogLevel(LogLevel.None)),
      Effect.provide(NodeContext.layer),
      Effect.either
    )
    const failure = result._tag === "Left" && typeof result.left === "object" && result.left !== null && "message" in result.left ? String(result.left.message) : ""
    return { ok: result._tag === "Right", output: [...lines, failure].join("\n") } satisfies Ran
  })

/** A folder with a configuration (TLS listener on unless `tls: null`) on free ports, nothing listening. */
const folder = (http2: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const dir = yield* tempDirectory("cursor-byok-setup-")
    const [port, proxyPort, tlsPort] = yield* Effect.promise(() => Promise.all([freePort(), freePort(), freePort()]))
    const config = { port, models: [], proxy: { port: proxyPort }, http2: { cleartextPort: null, tls: { port: tlsPort }, ...http2 } }
    writeFileSync(join(dir, "byok.config.json"), JSON.stringify(config))
    return { dir, settings: join(dir, "settings.json"), journal: join(dir, "settings.json.cursor-byok-journal.json"), proxyPort, tlsPort }
  })

const read = (path: string) => readFileSync(path, "utf8")
const valuesOf = (path: string) => Jsonc.parse(read(path), [], { allowTrailingComma: true }) as Record<string, unknown>

/** A hand-kept settings file; `disableHttp2` is the user's own value of the switch (undefined: not in the file). */
const userFile = (disableHttp2: boolean | undefined) =>
  [
    "// mine",
    "{",
    "\t\"editor.fontSize\": 13, /* small */",
    ...(disableHttp2 === undefined ? [] : [`\t"${KEY}": ${disableHttp2},`]),
    "\t\"workbench.colorTheme\": \"Default Dark+\",",
    "}",
    ""
  ].join("\n")

describe("setup's agent path", () => {
  it.scopedLive("by default writes cursor.general.disableHttp2 true with the TLS listener on, and says so", () =>
    Effect.gen(function*() {
      const f = yield* folder()
      writeFileSync(f.settings, userFile(undefined))
      const setup = yield* cli(f.dir, ["setup"])
      assert.isTrue(setup.ok, setup.output)
      const values = valuesOf(f.settings)
      assert.strictEqual(values[KEY], true)
      assert.strictEqual(values["http.proxy"], `http://127.0.0.1:${f.proxyPort}`)
      assert.include(read(f.settings), "/* small */")
      assert.match(setup.output, /Cursor's agent: HTTP\/1\.1: the agent on RunSSE \+ BidiAppend through the proxy/)
      assert.match(setup.output, new RegExp(`${KEY.replaceAll(".", "\\.")}: \\(absent\\) -> true`))
    }))

  it.scopedLive("--http2 writes false (never true), and --http1, the default, writes true again", () =>
    Effect.gen(function*() {
      const f = yield* folder()
      const http2 = yield* cli(f.dir, ["setup", "--http2"])
      assert.isTrue(http2.ok, http2.output)
      assert.strictEqual(valuesOf(f.settings)[KEY], false)
      assert.match(http2.output, new RegExp(`Cursor's agent: HTTP/2: the agent on Run at the TLS listener \\(https://127\\.0\\.0\\.1:${f.tlsPort}\\)`))
      const http1 = yield* cli(f.dir, ["setup", "--http1"])
      assert.isTrue(http1.ok, http1.output)
      assert.strictEqual(valuesOf(f.settings)[KEY], true)
      // Back to no file at all: the keys were all ours.
      assert.isTrue((yield* cli(f.dir, ["unsetup"])).ok)
      assert.isFalse(existsSync(f.settings))
    }))

  it.scopedLive("--http2 without the TLS listener, or with --http1, is refused and nothing is written", () =>
    Effect.gen(function*() {
      const f = yield* folder({ tls: null })
      writeFileSync(f.settings, userFile(false))
      const refused = yield* cli(f.dir, ["setup", "--http2"])
      assert.isFalse(refused.ok)
      assert.include(refused.output, "--http2 needs the TLS listener")
      const both = yield* cli(f.dir, ["setup", "--http1", "--http2"])
      assert.isFalse(both.ok)
      assert.include(both.output, "exclude each other")
      assert.strictEqual(read(f.settings), userFile(false))
      assert.isFalse(existsSync(f.journal))
      assert.isFalse(existsSync(join(f.dir, "home", "ca.pem")))
    }))

  // The user's own value of the switch, for each way setup can change it.
  for (const [flags, user] of [[[], undefined], [[], false], [[], true], [["--http2"], true], [["--http2"], undefined]] as const) {
    const had = user === undefined ? "did not have the key" : `had set it to ${user}`
    const ours = flags.length === 0
    it.scopedLive(`${["setup", ...flags].join(" ")} then unsetup, when the user ${had}: their value comes back, byte for byte and key by key`, () =>
      Effect.gen(function*() {
        const f = yield* folder()
        const before = userFile(user)
        // Byte for byte: the file untouched since setup.
        writeFileSync(f.settings, before)
        assert.isTrue((yield* cli(f.dir, ["setup", ...flags])).ok)
        assert.strictEqual(valuesOf(f.settings)[KEY], ours)
        assert.isTrue((yield* cli(f.dir, ["unsetup"])).ok)
        assert.strictEqual(read(f.settings), before)
        // Key by key: the user edits another key in between.
        assert.isTrue((yield* cli(f.dir, ["setup", ...flags])).ok)
        writeFileSync(f.settings, read(f.settings).replace("\"editor.fontSize\": 13", "\"editor.fontSize\": 15"))
        const unsetup = yield* cli(f.dir, ["unsetup"])
        assert.isTrue(unsetup.ok, unsetup.output)
        assert.strictEqual(read(f.settings), before.replace("13", "15"))
        assert.isFalse(existsSync(f.journal))
      }))
  }

  for (const user of [undefined, false] as const) {
    it.scopedLive(`setup, then setup --http2, then unsetup, when the user ${user === undefined ? "did not have the key" : `had ${user}`}: the value before the first setup comes back`, () =>
      Effect.gen(function*() {
        const f = yield* folder()
        writeFileSync(f.settings, userFile(user))
        assert.isTrue((yield* cli(f.dir, ["setup"])).ok)
        assert.strictEqual(valuesOf(f.settings)[KEY], true)
        const switched = yield* cli(f.dir, ["setup", "--http2"])
        assert.isTrue(switched.ok, switched.output)
        assert.strictEqual(valuesOf(f.settings)[KEY], false)
        writeFileSync(f.settings, read(f.settings).replace("13", "14"))
        assert.isTrue((yield* cli(f.dir, ["unsetup"])).ok)
        assert.strictEqual(read(f.settings), userFile(user).replace("13", "14"))
      }))
  }

  it.scopedLive("doctor names the path the settings select", () =>
    Effect.gen(function*() {
      const f = yield* folder()
      assert.isTrue((yield* cli(f.dir, ["setup"])).ok)
      // Nothing runs, so doctor fails; its agent path line is what is looked at.
      const http1 = yield* cli(f.dir, ["doctor"])
      assert.match(http1.output, /ok\s+Cursor agent path\s+HTTP\/1\.1: the agent on RunSSE \+ BidiAppend through the proxy .*cursor\.general\.disableHttp2 true/)
      assert.isTrue((yield* cli(f.dir, ["setup", "--http2"])).ok)
      const http2 = yield* cli(f.dir, ["doctor"])
      assert.match(http2.output, /ok\s+Cursor agent path\s+HTTP\/2: the agent on Run at the TLS listener .*cursor\.general\.disableHttp2 false/)
    }))
})
