/**
 * Bad input on the HTTP/2 `Run` wire, from a raw `node:http2` client: every stream gets a
 * Connect error (a JSON error before the response starts, or an end-stream frame carrying it)
 * or runs normally; the server keeps serving; nothing the bad input named changes. Also the
 * HTTP/2 ports' other edges: an HTTP/1.1 client, a TLS client (a real handshake, ALPN h2), and
 * `GetServerConfig` advertising the TLS listener.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as http from "node:http"
import * as Http2 from "node:http2"
import * as Tls from "node:tls"
import { gzipSync } from "node:zlib"
import * as Dialect from "../../src/Dialect.js"
import { AgentClientMessageSchema } from "../../src/gen/agent/v1/agent_pb.js"
import { GetServerConfigResponseSchema, Http2Config } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { ConnectError, parseEnvelopes } from "../../src/transport/Connect.js"
import { serverConfig } from "../../src/transport/SideRpcs.js"
import * as AppHarness from "../support/AppHarness.js"
import { freePort } from "../support/ChildServer.js"
import { selfSignedCert } from "../support/OfficialClients.js"
import { CursorClient, envelope, FLAG_END_STREAM, runRequestMessage, seededRandom } from "../support/CursorClient.js"
import type { AgentClientMessageInit } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { text } from "../support/FakeRuntime.js"
import * as ServerHarness from "../support/ServerHarness.js"
import { tempDirectory } from "../support/Transcripts.js"

const RUN = "/agent.v1.AgentService/Run"
const LIMIT = 64 * 1024

const frame = (message: AgentClientMessageInit) => envelope(0, toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, message)))

interface RawOutcome {
  readonly status: number
  readonly contentType: string
  /** The payloads of the data envelopes, then the end-stream JSON (if one came). */
  readonly messages: number
  readonly end: Dialect.EndStream | undefined
  readonly body: string
  readonly reset: boolean
}

/** One `Run` call: `body` written (then the request side ended unless `keepOpen`), the whole response read. */
const rawRun = (
  session: Http2.ClientHttp2Session,
  body: Uint8Array,
  options: { readonly contentType?: string; readonly headers?: Http2.OutgoingHttpHeaders; readonly keepOpenMs?: number } = {}
): Promise<RawOutcome> =>
  new Promise((resolve) => {
    const stream = session.request({
      ":method": "POST",
      ":path": RUN,
      "content-type": options.contentType ?? "application/connect+proto",
      "connect-protocol-version": "1",
      ...options.headers
    })
    let status = 0
    let contentType = ""
    const chunks: Array<Buffer> = []
    stream.on("response", (headers) => {
      status = Number(headers[":status"])
      contentType = String(headers["content-type"] ?? "")
    })
    stream.on("data", (chunk: Buffer) => chunks.push(chunk))
    const done = (reset: boolean) => {
      const all = Buffer.concat(chunks)
      let messages = 0
      let end: Dialect.EndStream | undefined
      const envelopes = contentType.startsWith("application/connect") ? parseEnvelopes(all, Number.MAX_SAFE_INTEGER) : []
      for (const { flags, payload } of envelopes instanceof ConnectError ? [] : envelopes) {
        if ((flags & FLAG_END_STREAM) === 0) messages++
        else {
          const decoded = Dialect.decodeEndStream(payload)
          end = decoded._tag === "Right" ? decoded.right : undefined
        }
      }
      resolve({ status, contentType, messages, end, body: all.toString("utf8"), reset })
    }
    stream.on("end", () => done(false))
    stream.on("error", () => done(true))
    stream.write(body)
    if (options.keepOpenMs === undefined) stream.end()
    else setTimeout(() => stream.end(), options.keepOpenMs)
  })

const connect = (url: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const session = Http2.connect(url)
      session.on("error", () => undefined)
      return session
    }),
    (session) => Effect.sync(() => session.destroy())
  )

const harness = (transport: NonNullable<ServerHarness.HarnessOptions["transport"]> = {}) =>
  ServerHarness.make({
    respond: () => text("fine"),
    transport: { bidiAppendMaxBytes: LIMIT, heartbeatMs: 50, blobAckTimeoutMs: 300, orphanTimeoutMs: 300, sweepIntervalMs: 100, ...transport }
  })

const conversationOf = (server: ServerHarness.Harness, conversationId: string) =>
  server.store.load(conversationId).pipe(Effect.orDie, Effect.map(Option.isSome))

const runFrame = (conversationId: string, text: string) => frame(runRequestMessage({ conversationId, text, messageId: `m-${conversationId}` }))

