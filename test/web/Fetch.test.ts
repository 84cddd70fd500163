/**
 * WebFetch's address policy and page reading, against loopback servers the tests start (no other
 * network: host names resolve through an injected lookup). A refused target is never connected
 * to: the server behind it counts its requests and stays at 0.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Schema } from "effect"
import { gzipSync } from "node:zlib"
import { FileConfig, resolve } from "../../src/Config.js"
import type { Lookup } from "../../src/web/Address.js"
import * as Web from "../../src/Web.js"
import { answer, loopbackServer } from "./LoopbackServer.js"

/** No real DNS in tests: names resolve only through the table given. */
const lookupOf = (table: Readonly<Record<string, ReadonlyArray<string>>> = {}): Lookup => (hostname) => {
  const addresses = table[hostname]
  if (addresses === undefined) return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }))
  return Promise.resolve(addresses.map((address) => ({ address, family: address.includes(":") ? 6 as const : 4 as const })))
}

const webOf = (web: unknown, lookup: Lookup = lookupOf()) => {
  const config = resolve(Schema.decodeUnknownSync(FileConfig)({ web }), {}).web
  return Web.make(() => config, { lookup })
}

const failure = (effect: Effect.Effect<unknown, Web.WebError>) => Effect.flip(effect)

describe("WebFetch: refusals", () => {
  it.scopedLive("loopback, IPv6 loopback and IPv4-mapped loopback are refused without connecting", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(answer("text/plain", "secret"))
      const web = webOf({})
      const direct = yield* failure(web.fetch(`http://127.0.0.1:${server.port}/`))
      assert.strictEqual(direct.kind, "Refused")
      assert.strictEqual(direct.message, `Refused to fetch http://127.0.0.1:${server.port}/: 127.0.0.1 is a loopback address. Only public addresses can be fetched.`)
      const v6 = yield* failure(web.fetch(`http://[::1]:${server.port}/`))
      assert.strictEqual(v6.kind, "Refused")
      assert.include(v6.message, "::1 is a loopback address")
      const mapped = yield* failure(web.fetch(`http://[::ffff:127.0.0.1]:${server.port}/`))
      assert.strictEqual(mapped.kind, "Refused")
      assert.include(mapped.message, "a loopback address (IPv4-mapped 127.0.0.1)")
      assert.strictEqual(server.requests(), 0)
    }))

  it.live("the metadata address, private, CGNAT, unspecified and multicast addresses, and metadata names are refused, each naming its class", () =>
    Effect.gen(function*() {
      const web = webOf({})
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["http://169.254.169.254/latest/meta-data/", "169.254.169.254 is the cloud metadata address (link-local)"],
        ["http://10.0.0.1/", "10.0.0.1 is a private network address"],
        ["http://172.16.5.4/", "172.16.5.4 is a private network address"],
        ["http://192.168.1.1/", "192.168.1.1 is a private network address"],
        ["http://100.64.0.1/", "100.64.0.1 is a carrier-grade NAT (shared) address"],
        ["http://0.0.0.0/", "0.0.0.0 is an unspecified address"],
        ["http://[::]/", ":: is an unspecified address"],
        ["http://224.0.0.1/", "224.0.0.1 is a multicast address"],
        ["http://255.255.255.255/", "255.255.255.255 is the broadcast address"],
        ["http://[fe80::1]/", "fe80::1 is a link-local address"],
        ["http://[fd12::1]/", "fd12::1 is a private network address (IPv6 unique local)"],
        ["http://[::ffff:10.0.0.1]/", "a private network address (IPv4-mapped 10.0.0.1)"],
        ["http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal is a cloud metadata host name"],
        ["http://localhost:9/", "localhost is a loopback host name"],
        ["http://2130706433/", "127.0.0.1 is a loopback address"]
      ]
      for (const [url, reason] of cases) {
        const error = yield* failure(web.fetch(url))
        assert.strictEqual(error.kind, "Refused", url)
        assert.include(error.message, reason, url)
      }
    }))

  it.scopedLive("a public-looking name that resolves to loopback is refused at the connection, and its server sees nothing", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(answer("text/plain", "secret"))
      const web = webOf({}, lookupOf({ "docs.example.com": ["127.0.0.1"] }))
      const error = yield* failure(web.fetch(`http://docs.example.com:${server.port}/guide`))
      assert.strictEqual(error.kind, "Refused")
      assert.strictEqual(
        error.message,
        `Refused to fetch http://docs.example.com:${server.port}/guide: docs.example.com resolves to 127.0.0.1, which is a loopback address. Only public addresses can be fetched.`
      )
      assert.strictEqual(server.requests(), 0)
    }))

  it.live("a name with one public and one private address is refused (any refused address refuses the host)", () =>
    Effect.gen(function*() {
      const web = webOf({}, lookupOf({ "mixed.example.com": ["93.184.216.34", "10.1.2.3"] }))
      const error = yield* failure(web.fetch("https://mixed.example.com/"))
      assert.strictEqual(error.kind, "Refused")
      assert.include(error.message, "mixed.example.com resolves to 10.1.2.3, which is a private network address")
    }))

  it.live("only http and https URLs, without credentials, are fetched", () =>
    Effect.gen(function*() {
      const web = webOf({})
      const file = yield* failure(web.fetch("file:///etc/passwd"))
      assert.strictEqual(file.kind, "InvalidUrl")
      assert.strictEqual(file.message, "file:///etc/passwd is not an http or https URL; only web pages can be fetched.")
      assert.strictEqual((yield* failure(web.fetch("ftp://ftp.example.com/pub/file.txt"))).kind, "InvalidUrl")
      assert.strictEqual((yield* failure(web.fetch("not a url"))).kind, "InvalidUrl")
      const credentials = yield* failure(web.fetch("https://user:hunter2@example.com/"))
      assert.strictEqual(credentials.kind, "InvalidUrl")
      assert.notInclude(credentials.message, "hunter2")
    }))

  it.scopedLive("allowHosts exempts exactly the host:port listed: another port of the same host is still refused", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(answer("text/plain", "intranet docs"))
      const allowed = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      assert.strictEqual((yield* allowed.fetch(`http://127.0.0.1:${server.port}/`)).markdown, "intranet docs")
      const otherPort = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port + 1}`] } })
      assert.strictEqual((yield* failure(otherPort.fetch(`http://127.0.0.1:${server.port}/`))).kind, "Refused")
      const byName = webOf({ fetch: { allowHosts: ["docs.internal"] } }, lookupOf({ "docs.internal": ["127.0.0.1"] }))
      assert.strictEqual((yield* byName.fetch(`http://docs.internal:${server.port}/`)).markdown, "intranet docs")
      assert.strictEqual(server.requests(), 2)
    }))

  it.scopedLive("an allowed server redirecting to a private address is refused, naming the hop", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer((_request, response) => {
        response.writeHead(302, { location: "http://10.0.0.1/admin" })
        response.end()
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      const error = yield* failure(web.fetch(`http://127.0.0.1:${server.port}/start`))
      assert.strictEqual(error.kind, "Refused")
      assert.strictEqual(
        error.message,
        `Refused to fetch http://10.0.0.1/admin (redirected from http://127.0.0.1:${server.port}/start): 10.0.0.1 is a private network address. Only public addresses can be fetched.`
      )
      assert.strictEqual(server.requests(), 1)
    }))

  it.scopedLive("a redirect loop ends with an error after the configured number of redirects", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer((request, response) => {
        response.writeHead(302, { location: request.url === "/a" ? "/b" : "/a" })
        response.end()
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`], maxRedirects: 3 } })
      const error = yield* failure(web.fetch(`http://127.0.0.1:${server.port}/a`))
      assert.strictEqual(error.kind, "Http")
      assert.include(error.message, "more than 3 redirects")
      assert.strictEqual(server.requests(), 4)
    }))

  it.scopedLive("a redirect to a file: URL is refused as not http", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer((_request, response) => {
        response.writeHead(301, { location: "file:///etc/passwd" })
        response.end()
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      const error = yield* failure(web.fetch(`http://127.0.0.1:${server.port}/`))
      assert.strictEqual(error.kind, "InvalidUrl")
      assert.include(error.message, `http://127.0.0.1:${server.port}/ redirected to file:///etc/passwd`)
    }))
})

