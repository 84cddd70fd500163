/**
 * The three protocols a Connect server answers, spoken by the official `@connectrpc/connect-node`
 * clients: Connect, gRPC and gRPC-Web, on every agent call (BidiAppend, RunSSE, `Run`) and side
 * RPC, on each listener (HTTP/1.1, h2c, TLS). A whole turn goes through each; errors come back
 * in each protocol's own form; gRPC-Web's text form and the exact request of a third-party
 * client (an enveloped BidiAppend) are read.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import type { DescMethod, DescMethodUnary } from "@bufbuild/protobuf"
import { Code, ConnectError, createClient } from "@connectrpc/connect"
import type { Transport } from "@connectrpc/connect"
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentClientMessageSchema, AgentService } from "../../src/gen/agent/v1/agent_pb.js"
import type { AgentServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import { AuthService, DashboardService } from "../../src/gen/aiserver/v1/account_pb.js"
import { AiService, BidiAppendRequestSchema, BidiService, ServerConfigService } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { AnalyticsService, NetworkService } from "../../src/gen/aiserver/v1/telemetry_pb.js"
import * as SideRpcs from "../../src/transport/SideRpcs.js"
import * as AppHarness from "../support/AppHarness.js"
import { freePort } from "../support/ChildServer.js"
import { runRequestMessage, toHex } from "../support/CursorClient.js"
import { blobAck, runTurn, selfSignedCert, sseTurn, transportOf } from "../support/OfficialClients.js"
import type { HttpVersion, ProtocolName } from "../support/OfficialClients.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { tempDirectory } from "../support/Transcripts.js"

const textOf = (messages: ReadonlyArray<AgentServerMessage>) =>
  messages.flatMap((m) => m.message.case === "interactionUpdate" && m.message.value.message.case === "textDelta" ? [m.message.value.message.value.text] : []).join("")

const failureOf = (promise: Promise<unknown>) => promise.then(() => undefined, (error: unknown) => error)

const PROTOCOLS: ReadonlyArray<ProtocolName> = ["connect", "grpc", "grpc-web"]

describe("the official Connect clients in all three protocols", () => {
  it.scopedLive("a whole turn on RunSSE + BidiAppend and on Run, and the side calls, in Connect, gRPC and gRPC-Web (HTTP/1.1 where the protocol allows, and h2c)", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { blobAckTimeoutMs: 2_000 } })
      const wires: Array<[ProtocolName, "sse" | "run", string, HttpVersion]> = []
      for (const protocol of PROTOCOLS) {
        // gRPC needs HTTP/2; Connect and gRPC-Web also run over HTTP/1.1.
        if (protocol !== "grpc") wires.push([protocol, "sse", app.baseUrl, "1.1"])
        wires.push([protocol, "sse", app.h2cUrl, "2"], [protocol, "run", app.h2cUrl, "2"])
      }
      for (const [protocol, wire, baseUrl, httpVersion] of wires) {
        const label = `${protocol} ${wire} HTTP/${httpVersion}`
        const transport = transportOf(protocol, baseUrl, httpVersion)
        const conversationId = `c-${protocol}-${wire}-${httpVersion.replace(".", "")}`
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text(`answer over ${label}`)))
        const messages = yield* Effect.promise(() => (wire === "sse" ? sseTurn : runTurn)(transport, conversationId, `hello over ${label}`))
        assert.strictEqual(textOf(messages), `answer over ${label}`, label)
        assert.isTrue(messages.some((m) => m.message.case === "conversationCheckpointUpdate"), label)
        // The side calls at the same URL.
        const usable = yield* Effect.promise(() => createClient(AgentService, transport).getUsableModels({}))
        assert.include(usable.models.map((m) => m.modelId), "fake-model", label)
        const time = yield* Effect.promise(() => createClient(AiService, transport).serverTime({}))
        assert.isAbove(Number(time.transmitTimestamp), 0, label)
      }
      // Every turn reached the provider once, with its own message.
      assert.strictEqual(app.provider.requests.length, wires.length)
    }))

  it.scopedLive("every side RPC of the table answers in each protocol, on HTTP/1.1 (Connect, gRPC-Web) and h2c (all three)", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const methods = new Map<string, DescMethod>()
      for (const service of [AgentService, AiService, BidiService, ServerConfigService, AuthService, DashboardService, NetworkService, AnalyticsService]) {
        for (const method of service.methods) methods.set(`/${service.typeName}/${method.name}`, method)
      }
      const rpcs = SideRpcs.procedures.filter((p) => p.kind === "rpc").map((p) => p.path)
      assert.isAtLeast(rpcs.length, 20)
      /** A path our schema has under another service (Cursor serves some procedures in two): that method, under this path's service. */
      const byName = (path: string): DescMethod | undefined => {
        const [, typeName = "", name = ""] = path.split("/")
        const other = [...methods.values()].find((m) => m.name === name)
        return other === undefined ? undefined : { ...other, parent: { ...other.parent, typeName } } as DescMethod
      }
      for (const path of rpcs) {
        const method = methods.get(path) ?? byName(path)
        assert.isDefined(method, `${path} is not in our services' schema`)
        for (const [protocol, baseUrl, httpVersion] of [["connect", app.baseUrl, "1.1"], ["grpc-web", app.baseUrl, "1.1"], ["connect", app.h2cUrl, "2"], ["grpc", app.h2cUrl, "2"], ["grpc-web", app.h2cUrl, "2"]] as const) {
          const transport = transportOf(protocol, baseUrl, httpVersion)
          const answer: unknown = yield* Effect.promise((): Promise<unknown> =>
            transport.unary(method as DescMethodUnary, undefined, 10_000, undefined, {}, undefined).then((r) => r.message, (error: unknown) => error))
          assert.notInstanceOf(answer, ConnectError, `${path} in ${protocol} over HTTP/${httpVersion}: ${answer instanceof ConnectError ? answer.message : ""}`)
        }
      }
    }))

  it.scopedLive("a request the door refuses (a hostile Origin) is refused in its own protocol: gRPC and gRPC-Web clients read permission_denied and the reason", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      for (const [protocol, baseUrl, httpVersion] of [["grpc", app.h2cUrl, "2"], ["grpc-web", app.baseUrl, "1.1"], ["grpc-web", app.h2cUrl, "2"], ["connect", app.baseUrl, "1.1"]] as const) {
        const label = `${protocol} HTTP/${httpVersion}`
        const transport = transportOf(protocol, baseUrl, httpVersion)
        const refused = yield* Effect.promise(() =>
          failureOf(createClient(AgentService, transport).getUsableModels({}, { headers: { origin: "https://evil.example" } })))
        assert.instanceOf(refused, ConnectError, label)
        assert.strictEqual((refused as ConnectError).code, Code.PermissionDenied, label)
        assert.match((refused as ConnectError).rawMessage, /origin/i, label)
      }
    }))

  it.scopedLive("errors in each protocol's own form: a bad append is invalid_argument, an unknown procedure unimplemented", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      for (const protocol of PROTOCOLS) {
        for (const [baseUrl, httpVersion] of [[app.baseUrl, "1.1"], [app.h2cUrl, "2"]] as const) {
          if (protocol === "grpc" && httpVersion === "1.1") continue
          const label = `${protocol} HTTP/${httpVersion}`
          const transport = transportOf(protocol, baseUrl, httpVersion)
          const refused = yield* Effect.promise(() => failureOf(createClient(BidiService, transport).bidiAppend({ appendSeqno: 0n, data: "00" })))
          assert.instanceOf(refused, ConnectError, label)
          assert.strictEqual((refused as ConnectError).code, Code.InvalidArgument, label)
          assert.include((refused as ConnectError).rawMessage, "request_id", label)
          // A procedure this server does not have.
          const unknown = yield* Effect.promise(() =>
            failureOf(transport.unary({ ...AiService.method.serverTime, name: "NoSuchProcedure", parent: { ...AiService, typeName: "aiserver.v1.AiService" } } as typeof AiService.method.serverTime, undefined, undefined, undefined, {}, undefined))
          )
          assert.instanceOf(unknown, ConnectError, label)
          assert.strictEqual((unknown as ConnectError).code, Code.Unimplemented, label)
        }
      }
    }))

  it.scopedLive("over a real TLS handshake, in each protocol: Run and the side calls at the agent URL Cursor is given", () =>
    Effect.gen(function*() {
      const { cert, certFile, keyFile } = selfSignedCert(yield* tempDirectory("cursor-byok-grpc-tls-"))
      const port = yield* Effect.promise(() => freePort())
      const app = yield* AppHarness.make({ config: { blobAckTimeoutMs: 2_000, http2: { cleartextPort: null, tls: { port, certFile, keyFile } } } })
      const baseUrl = `https://127.0.0.1:${port}`
      for (const protocol of PROTOCOLS) {
        const transport = transportOf(protocol, baseUrl, "2", cert)
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text(`tls ${protocol}`)))
        const messages = yield* Effect.promise(() => runTurn(transport, `c-tls-${protocol}`, "hi"))
        assert.strictEqual(textOf(messages), `tls ${protocol}`)
        const usable = yield* Effect.promise(() => createClient(AgentService, transport).getUsableModels({}))
        assert.include(usable.models.map((m) => m.modelId), "fake-model")
      }
    }))
})