describe("Bad input on the HTTP/2 Run wire", () => {
  it.scopedLive("a wrong content type and an unsupported encoding are refused with a JSON Connect error; nothing is created", () =>
    Effect.gen(function*() {
      const server = yield* harness()
      const session = yield* connect(server.h2cUrl)
      const wrong = yield* Effect.promise(() => rawRun(session, runFrame("c-ct", "hi"), { contentType: "application/json" }))
      assert.strictEqual(wrong.status, 400)
      assert.strictEqual((JSON.parse(wrong.body) as { code: string }).code, "invalid_argument")
      const encoding = yield* Effect.promise(() => rawRun(session, runFrame("c-br", "hi"), { headers: { "connect-content-encoding": "br" } }))
      assert.strictEqual(encoding.status, 501)
      assert.strictEqual((JSON.parse(encoding.body) as { code: string }).code, "unimplemented")
      assert.isFalse(yield* conversationOf(server, "c-ct"))
      assert.isFalse(yield* conversationOf(server, "c-br"))
      assert.strictEqual(server.transport.sessionCount(), 0)
    }))

  it.scopedLive("an oversized message, a truncated envelope and a bad gzip payload end the stream with a Connect error; nothing is committed", () =>
    Effect.gen(function*() {
      const server = yield* harness()
      const session = yield* connect(server.h2cUrl)
      const big = new Uint8Array(5)
      big[0] = 0
      new DataView(big.buffer).setUint32(1, LIMIT + 1)
      const oversized = yield* Effect.promise(() => rawRun(session, big))
      assert.strictEqual(oversized.status, 200)
      assert.deepInclude(oversized.end, { _tag: "Error", code: "resource_exhausted" })
      const badGzip = yield* Effect.promise(() => rawRun(session, envelope(1, Uint8Array.from([1, 2, 3, 4]))))
      assert.deepInclude(badGzip.end, { _tag: "Error", code: "invalid_argument" })
      // Truncated: the stream ends inside an envelope; nothing was handed on, so nothing to run.
      const truncated = yield* Effect.promise(() => rawRun(session, runFrame("c-trunc", "hi").subarray(0, 12)))
      assert.deepInclude(truncated.end, { _tag: "Error", code: "invalid_argument" })
      assert.isFalse(yield* conversationOf(server, "c-trunc"))
    }))

  it.scopedLive("garbage messages are logged and dropped: a run request after them runs normally; gzip-compressed messages are taken", () =>
    Effect.gen(function*() {
      const server = yield* harness()
      const session = yield* connect(server.h2cUrl)
      const garbage = envelope(0, Uint8Array.from([0xff, 0xff, 0x01, 0x02]))
      const compressedRun = envelope(1, new Uint8Array(gzipSync(toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, runRequestMessage({ conversationId: "c-garbage", text: "hi", messageId: "m-g" }))))))
      const body = Buffer.concat([garbage, compressedRun])
      const outcome = yield* Effect.promise(() => rawRun(session, body, { keepOpenMs: 2_000 }))
      assert.strictEqual(outcome.status, 200)
      assert.deepStrictEqual(outcome.end, Dialect.EndStream.Ok())
      assert.isAbove(outcome.messages, 0)
      assert.isTrue(yield* conversationOf(server, "c-garbage"))
    }))

  it.scopedLive("a stream that never sends a run request: half-closed at once it is told so; kept open with heartbeats it ends unavailable after the orphan timeout", () =>
    Effect.gen(function*() {
      const server = yield* harness()
      const session = yield* connect(server.h2cUrl)
      const empty = yield* Effect.promise(() => rawRun(session, new Uint8Array()))
      assert.deepInclude(empty.end, { _tag: "Error", code: "invalid_argument" })
      const heartbeats = yield* Effect.promise(() => rawRun(session, frame({ message: { case: "clientHeartbeat", value: {} } })))
      assert.deepInclude(heartbeats.end, { _tag: "Error", code: "invalid_argument" })
      const waiting = yield* Effect.promise(() => rawRun(session, frame({ message: { case: "clientHeartbeat", value: {} } }), { keepOpenMs: 5_000 }))
      assert.deepInclude(waiting.end, { _tag: "Error", code: "unavailable" })
    }))

  it.scopedLive("an HTTP/1.1 request to the h2c port gets a readable Connect error, and the port keeps serving HTTP/2", () =>
    Effect.gen(function*() {
      const server = yield* harness()
      const url = new URL(server.h2cUrl)
      const answer = yield* Effect.promise(() =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const request = http.request({ host: url.hostname, port: url.port, path: RUN, method: "POST", agent: false }, (response) => {
            let body = ""
            response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
            response.on("end", () => resolve({ status: response.statusCode ?? 0, body }))
          })
          request.on("error", reject)
          request.end("hello")
        })
      )
      assert.strictEqual(answer.status, 505)
      assert.strictEqual((JSON.parse(answer.body) as { code: string }).code, "unimplemented")
      const session = yield* connect(server.h2cUrl)
      const outcome = yield* Effect.promise(() => rawRun(session, runFrame("c-after-h1", "hi"), { keepOpenMs: 2_000 }))
      assert.deepStrictEqual(outcome.end, Dialect.EndStream.Ok())
    }))

  it.scopedLive("fuzz: random and mutated Run bodies each end with a Connect error (before the response or as its end-stream) or run; the server keeps serving", () =>
    Effect.gen(function*() {
      const server = yield* harness()
      const session = yield* connect(server.h2cUrl)
      const random = seededRandom(20261201)
      const int = (n: number) => Math.floor(random() * n)
      const bytes = (n: number) => Uint8Array.from({ length: n }, () => int(256))
      const seeds = [
        Buffer.concat([runFrame("fuzz-run", "hello"), frame({ message: { case: "clientHeartbeat", value: {} } })]),
        frame({ message: { case: "kvClientMessage", value: { id: 0, message: { case: "setBlobResult", value: {} } } } }),
        frame({ message: { case: "conversationAction", value: { action: { case: "cancelAction", value: { reason: "x" } } } } }),
        frame({ message: { case: "prewarmRequest", value: { conversationId: "fuzz-pre" } } })
      ]
      const mutate = (seed: Uint8Array): Uint8Array => {
        const out = Array.from(seed)
        for (let e = 1 + int(3); e > 0; e--) {
          if (out.length === 0) break
          switch (int(3)) {
            case 0:
              out[int(out.length)] = int(256)
              break
            case 1:
              out.length = int(out.length + 1)
              break
            case 2:
              out.splice(int(out.length + 1), 0, ...bytes(1 + int(6)))
              break
          }
        }
        return Uint8Array.from(out)
      }
      const total = Math.max(50, Number(process.env["BYOK_FUZZ_RUN_CASES"] ?? 600))
      const cases = Array.from({ length: total }, (_, i) => (i % 3 === 0 ? bytes(int(48)) : mutate(seeds[i % seeds.length]!)))
      const outcomes = yield* Effect.forEach(cases, (body) => Effect.promise(() => rawRun(session, body, int(3) === 0 ? { keepOpenMs: 50 } : {})), { concurrency: 16 })
      for (const [i, outcome] of outcomes.entries()) {
        const refused = outcome.status >= 400 && outcome.contentType.startsWith("application/json")
        assert.isTrue(refused || (outcome.status === 200 && outcome.end !== undefined), `case ${i}: status ${outcome.status}, end ${JSON.stringify(outcome.end)}, reset ${outcome.reset}`)
      }
      // Still serving.
      const after = yield* Effect.promise(() => rawRun(session, runFrame("c-after-fuzz", "hi"), { keepOpenMs: 2_000 }))
      assert.deepStrictEqual(after.end, Dialect.EndStream.Ok())
    }), { timeout: 120_000 })
})

