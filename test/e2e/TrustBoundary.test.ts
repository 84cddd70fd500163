/**
 * The trust boundary, against the real server process on real sockets: rebound Host names,
 * cross-site requests (simple content types, foreign and `null` Origins), a forged hop mark,
 * the token off loopback from both sources, and the connection bounds (idle sockets closed, a
 * readable 503 past the cap), on the HTTP/1.1 and h2c listeners.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as Http from "node:http"
import * as Http2 from "node:http2"
import * as Net from "node:net"
import * as AppHarness from "../support/AppHarness.js"
import * as ChildServer from "../support/ChildServer.js"
import { bidiAppendBody, runRequestMessage, runSseBody } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import * as HookupHarness from "../support/HookupHarness.js"
import { http1Via, http2Via } from "../support/ProxyClient.js"

const TOKEN = "trust-boundary-token-0123"
const BIDI_APPEND = "/aiserver.v1.BidiService/BidiAppend"
const RUN_SSE = "/agent.v1.AgentService/RunSSE"
const SIDE_RPC = "/aiserver.v1.AiService/AvailableModels"

interface Answer {
  readonly status: number
  readonly body: string
}

/** One HTTP/1.1 request to 127.0.0.1:port with exactly these headers (Host included). */
const send = (port: number, method: string, path: string, headers: Record<string, string>, body?: Uint8Array | string): Promise<Answer> =>
  new Promise((resolve, reject) => {
    const request = Http.request({ host: "127.0.0.1", port, method, path, headers, setHost: false, agent: false }, (response) => {
      let text = ""
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => {
        text += chunk
        // A RunSSE that was let through streams on: its first bytes are enough.
        if (path === RUN_SSE && response.statusCode === 200) response.destroy()
      })
      response.on("close", () => resolve({ status: response.statusCode ?? 0, body: text }))
    })
    request.on("error", reject)
    request.end(body)
  })

const rpcBodies = () => ({
  [BIDI_APPEND]: { type: "application/proto", body: bidiAppendBody("req-hostile", 0, runRequestMessage({ conversationId: "conv-hostile", text: "spend the key" })) },
  [RUN_SSE]: { type: "application/connect+proto", body: runSseBody("req-hostile") },
  [SIDE_RPC]: { type: "application/proto", body: new Uint8Array() }
})

/** Rows of the store's tables that a refused request must not have written. */
const storeRows = (database: string) => {
  const db = new Database(database, { readonly: true })
  try {
    const count = (table: string) => (db.prepare(`SELECT count(*) AS n FROM ${table}`).all()[0] as { n: number }).n
    return { conversations: count("conversations"), inputs: count("input_commits"), calls: count("llm_calls") }
  } finally {
    db.close()
  }
}

const childWith = (provider: FakeProvider.FakeProvider, options: Partial<ChildServer.ChildServerOptions> & { readonly config?: Record<string, unknown> } = {}) =>
  ChildServer.make({
    ...options,
    config: AppHarness.fileConfigJson(provider.baseUrl, options.config ?? {}),
    env: { [AppHarness.API_KEY_ENV]: AppHarness.API_KEY, ...options.env }
  })