/** An envelope: flags, a 4-byte big-endian length, the payload. */
const envelope = (flags: number, payload: Uint8Array) => {
  const out = Buffer.alloc(5 + payload.length)
  out[0] = flags
  out.writeUInt32BE(payload.length, 1)
  out.set(payload, 5)
  return out
}

/** The envelopes of a body: [flags, payload] each. */
const envelopesOf = (body: Buffer): Array<[number, Buffer]> => {
  const out: Array<[number, Buffer]> = []
  for (let at = 0; at + 5 <= body.length;) {
    const length = body.readUInt32BE(at + 1)
    out.push([body[at]!, body.subarray(at + 5, at + 5 + length)])
    at += 5 + length
  }
  return out
}

describe("gRPC-Web as third-party clients send it", () => {
  it.scopedLive("an enveloped BidiAppend (application/grpc-web+proto, as a published client sends it) is taken: an enveloped empty answer and a grpc-status 0 trailer frame; the turn completes", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { blobAckTimeoutMs: 2_000 } })
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("from grpc-web")))
      const conversationId = "c-grpc-web-raw"
      const requestId = "req-grpc-web-raw"
      const run = toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, runRequestMessage({ conversationId, text: "hi", messageId: "m1" })))
      const append = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId }, appendSeqno: 0n, data: toHex(run) }))
      const answer = yield* Effect.promise(() =>
        fetch(`${app.baseUrl}/aiserver.v1.BidiService/BidiAppend`, { method: "POST", headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" }, body: envelope(0, append) }))
      assert.strictEqual(answer.status, 200)
      assert.strictEqual(answer.headers.get("content-type"), "application/grpc-web+proto")
      const frames = envelopesOf(Buffer.from(yield* Effect.promise(() => answer.arrayBuffer())))
      assert.deepStrictEqual(frames.map(([flags, payload]) => [flags, payload.toString("latin1")]), [[0, ""], [0x80, "grpc-status: 0\r\n"]])
      // The rest of the turn with the official gRPC-Web client.
      const transport = transportOf("grpc-web", app.baseUrl, "1.1")
      const messages: Array<AgentServerMessage> = []
      let seqno = 1
      yield* Effect.promise(async () => {
        for await (const message of createClient(AgentService, transport).runSSE({ requestId }, { timeoutMs: 15_000 })) {
          messages.push(message)
          const ack = blobAck(message)
          if (ack !== undefined) {
            await createClient(BidiService, transport).bidiAppend({ requestId: { requestId }, appendSeqno: BigInt(seqno++), data: toHex(toBinary(AgentClientMessageSchema, ack)) })
          }
        }
      })
      assert.strictEqual(textOf(messages), "from grpc-web")
    }))

  it.scopedLive("gRPC-Web's text form: a base64 request is read, the answer and its trailers come back in base64; a bad append's error is a grpc-status trailer", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const post = (body: Uint8Array) =>
        Effect.promise(async () => {
          const response = await fetch(`${app.baseUrl}/aiserver.v1.AiService/ServerTime`, {
            method: "POST",
            headers: { "content-type": "application/grpc-web-text", accept: "application/grpc-web-text" },
            body: Buffer.from(envelope(0, body)).toString("base64")
          })
          return { status: response.status, type: response.headers.get("content-type"), frames: envelopesOf(Buffer.from(await response.text(), "base64")) }
        })
      const time = yield* post(new Uint8Array())
      assert.strictEqual(time.status, 200)
      assert.strictEqual(time.type, "application/grpc-web-text+proto")
      assert.strictEqual(time.frames.length, 2)
      assert.strictEqual(time.frames[1]![0], 0x80)
      assert.strictEqual(time.frames[1]![1].toString("latin1"), "grpc-status: 0\r\n")
      assert.isAbove(Number(fromBinary(AiService.method.serverTime.output, time.frames[0]![1]).transmitTimestamp), 0)
      // Two messages where a unary call takes one: invalid_argument, in a trailer.
      const twice = yield* Effect.promise(async () => {
        const response = await fetch(`${app.baseUrl}/aiserver.v1.AiService/ServerTime`, {
          method: "POST",
          headers: { "content-type": "application/grpc-web-text" },
          body: Buffer.concat([envelope(0, new Uint8Array()), envelope(0, new Uint8Array())]).toString("base64")
        })
        return envelopesOf(Buffer.from(await response.text(), "base64"))
      })
      assert.strictEqual(twice.length, 1)
      assert.match(twice[0]![1].toString("latin1"), /^grpc-status: 3\r\ngrpc-message: a unary call takes one enveloped message, not 2\r\n$/)
    }))

  it.scopedLive("a content type no protocol serves is 415 with a readable error naming it", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const odd = yield* Effect.promise(() =>
        fetch(`${app.baseUrl}/aiserver.v1.BidiService/BidiAppend`, { method: "POST", headers: { "content-type": "application/grpc-web-text+json" }, body: "e30=" }))
      assert.strictEqual(odd.status, 415)
      assert.include(((yield* Effect.promise(() => odd.json())) as { message: string }).message, "application/grpc-web-text+json")
    }))

  it.scopedLive("the agent calls in a JSON codec: a whole turn with the official clients' JSON form (Connect, gRPC, gRPC-Web); a malformed JSON append is invalid_argument", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { blobAckTimeoutMs: 2_000 } })
      const transports: Array<[string, Transport]> = [
        ["connect", createConnectTransport({ baseUrl: app.baseUrl, httpVersion: "1.1", useBinaryFormat: false })],
        ["grpc", createGrpcTransport({ baseUrl: app.h2cUrl, useBinaryFormat: false })],
        ["grpc-web", createGrpcWebTransport({ baseUrl: app.baseUrl, httpVersion: "1.1", useBinaryFormat: false })]
      ]
      for (const [label, transport] of transports) {
        app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text(`json over ${label}`)))
        const messages = yield* Effect.promise(() => sseTurn(transport, `c-json-${label}`, "hi"))
        assert.strictEqual(textOf(messages), `json over ${label}`, label)
        assert.isTrue(messages.some((m) => m.message.case === "conversationCheckpointUpdate"), label)
      }
      const malformed = yield* Effect.promise(() =>
        fetch(`${app.baseUrl}/aiserver.v1.BidiService/BidiAppend`, { method: "POST", headers: { "content-type": "application/json" }, body: "{\"appendSeqno\": \"x\"}" }))
      assert.strictEqual(malformed.status, 400)
      assert.include(((yield* Effect.promise(() => malformed.json())) as { message: string }).message, "BidiAppendRequest")
    }))
})
