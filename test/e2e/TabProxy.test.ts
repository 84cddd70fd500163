/**
 * Tab through the intercepting proxy, as Cursor reaches it: the whole server (`Server.layer`,
 * via `HookupHarness`) with its proxy, every Cursor host resolved to a fake Cursor origin (the
 * proxy's test options `resolve` and `originCa`, added by wrapping `Proxy.layer`), and Connect
 * requests made by CONNECT, TLS, then HTTP/1.1 or HTTP/2. Tab on: Tab's own hosts (api4,
 * *.gcpp) are decrypted and StreamCpp, CppConfig and file sync are answered from the FIM model,
 * on api2 and offline too, with nothing reaching the origin. Tab off: Tab's host is a tunnel
 * and StreamCpp on api2 reaches the origin byte for byte.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { NodeContext } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { X509Certificate } from "node:crypto"
import * as Http2 from "node:http2"
import type * as Net from "node:net"
import type * as Tls from "node:tls"
import { vi } from "vitest"
import {
  CppConfigRequestSchema,
  CppConfigResponseSchema,
  FSUploadErrorType,
  FSUploadFileRequestSchema,
  FSUploadFileResponseSchema,
  StreamCppRequestSchema,
  StreamCppResponseSchema
} from "../../src/gen/aiserver/v1/tab_pb.js"
import type { StreamCppResponse } from "../../src/gen/aiserver/v1/tab_pb.js"
import * as Ca from "../../src/hookup/Ca.js"
import type { ProxyOptions } from "../../src/hookup/Proxy.js"
import * as FakeProvider from "../support/FakeProvider.js"
import * as HookupHarness from "../support/HookupHarness.js"
import { http1Via, http2Via, tlsVia } from "../support/ProxyClient.js"
import { tempDirectory } from "../support/Transcripts.js"

/** The fake origin of the test running now: every `*.cursor.sh` the proxy reaches out to goes there. */
const hooks = vi.hoisted(() => ({ origin: undefined as { readonly port: number; readonly ca: string } | undefined }))

vi.mock("../../src/hookup/Proxy.js", async (importOriginal) => {
  const actual = await importOriginal<typeof import("../../src/hookup/Proxy.js")>()
  return {
    ...actual,
    layer: (options: ProxyOptions) =>
      actual.layer({
        ...options,
        resolve: (target) => (hooks.origin !== undefined && target.host.endsWith(".cursor.sh") ? { host: "127.0.0.1", port: hooks.origin.port } : target),
        originCa: hooks.origin === undefined ? undefined : [hooks.origin.ca]
      })
  }
})

const AI = "/aiserver.v1.AiService"
const STREAM_CPP = `${AI}/StreamCpp`
const CONNECT_STREAM = { "content-type": "application/connect+proto", "connect-protocol-version": "1" }
const UNARY = { "content-type": "application/proto", "connect-protocol-version": "1" }
const TAB = { provider: "fake-openai", model: "coder-fim", maxLines: 8 }

const FILE = "export function total(items: Array<number>) {\n  let sum = 0\n  for (const item of items) {\n    sum += \n  }\n  return sum\n}\n"

/** One Connect envelope: flags, big-endian length, the bytes. */
const envelope = (bytes: Uint8Array, flags = 0) => {
  const head = Buffer.alloc(5)
  head.writeUInt8(flags, 0)
  head.writeUInt32BE(bytes.length, 1)
  return Buffer.concat([head, bytes])
}

/** StreamCpp's request for `path` at the cursor (`sum += |`): its contents, or relying on the synced file. */
const streamCpp = (path: string, rely = false) =>
  envelope(toBinary(StreamCppRequestSchema, create(StreamCppRequestSchema, {
    currentFile: { relativeWorkspacePath: path, contents: rely ? "" : FILE, cursorPosition: { line: 3, column: 11 }, languageId: "typescript", relyOnFilesync: rely },
    workspaceId: "ws-1",
    modelName: "coder-fim"
  })))

/** A Connect stream's messages and its end-of-stream JSON. */
const framesOf = (body: Buffer) => {
  const messages: Array<StreamCppResponse> = []
  let end: unknown = undefined
  for (let at = 0; at + 5 <= body.length;) {
    const length = body.readUInt32BE(at + 1)
    const bytes = body.subarray(at + 5, at + 5 + length)
    if ((body[at]! & 2) === 2) end = JSON.parse(bytes.toString("utf8"))
    else messages.push(fromBinary(StreamCppResponseSchema, bytes))
    at += 5 + length
  }
  return { messages, end, suggestion: messages.slice(2, -1).map((m) => m.text).join(""), done: messages.at(-1)?.doneStream === true }
}

