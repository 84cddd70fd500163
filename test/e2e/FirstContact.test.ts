/**
 * First contact, in real processes (`node dist/main.js`, as `npm start` runs it): a start that
 * cannot happen says what failed, where and why, and exits 1, connected clients or not; a stop
 * ends whatever the clients do, open streams told to come back.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import type { ChildProcess } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import * as Net from "node:net"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { startFlags } from "../../scripts/build.js"
import { freePort } from "../support/ChildServer.js"
import { CursorClient } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"

interface Run {
  readonly child: ChildProcess
  readonly output: () => string
  /** Resolves with the exit code once the process is gone (null: killed by a signal). */
  readonly exited: Promise<number | null>
}

/** Starts the server in a process of its own, on the given ports ("off" for none). */
const launch = (dir: string, env: Readonly<Record<string, string>>): Run => {
  const cwd = process.cwd()
  const child = spawn(process.execPath, [...startFlags(cwd), resolve(cwd, "dist/main.js")], {
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      BYOK_LOG_FORMAT: "logfmt",
      BYOK_HOME: join(dir, "home"),
      BYOK_CONFIG: join(dir, "byok.config.json"),
      BYOK_DB: join(dir, "byok.sqlite"),
      BYOK_HOST: "127.0.0.1",
      BYOK_PROXY_PORT: "off",
      BYOK_TLS_PORT: "off",
      BYOK_H2C_PORT: "off",
      ...env
    }
  })
  let out = ""
  child.stdout!.setEncoding("utf8").on("data", (data: string) => void (out += data))
  child.stderr!.setEncoding("utf8").on("data", (data: string) => void (out += data))
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)))
  return { child, output: () => out, exited }
}

const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "cursor-byok-first-"))
  writeFileSync(join(dir, "byok.config.json"), "{}")
  return dir
}

/** A port held by a plain listener of another "program". */
const holdPort = (): Promise<{ port: number; close: () => void }> =>
  new Promise((done) => {
    const server = Net.createServer((socket) => socket.destroy())
    server.listen(0, "127.0.0.1", () => done({ port: (server.address() as Net.AddressInfo).port, close: () => server.close() }))
  })

/** Waits for the process to exit, or kills it after `ms` (then the result says it did not exit by itself). */
const exitOrKill = async (run: Run, ms: number): Promise<number | null | "still running"> => {
  const timer = new Promise<"still running">((done) => setTimeout(() => done("still running"), ms))
  const result = await Promise.race([run.exited, timer])
  if (result === "still running") {
    run.child.kill("SIGKILL")
    await run.exited
  }
  return result
}