describe("the TLS listener (ALPN h2)", () => {
  it.scopedLive("a real TLS handshake negotiates h2 and serves Run; an HTTP/1.1-only TLS client gets a Connect error; GetServerConfig advertises the listener", () =>
    Effect.gen(function*() {
      const { cert, certFile, keyFile } = selfSignedCert(yield* tempDirectory("cursor-byok-tls-"))
      const port = yield* Effect.promise(() => freePort())
      const app = yield* AppHarness.make({
        config: { blobAckTimeoutMs: 300, http2: { cleartextPort: null, tls: { port, certFile, keyFile } } }
      })
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("over tls")))
      assert.strictEqual(app.tlsPort, port)
      const session = yield* Effect.acquireRelease(
        Effect.sync(() => {
          const s = Http2.connect(`https://127.0.0.1:${port}`, { ca: cert })
          s.on("error", () => undefined)
          return s
        }),
        (s) => Effect.sync(() => s.destroy())
      )
      const outcome = yield* Effect.promise(() => rawRun(session, runFrame("c-tls", "hi"), { keepOpenMs: 2_000 }))
      assert.strictEqual(outcome.status, 200)
      assert.deepStrictEqual(outcome.end, Dialect.EndStream.Ok())
      assert.strictEqual((session.socket as unknown as { alpnProtocol: string }).alpnProtocol, "h2")
      // A TLS client offering only http/1.1.
      const refusal = yield* Effect.promise(() =>
        new Promise<string>((resolve, reject) => {
          const socket = Tls.connect({ host: "127.0.0.1", port, ca: cert, ALPNProtocols: ["http/1.1"] }, () => socket.write(`POST ${RUN} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n`))
          let data = ""
          socket.on("data", (chunk: Buffer) => (data += chunk.toString("utf8")))
          socket.on("end", () => resolve(data))
          socket.on("error", reject)
        })
      )
      assert.match(refusal, /^HTTP\/1\.1 505/)
      assert.include(refusal, "\"code\":\"unimplemented\"")
      // GetServerConfig on the HTTP/1.1 port: HTTP/2 left to Cursor, the agent URLs at the listener.
      const client = new CursorClient({ baseUrl: app.baseUrl })
      const answer = yield* Effect.promise(() => client.post("/aiserver.v1.ServerConfigService/GetServerConfig", new Uint8Array()))
      client.close()
      const config = fromBinary(GetServerConfigResponseSchema, answer.body)
      assert.strictEqual(config.http2Config, Http2Config.UNSPECIFIED)
      assert.deepStrictEqual([config.agentUrlConfig?.agentUrl, config.agentUrlConfig?.agentnUrl], [`https://127.0.0.1:${port}`, `https://127.0.0.1:${port}`])
    }))

  it("without the TLS listener GetServerConfig keeps HTTP/2 disabled (Cursor stays on RunSSE + BidiAppend)", () => {
    assert.strictEqual(serverConfig().http2Config, Http2Config.FORCE_ALL_DISABLED)
    assert.isUndefined(serverConfig().agentUrlConfig)
  })
})
