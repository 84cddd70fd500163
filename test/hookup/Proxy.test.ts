/**
 * The intercepting proxy on loopback, with a fake "Cursor" TLS origin (its own CA, a leaf for
 * api2.cursor.sh) and a stub of this server: owned procedures reach this server, the rest the
 * origin byte for byte (trailers kept), other hosts are tunneled undecrypted, an upstream proxy
 * carries every outgoing connection, and bad clients are closed while others go on.
 */
import { describe, expect, it } from "@effect/vitest"
import { NodeContext } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import { randomBytes, X509Certificate } from "node:crypto"
import { mkdtempSync } from "node:fs"
import * as Http from "node:http"
import * as Http2 from "node:http2"
import * as Net from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Ca from "../../src/hookup/Ca.js"
import * as Proxy from "../../src/hookup/Proxy.js"
import { parseNoProxy } from "../../src/Config.js"
import { bypasses } from "../../src/hookup/proxy/Upstream.js"
import { connectTunnel, fakeUpstreamProxy, http1Via, http2Via, tlsVia } from "../support/ProxyClient.js"

const OWNED = "/aiserver.v1.AiService/AvailableModels"
const UNOWNED = "/aiserver.v1.DashboardService/GetTeams"

const home = () => mkdtempSync(join(tmpdir(), "byok-proxy-"))
const authorityIn = (dir: string) => Effect.runPromise(Ca.ensure(dir).pipe(Effect.provide(NodeContext.layer)))

const listen = (server: Net.Server) =>
  new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as Net.AddressInfo).port)))

const readAll = (request: Http.IncomingMessage | Http2.Http2ServerRequest) =>
  new Promise<Buffer>((resolve) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks)))
  })

/** The fake Cursor origin: echoes method, path and body, with a header and a trailer. */
const fakeOrigin = async () => {
  const originCa = await authorityIn(home())
  const leaf = await Effect.runPromise(Ca.issueLeaf(originCa, ["api2.cursor.sh", "downloads.cursor.sh"]))
  const server = Http2.createSecureServer({ cert: leaf.certPem, key: leaf.keyPem, allowHTTP1: true }, async (request, response) => {
    const body = await readAll(request)
    response.writeHead(201, { "content-type": "application/proto", "x-origin": "fake", ...(request.httpVersionMajor === 2 ? {} : { trailer: "x-trailer" }) })
    response.addTrailers({ "x-trailer": "kept" })
    response.end(Buffer.concat([Buffer.from(`ORIGIN ${request.method} ${request.url}\n`), body]))
  })
  return { port: await listen(server), ca: originCa, server }
}

/** The stub of this server's HTTP/1.1 listener. */
const fakeLocal = async () => {
  const server = Http.createServer(async (request, response) => {
    const body = await readAll(request)
    response.writeHead(200, { "content-type": "application/proto" })
    response.end(Buffer.concat([Buffer.from(`LOCAL ${request.method} ${request.url}\n`), body]))
  })
  return { port: await listen(server), server }
}

interface World {
  readonly proxyPort: number
  readonly ca: Ca.Authority
  readonly origin: Awaited<ReturnType<typeof fakeOrigin>>
}

const world = (overrides: Partial<Proxy.ProxyOptions> = {}) =>
  Effect.gen(function*() {
    const ca = yield* Effect.promise(() => authorityIn(home()))
    const origin = yield* Effect.promise(fakeOrigin)
    const local = yield* Effect.promise(fakeLocal)
    yield* Effect.addFinalizer(() => Effect.sync(() => (origin.server.close(), local.server.close())))
    const context = yield* Layer.build(Proxy.layer({
      host: "127.0.0.1",
      port: 0,
      authority: ca,
      routing: { local: new Set([OWNED]), offline: false },
      local: { host: "127.0.0.1", port: local.port, h2cPort: undefined },
      upstream: undefined,
      resolve: (target) => target.host.endsWith(".cursor.sh") ? { host: "127.0.0.1", port: origin.port } : target,
      originCa: [origin.ca.certPem],
      idleHandshakeMs: 300,
      ...overrides
    }))
    const world: World = { proxyPort: Context.get(context, Proxy.ProxyEndpoint).port!, ca, origin }
    return world
  })

const rawExchange = (port: number, bytes: string) =>
  new Promise<string>((resolve) => {
    const socket = Net.connect({ host: "127.0.0.1", port }, () => {
      if (bytes !== "") socket.write(bytes)
    })
    let text = ""
    socket.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")))
    socket.on("close", () => resolve(text))
    socket.on("error", () => undefined)
  })