describe("Trust boundary (server process)", () => {
  it.scopedLive("rebound Host names, cross-site posts, foreign Origins and a forged hop mark reach no handler: readable 403/415, nothing stored, no provider call", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const child = yield* childWith(provider, { h2c: true })
      const port = child.port
      const local = `127.0.0.1:${port}`
      const hostile = [
        `127.0.0.1.nip.io:${port}`, `127.evil.example:${port}`, `localhost.evil.example:${port}`, `evil.example:${port}`,
        `app.localhost:${port}`, `127.1:${port}`, `2130706433:${port}`, `[::ffff:127.0.0.1]:${port}`, `127.0.0.1:${port + 1}`, "api2.cursor.sh"
      ]
      for (const host of hostile) {
        for (const path of ["/console", "/console/conversations/conv-x?messages=1", "/console/api/running", "/metrics"]) {
          const answer = yield* Effect.promise(() => send(port, "GET", path, { host }))
          assert.strictEqual(answer.status, 403, `${host} ${path}`)
          assert.include(answer.body, "is not this server's", `${host} ${path}`)
        }
        for (const [path, { type, body }] of Object.entries(rpcBodies())) {
          const answer = yield* Effect.promise(() => send(port, "POST", path, { host, "content-type": type }, body))
          assert.strictEqual(answer.status, 403, `${host} ${path}`)
        }
      }
      // Asking for a protocol upgrade is no way around the door.
      const upgrade = yield* Effect.promise(() => send(port, "GET", "/console", { host: hostile[0]!, connection: "Upgrade", upgrade: "websocket" }))
      assert.strictEqual(upgrade.status, 403)
      // Cross-site: what a browser sends without a preflight, and good types from a foreign page.
      for (const [path, { body }] of Object.entries(rpcBodies())) {
        for (const type of ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]) {
          const answer = yield* Effect.promise(() => send(port, "POST", path, { host: local, "content-type": type, origin: "https://evil.example" }, body))
          assert.include([403, 415], answer.status, `${type} ${path}`)
          const sameOrigin = yield* Effect.promise(() => send(port, "POST", path, { host: local, "content-type": type }, body))
          assert.strictEqual(sameOrigin.status, 415, `${type} ${path}`)
          assert.include(sameOrigin.body, "takes the Connect, gRPC or gRPC-Web protocol")
        }
        for (const origin of ["https://evil.example", "null", `http://127.0.0.1.nip.io:${port}`]) {
          const { type } = rpcBodies()[path as typeof BIDI_APPEND]
          const answer = yield* Effect.promise(() => send(port, "POST", path, { host: local, "content-type": type, origin }, body))
          assert.strictEqual(answer.status, 403, `${origin} ${path}`)
          assert.include(answer.body, "requests from web pages")
        }
        const forged = yield* Effect.promise(() =>
          send(port, "POST", path, { host: "api2.cursor.sh", "content-type": "application/proto", "x-cursor-byok-hop": "guess proxy" }, body))
        assert.strictEqual(forged.status, 403, `forged mark ${path}`)
      }
      // h2c: the same door before Run.
      const h2 = yield* Effect.acquireRelease(Effect.sync(() => Http2.connect(child.h2cUrl!)), (session) => Effect.sync(() => session.close()))
      const h2Status = (headers: Http2.OutgoingHttpHeaders) =>
        Effect.promise(() => new Promise<number>((resolve) => {
          const stream = h2.request({ ":method": "POST", ":path": "/agent.v1.AgentService/Run", "content-type": "application/connect+proto", ...headers })
          stream.on("response", (response) => resolve(Number(response[":status"])))
          stream.on("error", () => resolve(0))
          stream.end()
        }))
      assert.strictEqual(yield* h2Status({ ":authority": "127.0.0.1.nip.io" }), 403)
      assert.strictEqual(yield* h2Status({ ":authority": new URL(child.h2cUrl!).host, origin: "https://evil.example" }), 403)
      assert.strictEqual(yield* h2Status({ ":authority": new URL(child.h2cUrl!).host, "content-type": "text/plain" }), 415)

      // Nothing ran: no provider call, nothing in the store; the log says why, once per cause.
      assert.strictEqual(provider.requests.length, 0)
      assert.deepStrictEqual(storeRows(child.database), { conversations: 0, inputs: 0, calls: 0 })
      const refusals = child.stdout().split("\n").filter((line) => line.includes("request refused"))
      assert.deepStrictEqual([...new Set(refusals.map((line) => /request refused \(([\w-]+)\)/.exec(line)?.[1]))].sort(), ["content-type", "host", "origin"])
      assert.strictEqual(refusals.length, 3, refusals.join("\n"))

      // The same requests, addressed right, are served: the console, and a whole turn.
      for (const host of [local, `localhost:${port}`, `[::1]:${port}`, `127.8.9.10:${port}`]) {
        assert.strictEqual((yield* Effect.promise(() => send(port, "GET", "/console", { host }))).status, 200, host)
      }
      const fromCursor = yield* Effect.promise(() => send(port, "GET", "/console", { host: local, origin: "vscode-file://vscode-app" }))
      assert.strictEqual(fromCursor.status, 200)
    }), { timeout: 90_000 })

  it.scopedLive("Cursor's doors: through the proxy (HTTP/1.1 and HTTP/2 to Run over h2c) and on the TLS listener Cursor's names pass; a web Origin or a simple content type there does not", () =>
    Effect.gen(function*() {
      const server = yield* HookupHarness.make()
      const ca = [server.ca.certPem]
      const empty = { method: "POST", path: "/agent.v1.AgentService/Run", headers: { "content-type": "application/connect+proto" }, body: new Uint8Array() }
      // Handed on over loopback to h2c: reaches Run, which says the stream had no run request.
      const run = yield* Effect.promise(() => http2Via(server.proxyPort, "agentn.api5.cursor.sh", ca, empty))
      assert.strictEqual(run.status, 200)
      assert.include(run.body.toString("latin1"), "without a run request")
      const models = yield* Effect.promise(() =>
        http1Via(server.proxyPort, "api2.cursor.sh", ca, { method: "POST", path: SIDE_RPC, headers: { "content-type": "application/proto" }, body: new Uint8Array() }))
      assert.strictEqual(models.status, 200)
      const fromPage = yield* Effect.promise(() => http2Via(server.proxyPort, "agentn.api5.cursor.sh", ca, { ...empty, headers: { ...empty.headers, origin: "https://evil.example" } }))
      assert.strictEqual(fromPage.status, 403)
      const simple = yield* Effect.promise(() =>
        http1Via(server.proxyPort, "api2.cursor.sh", ca, { method: "POST", path: SIDE_RPC, headers: { "content-type": "text/plain" }, body: new Uint8Array() }))
      assert.strictEqual(simple.status, 415)
      // The TLS listener takes Cursor's names (it is given to Cursor in their place), not others.
      const tls = (authority: string) =>
        Effect.promise(() => new Promise<number>((resolve, reject) => {
          const session = Http2.connect(`https://127.0.0.1:${server.tlsPort}`, { ca, servername: "localhost" })
          session.on("error", reject)
          const stream = session.request({ ":method": "POST", ":path": SIDE_RPC, ":authority": authority, "content-type": "application/proto" })
          stream.on("response", (headers) => resolve(Number(headers[":status"])))
          stream.resume()
          stream.on("end", () => session.close())
          stream.on("error", reject)
          stream.end()
        }))
      assert.strictEqual(yield* tls("api2.cursor.sh"), 200)
      assert.strictEqual(yield* tls(`127.0.0.1:${server.tlsPort}`), 200)
      assert.strictEqual(yield* tls("127.0.0.1.nip.io"), 403)
      assert.strictEqual(server.provider.requests.length, 0)
    }), { timeout: 60_000 })

  it.scopedLive("off loopback: every route but /healthz needs the token (header, x-byok-token or query); a short token from either source stops the start", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const child = yield* childWith(provider, { host: "0.0.0.0", env: { BYOK_CONSOLE_TOKEN: TOKEN } })
      const port = child.port
      const host = `127.0.0.1:${port}`
      assert.strictEqual((yield* Effect.promise(() => send(port, "GET", "/healthz", { host }))).status, 200)
      for (const path of ["/metrics", "/console"]) {
        const refused = yield* Effect.promise(() => send(port, "GET", path, { host }))
        assert.strictEqual(refused.status, 401, path)
        assert.include(refused.body, "needs its token")
        assert.strictEqual((yield* Effect.promise(() => send(port, "GET", path, { host, authorization: `Bearer ${TOKEN}` }))).status, 200, path)
        assert.strictEqual((yield* Effect.promise(() => send(port, "GET", path, { host, "x-byok-token": TOKEN }))).status, 200, path)
        assert.strictEqual((yield* Effect.promise(() => send(port, "GET", `${path}?token=${TOKEN}`, { host }))).status, 200, path)
        assert.strictEqual((yield* Effect.promise(() => send(port, "GET", path, { host, "x-byok-token": `${TOKEN}x` }))).status, 401, path)
      }
      const append = yield* Effect.promise(() =>
        send(port, "POST", BIDI_APPEND, { host, "content-type": "application/proto" }, rpcBodies()[BIDI_APPEND].body))
      assert.strictEqual(append.status, 401)
      assert.strictEqual(provider.requests.length, 0)

      for (const setting of [{ env: { BYOK_CONSOLE_TOKEN: "short-token" } }, { config: { console: { token: "short-token" } } }]) {
        const failed = yield* Effect.promise(() =>
          ChildServer.start({
            host: "0.0.0.0",
            config: AppHarness.fileConfigJson(provider.baseUrl, setting.config ?? {}),
            env: setting.env ?? {},
            startTimeoutMs: 20_000
          }).then(() => "started", (error: Error) => error.message))
        assert.include(failed, "exited before it listened")
        assert.include(failed, "at least 16 characters")
      }
    }), { timeout: 90_000 })

  it.scopedLive("connections are bounded: a silent socket and an idle keep-alive one are closed, past the cap a readable 503, on HTTP/1.1, h2c and the proxy", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const proxyPort = yield* Effect.promise(() => ChildServer.freePort())
      const child = yield* childWith(provider, {
        h2c: true,
        env: { BYOK_PROXY_PORT: String(proxyPort) },
        config: { http2: { tls: null }, limits: { maxConnections: 4, headersTimeoutMs: 1_500, idleTimeoutMs: 1_000 } }
      })
      const h2cPort = Number(new URL(child.h2cUrl!).port)
      for (const port of [child.port, h2cPort, proxyPort]) {
        const sockets = yield* Effect.promise(() => Promise.all([0, 1, 2, 3].map(() => openSocket(port))))
        // The fifth is answered and closed, readably.
        const fifth = yield* Effect.promise(() => openSocket(port))
        const refused = yield* Effect.promise(() => fifth.closed)
        assert.match(refused, /^HTTP\/1\.1 503/, `port ${port}`)
        assert.include(refused, "limits.maxConnections")
        // The four that sent nothing are closed by the server.
        yield* Effect.promise(() => Promise.all(sockets.map((socket) => socket.closed)))
      }
      // A keep-alive socket idle after its request is closed too.
      const socket = yield* Effect.promise(() => openSocket(child.port))
      socket.socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${child.port}\r\n\r\n`)
      const text = yield* Effect.promise(() => socket.closed)
      assert.match(text, /^HTTP\/1\.1 200/)
      assert.include(text, "\"status\":\"ok\"")
    }), { timeout: 60_000 })
})

/** A raw TCP socket: what it received by the time the server closed it. */
const openSocket = (port: number): Promise<{ readonly socket: Net.Socket; readonly closed: Promise<string> }> =>
  new Promise((resolve, reject) => {
    const socket = Net.connect(port, "127.0.0.1")
    let received = ""
    socket.setEncoding("utf8")
    socket.on("data", (chunk: string) => {
      received += chunk
    })
    const closed = new Promise<string>((done) => socket.on("close", () => done(received)))
    socket.once("connect", () => resolve({ socket, closed }))
    socket.once("error", reject)
  })
