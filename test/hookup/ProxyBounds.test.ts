/**
 * The proxy's bounds, on real sockets: it listens on 127.0.0.1 whatever host the server is on
 * (and still reaches the server's own listeners there), and keeps one TLS endpoint per
 * canonical host name, for a bounded number of names, without breaking the connections of a
 * name it dropped, and closing those whose client went away.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import { NodeContext } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Logger, Schema } from "effect"
import { X509Certificate } from "node:crypto"
import { mkdtempSync } from "node:fs"
import * as Http from "node:http"
import * as Http2 from "node:http2"
import * as Net from "node:net"
import { networkInterfaces, tmpdir } from "node:os"
import { join } from "node:path"
import type * as Tls from "node:tls"
import * as Config from "../../src/Config.js"
import * as Hookup from "../../src/Hookup.js"
import * as Ca from "../../src/hookup/Ca.js"
import * as Proxy from "../../src/hookup/Proxy.js"
import { canonicalName, ENDPOINTS_KEPT, makeEndpointCache } from "../../src/hookup/proxy/Leaves.js"
import * as Run from "../../src/transport/Run.js"
import * as AppHarness from "../support/AppHarness.js"
import { http1Via, tlsVia } from "../support/ProxyClient.js"

const OWNED = "/aiserver.v1.AiService/AvailableModels"
const RUN_SSE = "/agent.v1.AgentService/RunSSE"

const home = () => mkdtempSync(join(tmpdir(), "byok-proxy-bounds-"))
const authorityIn = (dir: string) => Effect.runPromise(Ca.ensure(dir).pipe(Effect.provide(NodeContext.layer)))

/** This machine's non-loopback addresses one can connect to (no link-local IPv6, which needs a scope). */
const lanAddresses = () =>
  Object.values(networkInterfaces()).flatMap((entries) => entries ?? [])
    .filter((entry) => !entry.internal && !(entry.family === "IPv6" && entry.address.toLowerCase().startsWith("fe80")))
    .map((entry) => entry.address)

/** A stub of this server's HTTP/1.1 listener on `host`: answers `LOCAL <method> <path>`. */
const fakeLocal = (host: string) =>
  Effect.acquireRelease(
    Effect.async<Http.Server & { port: number }>((resume) => {
      const server = Http.createServer((request, response) => {
        request.resume()
        request.on("end", () => response.end(`LOCAL ${request.method} ${request.url}`))
      })
      server.listen(0, host, () => resume(Effect.succeed(Object.assign(server, { port: (server.address() as Net.AddressInfo).port }))))
    }),
    (server) => Effect.sync(() => server.close())
  )

/** Resolves with "connected" or the connection error's code. */
const reach = (host: string, port: number) =>
  new Promise<string>((resolve) => {
    const socket = Net.connect({ host, port }, () => {
      socket.destroy()
      resolve("connected")
    })
    socket.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message))
  })

/** One HTTP/1.1 request on an open TLS connection (kept open). */
const requestOn = (socket: Tls.TLSSocket, host: string, path: string) =>
  new Promise<string>((resolve, reject) => {
    const outgoing = Http.request({ createConnection: () => socket, method: "POST", path, headers: { host, connection: "keep-alive" } }, (answer) => {
      let text = ""
      answer.setEncoding("utf8").on("data", (chunk: string) => (text += chunk))
      answer.on("end", () => resolve(text))
    })
    outgoing.on("error", reject)
    outgoing.end("x")
  })

/** One request on an open HTTP/2 session. */
const streamOn = (session: Http2.ClientHttp2Session, path: string) =>
  new Promise<string>((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": path })
    let text = ""
    stream.setEncoding("utf8").on("data", (chunk: string) => (text += chunk))
    stream.on("end", () => resolve(text))
    stream.on("error", reject)
    stream.end("x")
  })

/** The proxy as `layerProxy` makes it for a server on `host`, whose HTTP/1.1 listener is `localPort`; with its log lines. */
const proxyFor = (host: string, localPort: number) =>
  Effect.gen(function*() {
    const dir = home()
    const ca = yield* Effect.promise(() => authorityIn(dir))
    const file = Schema.decodeUnknownSync(Config.FileConfig)(AppHarness.fileConfigJson("http://127.0.0.1:9", { host, home: dir }))
    const resolved = Config.resolve(file, { [AppHarness.API_KEY_ENV]: AppHarness.API_KEY })
    const config = { ...resolved, proxy: { ...resolved.proxy, port: 0 } }
    const listeners = Layer.mergeAll(
      Layer.succeed(HttpServer.HttpServer, HttpServer.make({ serve: () => Effect.void, address: { _tag: "TcpAddress", hostname: host, port: localPort } })),
      Layer.succeed(Run.Http2Endpoints, { cleartextPort: undefined, tlsPort: undefined })
    )
    const lines: Array<string> = []
    const capture = Logger.make(({ message }) => void lines.push(Array.isArray(message) ? message.join(" ") : String(message)))
    const context = yield* Layer.build(Hookup.layerProxy(config, ca, () => undefined).pipe(Layer.provide(listeners))).pipe(
      Effect.provide(Logger.replace(Logger.defaultLogger, capture))
    )
    return { endpoint: Context.get(context, Proxy.ProxyEndpoint), ca, lines }
  })

