/**
 * Capture mode on the real server: off by default and turned on by a reload of the file; the
 * file's modes, its redaction (file contents, the provider key), a disk that refuses the write
 * (the turn goes on), the console's list and download, and `cursor-byok capture on|off`'s edit.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { withCapture } from "../../src/replay/Commands.js"
import { capturesPage } from "../../src/console/Captures.js"
import { linksOf } from "../../src/console/Pages.js"
import * as AppHarness from "../support/AppHarness.js"
import { get } from "../support/ConsoleSession.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, tempDirectory } from "../support/Transcripts.js"

const eventually = <A>(what: string, read: () => A, ok: (value: A) => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      const value = read()
      if (ok(value)) return value
      yield* Effect.sleep("50 millis")
    }
    return assert.fail(`never: ${what}`)
  })

const capturesIn = (home: string) => (existsSync(join(home, "captures")) ? readdirSync(join(home, "captures")) : [])

describe("capture mode", () => {
  it.scopedLive("off by default; on after a reload of the file; one 0600 file per request in a 0700 folder, redacted", () =>
    Effect.gen(function*() {
      const home = yield* tempDirectory("cursor-byok-capture-")
      const app = yield* AppHarness.make({ watchConfig: true, config: { home } })
      const client = yield* clientFor(app)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("not captured")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "c-off", text: "hello", requestId: "req-off" })))
      yield* Effect.sleep("100 millis")
      assert.deepStrictEqual(capturesIn(home), [])

      yield* app.writeConfig({ home, capture: { enabled: true } })
      yield* eventually("the reload", () => app.live.current().capture.enabled, (on) => on)
      const long = "x".repeat(2_000)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("captured answer")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "c-on", text: `look: ${long}`, requestId: "req-on" })))
      const files = yield* eventually("the capture", () => capturesIn(home), (names) => names.some((name) => name.includes("req-on")))
      assert.strictEqual(files.length, 1, files.join(", "))
      assert.strictEqual(statSync(join(home, "captures")).mode & 0o777, 0o700)
      const path = join(home, "captures", files[0]!)
      assert.strictEqual(statSync(path).mode & 0o777, 0o600)
      const text = yield* eventually("the end of the stream", () => readFileSync(path, "utf8"), (body) => body.includes(`"end":{}`))
      const lines = text.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
      assert.strictEqual(lines[0]!["kind"], "capture")
      assert.strictEqual(lines[0]!["requestId"], "req-on")
      for (const kind of ["client", "server", "model"]) assert.isTrue(lines.some((line) => line["kind"] === kind), kind)
      // The long text redacted, its length said; the provider's key nowhere.
      assert.notInclude(text, long)
      assert.include(text, `[redacted ${long.length + 6} chars]`)
      assert.notInclude(text, AppHarness.API_KEY)
      assert.include(text, "captured answer")
    }))

  it.scopedLive("a capture folder that cannot be made costs the request nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-capture-bad-")
      // `home` is a file: the captures folder cannot be made under it.
      const home = join(dir, "not-a-folder")
      writeFileSync(home, "")
      const app = yield* AppHarness.make({ config: { home, capture: { enabled: true } } })
      const client = yield* clientFor(app)
      for (const n of [1, 2]) {
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text(`answer ${n}`)))
        const transcript = yield* Effect.promise(() => client.run({ conversationId: `c-bad-${n}`, text: "hello" }))
        assertCleanOk(transcript)
        assert.strictEqual(transcript.text, `answer ${n}`)
      }
    }))

  it.scopedLive("the console lists the captures with a download link; the download is the file; another name is 404", () =>
    Effect.gen(function*() {
      const home = yield* tempDirectory("cursor-byok-capture-console-")
      const app = yield* AppHarness.make({ config: { home, capture: { enabled: true } } })
      const client = yield* clientFor(app)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("listed")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "c-console", text: "hello", requestId: "req-console" })))
      const [name] = yield* eventually("the capture", () => capturesIn(home), (names) => names.length === 1)
      // The capture's last lines (the checkpoint's blobs, the turn's end, the model's answer) are
      // written as they happen, some after the client read the turn's end: the file is whole
      // once the model's line is in it and two reads 50 ms apart agree.
      let before = ""
      yield* eventually("the whole capture", () => {
        const [previous, now] = [before, readFileSync(join(home, "captures", name!), "utf8")]
        before = now
        return { previous, now }
      }, ({ now, previous }) => now === previous && now.includes(`"kind":"model"`))
      const page = yield* get(app, "/console/captures")
      assert.strictEqual(page.status, 200)
      assert.include(page.body, `href="/console/captures/${name}"`)
      assert.include(page.body, "Capture mode is on")
      const download = yield* get(app, `/console/captures/${name}`)
      assert.strictEqual(download.status, 200)
      assert.include(download.headers.get("content-disposition") ?? "", name!)
      assert.strictEqual(download.body, readFileSync(join(home, "captures", name!), "utf8"))
      assert.strictEqual((yield* get(app, "/console/captures/..%2Fbyok.sqlite")).status, 404)
      assert.strictEqual((yield* get(app, "/console/captures/nothing.jsonl")).status, 404)
      // From another host: listed, never linked.
      const remote = capturesPage([{ name: name!, bytes: 10, modifiedMs: 0 }], { enabled: true, folder: "/x", loopbackClient: false }, linksOf(undefined), "n")
      assert.include(remote, name!)
      assert.notInclude(remote, `href="/console/captures/`)
    }))

  it("`capture on|off` edits the file as JSONC: comments and other keys kept, the file made when empty", () => {
    const text = `{\n  // my models\n  "port": 9000,\n  "capture": { "contents": true },\n}\n`
    const on = withCapture(text, true)
    assert.include(on, "// my models")
    assert.include(on, `"port": 9000`)
    assert.match(on, /"capture": \{\s*"contents": true,\s*"enabled": true\s*\}/)
    assert.match(withCapture(on, false), /"enabled": false/)
    assert.match(withCapture("", true), /"capture": \{\s*"enabled": true\s*\}/)
    assert.throws(() => withCapture("[1, 2]", true))
  })
})
