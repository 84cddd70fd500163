import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, type Scope } from "effect"
import * as Jsonc from "jsonc-parser"
import * as CursorSettings from "../../src/hookup/CursorSettings.js"

const wanted = CursorSettings.desired({ proxyUrl: "http://127.0.0.1:8788", disableHttp2: true })

const userFile = [
  "// Cursor settings, kept by hand",
  "{",
  "\t/* editor */",
  "\t\"editor.fontSize\": 13, // small",
  "\t\"files.exclude\": {",
  "\t\t\"**/.git\": true,",
  "\t},",
  "\t\"workbench.colorTheme\": \"Default Dark+\",",
  "}",
  ""
].join("\n")

const valuesOf = (text: string) => Jsonc.parse(text, [], { allowTrailingComma: true }) as Record<string, unknown>

/** A temp folder with the settings and journal paths inside (settings under a folder that does not exist yet). */
const paths = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-settings-" })
  return {
    fs,
    directory,
    settings: `${directory}/Cursor/User/settings.json`,
    journal: `${directory}/journal.json`
  }
})

const withFile = (text: string) =>
  Effect.gen(function*() {
    const p = yield* paths
    yield* p.fs.makeDirectory(`${p.directory}/Cursor/User`, { recursive: true })
    yield* p.fs.writeFileString(p.settings, text)
    return p
  })

/** The file's text with any byte-order mark kept (readFileString drops it). */
const readExact = (fs: FileSystem.FileSystem, path: string) =>
  Effect.map(fs.readFile(path), (bytes) => new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes))

const run = <A, E>(effect: Effect.Effect<A, E, FileSystem.FileSystem | Scope.Scope>) =>
  effect.pipe(Effect.scoped, Effect.provide(NodeContext.layer))