/** A fake Cursor origin (its own CA, one leaf for the hosts used here): records TLS connections and requests. */
const fakeOrigin = Effect.gen(function*() {
  const dir = yield* tempDirectory("byok-tab-origin-")
  const ca = yield* Ca.ensure(dir).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
  const leaf = yield* Effect.orDie(Ca.issueLeaf(ca, ["api2.cursor.sh", "api4.cursor.sh", "us-only.gcpp.cursor.sh"]))
  const connections: Array<string> = []
  const requests: Array<{ readonly path: string; readonly contentType: unknown; readonly body: Buffer }> = []
  const server = Http2.createSecureServer({ cert: leaf.certPem, key: leaf.keyPem, allowHTTP1: true }, (request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      requests.push({ path: request.url, contentType: request.headers["content-type"], body: Buffer.concat(chunks) })
      response.writeHead(200, { "content-type": "application/connect+proto" })
      response.end(envelope(Buffer.from(JSON.stringify({ error: { code: "unauthenticated", message: "from the origin" } })), 2))
    })
  })
  const tcp = { count: 0 }
  server.on("connection", () => tcp.count++)
  server.on("secureConnection", (socket: Tls.TLSSocket) => connections.push(String(socket.servername)))
  const port = yield* Effect.acquireRelease(
    Effect.promise(() => new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as Net.AddressInfo).port)))),
    () => Effect.sync(() => (server.close(), hooks.origin = undefined))
  )
  hooks.origin = { port, ca: ca.certPem }
  return { ca, tcp, connections, requests }
})

/** The whole server with its proxy (Tab on or off, offline or not), its fake provider, and the fake origin. */
const serve = (options: { readonly tab: boolean; readonly offline?: boolean }) =>
  Effect.gen(function*() {
    const origin = yield* fakeOrigin
    const provider = yield* FakeProvider.make
    const dir = yield* tempDirectory("cursor-byok-tab-proxy-")
    const config = yield* HookupHarness.configOn({ providerUrl: provider.baseUrl, dir, overrides: options.tab ? { tab: TAB } : {} })
    const { proxyPort } = yield* HookupHarness.serveConfig({ ...config, proxy: { ...config.proxy, offline: options.offline ?? false } })
    const ca = yield* Ca.load(config.home).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
    return { origin, provider, proxyPort, ca }
  })

type World = Effect.Effect.Success<ReturnType<typeof serve>>

/** One POST through the proxy to `host`, over HTTP/1.1 or HTTP/2, trusting only this installation's CA. */
const post = (world: World, version: "1.1" | "2", host: string, path: string, headers: Record<string, string>, body: Uint8Array) =>
  Effect.promise(() => (version === "1.1" ? http1Via : http2Via)(world.proxyPort, host, [world.ca.certPem], { method: "POST", path, headers, body }))

/** StreamCpp for `file` through the proxy, the provider answering `completion`: the frames, checked to be this server's. */
const suggest = (world: World, version: "1.1" | "2", host: string, file: string, completion: string, rely = false) =>
  Effect.gen(function*() {
    world.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions([completion])))
    const answer = yield* post(world, version, host, STREAM_CPP, CONNECT_STREAM, streamCpp(file, rely))
    expect(answer.status).toBe(200)
    if (version === "2") expect((answer as { alpn?: unknown }).alpn).toBe("h2")
    const frames = framesOf(answer.body)
    expect(frames.end).toEqual({})
    expect(frames.done).toBe(true)
    const prompt = String((JSON.parse(world.provider.requests.at(-1)!.body) as Record<string, unknown>)["prompt"])
    expect(prompt).toContain(`Path: ${file}`)
    return { ...frames, prompt }
  })

const nothingReachedTheOrigin = (world: World) => {
  expect(world.origin.tcp.count).toBe(0)
  expect(world.origin.connections).toEqual([])
  expect(world.origin.requests).toEqual([])
}