describe("the proxy's address", () => {
  it.scoped("is 127.0.0.1 on a wildcard or non-loopback server host, unreachable from the network, and still reaches the server's listeners", () =>
    Effect.gen(function*() {
      const lan = lanAddresses()
      const cases: Array<{ readonly host: string; readonly localOn: string }> = [
        { host: "0.0.0.0", localOn: "127.0.0.1" },
        { host: "::", localOn: "::1" },
        ...lan.slice(0, 1).map((address) => ({ host: address, localOn: address }))
      ]
      for (const { host, localOn } of cases) {
        const local = yield* fakeLocal(localOn)
        const { endpoint, ca, lines } = yield* proxyFor(host, local.port)
        const port = endpoint.port!
        expect(endpoint.host).toBe("127.0.0.1")
        expect(yield* Effect.promise(() => reach("127.0.0.1", port))).toBe("connected")
        for (const address of lan) expect(yield* Effect.promise(() => reach(address, port))).not.toBe("connected")
        expect(lines.filter((line) => line.includes("127.0.0.1 only"))).toHaveLength(1)
        // HTTP/2 to this server's own procedures goes over the loopback hop to its HTTP/1.1 listener.
        const session = yield* Effect.promise(async () => {
          const socket = await tlsVia(port, "agent.api5.cursor.sh", 443, [ca.certPem], ["h2"])
          return Http2.connect("https://agent.api5.cursor.sh", { createConnection: () => socket })
        })
        expect(yield* Effect.promise(() => streamOn(session, RUN_SSE))).toBe(`LOCAL POST ${RUN_SSE}`)
        session.close()
      }
    }))

  it.scoped("on a loopback server host, nothing is logged about it", () =>
    Effect.gen(function*() {
      const local = yield* fakeLocal("127.0.0.1")
      const { endpoint, lines } = yield* proxyFor("127.0.0.1", local.port)
      expect(endpoint.host).toBe("127.0.0.1")
      expect(lines.filter((line) => line.includes("127.0.0.1 only"))).toHaveLength(0)
    }))
})

/** The proxy alone, with this server's stub on loopback. */
const bareProxy = Effect.gen(function*() {
  const ca = yield* Effect.promise(() => authorityIn(home()))
  const local = yield* fakeLocal("127.0.0.1")
  const context = yield* Layer.build(Proxy.layer({
    port: 0,
    authority: ca,
    routing: { local: new Set([OWNED]), offline: false },
    local: { host: "127.0.0.1", port: local.port, h2cPort: undefined },
    upstream: undefined
  }))
  const endpoint = Context.get(context, Proxy.ProxyEndpoint)
  return { port: endpoint.port!, kept: endpoint.interceptorsKept!, socketsOpen: endpoint.socketsOpen!, ca }
})

/** Polls until `done` holds (at most ~5 s, half the proxy's handshake limit); resolves with whether it did. */
const eventually = async (done: () => boolean) => {
  for (let i = 0; i < 200 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 25))
  return done()
}