const waitFor = async (check: () => boolean | Promise<boolean>, ms = 30_000) => {
  const until = Date.now() + ms
  while (Date.now() < until) {
    if (await check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error("timed out waiting")
}

const healthy = (port: number) => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)

describe("a start that cannot happen says why and exits 1", () => {
  it("a port another program holds: the main port, and each of h2c, TLS and the proxy, named with its fix", async () => {
    const held = await holdPort()
    try {
      const cases: Array<[string, Record<string, string>, RegExp]> = [
        ["main", { BYOK_PORT: String(held.port) }, new RegExp(`the main port 127\\.0\\.0\\.1:${held.port} is in use.*BYOK_PORT`)],
        ["h2c", { BYOK_PORT: String(await freePort()), BYOK_H2C_PORT: String(held.port) }, new RegExp(`the h2c port 127\\.0\\.0\\.1:${held.port} is in use`)],
        ["TLS", { BYOK_PORT: String(await freePort()), BYOK_TLS_PORT: String(held.port) }, new RegExp(`the TLS port 127\\.0\\.0\\.1:${held.port} is in use`)],
        ["proxy", { BYOK_PORT: String(await freePort()), BYOK_PROXY_PORT: String(held.port) }, new RegExp(`${held.port}.*in use`)]
      ]
      for (const [what, env, expected] of cases) {
        const dir = tempDir()
        try {
          const run = launch(dir, env)
          assert.strictEqual(await exitOrKill(run, 30_000), 1, `${what}: ${run.output()}`)
          assert.match(run.output(), expected, what)
          assert.match(run.output(), /level=ERROR/, what)
        } finally {
          rmSync(dir, { recursive: true, force: true })
        }
      }
    } finally {
      held.close()
    }
  }, 120_000)

  it("a garbage file, a truncated database and a folder at the database's path: the path, SQLite's reason and the fix", async () => {
    const dir = tempDir()
    try {
      // A real database to truncate: made by a server that started and stopped.
      const port = await freePort()
      const first = launch(dir, { BYOK_PORT: String(port) })
      await waitFor(() => healthy(port))
      first.child.kill("SIGTERM")
      await first.exited
      const whole = readFileSync(join(dir, "byok.sqlite"))
      const bad: Array<[string, (path: string) => void, RegExp]> = [
        ["garbage", (path) => writeFileSync(path, Buffer.alloc(8192, 7)), /file is not a database \(SQLITE_NOTADB\); it is not a SQLite database, or it is damaged: move it aside/],
        ["truncated", (path) => writeFileSync(path, whole.subarray(0, Math.floor(whole.length / 2))), /could not be (opened|brought up to date): .*(SQLITE_CORRUPT|SQLITE_NOTADB|malformed)/],
        ["folder", (path) => mkdirSync(path), /could not be opened: unable to open database file \(SQLITE_CANTOPEN\); check that the path names a file \(not a folder\)/]
      ]
      for (const [what, make, expected] of bad) {
        const path = join(dir, `${what}.sqlite`)
        make(path)
        const run = launch(dir, { BYOK_PORT: String(await freePort()), BYOK_DB: path })
        assert.strictEqual(await exitOrKill(run, 30_000), 1, `${what}: ${run.output()}`)
        assert.include(run.output(), `the database ${path} could not be`, what)
        assert.match(run.output(), expected, what)
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})

describe("a start that fails after the main port opened", () => {
  it("ends even with a client connected mid-request: the reason is said and the process exits 1", async () => {
    const held = await holdPort()
    let connectedBeforeExit = 0
    try {
      // The main port opens first; h2c fails a moment later. A client that got in between holds a half-sent request.
      for (let attempt = 0; attempt < 5 && connectedBeforeExit === 0; attempt++) {
        const dir = tempDir()
        const port = await freePort()
        const run = launch(dir, { BYOK_PORT: String(port), BYOK_H2C_PORT: String(held.port) })
        let exited = false
        void run.exited.then(() => void (exited = true))
        const sockets: Array<Net.Socket> = []
        try {
          while (!exited) {
            const socket = await new Promise<Net.Socket | undefined>((done) => {
              const s = Net.connect(port, "127.0.0.1")
              s.once("connect", () => done(s))
              s.once("error", () => done(undefined))
            })
            if (socket !== undefined && !exited) {
              socket.on("error", () => undefined)
              socket.write(`POST /aiserver.v1.BidiService/BidiAppend HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\ncontent-type: application/proto\r\ncontent-length: 100\r\n\r\n1`)
              sockets.push(socket)
              connectedBeforeExit++
              break
            }
            await new Promise((r) => setTimeout(r, 2))
          }
          assert.strictEqual(await exitOrKill(run, 30_000), 1, run.output())
          assert.match(run.output(), new RegExp(`the h2c port 127\\.0\\.0\\.1:${held.port} is in use`))
        } finally {
          for (const socket of sockets) socket.destroy()
          rmSync(dir, { recursive: true, force: true })
        }
      }
      assert.isAbove(connectedBeforeExit, 0, "no client got in before the start failed: the case was not exercised")
    } finally {
      held.close()
    }
  }, 120_000)
})

describe("a start that works says so", () => {
  it("once every listener is bound: the models, the listeners, the console's address and the next step; the default catalogue is no warning; GET / leads to the console", async () => {
    const dir = tempDir()
    const port = await freePort()
    const run = launch(dir, { BYOK_PORT: String(port), OPENAI_API_KEY: "sk-test", BYOK_CURSOR_SETTINGS: join(dir, "cursor", "settings.json") })
    try {
      await waitFor(() => healthy(port))
      await waitFor(() => run.output().includes("next: "))
      const out = run.output()
      assert.match(out, /cursor-byok is ready: \d+ models? \(/)
      assert.include(out, `listening: RunSSE + BidiAppend and the side calls on http://127.0.0.1:${port}`)
      assert.include(out, `console: http://127.0.0.1:${port}/console`)
      assert.include(out, "Tab: answered by Cursor")
      assert.include(out, "next: point Cursor here with `npx cursor-byok setup`")
      assert.notMatch(out, /level=WARN/)
      const root = await fetch(`http://127.0.0.1:${port}/`, { redirect: "manual" })
      assert.strictEqual(root.status, 302)
      assert.strictEqual(root.headers.get("location"), "/console")
    } finally {
      run.child.kill("SIGTERM")
      await run.exited
      rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)
})

describe("a stop ends whatever the clients do", () => {
  it("SIGTERM with a half-sent request and a live RunSSE stream: the stream gets its retryable end, the process exits without waiting for the client", async () => {
    const provider = await FakeProvider.start()
    // The model starts its answer and then says nothing more: the turn stays open.
    provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("Thinking about it"), { end: "stall" }))
    const dir = tempDir()
    writeFileSync(join(dir, "byok.config.json"), JSON.stringify({
      providers: [{ id: "fake", api: "openai-chat", baseUrl: provider.baseUrl, apiKeyEnv: "FAKE_KEY" }],
      models: [{ id: "fake-model", provider: "fake", upstreamModel: "fake-upstream", contextWindow: 100000 }],
      defaultModel: "fake-model"
    }))
    const port = await freePort()
    const run = launch(dir, { BYOK_PORT: String(port), FAKE_KEY: "sk-test" })
    try {
      await waitFor(() => healthy(port))
      // A request whose body never comes.
      const half = Net.connect(port, "127.0.0.1")
      half.on("error", () => undefined)
      await new Promise<void>((done) => half.once("connect", () => done()))
      half.write(`POST /aiserver.v1.BidiService/BidiAppend HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\ncontent-type: application/proto\r\ncontent-length: 100\r\n\r\n12345`)
      const client = new CursorClient({ baseUrl: `http://127.0.0.1:${port}`, turnTimeoutMs: 60_000 })
      const turn = client.turn({ requestId: "req-stop", conversationId: "c-stop", text: "hi", model: "fake-model" })
      await turn.waitFor((frame) => frame.event.kind === "text_delta", 30_000)
      run.child.kill("SIGTERM")
      const code = await exitOrKill(run, 30_000)
      assert.notStrictEqual(code, "still running", run.output())
      const transcript = await turn.done
      assert.strictEqual(transcript.end?._tag, "Error", JSON.stringify(transcript.end))
      assert.strictEqual(transcript.end?._tag === "Error" ? transcript.end.code : "", "unavailable")
      half.destroy()
      // Nothing committed was lost: started again on the same database, the conversation goes on from the user's message.
      provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("Here it is")))
      const again = launch(dir, { BYOK_PORT: String(port), FAKE_KEY: "sk-test" })
      try {
        await waitFor(() => healthy(port))
        const next = await new CursorClient({ baseUrl: `http://127.0.0.1:${port}`, turnTimeoutMs: 30_000 }).run({ requestId: "req-again", conversationId: "c-stop", text: "again", model: "fake-model" })
        assert.strictEqual(next.text, "Here it is", again.output())
        const body = provider.requests[provider.requests.length - 1]!.body
        assert.isTrue(body.indexOf("\"hi\"") !== -1 && body.indexOf("\"hi\"") < body.indexOf("again"), body)
      } finally {
        again.child.kill("SIGTERM")
        await again.exited
      }
    } finally {
      if (run.child.exitCode === null) run.child.kill("SIGKILL")
      rmSync(dir, { recursive: true, force: true })
      await provider.close()
    }
  }, 120_000)
})