describe("WebFetch: reading pages", () => {
  const page = `<!doctype html>
<html><head><title>Effect Guide</title><style>body { color: red }</style><script>window.track = 1</script></head>
<body>
  <header><nav><a href="/">Home</a> <a href="/blog">Blog</a></nav></header>
  <aside>Sponsored</aside>
  <main>
    <h2>Getting started</h2>
    <p>Install it with <code>npm</code>, then read the <a href="/docs/intro">introduction</a>.</p>
    <script>alert("tracking")</script>
    <pre><code class="language-ts">const answer = 42
console.log(answer)</code></pre>
    <ul><li>fast</li><li>typed</li></ul>
    <table><thead><tr><th>Name</th><th>Kind</th></tr></thead><tbody><tr><td>Effect</td><td>library</td></tr></tbody></table>
  </main>
  <footer>Copyright 2026</footer>
</body></html>`

  it.scopedLive("an HTML page becomes Markdown: the title as a top heading, the main content, no navigation or scripts", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(answer("text/html; charset=utf-8", page))
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      const result = yield* web.fetch(`http://127.0.0.1:${server.port}/guide`)
      assert.strictEqual(result.status, 200)
      assert.strictEqual(result.url, `http://127.0.0.1:${server.port}/guide`)
      assert.isFalse(result.truncated)
      assert.strictEqual(result.markdown, [
        "# Effect Guide",
        "",
        "## Getting started",
        "",
        `Install it with \`npm\`, then read the [introduction](http://127.0.0.1:${server.port}/docs/intro).`,
        "",
        "```ts",
        "const answer = 42",
        "console.log(answer)",
        "```",
        "",
        "- fast",
        "- typed",
        "",
        "| Name | Kind |",
        "| --- | --- |",
        "| Effect | library |"
      ].join("\n"))
      for (const unwanted of ["Home", "Blog", "tracking", "window.track", "color: red", "Sponsored", "Copyright"]) {
        assert.notInclude(result.markdown, unwanted)
      }
    }))

  it.scopedLive("a latin1 page is decoded by its charset; a redirect's final URL is reported", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer((request, response) => {
        if (request.url === "/old") {
          response.writeHead(301, { location: "/new" })
          response.end()
          return
        }
        response.writeHead(200, { "content-type": "text/plain; charset=ISO-8859-1" })
        response.end(Buffer.from("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e", "latin1"))
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      const result = yield* web.fetch(`http://127.0.0.1:${server.port}/old`)
      assert.strictEqual(result.markdown, "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e")
      assert.strictEqual(result.url, `http://127.0.0.1:${server.port}/new`)
    }))

  it.scopedLive("plain text, Markdown and JSON pass through as they are", () =>
    Effect.gen(function*() {
      const json = JSON.stringify({ name: "cursor-byok", tags: ["a", "b"] }, null, 2)
      const server = yield* loopbackServer((request, response) => {
        const [type, body] = request.url === "/json" ? ["application/json", json] : request.url === "/md" ? ["text/markdown", "# Title\n\n*x*"] : ["text/plain", "line 1\n<b>not html</b>\n"]
        response.writeHead(200, { "content-type": type! })
        response.end(body)
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      assert.strictEqual((yield* web.fetch(`http://127.0.0.1:${server.port}/json`)).markdown, json)
      assert.strictEqual((yield* web.fetch(`http://127.0.0.1:${server.port}/md`)).markdown, "# Title\n\n*x*")
      const text = yield* web.fetch(`http://127.0.0.1:${server.port}/txt`)
      assert.strictEqual(text.markdown, "line 1\n<b>not html</b>\n")
      assert.strictEqual(text.contentType, "text/plain")
    }))

  it.scopedLive("a gzip body sent although identity was asked is inflated; an HTML page's <meta charset> is honoured", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer((request, response) => {
        if (request.url === "/gz") {
          response.writeHead(200, { "content-type": "text/plain; charset=utf-8", "content-encoding": "gzip" })
          response.end(gzipSync("compressed text \u2713"))
          return
        }
        response.writeHead(200, { "content-type": "text/html" })
        response.end(Buffer.from(`<html><head><meta charset="windows-1252"><title>Na\u00efve</title></head><body><p>r\u00e9sum\u00e9</p></body></html>`, "latin1"))
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      assert.strictEqual((yield* web.fetch(`http://127.0.0.1:${server.port}/gz`)).markdown, "compressed text \u2713")
      assert.strictEqual((yield* web.fetch(`http://127.0.0.1:${server.port}/meta`)).markdown, "# Na\u00efve\n\nr\u00e9sum\u00e9")
    }))

  it.scopedLive("an image is Unsupported, saying which type it is", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(answer("image/png", new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0])))
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      const error = yield* failure(web.fetch(`http://127.0.0.1:${server.port}/logo.png`))
      assert.strictEqual(error.kind, "Unsupported")
      assert.strictEqual(
        error.message,
        `http://127.0.0.1:${server.port}/logo.png is image/png, which cannot be read as text; only HTML and text pages (plain text, Markdown, JSON, XML) can be fetched.`
      )
    }))

  it.scopedLive("a body over the cap is returned truncated with exactly the cap read, and the rest is never read (the server sees the connection close)", () =>
    Effect.gen(function*() {
      const cap = 64 * 1024
      const closed = yield* Deferred.make<number>()
      const server = yield* loopbackServer((_request, response) => {
        response.writeHead(200, { "content-type": "text/plain" })
        let written = 0
        // An endless body: 16 KiB every few milliseconds until the client goes away.
        const timer = setInterval(() => {
          response.write("a".repeat(16 * 1024))
          written += 16 * 1024
        }, 5)
        response.on("close", () => {
          clearInterval(timer)
          Deferred.unsafeDone(closed, Effect.succeed(written))
        })
      })
      const web = webOf({ timeoutMs: 20_000, fetch: { allowHosts: [`127.0.0.1:${server.port}`], maxBytes: cap } })
      const result = yield* web.fetch(`http://127.0.0.1:${server.port}/endless`)
      assert.isTrue(result.truncated)
      assert.strictEqual(result.bytesRead, cap)
      assert.isTrue(result.markdown.startsWith(`${"a".repeat(cap)}\n\n[`))
      assert.include(result.markdown, `is larger than 64 KiB; only the first 64 KiB were read.`)
      yield* Deferred.await(closed)
    }))

  it.scopedLive("a body announced larger than the cap is read only up to the cap", () =>
    Effect.gen(function*() {
      const cap = 1000
      const server = yield* loopbackServer((_request, response) => {
        response.writeHead(200, { "content-type": "text/plain", "content-length": String(10 * 1024 * 1024) })
        // The cap's worth, then nothing more: a reader that waited for the rest would hang.
        response.write("b".repeat(cap))
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`], maxBytes: cap } })
      const result = yield* web.fetch(`http://127.0.0.1:${server.port}/big`)
      assert.isTrue(result.truncated)
      assert.strictEqual(result.bytesRead, cap)
    }))

  it.scopedLive("Markdown longer than the character cap is cut with a note", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(answer("text/plain", "x".repeat(500)))
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`], maxMarkdownChars: 100 } })
      const result = yield* web.fetch(`http://127.0.0.1:${server.port}/`)
      assert.isTrue(result.truncated)
      assert.strictEqual(result.markdown, `${"x".repeat(100)}\n\n[The page's text is 500 characters long; only the first 100 are shown.]`)
    }))

  it.scopedLive("a server that never answers ends in a Timeout within the configured limit", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(() => {
        // Never answers.
      })
      const web = webOf({ timeoutMs: 300, fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      const error = yield* failure(web.fetch(`http://127.0.0.1:${server.port}/slow`))
      assert.strictEqual(error.kind, "Timeout")
      assert.strictEqual(error.message, `http://127.0.0.1:${server.port}/slow did not load within 300 ms; try again later or another source.`)
    }))

  it.scopedLive("a 404 is an Http error with the status", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(answer("text/html", "<h1>Not here</h1>", 404))
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      const error = yield* failure(web.fetch(`http://127.0.0.1:${server.port}/missing`))
      assert.strictEqual(error.kind, "Http")
      assert.strictEqual(error.status, 404)
      assert.strictEqual(error.message, `http://127.0.0.1:${server.port}/missing answered 404 Not Found.`)
    }))

  it.scopedLive("a host that does not resolve is a Network error naming it", () =>
    Effect.gen(function*() {
      const web = webOf({})
      const error = yield* failure(web.fetch("https://no-such-host.example/"))
      assert.strictEqual(error.kind, "Network")
      assert.strictEqual(error.message, "Could not fetch https://no-such-host.example/: the host no-such-host.example could not be resolved.")
    }))

  it.scopedLive("the request carries an honest User-Agent and prefers HTML, Markdown and text", () =>
    Effect.gen(function*() {
      let headers: Record<string, string | Array<string> | undefined> = {}
      const server = yield* loopbackServer((request, response) => {
        headers = request.headers
        response.writeHead(200, { "content-type": "text/plain" })
        response.end("ok")
      })
      const web = webOf({ fetch: { allowHosts: [`127.0.0.1:${server.port}`] } })
      yield* web.fetch(`http://127.0.0.1:${server.port}/`)
      assert.match(String(headers["user-agent"]), /^cursor-byok\/\S+ \(\+web fetch\)$/)
      assert.match(String(headers["accept"]), /^text\/html/)
    }))
})