describe("the proxy's endpoints for intercepted hosts", () => {
  it("a name is lower-case without its trailing dot", () => {
    expect(canonicalName("API2.Cursor.SH.")).toBe("api2.cursor.sh")
    expect(canonicalName("agent.api5.cursor.sh")).toBe("agent.api5.cursor.sh")
  })

  it("the cache drops the least recently used name, and makes a name's endpoint again once it is due for renewal", async () => {
    let clock = 0
    const made: Array<string> = []
    const cache = makeEndpointCache({ make: async (name) => (made.push(name), name), renewAfterMs: 1_000, capacity: 2, now: () => clock })
    await cache.get("a")
    await cache.get("b")
    await cache.get("a")
    await cache.get("c")
    expect(cache.size()).toBe(2)
    await cache.get("a")
    await cache.get("b")
    expect(made).toEqual(["a", "b", "c", "b"])
    clock = 1_000
    await cache.get("b")
    expect(made).toEqual(["a", "b", "c", "b", "b"])
    const failing = makeEndpointCache({ make: () => Promise.reject(new Error("no leaf")), renewAfterMs: 1_000 })
    await expect(failing.get("x")).rejects.toThrow("no leaf")
    expect(failing.size()).toBe(0)
  })

  it.scoped("spellings of one name share one endpoint and one leaf, issued for the canonical name", () =>
    Effect.gen(function*() {
      const { port, kept, ca } = yield* bareProxy
      const names = new Set<string>()
      for (const spelling of ["api2.cursor.sh", "API2.CURSOR.SH", "Api2.Cursor.Sh", "api2.cursor.sh.", "API2.cursor.SH."]) {
        const socket = yield* Effect.promise(() => tlsVia(port, spelling, 443, [ca.certPem], ["http/1.1"]))
        names.add(new X509Certificate(socket.getPeerCertificate().raw).subjectAltName ?? "")
        expect(yield* Effect.promise(() => requestOn(socket, spelling, OWNED))).toBe(`LOCAL POST ${OWNED}`)
        socket.destroy()
        expect(kept()).toBe(1)
      }
      expect([...names]).toEqual(["DNS:api2.cursor.sh"])
    }))

  it.scoped("no more than ENDPOINTS_KEPT are kept over 100 names; a connection to a dropped name finishes its requests", () =>
    Effect.gen(function*() {
      const { port, kept, ca } = yield* bareProxy
      // Connections made before their names are dropped: HTTP/1.1 and HTTP/2.
      const held = yield* Effect.promise(() => tlsVia(port, "held.api5.cursor.sh", 443, [ca.certPem], ["http/1.1"]))
      const session = yield* Effect.promise(async () => {
        const socket = await tlsVia(port, "held2.api5.cursor.sh", 443, [ca.certPem], ["h2"])
        return Http2.connect("https://held2.api5.cursor.sh", { createConnection: () => socket })
      })
      expect(yield* Effect.promise(() => streamOn(session, OWNED))).toBe(`LOCAL POST ${OWNED}`)
      let most = kept()
      for (let i = 0; i < 60; i++) {
        const socket = yield* Effect.promise(() => tlsVia(port, `n${i}.api5.cursor.sh`, 443, [ca.certPem], ["http/1.1"]))
        socket.destroy()
        most = Math.max(most, kept())
      }
      // And 40 at once, each name's endpoint being made while others are.
      yield* Effect.promise(() =>
        Promise.all(Array.from({ length: 40 }, (_, i) =>
          tlsVia(port, `m${i}.api5.cursor.sh`, 443, [ca.certPem], ["http/1.1"]).then((socket) => {
            socket.destroy()
            most = Math.max(most, kept())
          })))
      )
      expect(most).toBe(ENDPOINTS_KEPT)
      expect(kept()).toBe(ENDPOINTS_KEPT)
      expect(yield* Effect.promise(() => requestOn(held, "held.api5.cursor.sh", OWNED))).toBe(`LOCAL POST ${OWNED}`)
      expect(yield* Effect.promise(() => streamOn(session, OWNED))).toBe(`LOCAL POST ${OWNED}`)
      held.destroy()
      session.close()
      // A dropped name is served again on its next CONNECT.
      const again = yield* Effect.promise(() => http1Via(port, "held.api5.cursor.sh", [ca.certPem], { method: "POST", path: OWNED, body: Buffer.from("y") }))
      expect(again.body.toString()).toBe(`LOCAL POST ${OWNED}`)
      expect(kept()).toBe(ENDPOINTS_KEPT)
    }))

  it.scoped("a client gone right after its handshake, or without closing its HTTP/2 session, leaves no socket open (nor its endpoint held)", () =>
    Effect.gen(function*() {
      const { port, socketsOpen, ca } = yield* bareProxy
      // Dropped as soon as the client sees the handshake done (TLS 1.3: before the proxy may have).
      for (let i = 0; i < 10; i++) (yield* Effect.promise(() => tlsVia(port, `d${i}.api5.cursor.sh`, 443, [ca.certPem], ["h2", "http/1.1"]))).destroy()
      expect(yield* Effect.promise(() => eventually(() => socketsOpen() === 0))).toBe(true)
      const socket = yield* Effect.promise(() => tlsVia(port, "agent.api5.cursor.sh", 443, [ca.certPem], ["h2"]))
      const session = Http2.connect("https://agent.api5.cursor.sh", { createConnection: () => socket })
      expect(yield* Effect.promise(() => streamOn(session, OWNED))).toBe(`LOCAL POST ${OWNED}`)
      expect(socketsOpen()).toBe(1)
      // No GOAWAY: the connection just ends.
      socket.destroy()
      expect(yield* Effect.promise(() => eventually(() => socketsOpen() === 0))).toBe(true)
    }))
})