describe("CursorSettings paths and keys", () => {
  it("finds settings.json on macOS, Windows and Linux, and BYOK_CURSOR_SETTINGS wins", () => {
    assert.strictEqual(CursorSettings.defaultSettingsPath("darwin", {}, "/Users/ann"), "/Users/ann/Library/Application Support/Cursor/User/settings.json")
    assert.strictEqual(
      CursorSettings.defaultSettingsPath("win32", { APPDATA: "C:\\Users\\ann\\AppData\\Roaming" }, "C:\\Users\\ann"),
      "C:\\Users\\ann\\AppData\\Roaming\\Cursor\\User\\settings.json"
    )
    assert.strictEqual(CursorSettings.defaultSettingsPath("linux", {}, "/home/ann"), "/home/ann/.config/Cursor/User/settings.json")
    assert.strictEqual(CursorSettings.defaultSettingsPath("linux", { XDG_CONFIG_HOME: "/xdg" }, "/home/ann"), "/xdg/Cursor/User/settings.json")
    assert.strictEqual(CursorSettings.defaultSettingsPath("freebsd", {}, "/home/ann"), "/home/ann/.config/Cursor/User/settings.json")
    assert.strictEqual(CursorSettings.defaultSettingsPath("darwin", { BYOK_CURSOR_SETTINGS: "/tmp/s.json" }, "/Users/ann"), "/tmp/s.json")
  })

  it("sets the proxy keys and Cursor's HTTP/2 switch either way; only true selects HTTP/1.1", () => {
    assert.deepStrictEqual(wanted, {
      "http.proxy": "http://127.0.0.1:8788",
      "http.proxySupport": "on",
      "http.experimental.systemCertificatesV2": true,
      "cursor.general.disableHttp2": true
    })
    assert.strictEqual(CursorSettings.desired({ proxyUrl: "http://127.0.0.1:8788", disableHttp2: false })["cursor.general.disableHttp2"], false)
    assert.strictEqual(CursorSettings.agentPathOf(wanted), "http1")
    assert.strictEqual(CursorSettings.agentPathOf({}), "http2")
    assert.strictEqual(CursorSettings.agentPathOf({ "cursor.general.disableHttp2": false }), "http2")
    assert.strictEqual(CursorSettings.agentPathOf({ "cursor.general.disableHttp2": "true" }), "http2")
  })

  it("apply keeps comments, trailing commas and the file's tabs; status reports each key", () => {
    const applied = Either.getOrThrow(CursorSettings.apply(userFile, wanted, "settings.json"))
    assert.include(applied.text, "// small")
    assert.include(applied.text, "/* editor */")
    assert.include(applied.text, "\t\"http.proxy\": \"http://127.0.0.1:8788\"")
    assert.notMatch(applied.text, /^ +"/m)
    assert.strictEqual(valuesOf(applied.text)["editor.fontSize"], 13)
    assert.deepStrictEqual(Either.getOrThrow(CursorSettings.status(userFile, wanted)).map((s) => s.state), ["missing", "missing", "missing", "missing"])
    const changed = applied.text.replace("\"on\"", "\"off\"")
    assert.deepStrictEqual(Either.getOrThrow(CursorSettings.status(changed, wanted)).map((s) => s.state), ["applied", "different", "applied", "applied"])
  })

  it("apply indents with the file's spaces", () => {
    const applied = Either.getOrThrow(CursorSettings.apply("{\n  \"a\": 1\n}\n", wanted, "settings.json"))
    assert.include(applied.text, "\n  \"http.proxy\"")
  })
})

describe("CursorSettings setup and unsetup", () => {
  it.effect("setup then unsetup gives back a hand-kept file byte for byte", () =>
    run(Effect.gen(function*() {
      const p = yield* withFile(userFile)
      const summary = yield* CursorSettings.setup(p.settings, p.journal, wanted)
      assert.strictEqual(summary.file, "updated")
      assert.strictEqual(summary.changes.length, 4)
      const during = valuesOf(yield* p.fs.readFileString(p.settings))
      assert.strictEqual(during["http.proxy"], "http://127.0.0.1:8788")
      assert.strictEqual(during["cursor.general.disableHttp2"], true)
      assert.strictEqual(during["workbench.colorTheme"], "Default Dark+")
      const undone = yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.strictEqual(undone.file, "restored")
      assert.strictEqual(yield* p.fs.readFileString(p.settings), userFile)
      assert.isFalse(yield* p.fs.exists(p.journal))
    })))

  it.effect("a missing settings file is created by setup and deleted by unsetup", () =>
    run(Effect.gen(function*() {
      const p = yield* paths
      const summary = yield* CursorSettings.setup(p.settings, p.journal, wanted)
      assert.strictEqual(summary.file, "created")
      const text = yield* p.fs.readFileString(p.settings)
      assert.deepStrictEqual(valuesOf(text), wanted)
      assert.isTrue(text.endsWith("}\n"))
      const undone = yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.strictEqual(undone.file, "deleted")
      assert.isFalse(yield* p.fs.exists(p.settings))
    })))

  it.effect("prior values of our keys come back", () =>
    run(Effect.gen(function*() {
      const before = "{\n    \"http.proxy\": \"http://corp:3128\",\n    \"http.proxySupport\": \"override\"\n}\n"
      const p = yield* withFile(before)
      const summary = yield* CursorSettings.setup(p.settings, p.journal, wanted)
      assert.deepStrictEqual(summary.changes.find((c) => c.key === "http.proxy"), { key: "http.proxy", before: "http://corp:3128", after: "http://127.0.0.1:8788" })
      // An unrelated edit forces the key-by-key path rather than the byte-identical one.
      const during = yield* p.fs.readFileString(p.settings)
      yield* p.fs.writeFileString(p.settings, during.replace("{\n", "{\n    \"editor.tabSize\": 2,\n"))
      const undone = yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.deepStrictEqual(valuesOf(yield* p.fs.readFileString(p.settings)), {
        "editor.tabSize": 2,
        "http.proxy": "http://corp:3128",
        "http.proxySupport": "override"
      })
      assert.deepStrictEqual(undone.changes.find((c) => c.key === "http.proxySupport"), { key: "http.proxySupport", before: "on", after: "override" })
    })))

  it.effect("a user edit after setup survives unsetup while our keys revert", () =>
    run(Effect.gen(function*() {
      const p = yield* withFile(userFile)
      yield* CursorSettings.setup(p.settings, p.journal, wanted)
      const during = yield* p.fs.readFileString(p.settings)
      yield* p.fs.writeFileString(p.settings, during.replace("\"editor.fontSize\": 13", "\"editor.fontSize\": 15"))
      const undone = yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.strictEqual(undone.file, "restored")
      assert.deepStrictEqual(undone.leftAlone, [])
      const after = yield* p.fs.readFileString(p.settings)
      assert.deepStrictEqual(valuesOf(after), { ...valuesOf(userFile), "editor.fontSize": 15 })
      assert.include(after, "// Cursor settings, kept by hand")
      assert.include(after, "/* editor */")
    })))

  it.effect("a key the user changed after setup is left as it is and reported", () =>
    run(Effect.gen(function*() {
      const p = yield* withFile(userFile)
      yield* CursorSettings.setup(p.settings, p.journal, wanted)
      const during = yield* p.fs.readFileString(p.settings)
      yield* p.fs.writeFileString(p.settings, during.replace("http://127.0.0.1:8788", "http://127.0.0.1:9999"))
      const undone = yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.deepStrictEqual(undone.leftAlone, [{ key: "http.proxy", ours: "http://127.0.0.1:8788", current: "http://127.0.0.1:9999" }])
      const after = valuesOf(yield* p.fs.readFileString(p.settings))
      assert.strictEqual(after["http.proxy"], "http://127.0.0.1:9999")
      assert.notProperty(after, "http.proxySupport")
      assert.notProperty(after, "cursor.general.disableHttp2")
    })))

  it.effect("invalid JSONC is refused with a typed error and nothing written", () =>
    run(Effect.gen(function*() {
      const broken = "{\n\t\"a\": 1,\n\t\"b\" 2\n}\n"
      const p = yield* withFile(broken)
      const error = yield* Effect.flip(CursorSettings.setup(p.settings, p.journal, wanted))
      assert.strictEqual(error._tag, "InvalidSettings")
      if (error._tag === "InvalidSettings") {
        assert.strictEqual(error.path, p.settings)
        assert.strictEqual(error.line, 3)
        assert.include(error.message, p.settings)
      }
      assert.strictEqual(yield* p.fs.readFileString(p.settings), broken)
      assert.isFalse(yield* p.fs.exists(p.journal))
      const array = yield* withFile("[1, 2]\n")
      const notObject = yield* Effect.flip(CursorSettings.setup(array.settings, array.journal, wanted))
      assert.include(notObject.message, "not an object")
      assert.strictEqual(yield* array.fs.readFileString(array.settings), "[1, 2]\n")
      assert.deepStrictEqual(yield* p.fs.readDirectory(`${p.directory}/Cursor/User`), ["settings.json"])
    })))

  it.effect("setup twice then unsetup gives back the file before the first setup", () =>
    run(Effect.gen(function*() {
      const p = yield* withFile(userFile)
      yield* CursorSettings.setup(p.settings, p.journal, CursorSettings.desired({ proxyUrl: "http://127.0.0.1:8788", disableHttp2: false }))
      const second = yield* CursorSettings.setup(p.settings, p.journal, CursorSettings.desired({ proxyUrl: "http://127.0.0.1:8800", disableHttp2: true }))
      assert.deepStrictEqual(second.changes.map((c) => c.key), ["http.proxy", "cursor.general.disableHttp2"])
      yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.strictEqual(yield* p.fs.readFileString(p.settings), userFile)
    })))

  it.effect("the HTTP/2 switch the user set to true comes back after a setup that wrote false", () =>
    run(Effect.gen(function*() {
      const before = "{\n\t\"cursor.general.disableHttp2\": true\n}\n"
      const p = yield* withFile(before)
      const summary = yield* CursorSettings.setup(p.settings, p.journal, CursorSettings.desired({ proxyUrl: "http://127.0.0.1:8788", disableHttp2: false }))
      assert.deepStrictEqual(summary.changes.find((c) => c.key === "cursor.general.disableHttp2"), { key: "cursor.general.disableHttp2", before: true, after: false })
      const during = yield* p.fs.readFileString(p.settings)
      assert.strictEqual(valuesOf(during)["cursor.general.disableHttp2"], false)
      yield* p.fs.writeFileString(p.settings, during.replace("{\n", "{\n\t\"editor.tabSize\": 2,\n"))
      yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.deepStrictEqual(valuesOf(yield* p.fs.readFileString(p.settings)), { "editor.tabSize": 2, "cursor.general.disableHttp2": true })
    })))

  it.effect("a Windows file (byte-order mark, CRLF, two spaces) keeps its shape through a key-by-key unsetup", () =>
    run(Effect.gen(function*() {
      const before = "\uFEFF{\r\n  \"editor.fontSize\": 13\r\n}\r\n"
      const p = yield* withFile(before)
      yield* CursorSettings.setup(p.settings, p.journal, wanted)
      const during = yield* readExact(p.fs, p.settings)
      assert.isTrue(during.startsWith("\uFEFF{"))
      assert.include(during, "\r\n  \"http.proxy\": \"http://127.0.0.1:8788\"")
      assert.notMatch(during, /[^\r]\n/)
      yield* p.fs.writeFileString(p.settings, during.replace("13", "14"))
      yield* CursorSettings.unsetup(p.settings, p.journal)
      assert.strictEqual(yield* readExact(p.fs, p.settings), before.replace("13", "14"))
    })))

  it.effect("unsetup of a file the user broke since is refused, and the journal is kept", () =>
    run(Effect.gen(function*() {
      const p = yield* withFile(userFile)
      yield* CursorSettings.setup(p.settings, p.journal, wanted)
      const broken = (yield* p.fs.readFileString(p.settings)).replace("}\n", "")
      yield* p.fs.writeFileString(p.settings, broken)
      const error = yield* Effect.flip(CursorSettings.unsetup(p.settings, p.journal))
      assert.strictEqual(error._tag, "InvalidSettings")
      assert.strictEqual(yield* p.fs.readFileString(p.settings), broken)
      assert.isTrue(yield* p.fs.exists(p.journal))
    })))

  it.effect("unsetup without a journal is a clear error and changes nothing", () =>
    run(Effect.gen(function*() {
      const p = yield* withFile(userFile)
      const error = yield* Effect.flip(CursorSettings.unsetup(p.settings, p.journal))
      assert.strictEqual(error._tag, "JournalError")
      if (error._tag === "JournalError") assert.strictEqual(error.reason, "Missing")
      assert.strictEqual(yield* p.fs.readFileString(p.settings), userFile)
    })))
})
