/**
 * WebSearch against fake backends on loopback (a search backend is the operator's choice, so a
 * local one is not refused): each backend's request is checked (query, key header, JSON body)
 * and its answer mapped to references; failures name the backend and the status, never the key.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { FileConfig, resolve } from "../../src/Config.js"
import * as Live from "../../src/config/Live.js"
import * as Web from "../../src/Web.js"
import { loopbackServer } from "./LoopbackServer.js"

const webOf = (web: unknown, env: Readonly<Record<string, string>> = {}) => {
  const config = resolve(Schema.decodeUnknownSync(FileConfig)({ web }), env).web
  return Web.make(() => config, { lookup: () => Promise.reject(new Error("no DNS in tests")) })
}

const json = (response: import("node:http").ServerResponse, status: number, body: unknown) => {
  response.writeHead(status, { "content-type": "application/json" })
  response.end(JSON.stringify(body))
}

describe("WebSearch", () => {
  it.scopedLive("SearXNG: GET /search?q=…&format=json on the configured URL; results mapped, snippets as plain text", () =>
    Effect.gen(function*() {
      let seen: URL | undefined
      const server = yield* loopbackServer((request, response) => {
        seen = new URL(request.url!, "http://x")
        json(response, 200, {
          results: [
            { title: "Effect <b>docs</b>", url: "https://effect.website/docs", content: "The <b>Effect</b> documentation &amp; guides" },
            { title: "Schema", url: "https://effect.website/docs/schema", content: null }
          ]
        })
      })
      const web = webOf({ search: { backend: "searxng", url: `${server.origin}/` } })
      assert.strictEqual(web.searchBackend(), "searxng")
      const references = yield* web.search("effect schema")
      assert.strictEqual(seen?.pathname, "/search")
      assert.strictEqual(seen?.searchParams.get("q"), "effect schema")
      assert.strictEqual(seen?.searchParams.get("format"), "json")
      assert.deepStrictEqual(references, [
        { title: "Effect docs", url: "https://effect.website/docs", chunk: "The Effect documentation & guides" },
        { title: "Schema", url: "https://effect.website/docs/schema", chunk: "" }
      ])
    }))

  it.scopedLive("Brave: GET /res/v1/web/search?q= with the key in X-Subscription-Token; web.results mapped", () =>
    Effect.gen(function*() {
      let headers: Record<string, unknown> = {}
      let seen: URL | undefined
      const server = yield* loopbackServer((request, response) => {
        headers = request.headers
        seen = new URL(request.url!, "http://x")
        json(response, 200, {
          web: { results: [{ title: "Brave result", url: "https://example.com/a", description: "A <strong>bold</strong> description" }] }
        })
      })
      const web = webOf({ search: { backend: "brave", baseUrl: server.origin } }, { BRAVE_SEARCH_API_KEY: "brave-key-123" })
      assert.strictEqual(web.searchBackend(), "brave")
      const references = yield* web.search("what is effect")
      assert.strictEqual(seen?.pathname, "/res/v1/web/search")
      assert.strictEqual(seen?.searchParams.get("q"), "what is effect")
      assert.strictEqual(headers["x-subscription-token"], "brave-key-123")
      assert.deepStrictEqual(references, [{ title: "Brave result", url: "https://example.com/a", chunk: "A bold description" }])
    }))

  it.scopedLive("Tavily: POST /search with {query, max_results} and the key as a bearer token; results mapped, capped in count and length", () =>
    Effect.gen(function*() {
      let headers: Record<string, unknown> = {}
      let method = ""
      let path = ""
      const server = yield* loopbackServer((request, response) => {
        headers = request.headers
        method = request.method ?? ""
        path = request.url ?? ""
        json(response, 200, {
          results: Array.from({ length: 5 }, (_, i) => ({ title: `Result ${i}`, url: `https://example.com/${i}`, content: "word ".repeat(100) }))
        })
      })
      const web = webOf({ search: { backend: "tavily", apiKeyEnv: "MY_TAVILY", baseUrl: server.origin, maxResults: 3, chunkChars: 20 } }, { MY_TAVILY: "tvly-secret" })
      const references = yield* web.search("effect")
      assert.strictEqual(method, "POST")
      assert.strictEqual(path, "/search")
      assert.strictEqual(headers["authorization"], "Bearer tvly-secret")
      assert.deepStrictEqual(JSON.parse(server.bodies[0]!), { query: "effect", max_results: 3 })
      assert.strictEqual(references.length, 3)
      assert.strictEqual(references[0]!.chunk, "word word word word…")
      assert.isAtMost(references[0]!.chunk.length, 20)
    }))

  it.scopedLive("a 500 from the backend is an Http error naming the backend and the status, never the key (even echoed back)", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer((request, response) => {
        response.writeHead(500, { "content-type": "text/plain" })
        response.end(`internal error for token ${String(request.headers["x-subscription-token"])}`)
      })
      const web = webOf({ search: { backend: "brave", baseUrl: server.origin } }, { BRAVE_SEARCH_API_KEY: "brave-key-123" })
      const error = yield* Effect.flip(web.search("anything"))
      assert.strictEqual(error.kind, "Http")
      assert.strictEqual(error.status, 500)
      assert.strictEqual(error.message, "The brave search backend answered 500 Internal Server Error: internal error for token <redacted>.")
      assert.notInclude(JSON.stringify(error), "brave-key-123")
    }))

  it.scopedLive("an answer that is not the expected JSON is an Http error naming the backend", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer((_request, response) => {
        response.writeHead(200, { "content-type": "text/html" })
        response.end("<html>SearXNG: JSON format disabled</html>")
      })
      const web = webOf({ search: { backend: "searxng", url: server.origin } })
      const error = yield* Effect.flip(web.search("q"))
      assert.strictEqual(error.kind, "Http")
      assert.strictEqual(error.message, "The searxng search backend answered with something other than its JSON search results.")
    }))

  it.scopedLive("a backend that never answers ends in a Timeout", () =>
    Effect.gen(function*() {
      const server = yield* loopbackServer(() => {
        // Never answers.
      })
      const web = webOf({ timeoutMs: 200, search: { backend: "searxng", url: server.origin } })
      const error = yield* Effect.flip(web.search("q"))
      assert.strictEqual(error.kind, "Timeout")
      assert.strictEqual(error.message, "The searxng search backend did not answer within 200 ms.")
    }))

  it.live("without a backend there is no search tool: searchBackend is undefined and search fails NotConfigured", () =>
    Effect.gen(function*() {
      const web = webOf({})
      assert.isUndefined(web.searchBackend())
      const error = yield* Effect.flip(web.search("anything"))
      assert.strictEqual(error.kind, "NotConfigured")
      assert.include(error.message, "Web search is not configured")
    }))

  it.live("make reads its configuration at each call", () =>
    Effect.gen(function*() {
      let config = resolve(Schema.decodeSync(FileConfig)({}), {}).web
      const web = Web.make(() => config)
      assert.isUndefined(web.searchBackend())
      config = resolve(Schema.decodeSync(FileConfig)({ web: { search: { backend: "searxng", url: "http://127.0.0.1:8888" } } }), {}).web
      assert.strictEqual(web.searchBackend(), "searxng")
    }))

  it.scopedLive("the layer follows the live configuration: a reload that configures a backend offers search at once", () =>
    Effect.gen(function*() {
      const before = resolve(Schema.decodeSync(FileConfig)({}), {})
      // heartbeatMs changes too: Changes.ts does not list `web` among the keys a reload applies yet.
      const after = resolve(Schema.decodeSync(FileConfig)({ heartbeatMs: 6000, web: { search: { backend: "searxng", url: "http://127.0.0.1:8888" } } }), {})
      const live = yield* Live.make(before, { path: "byok.config.json", load: Effect.succeed(after) })
      const web = yield* Effect.provide(Web.Web, Web.layer.pipe(Layer.provide(Layer.succeed(Live.LiveConfig, live))))
      assert.isUndefined(web.searchBackend())
      yield* live.reload
      assert.strictEqual(web.searchBackend(), "searxng")
    }))
})