describe("the intercepting proxy", () => {
  it.scoped("an owned procedure on a Cursor host reaches this server; an unowned one reaches the origin byte for byte (HTTP/1.1)", () =>
    Effect.gen(function*() {
      const { proxyPort, ca } = yield* world()
      const body = randomBytes(200_000)
      const owned = yield* Effect.promise(() => http1Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: OWNED, body }))
      expect(owned.status).toBe(200)
      expect(owned.body.equals(Buffer.concat([Buffer.from(`LOCAL POST ${OWNED}\n`), body]))).toBe(true)
      const unowned = yield* Effect.promise(() => http1Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: UNOWNED, body }))
      expect(unowned.status).toBe(201)
      expect(unowned.headers["x-origin"]).toBe("fake")
      expect(unowned.body.equals(Buffer.concat([Buffer.from(`ORIGIN POST ${UNOWNED}\n`), body]))).toBe(true)
      expect(unowned.trailers["x-trailer"]).toBe("kept")
    }))

  it.scoped("over HTTP/2 the same routing holds and the origin's trailers are kept", () =>
    Effect.gen(function*() {
      const { proxyPort, ca } = yield* world()
      const body = randomBytes(100_000)
      const owned = yield* Effect.promise(() => http2Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: OWNED, body }))
      expect(owned.alpn).toBe("h2")
      expect(owned.body.equals(Buffer.concat([Buffer.from(`LOCAL POST ${OWNED}\n`), body]))).toBe(true)
      const unowned = yield* Effect.promise(() => http2Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: UNOWNED, body }))
      expect(unowned.status).toBe(201)
      expect(unowned.body.equals(Buffer.concat([Buffer.from(`ORIGIN POST ${UNOWNED}\n`), body]))).toBe(true)
      expect(unowned.trailers["x-trailer"]).toBe("kept")
    }))

  it.scoped("offline, every procedure on a Cursor host is answered by this server", () =>
    Effect.gen(function*() {
      const { proxyPort, ca } = yield* world({ routing: { local: new Set([OWNED]), offline: true } })
      const answer = yield* Effect.promise(() => http1Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: UNOWNED, body: Buffer.from("x") }))
      expect(answer.body.toString()).toBe(`LOCAL POST ${UNOWNED}\nx`)
    }))

  it.scoped("a CONNECT to any other host is a tunnel: the client sees that origin's own certificate, and ours does not verify there", () =>
    Effect.gen(function*() {
      const { proxyPort, ca, origin } = yield* world()
      // downloads.cursor.sh is not one of the API hosts: the proxy must not decrypt it.
      const socket = yield* Effect.promise(() => tlsVia(proxyPort, "downloads.cursor.sh", 443, [origin.ca.certPem], ["http/1.1"]))
      const seen = new X509Certificate(socket.getPeerCertificate().raw)
      expect(seen.checkIssued(new X509Certificate(origin.ca.certPem))).toBe(true)
      expect(seen.checkIssued(new X509Certificate(ca.certPem))).toBe(false)
      socket.destroy()
      const refused = yield* Effect.promise(() => tlsVia(proxyPort, "downloads.cursor.sh", 443, [ca.certPem], ["http/1.1"]).then(() => "verified", (error: Error) => error.message))
      expect(refused).not.toBe("verified")
    }))

  it.scoped("with an upstream proxy, tunnels and forwards to Cursor both go through it", () =>
    Effect.gen(function*() {
      const upstream = yield* Effect.acquireRelease(Effect.promise(fakeUpstreamProxy), (proxy) => Effect.promise(proxy.close))
      const { proxyPort, ca, origin } = yield* world({ upstream: { host: "127.0.0.1", port: upstream.port, authorization: undefined, url: `http://127.0.0.1:${upstream.port}` } })
      const unowned = yield* Effect.promise(() => http1Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: UNOWNED, body: Buffer.from("y") }))
      expect(unowned.body.toString()).toBe(`ORIGIN POST ${UNOWNED}\ny`)
      const tunnel = yield* Effect.promise(() => tlsVia(proxyPort, "downloads.cursor.sh", 443, [origin.ca.certPem], ["http/1.1"]))
      tunnel.destroy()
      expect(upstream.targets).toEqual([`127.0.0.1:${origin.port}`, `127.0.0.1:${origin.port}`])
    }))

  it.scoped("NO_PROXY: a bypassed host is reached directly, the others still through the upstream proxy", () =>
    Effect.gen(function*() {
      const upstream = yield* Effect.acquireRelease(Effect.promise(fakeUpstreamProxy), (proxy) => Effect.promise(proxy.close))
      const { proxyPort, ca, origin } = yield* world({
        upstream: { host: "127.0.0.1", port: upstream.port, authorization: undefined, url: `http://127.0.0.1:${upstream.port}`, bypass: parseNoProxy("downloads.cursor.sh:443, .corp.example") }
      })
      const forwarded = yield* Effect.promise(() => http1Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: UNOWNED, body: Buffer.from("d") }))
      expect(forwarded.body.toString()).toBe(`ORIGIN POST ${UNOWNED}\nd`)
      const tunnel = yield* Effect.promise(() => tlsVia(proxyPort, "downloads.cursor.sh", 443, [origin.ca.certPem], ["http/1.1"]))
      tunnel.destroy()
      // The forward to api2.cursor.sh went through the upstream proxy; the tunnel to the bypassed host did not.
      expect(upstream.targets).toEqual([`127.0.0.1:${origin.port}`])
      expect(bypasses({ host: "p", port: 1, authorization: undefined, url: "http://p:1", bypass: parseNoProxy("corp.example") }, "git.corp.example")).toBe(true)
      expect(bypasses({ host: "p", port: 1, authorization: undefined, url: "http://p:1", bypass: parseNoProxy("corp.example") }, "api2.cursor.sh")).toBe(false)
      expect(bypasses({ host: "p", port: 1, authorization: undefined, url: "http://p:1", bypass: ["*"] }, "anything")).toBe(true)
    }))

  it.scoped("a plain-HTTP request in absolute form is forwarded as any proxy would; a path or an https URL in that form is refused readably", () =>
    Effect.gen(function*() {
      const plain = yield* Effect.promise(fakeLocal)
      yield* Effect.addFinalizer(() => Effect.sync(() => plain.server.close()))
      const { proxyPort } = yield* world({ resolve: (target) => target.host === "plain.example" ? { host: "127.0.0.1", port: plain.port } : target })
      const forwarded = yield* Effect.promise(() =>
        rawExchange(proxyPort, "POST http://plain.example/some/path?q=1 HTTP/1.1\r\nHost: plain.example\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"))
      expect(forwarded).toMatch(/^HTTP\/1\.1 200/)
      expect(forwarded).toContain("LOCAL POST /some/path?q=1\nhello")
      const path = yield* Effect.promise(() => rawExchange(proxyPort, "GET /only/a/path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
      expect(path).toMatch(/^HTTP\/1\.1 400/)
      expect(path).toContain("send CONNECT host:port, or an absolute http:// URL")
      const https = yield* Effect.promise(() => rawExchange(proxyPort, "GET https://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nConnection: close\r\n\r\n"))
      expect(https).toMatch(/^HTTP\/1\.1 400/)
      expect(https).toContain("only http:// URLs are proxied in plain form")
    }))

  it.scoped("garbage, a closed port, a half handshake and a silent client are closed; the proxy serves the next client", () =>
    Effect.gen(function*() {
      const { proxyPort, ca } = yield* world()
      expect(yield* Effect.promise(() => rawExchange(proxyPort, "\x16\x03\x01garbage\r\n\r\n"))).toContain("400")
      const closed = Net.createServer()
      const closedPort = yield* Effect.promise(() => listen(closed))
      yield* Effect.promise(() => new Promise<void>((resolve) => closed.close(() => resolve())))
      const refused = yield* Effect.promise(() => connectTunnel(proxyPort, `127.0.0.1:${closedPort}`).then(() => "open", (error: Error) => error.message))
      expect(refused).toContain("502")
      // A ClientHello cut off after its first bytes: the TLS endpoint gives up after the idle limit.
      const halfHandshake = yield* Effect.promise(async () => {
        const socket = await connectTunnel(proxyPort, "api2.cursor.sh:443")
        socket.resume()
        socket.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00]))
        return new Promise<string>((resolve) => socket.on("close", () => resolve("closed")))
      })
      expect(halfHandshake).toBe("closed")
      expect(yield* Effect.promise(() => rawExchange(proxyPort, ""))).toContain("408")
      const answer = yield* Effect.promise(() => http1Via(proxyPort, "api2.cursor.sh", [ca.certPem], { method: "POST", path: OWNED, body: Buffer.from("z") }))
      expect(answer.body.toString()).toBe(`LOCAL POST ${OWNED}\nz`)
    }))
})

describe("the proxy's CONNECT targets", () => {
  it("host:port, bracketed IPv6, and nothing else", () => {
    expect(Proxy.parseAuthority("api2.cursor.sh:443")).toEqual({ host: "api2.cursor.sh", port: 443 })
    expect(Proxy.parseAuthority("[::1]:8080")).toEqual({ host: "::1", port: 8080 })
    expect(Proxy.parseAuthority("api2.cursor.sh")).toBeUndefined()
    expect(Proxy.parseAuthority("a:0")).toBeUndefined()
    expect(Proxy.parseAuthority("a:70000")).toBeUndefined()
  })
})

