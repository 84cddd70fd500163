/**
 * The agent front (`transport/Front.ts`): it takes POSTs to BidiAppend and RunSSE before the
 * Effect HTTP server sees them, leaves every other request to it, answers exactly as the Effect
 * routes do, and stops a request's work (or detaches a turn's reader) when its client goes away.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit } from "effect"
import type { Fiber } from "effect"
import type { AddressInfo } from "node:net"
import * as http from "node:http"
import { gzipSync } from "node:zlib"
import type { TransportService } from "../../src/Transport.js"
import { ConnectError } from "../../src/transport/Connect.js"
import { BIDI_APPEND_PATH, RUN_SSE_PATH } from "../../src/Transport.js"
import { FrontedServer, makeFront } from "../../src/transport/Front.js"
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

/** A FrontedServer on an ephemeral port with `transport`'s front and a listener that records what the front left. */
const frontedServer = (bidiAppend: TransportService["bidiAppend"], limit = 1024, runSse?: TransportService["runSse"]) =>
  Effect.acquireRelease(
    Effect.async<{ readonly port: number; readonly left: Array<string>; readonly server: http.Server }>((resume) => {
      const server = new FrontedServer()
      const left: Array<string> = []
      const runFork = <A, E>(effect: Effect.Effect<A, E>) => Effect.runFork(effect) as Fiber.RuntimeFiber<A, E>
      server.front = makeFront({ bidiAppend, runSse, options: { bidiAppendMaxBytes: limit, runSseMaxBytes: limit } } as unknown as TransportService, runFork)
      server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
        left.push(`${req.method} ${req.url}`)
        req.resume()
        res.writeHead(404).end()
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ port: (server.address() as AddressInfo).port, left, server })))
    }),
    ({ server }) => Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
  )

describe("The agent front", () => {
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

  it.scopedLive("RunSSE refused: 200 with one end-stream frame carrying the error, through the front as through the route", () =>
    Effect.gen(function*() {
      const answersOf = (front: boolean) =>
        Effect.scoped(Effect.gen(function*() {
          const harness = yield* ServerHarness.make({ front, transport: { runSseMaxBytes: 64 } })
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
      const front = yield* answersOf(true)
      assert.deepStrictEqual(front, yield* answersOf(false))
      for (const answer of front) assert.match(answer, /^200 application\/connect\+proto 02/)
    }))

  it.scopedLive("through the front and through the Effect route, the same appends get the same answers", () =>
    Effect.gen(function*() {
      const answersOf = (front: boolean) =>
        Effect.scoped(Effect.gen(function*() {
          const harness = yield* ServerHarness.make({ front, scripts: [text("fine", usage(1, 1))], transport: { bidiAppendMaxBytes: 4096 } })
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
      const route = yield* answersOf(false)
      assert.deepStrictEqual(front, route)
      assert.deepStrictEqual(front.map((a) => a.split(" ")[0]), ["200", "200", "200", "400", "400", "400", "429", "200", "501"])
    }))
})
