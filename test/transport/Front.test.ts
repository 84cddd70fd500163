/**
 * The front door (`transport/Front.ts`): the listener's one request listener. It answers 503
 * until the server accepts, checks each request once with the door, sends POSTs to BidiAppend
 * and RunSSE to their wire (`front/Agent.ts`) and every other request to the Effect app, answers
 * the agent calls exactly as the Effect routes did before they were removed, and stops a
 * request's work (or detaches a turn's reader) when its client goes away.
 */
import { LOCAL } from "../../src/Users.js"
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer } from "effect"
import type { Fiber } from "effect"
import type { AddressInfo } from "node:net"
import * as http from "node:http"
import { gzipSync } from "node:zlib"
import type { TransportService } from "../../src/Transport.js"
import { ConnectError } from "../../src/transport/Connect.js"
import { BIDI_APPEND_PATH, RUN_SSE_PATH } from "../../src/Transport.js"
import * as Door from "../../src/transport/Door.js"
import { FrontDoor, layerServer } from "../../src/transport/Front.js"
import * as Agent from "../../src/transport/front/Agent.js"
import type { FrameSink } from "../../src/transport/TurnChannel.js"
import { bidiAppendBody, clientHeartbeat, envelope, runRequestMessage } from "../support/CursorClient.js"
import type { RawResponse } from "../support/CursorClient.js"
import { clientFor } from "../support/Transcripts.js"
import { text, usage } from "../support/FakeRuntime.js"
import * as ServerHarness from "../support/ServerHarness.js"

const request = (port: number, method: string, path: string, body: Uint8Array | undefined, headers: Record<string, string> = {}): Promise<RawResponse> =>
  new Promise((resolve, reject) => {
    const sent = http.request({ host: "127.0.0.1", port, path, method, headers: { "content-type": "application/proto", ...headers } }, (response) => {
      const parts: Array<Buffer> = []
      response.on("data", (chunk: Buffer) => parts.push(chunk))
      response.on("end", () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: new Uint8Array(Buffer.concat(parts)) }))
    })
    sent.on("error", reject)
    sent.end(body)
  })

const runFork = <A, E>(effect: Effect.Effect<A, E>) => Effect.runFork(effect) as Fiber.RuntimeFiber<A, E>

/** A front door on an ephemeral port with `transport`'s agent wire and an app that records what the door left to it. */
const frontedServer = (bidiAppend: TransportService["bidiAppend"], limit = 1024, runSse?: TransportService["runSse"]) =>
  Effect.acquireRelease(
    Effect.async<{ readonly port: number; readonly left: Array<string>; readonly front: FrontDoor; readonly server: http.Server }>((resume) => {
      const front = new FrontDoor()
      const server = front.server
      const left: Array<string> = []
      front.agent = Agent.make({ bidiAppend, runSse, options: { bidiAppendMaxBytes: limit, runSseMaxBytes: limit } } as unknown as TransportService, runFork)
      front.app = (req, res) => {
        left.push(`${req.method} ${req.url}`)
        req.resume()
        res.writeHead(404).end()
      }
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ port: (server.address() as AddressInfo).port, left, front, server })))
    }),
    ({ server }) => Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
  )

/**
 * What the Effect routes of RunSSE and BidiAppend answered (`Transport.layerRoutes`, recorded
 * before they were removed) to the requests of the two tests below that compare with them.
 */
const ROUTE_RUN_SSE_ANSWERS = [
  "200 application/connect+proto 020000004f7b226572726f72223a7b22636f6465223a22696e76616c69645f617267756d656e74222c226d657373616765223a2252756e535345207265717565737420686173206e6f206d657373616765227d7d",
  "200 application/connect+proto 02000000557b226572726f72223a7b22636f6465223a22696e76616c69645f617267756d656e74222c226d657373616765223a227472756e636174656420656e76656c6f70652068656164657220617420627974652030227d7d",
  "200 application/connect+proto 02000000647b226572726f72223a7b22636f6465223a22696e76616c69645f617267756d656e74222c226d657373616765223a2242696469526571756573744964206973206e6f742076616c69642070726f746f6275663a207072656d617475726520454f46227d7d",
  "200 application/connect+proto 02000000557b226572726f72223a7b22636f6465223a22696e76616c69645f617267756d656e74222c226d657373616765223a22426964695265717565737449642e726571756573745f6964206973206d697373696e67227d7d",
  "200 application/connect+proto 02000000647b226572726f72223a7b22636f6465223a227265736f757263655f657868617573746564222c226d657373616765223a227265717565737420626f6479206f66203635206279746573206578636565647320746865206c696d6974206f66203634227d7d"
]
const ROUTE_BIDI_APPEND_ANSWERS = [
  "200 application/proto ",
  "200 application/proto ",
  "200 application/proto ",
  "400 application/json invalid_argument",
  "400 application/json invalid_argument",
  "400 application/json out_of_range",
  "429 application/json resource_exhausted",
  "200 application/proto ",
  "501 application/json unimplemented"
]

