/**
 * The IDE's way in, end to end on the real server (`Server.layer`, as `serve` runs it): a client
 * that trusts only the installation's CA reaches the server through the proxy as Cursor does
 * (CONNECT api2.cursor.sh:443, TLS, HTTP/1.1), lists the configured models and runs a whole
 * RunSSE + BidiAppend turn; the TLS listener (the agent URL GetServerConfig names) hands
 * RunSSE and the side RPCs on to the HTTP/1.1 server, over HTTP/1.1 and HTTP/2 alike.
 */
import { fromBinary, toBinary, create } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Http2 from "node:http2"
import * as Https from "node:https"
import { AvailableModelsRequestSchema, AvailableModelsResponseSchema, GetServerConfigResponseSchema, Http2Config } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { CursorClient } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import * as HookupHarness from "../support/HookupHarness.js"
import { http1Via, proxyAgent } from "../support/ProxyClient.js"
import { assertCleanOk } from "../support/Transcripts.js"

const serve = HookupHarness.make()

describe("the IDE hookup on the real server", () => {
  it.scopedLive("through the proxy, trusting only our CA: the model list and a whole RunSSE turn reach this server", () =>
    Effect.gen(function*() {
      const server = yield* serve
      const listed = yield* Effect.promise(() =>
        http1Via(server.proxyPort, "api2.cursor.sh", [server.ca.certPem], {
          method: "POST",
          path: "/aiserver.v1.AiService/AvailableModels",
          headers: { "content-type": "application/proto" },
          body: toBinary(AvailableModelsRequestSchema, create(AvailableModelsRequestSchema, {}))
        })
      )
      assert.strictEqual(listed.status, 200)
      assert.deepStrictEqual(fromBinary(AvailableModelsResponseSchema, listed.body).modelNames, ["fake-model", "fake-claude", "fake-gemini"])

      server.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("hello through the proxy")))
      const client = yield* Effect.acquireRelease(
        Effect.sync(() => new CursorClient({ baseUrl: "https://api2.cursor.sh", agent: proxyAgent(server.proxyPort, [server.ca.certPem]), turnTimeoutMs: 20_000 })),
        (c) => Effect.sync(() => c.close())
      )
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-proxy", text: "hi" }))
      assertCleanOk(transcript)
      assert.strictEqual(transcript.text, "hello through the proxy")
      assert.isAbove(transcript.checkpoints.length, 0)
    }))

  it.scopedLive("GetServerConfig names the TLS listener (its leaf from our CA); there a RunSSE turn works over HTTP/1.1 and a side RPC over h2 (Run over TLS: RunBadInput)", () =>
    Effect.gen(function*() {
      const server = yield* serve
      const config = yield* Effect.promise(() =>
        http1Via(server.proxyPort, "api2.cursor.sh", [server.ca.certPem], {
          method: "POST",
          path: "/aiserver.v1.AiService/GetServerConfig",
          headers: { "content-type": "application/proto" },
          body: new Uint8Array()
        })
      )
      const answer = fromBinary(GetServerConfigResponseSchema, config.body)
      assert.strictEqual(answer.http2Config, Http2Config.UNSPECIFIED)
      assert.match(answer.agentUrlConfig?.agentnUrl ?? "", /^https:\/\/127\.0\.0\.1:\d+$/)

      // HTTP/1.1 on the agent URL: a whole RunSSE turn, with the CA-issued loopback leaf verified.
      server.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("over the agent URL")))
      const agent = new Https.Agent({ keepAlive: true, ca: server.ca.certPem })
      const client = yield* Effect.acquireRelease(
        Effect.sync(() => new CursorClient({ baseUrl: `https://127.0.0.1:${server.tlsPort}`, agent, turnTimeoutMs: 20_000 })),
        (c) => Effect.sync(() => c.close())
      )
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-agent-url", text: "hi" }))
      assertCleanOk(transcript)
      assert.strictEqual(transcript.text, "over the agent URL")

      // HTTP/2 on the agent URL: a side RPC is handed on, not refused.
      const session = yield* Effect.acquireRelease(
        Effect.sync(() => {
          const s = Http2.connect(`https://127.0.0.1:${server.tlsPort}`, { ca: server.ca.certPem })
          s.on("error", () => undefined)
          return s
        }),
        (s) => Effect.sync(() => s.destroy())
      )
      const models = yield* Effect.promise(() =>
        new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
          const stream = session.request({ ":method": "POST", ":path": "/aiserver.v1.AiService/AvailableModels", "content-type": "application/proto" })
          const chunks: Array<Buffer> = []
          let status = 0
          stream.on("response", (headers) => (status = Number(headers[":status"])))
          stream.on("data", (chunk: Buffer) => chunks.push(chunk))
          stream.on("end", () => resolve({ status, body: Buffer.concat(chunks) }))
          stream.on("error", reject)
          stream.end()
        })
      )
      assert.strictEqual(models.status, 200)
      // Issued once per start, so valid for a year (the proxy's leaves are renewed as they run).
      const validTo = Date.parse((session.socket as unknown as { getPeerCertificate: () => { valid_to: string } }).getPeerCertificate().valid_to)
      assert.isAbove(validTo - Date.now(), 360 * 86_400_000)
      assert.strictEqual(fromBinary(AvailableModelsResponseSchema, models.body).modelNames.length, 3)
    }))
})
