/**
 * Protocol drift on the wire: the agent calls' unknown fields are counted under the request's
 * `x-cursor-client-version` (the front door passes it down: `front/Agent.ts` for BidiAppend and
 * RunSSE, `front/Run.ts` for `Run`), and a request without it under `unknown`. The counting
 * itself is `test/dialect/Drift.test.ts`.
 */
import { create, toBinary } from "@bufbuild/protobuf"
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http2 from "node:http2"
import * as Drift from "../../src/Drift.js"
import { AgentClientMessageSchema } from "../../src/gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiRequestIdSchema } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { clientHeartbeat, envelope, toHex } from "../support/CursorClient.js"
import * as ServerHarness from "../support/ServerHarness.js"

const APPEND = "/aiserver.v1.BidiService/BidiAppend"
const RUN_SSE = "/agent.v1.AgentService/RunSSE"

const concat = (a: Uint8Array, b: Uint8Array): Uint8Array => {
  const out = new Uint8Array(a.length + b.length)
  out.set(a)
  out.set(b, a.length)
  return out
}

/** A tag the schema does not name, as a newer client would add it. */
const extraField = (no: number): Uint8Array => new BinaryWriter().tag(no, WireType.Varint).uint32(1).finish()

const heartbeatWith = (no: number): Uint8Array => concat(toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, clientHeartbeat())), extraField(no))

const kindOf = (type: string, field: number, version: string) =>
  Drift.kindsSeen().find((k) => k.type === type && k.field === field && k.clientVersion === version)

/** Waits (up to 3 s) for the server to have counted the kind. */
const seen = (type: string, field: number, version: string) =>
  Effect.promise(async () => {
    for (let i = 0; i < 150 && kindOf(type, field, version) === undefined; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    return kindOf(type, field, version)
  })

/** POSTs, reading no answer (an append behind a gap is answered only after seconds); the request is aborted when the test's scope closes. */
const post = (baseUrl: string, path: string, body: Uint8Array, headers: Record<string, string>) =>
  Effect.gen(function*() {
    const controller = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
    fetch(`${baseUrl}${path}`, { method: "POST", body, headers: { "connect-protocol-version": "1", ...headers }, signal: controller.signal }).catch(() => undefined)
  })

describe("protocol drift on the wire", () => {
  it.scopedLive("BidiAppend, RunSSE and Run count their unknown fields under x-cursor-client-version", () =>
    Effect.gen(function*() {
      const harness = yield* ServerHarness.make({ transport: { heartbeatMs: 50 } })
      const version = "3.99.1-wire"

      const append = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { data: toHex(heartbeatWith(201)), requestId: { requestId: "drift-wire" }, appendSeqno: 1n }))
      yield* post(harness.baseUrl, APPEND, concat(append, extraField(202)), { "content-type": "application/proto", "x-cursor-client-version": version })
      assert.strictEqual((yield* seen("agent.v1.AgentClientMessage", 201, version))?.count, 1)
      assert.strictEqual((yield* seen("aiserver.v1.BidiAppendRequest", 202, version))?.count, 1)

      const runSse = envelope(0, concat(toBinary(BidiRequestIdSchema, create(BidiRequestIdSchema, { requestId: "drift-wire" })), extraField(203)))
      yield* post(harness.baseUrl, RUN_SSE, runSse, { "content-type": "application/connect+proto", "x-cursor-client-version": version })
      assert.strictEqual((yield* seen("aiserver.v1.BidiRequestId", 203, version))?.count, 1)

      // No header: counted all the same, under `unknown`.
      const bare = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { data: toHex(heartbeatWith(204)), requestId: { requestId: "drift-bare" }, appendSeqno: 1n }))
      yield* post(harness.baseUrl, APPEND, bare, { "content-type": "application/proto" })
      assert.strictEqual((yield* seen("agent.v1.AgentClientMessage", 204, Drift.NO_VERSION))?.count, 1)

      // `Run` (HTTP/2, h2c): a heartbeat carrying field 205, on a stream left open.
      const session = Http2.connect(harness.h2cUrl)
      session.on("error", () => undefined)
      yield* Effect.addFinalizer(() => Effect.sync(() => session.destroy()))
      const stream = session.request({
        ":method": "POST",
        ":path": "/agent.v1.AgentService/Run",
        "content-type": "application/connect+proto",
        "connect-protocol-version": "1",
        "x-request-id": "drift-run",
        "x-cursor-client-version": version
      })
      stream.on("error", () => undefined)
      stream.resume()
      stream.write(envelope(0, heartbeatWith(205)))
      assert.strictEqual((yield* seen("agent.v1.AgentClientMessage", 205, version))?.count, 1)
      stream.close()
    }))
})