describe("The front door", () => {
  it.scopedLive("takes POST BidiAppend (with or without a query) and leaves every other request but RunSSE to the Effect server", () =>
    Effect.gen(function*() {
      const bodies: Array<Uint8Array> = []
      const { port, left } = yield* frontedServer((body) => Effect.sync(() => {
        bodies.push(body)
        return new Uint8Array()
      }))
      const body = bidiAppendBody("req-front", 0, clientHeartbeat())
      const taken = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, body))
      assert.strictEqual(taken.status, 200)
      assert.strictEqual(taken.headers["content-type"], "application/proto")
      assert.strictEqual((yield* Effect.promise(() => request(port, "POST", `${BIDI_APPEND_PATH}?x=1`, gzipSync(body), { "content-encoding": "gzip" }))).status, 200)
      assert.deepStrictEqual(bodies, [body, body])
      for (const [method, path] of [["GET", BIDI_APPEND_PATH], ["GET", RUN_SSE_PATH], ["POST", "/agent.v1.AgentService/Run"], ["POST", `${BIDI_APPEND_PATH}/x`], ["GET", "/healthz"]] as const) {
        assert.strictEqual((yield* Effect.promise(() => request(port, method, path, method === "POST" ? body : undefined))).status, 404)
      }
      assert.deepStrictEqual(left, [`GET ${BIDI_APPEND_PATH}`, `GET ${RUN_SSE_PATH}`, "POST /agent.v1.AgentService/Run", `POST ${BIDI_APPEND_PATH}/x`, "GET /healthz"])
    }))

  it.scopedLive("a refusal is the Connect error as JSON with its status; a defect is an internal error; neither reaches the Effect server", () =>
    Effect.gen(function*() {
      const { port, left } = yield* frontedServer((body) =>
        body[0] === 1 ? Effect.fail(new ConnectError("out_of_range", "too far")) : Effect.dieMessage("boom"), 16)
      const refused = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, new Uint8Array([1])))
      assert.strictEqual(refused.status, 400)
      assert.deepInclude(JSON.parse(Buffer.from(refused.body).toString()), { code: "out_of_range", message: "too far" })
      const died = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, new Uint8Array([2])))
      assert.strictEqual(died.status, 500)
      assert.strictEqual(JSON.parse(Buffer.from(died.body).toString()).code, "internal")
      const big = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, new Uint8Array(17)))
      assert.strictEqual(JSON.parse(Buffer.from(big.body).toString()).code, "resource_exhausted")
      assert.deepStrictEqual(left, [])
    }))

  it.scopedLive("a client that goes away while its append waits stops the append's work", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      const { port } = yield* frontedServer(() =>
        Deferred.succeed(started, undefined).pipe(Effect.zipRight(Effect.never), Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))))
      const sent = http.request({ host: "127.0.0.1", port, path: BIDI_APPEND_PATH, method: "POST" })
      sent.on("error", () => undefined)
      sent.end(new Uint8Array([1, 2, 3]))
      yield* Deferred.await(started)
      sent.destroy()
      yield* Deferred.await(interrupted).pipe(Effect.timeout("5 seconds"))
    }))

  it.scopedLive("RunSSE: the turn's frames are written as the sink gets them, then the stream ends; a client that goes away detaches its sink", () =>
    Effect.gen(function*() {
      const detached = yield* Deferred.make<void>()
      const sinks: Array<FrameSink> = []
      const { port, left } = yield* frontedServer(() => Effect.never, 1024, () =>
        Effect.succeed((sink: FrameSink) => Effect.sync(() => {
          sinks.push(sink)
          sink.write([new Uint8Array([1, 2])])
          return () => void Deferred.unsafeDone(detached, Exit.void)
        })))
      // A stream that the turn ends.
      const ended = request(port, "POST", RUN_SSE_PATH, new Uint8Array([0]))
      while (sinks.length < 1) yield* Effect.sleep("5 millis")
      sinks[0]!.write([new Uint8Array([3]), new Uint8Array([4, 5])])
      sinks[0]!.end()
      const response = yield* Effect.promise(() => ended)
      assert.strictEqual(response.status, 200)
      assert.strictEqual(response.headers["content-type"], "text/event-stream")
      assert.strictEqual(response.headers["connect-protocol-version"], "1")
      assert.deepStrictEqual([...response.body], [1, 2, 3, 4, 5])
      // A client that goes away.
      const sent = http.request({ host: "127.0.0.1", port, path: RUN_SSE_PATH, method: "POST" }, (r) => r.resume())
      sent.on("error", () => undefined)
      sent.end(new Uint8Array([0]))
      while (sinks.length < 2) yield* Effect.sleep("5 millis")
      sent.destroy()
      yield* Deferred.await(detached).pipe(Effect.timeout("5 seconds"))
      assert.deepStrictEqual(left, [])
    }))

  it.scopedLive("RunSSE refused: 200 with one end-stream frame carrying the error, through the front as through the route (as it answered)", () =>
    Effect.gen(function*() {
      const answersOf = () =>
        Effect.scoped(Effect.gen(function*() {
          const harness = yield* ServerHarness.make({ transport: { runSseMaxBytes: 64 } })
          const client = yield* clientFor(harness)
          const post = (body: Uint8Array) =>
            Effect.promise(() => client.post(RUN_SSE_PATH, body)).pipe(
              Effect.map((r) => `${r.status} ${r.headers["content-type"]} ${Buffer.from(r.body).toString("hex")}`)
            )
          return [
            yield* post(new Uint8Array()),
            yield* post(new Uint8Array([0, 0, 0])),
            yield* post(envelope(0, new Uint8Array([0x0c]))),
            yield* post(envelope(0, new Uint8Array())),
            yield* post(new Uint8Array(65))
          ]
        }))
      const front = yield* answersOf()
      assert.deepStrictEqual(front, ROUTE_RUN_SSE_ANSWERS)
      for (const answer of front) assert.match(answer, /^200 application\/connect\+proto 02/)
    }))

  it.scopedLive("through the front and through the Effect route (as it answered), the same appends get the same answers", () =>
    Effect.gen(function*() {
      const answersOf = (front: boolean) =>
        Effect.scoped(Effect.gen(function*() {
          const harness = yield* ServerHarness.make({ scripts: [text("fine", usage(1, 1))], transport: { bidiAppendMaxBytes: 4096 } })
          const client = yield* clientFor(harness)
          const post = (body: Uint8Array, headers: Record<string, string> = {}) =>
            Effect.promise(() => client.post(BIDI_APPEND_PATH, body, headers)).pipe(
              Effect.map((r) => `${r.status} ${r.headers["content-type"]} ${r.status === 200 ? Buffer.from(r.body).toString("hex") : JSON.parse(Buffer.from(r.body).toString()).code}`)
            )
          const heartbeat = bidiAppendBody("req-same", 0, clientHeartbeat())
          const answers = [
            yield* post(heartbeat),
            yield* post(bidiAppendBody("req-same", 1, clientHeartbeat())),
            yield* post(heartbeat),
            yield* post(heartbeat.subarray(0, heartbeat.length - 2)),
            yield* post(bidiAppendBody("", 0, clientHeartbeat())),
            yield* post(bidiAppendBody("req-far", 1_000_000, clientHeartbeat())),
            yield* post(bidiAppendBody("req-big", 0, runRequestMessage({ conversationId: "conv-big", text: "x".repeat(8192) }))),
            yield* post(gzipSync(bidiAppendBody("req-same", 2, clientHeartbeat())), { "content-encoding": "gzip" }),
            yield* post(heartbeat, { "content-encoding": "br" })
          ]
          const turn = yield* Effect.promise(() => client.run({ conversationId: `conv-same-${front}`, text: "hi" }))
          assert.deepStrictEqual(turn.problems, [])
          return answers
        }))
      const front = yield* answersOf(true)
      const route = ROUTE_BIDI_APPEND_ANSWERS
      assert.deepStrictEqual(front, route)
      assert.deepStrictEqual(front.map((a) => a.split(" ")[0]), ["200", "200", "200", "400", "400", "400", "429", "200", "501"])
    }))

  it.scopedLive("until the server accepts, every request is answered 503 unavailable with retry-after, before the door and any handler", () =>
    Effect.gen(function*() {
      let checked = 0
      const appended: Array<Uint8Array> = []
      const { front, left, port } = yield* frontedServer((body) => Effect.sync(() => {
        appended.push(body)
        return new Uint8Array()
      }))
      front.door = { http1: () => (checked += 1, LOCAL), http2: () => LOCAL }
      front.accepting = false
      for (const [method, path] of [["POST", BIDI_APPEND_PATH], ["POST", RUN_SSE_PATH], ["GET", "/healthz"]] as const) {
        const answer = yield* Effect.promise(() => request(port, method, path, method === "POST" ? new Uint8Array([1]) : undefined))
        assert.strictEqual(answer.status, 503, path)
        assert.strictEqual(answer.headers["retry-after"], "1")
        assert.deepInclude(JSON.parse(Buffer.from(answer.body).toString()), { code: "unavailable" })
      }
      assert.strictEqual(checked, 0)
      assert.deepStrictEqual([appended.length, left], [0, []])
      front.accepting = true
      assert.strictEqual((yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, new Uint8Array([1])))).status, 200)
      assert.deepStrictEqual([checked, appended.length], [1, 1])
    }))

  it.scopedLive("the door checks each request once, before it is routed: a refused one reaches no handler, a passed one exactly one", () =>
    Effect.gen(function*() {
      const appended: Array<Uint8Array> = []
      const { front, left, port } = yield* frontedServer((body) => Effect.sync(() => {
        appended.push(body)
        return new Uint8Array()
      }))
      const door = Door.make(() => ({ bindHost: "127.0.0.1", allowedHosts: [], token: undefined }), () => undefined)
      let checks = 0
      front.door = {
        http1: (req, res, listener) => {
          checks += 1
          return door.http1(req, res, listener)
        },
        http2: door.http2
      }
      const requests = [["POST", BIDI_APPEND_PATH], ["POST", RUN_SSE_PATH], ["GET", "/healthz"]] as const
      for (const [method, path] of requests) {
        const refused = yield* Effect.promise(() => request(port, method, path, method === "POST" ? new Uint8Array([1]) : undefined, { host: "evil.example" }))
        assert.strictEqual(refused.status, 403, path)
        assert.deepInclude(JSON.parse(Buffer.from(refused.body).toString()), { code: "permission_denied" })
      }
      assert.deepStrictEqual([checks, appended.length, left], [3, 0, []])
      const host = { host: `127.0.0.1:${port}` }
      assert.strictEqual((yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, new Uint8Array([1]), host))).status, 200)
      assert.strictEqual((yield* Effect.promise(() => request(port, "GET", "/healthz", undefined, host))).status, 404)
      assert.deepStrictEqual([checks, appended.length, left], [5, 1, ["GET /healthz"]])
    }))

  it.scopedLive("an agent call in gRPC or gRPC-Web is served in that protocol (enveloped answer, status in trailers); a content type no protocol serves is 415", () =>
    Effect.gen(function*() {
      const appended: Array<Uint8Array> = []
      const { left, port } = yield* frontedServer((body) => Effect.sync(() => {
        appended.push(body)
        return new Uint8Array()
      }), 1024, () => Effect.die("no stream may open"))
      const message = new Uint8Array([10, 0])
      const enveloped = new Uint8Array([0, 0, 0, 0, 2, 10, 0])
      const web = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, enveloped, { "content-type": "Application/GRPC-Web" }))
      assert.strictEqual(web.status, 200)
      assert.strictEqual(web.headers["content-type"], "application/grpc-web+proto")
      assert.strictEqual(Buffer.from(web.body).toString("latin1"), "\0\0\0\0\0\x80\0\0\0\x10grpc-status: 0\r\n")
      const grpc = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, enveloped, { "content-type": "application/grpc" }))
      assert.strictEqual(grpc.status, 200)
      assert.strictEqual(grpc.headers["content-type"], "application/grpc+proto")
      assert.deepStrictEqual(appended, [message, message])
      const odd = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, enveloped, { "content-type": "application/grpc-web-text+json" }))
      assert.strictEqual(odd.status, 415)
      assert.deepInclude(JSON.parse(Buffer.from(odd.body).toString()), { code: "unimplemented" })
      assert.deepStrictEqual([appended.length, left], [2, []])
    }))

  it.scopedLive("one request listener: the Effect app served on the listener gets every request but the agent calls; a failure it leaves is a Connect error (internal, or not_found with no route)", () =>
    Effect.gen(function*() {
      const front = new FrontDoor()
      const appended: Array<Uint8Array> = []
      const bidiAppend: TransportService["bidiAppend"] = (body) => Effect.sync(() => {
        appended.push(body)
        return new Uint8Array([7])
      })
      front.agent = Agent.make({ bidiAppend, options: { bidiAppendMaxBytes: 1024, runSseMaxBytes: 1024 } } as unknown as TransportService, runFork)
      const routes = HttpLayerRouter.use((router) =>
        Effect.gen(function*() {
          yield* router.add("GET", "/hello", HttpServerResponse.text("hi"))
          // Never reached: the door sends the agent calls to their wire.
          yield* router.add("POST", BIDI_APPEND_PATH, HttpServerResponse.text("the app's"))
          yield* router.add("GET", "/boom", Effect.dieMessage("boom"))
        }))
      const served = HttpLayerRouter.serve(routes, { disableLogger: true, disableListenLog: true }).pipe(
        Layer.provide(layerServer(front, { port: 0, host: "127.0.0.1" }))
      )
      yield* Layer.build(served)
      const port = (front.server.address() as AddressInfo).port
      assert.strictEqual(front.server.listenerCount("request"), 1)
      const hello = yield* Effect.promise(() => request(port, "GET", "/hello", undefined))
      assert.deepStrictEqual([hello.status, Buffer.from(hello.body).toString()], [200, "hi"])
      const appendAnswer = yield* Effect.promise(() => request(port, "POST", BIDI_APPEND_PATH, new Uint8Array([1])))
      assert.deepStrictEqual([appendAnswer.status, appendAnswer.headers["content-type"], [...appendAnswer.body]], [200, "application/proto", [7]])
      assert.strictEqual(appended.length, 1)
      const boom = yield* Effect.promise(() => request(port, "GET", "/boom", undefined))
      assert.strictEqual(boom.status, 500)
      assert.deepInclude(JSON.parse(Buffer.from(boom.body).toString()), { code: "internal" })
      const nowhere = yield* Effect.promise(() => request(port, "GET", "/nowhere", undefined))
      assert.strictEqual(nowhere.status, 404)
      assert.deepInclude(JSON.parse(Buffer.from(nowhere.body).toString()), { code: "not_found" })
    }))

  it.scopedLive("a request asking for a protocol upgrade goes through the door like any other (no second way into the app)", () =>
    Effect.gen(function*() {
      const front = new FrontDoor()
      front.door = Door.make(() => ({ bindHost: "127.0.0.1", allowedHosts: [], token: undefined }), () => undefined)
      let served = 0
      const app = HttpLayerRouter.use((router) => router.add("GET", "/console", Effect.sync(() => (served += 1, HttpServerResponse.text("the app")))))
      yield* Layer.build(HttpLayerRouter.serve(app, { disableLogger: true, disableListenLog: true }).pipe(Layer.provide(layerServer(front, { port: 0, host: "127.0.0.1" }))))
      const port = (front.server.address() as AddressInfo).port
      const upgrade = { connection: "Upgrade", upgrade: "websocket" }
      const refused = yield* Effect.promise(() => request(port, "GET", "/console", undefined, { ...upgrade, host: "evil.example" }))
      assert.strictEqual(refused.status, 403)
      assert.strictEqual(served, 0)
      const passed = yield* Effect.promise(() => request(port, "GET", "/console", undefined, { ...upgrade, host: `127.0.0.1:${port}` }))
      assert.deepStrictEqual([passed.status, served], [200, 1])
    }))
})