describe("Tab through the proxy, Tab on", () => {
  it.scopedLive("StreamCpp to api4.cursor.sh and us-only.gcpp.cursor.sh, over HTTP/1.1 and HTTP/2, is answered from the FIM model; nothing reaches Cursor", () =>
    Effect.gen(function*() {
      const world = yield* serve({ tab: true })
      let n = 0
      for (const host of ["api4.cursor.sh", "us-only.gcpp.cursor.sh"]) {
        for (const version of ["1.1", "2"] as const) {
          n++
          const file = `src/total-${n}.ts`
          const frames = yield* suggest(world, version, host, file, `item * ${n}`)
          expect(frames.suggestion).toBe(`    sum += item * ${n}`)
          expect(world.provider.requests).toHaveLength(n)
          expect(world.provider.requests[n - 1]!.path).toBe("/v1/completions")
          expect(frames.prompt.endsWith("for (const item of items) {\n    sum += ")).toBe(true)
        }
      }
      nothingReachedTheOrigin(world)
    }))

  it.scopedLive("on api2.cursor.sh: StreamCpp, CppConfig (is_on) and FSUploadFile are answered here; the synced file reaches the prompt, not Cursor", () =>
    Effect.gen(function*() {
      const world = yield* serve({ tab: true })
      for (const version of ["1.1", "2"] as const) {
        const frames = yield* suggest(world, version, "api2.cursor.sh", `src/api2-${version}.ts`, "item")
        expect(frames.suggestion).toBe("    sum += item")
      }
      const config = yield* post(world, "1.1", "api2.cursor.sh", `${AI}/CppConfig`, UNARY, toBinary(CppConfigRequestSchema, create(CppConfigRequestSchema, {})))
      expect(config.status).toBe(200)
      expect(fromBinary(CppConfigResponseSchema, config.body).isOn).toBe(true)
      const secret = "export const SECRET_SAUCE = 42\n"
      const upload = yield* post(world, "1.1", "api2.cursor.sh", "/aiserver.v1.FileSyncService/FSUploadFile", UNARY, toBinary(FSUploadFileRequestSchema, create(FSUploadFileRequestSchema, {
        uuid: "ws-1",
        relativeWorkspacePath: "src/secret.ts",
        contents: secret + FILE,
        modelVersion: 1
      })))
      expect(upload.status).toBe(200)
      expect(fromBinary(FSUploadFileResponseSchema, upload.body).error).toBe(FSUploadErrorType.FS_UPLOAD_ERROR_TYPE_UNSPECIFIED)
      // A request relying on file sync reads the uploaded text: it was kept here.
      const synced = yield* suggest(world, "1.1", "api2.cursor.sh", "src/secret.ts", "item", true)
      expect(synced.prompt).toContain("SECRET_SAUCE")
      nothingReachedTheOrigin(world)
    }))

  it.scopedLive("offline: StreamCpp on api4 and api2 is answered here", () =>
    Effect.gen(function*() {
      const world = yield* serve({ tab: true, offline: true })
      expect((yield* suggest(world, "2", "api4.cursor.sh", "src/offline-4.ts", "item + 4")).suggestion).toBe("    sum += item + 4")
      expect((yield* suggest(world, "1.1", "api2.cursor.sh", "src/offline-2.ts", "item + 2")).suggestion).toBe("    sum += item + 2")
      nothingReachedTheOrigin(world)
    }))
})

describe("Tab through the proxy, Tab off", () => {
  it.scopedLive("a CONNECT to api4.cursor.sh:443 is a tunnel to Cursor, never decrypted; StreamCpp on api2 reaches Cursor byte for byte", () =>
    Effect.gen(function*() {
      const world = yield* serve({ tab: false })
      const socket = yield* Effect.promise(() => tlsVia(world.proxyPort, "api4.cursor.sh", 443, [world.origin.ca.certPem], ["http/1.1"]))
      const seen = new X509Certificate(socket.getPeerCertificate().raw)
      expect(seen.checkIssued(new X509Certificate(world.origin.ca.certPem))).toBe(true)
      expect(seen.checkIssued(new X509Certificate(world.ca.certPem))).toBe(false)
      // The origin's side of the handshake ends a moment after the client's.
      for (let i = 0; i < 100 && world.origin.connections.length === 0; i++) yield* Effect.sleep("20 millis")
      expect(world.origin.connections).toEqual(["api4.cursor.sh"])
      socket.destroy()
      const refused = yield* Effect.promise(() =>
        tlsVia(world.proxyPort, "api4.cursor.sh", 443, [world.ca.certPem], ["http/1.1"]).then((s) => (s.destroy(), "verified"), (error: Error) => error.message)
      )
      expect(refused).not.toBe("verified")

      const request = streamCpp("src/total.ts")
      const answer = yield* post(world, "1.1", "api2.cursor.sh", STREAM_CPP, CONNECT_STREAM, request)
      expect(world.origin.requests).toHaveLength(1)
      expect(world.origin.requests[0]!.path).toBe(STREAM_CPP)
      expect(world.origin.requests[0]!.contentType).toBe("application/connect+proto")
      expect(world.origin.requests[0]!.body.equals(request)).toBe(true)
      expect(framesOf(answer.body).end).toEqual({ error: { code: "unauthenticated", message: "from the origin" } })
      expect(world.provider.requests).toHaveLength(0)
    }))
})
