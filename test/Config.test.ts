import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted, Schema } from "effect"
import { homedir } from "node:os"
import { join } from "node:path"
import { decodeFile, FileConfig, resolve, validate } from "../src/Config.js"

const empty = Schema.decodeSync(FileConfig)({})

describe("Config", () => {
  it("defaults to loopback, port 8787 and ./data/byok.sqlite, and says when no provider is usable", () => {
    const config = resolve(empty, {})
    assert.strictEqual(config.host, "127.0.0.1")
    assert.strictEqual(config.port, 8787)
    assert.strictEqual(config.database, "./data/byok.sqlite")
    assert.strictEqual(config.blobAckTimeoutMs, 30_000)
    assert.strictEqual(config.router.providers.length, 0)
    assert.isTrue(config.notices.some((n) => n.includes("no provider is configured")))
  })

  it("builds a default catalogue from the key variables that are set", () => {
    const config = resolve(empty, { DEEPSEEK_API_KEY: "sk-deep", ANTHROPIC_API_KEY: "sk-ant" })
    assert.deepStrictEqual(config.router.providers.map((p) => p.id), ["anthropic", "deepseek"])
    assert.include(config.models.map((m) => m.id), "deepseek-chat")
    assert.strictEqual(Redacted.value(config.router.providers.find((p) => p.id === "deepseek")!.apiKey), "sk-deep")
    assert.strictEqual(config.defaultModel, "claude-sonnet-4-5")
  })

  it("never shows a key when the configuration is printed", () => {
    const config = resolve(empty, { OPENAI_API_KEY: "sk-secret-123" })
    assert.notInclude(JSON.stringify(config), "sk-secret-123")
    assert.notInclude(String(config.router.providers[0]!.apiKey), "sk-secret-123")
  })

  it.effect("reads providers and models from a file, keys from the variables it names, with env overrides", () =>
    Effect.gen(function*() {
      const file = yield* decodeFile("byok.config.json", JSON.stringify({
        port: 9000,
        providers: [
          { id: "local", api: "openai-chat", baseUrl: "http://127.0.0.1:8000/v1" },
          { id: "kimi", api: "openai-chat", baseUrl: "https://api.moonshot.ai/v1", apiKeyEnv: "MOONSHOT_API_KEY", compat: { replayReasoning: true } }
        ],
        models: [
          { id: "qwen-local", provider: "local", upstreamModel: "Qwen/Qwen3-32B", contextWindow: 32768 },
          { id: "kimi-k2", provider: "kimi", upstreamModel: "kimi-k2-thinking", displayName: "Kimi K2" }
        ]
      }))
      const config = resolve(file, { MOONSHOT_API_KEY: "mk", BYOK_PORT: "9100", BYOK_DB: "/tmp/x.sqlite", BYOK_HOST: "0.0.0.0" })
      assert.strictEqual(config.port, 9100)
      assert.strictEqual(config.database, "/tmp/x.sqlite")
      assert.deepStrictEqual(config.router.models.map((m) => m.id), ["qwen-local", "kimi-k2"])
      assert.strictEqual(Redacted.value(config.router.providers[1]!.apiKey), "mk")
      assert.isTrue(config.notices.some((n) => n.includes("not a loopback address")))
    }))

  it.effect("a bad file is a ConfigError naming the file and the field", () =>
    Effect.gen(function*() {
      const badJson = yield* Effect.flip(decodeFile("byok.config.json", "{ port: 1"))
      assert.include(badJson.message, "not valid JSON")
      const badField = yield* Effect.flip(decodeFile("byok.config.json", JSON.stringify({ port: 70000 })))
      assert.include(badField.message, "port")
      const unknownApi = yield* Effect.flip(decodeFile("c.json", JSON.stringify({ providers: [{ id: "x", api: "soap", baseUrl: "http://127.0.0.1:1/v1" }] })))
      assert.include(unknownApi.message, "api")
      const typo = yield* Effect.flip(decodeFile("c.json", JSON.stringify({ prot: 1 })))
      assert.include(typo.message, "prot")
    }))

  it("a model naming an unknown provider is refused, not a notice", () => {
    const file = Schema.decodeSync(FileConfig)({
      providers: [{ id: "a", api: "anthropic", baseUrl: "https://api.anthropic.com/v1" }],
      models: [{ id: "m", provider: "b", upstreamModel: "x" }]
    })
    assert.isFalse(resolve(file, {}).notices.some((n) => n.includes("names provider")))
    const refused = Effect.runSync(Effect.flip(validate(resolve(file, {}), {})))
    assert.strictEqual(refused.message, `models[0].provider: names provider "b", which is not configured: name one of providers[].id (a) or add it to providers`)
  })

  describe("the IDE hookup's keys", () => {
    it("default: the proxy on 8788 (online), the TLS listener on 8790 with the CA's leaf, the CA in ~/.cursor-byok", () => {
      const config = resolve(empty, {})
      assert.deepStrictEqual(config.proxy, { port: 8788, offline: false, upstream: undefined, noProxy: [], upstreamServer: undefined })
      assert.deepStrictEqual(config.http2.tls, { port: 8790, certFile: undefined, keyFile: undefined })
      assert.strictEqual(config.home, join(homedir(), ".cursor-byok"))
    })

    it("the environment turns them off, moves them, goes offline and names the upstream proxy (BYOK_UPSTREAM_PROXY over HTTPS_PROXY)", () => {
      const off = resolve(empty, { BYOK_PROXY_PORT: "off", BYOK_TLS_PORT: "off", BYOK_HOME: "/tmp/h" })
      assert.strictEqual(off.proxy.port, undefined)
      assert.strictEqual(off.http2.tls, undefined)
      assert.strictEqual(off.home, "/tmp/h")
      const moved = resolve(empty, { BYOK_PROXY_PORT: "9001", BYOK_TLS_PORT: "9002", BYOK_OFFLINE: "1", HTTPS_PROXY: "http://corp:3128", NO_PROXY: "localhost, .corp.example:8443, *.intra" })
      assert.deepStrictEqual(moved.proxy, { port: 9001, offline: true, upstream: "http://corp:3128", noProxy: ["localhost", ".corp.example", ".intra"], upstreamServer: undefined })
      assert.strictEqual(moved.http2.tls?.port, 9002)
      assert.strictEqual(resolve(empty, { HTTPS_PROXY: "http://corp:3128", BYOK_UPSTREAM_PROXY: "http://mine:8080" }).proxy.upstream, "http://mine:8080")
    })

    it("a team's server: the file's upstreamServer and upstreamToken, the environment's over them; the token kept redacted", () => {
      const file = Schema.decodeSync(FileConfig)({ proxy: { upstreamServer: "https://team.example/", upstreamToken: "byok_u_file" } })
      const fromFile = resolve(file, {}).proxy.upstreamServer
      assert.strictEqual(fromFile?.url, "https://team.example")
      assert.strictEqual(String(fromFile?.token), "<redacted>")
      const fromEnv = resolve(file, { BYOK_UPSTREAM_SERVER: "http://10.0.0.5:8787", BYOK_UPSTREAM_TOKEN: "byok_u_env" }).proxy.upstreamServer
      assert.deepStrictEqual([fromEnv?.url, fromEnv?.token === undefined ? undefined : Redacted.value(fromEnv.token)], ["http://10.0.0.5:8787", "byok_u_env"])
    })

    it("the file turns the TLS listener off with null; PEM files replace the CA's leaf, and only in pairs", () => {
      const file = Schema.decodeSync(FileConfig)({ http2: { tls: null }, proxy: { port: null, offline: true } })
      const config = resolve(file, {})
      assert.strictEqual(config.http2.tls, undefined)
      assert.deepStrictEqual(config.proxy, { port: undefined, offline: true, upstream: undefined, noProxy: [], upstreamServer: undefined })
      const withFiles = resolve(empty, { BYOK_TLS_CERT: "/c.pem", BYOK_TLS_KEY: "/k.pem" })
      assert.deepStrictEqual(withFiles.http2.tls, { port: 8790, certFile: "/c.pem", keyFile: "/k.pem" })
      const half = Effect.runSync(Effect.flip(validate(resolve(empty, { BYOK_TLS_CERT: "/c.pem" }), {})))
      assert.include(half.message, "both a certificate and a key")
      const badPort = Effect.runSync(Effect.flip(validate(resolve(empty, { BYOK_PROXY_PORT: "nope" }), { BYOK_PROXY_PORT: "nope" })))
      assert.include(badPort.message, "BYOK_PROXY_PORT")
    })

    it("BYOK_COMPACTION=off turns automatic compaction off; a value that is not on or off is refused in one line", () => {
      const empty = Schema.decodeSync(FileConfig)({})
      assert.isTrue(resolve(empty, {}).compaction.auto)
      assert.isFalse(resolve(empty, { BYOK_COMPACTION: "off" }).compaction.auto)
      assert.deepStrictEqual(resolve(empty, {}).compaction, { auto: true, threshold: 0.8, tailShare: 0.15, summaryMaxTokens: 4096, elideToolResultChars: 2048 })
      const bad = Effect.runSync(Effect.flip(validate(resolve(empty, { BYOK_COMPACTION: "maybe" }), { BYOK_COMPACTION: "maybe" })))
      assert.strictEqual(bad.message, "BYOK_COMPACTION must be on or off, got maybe")
    })
  })

  describe("the web section", () => {
    const withWeb = (web: unknown) => Schema.decodeUnknownSync(FileConfig)({ web })
    const refusal = (file: FileConfig, env: Record<string, string>) => Effect.runSync(Effect.flip(validate(resolve(file, env), env))).message

    it("defaults: fetch on, 15 s, 2 MiB, 5 redirects, 100,000 characters, no allowed hosts and no search backend", () => {
      assert.deepStrictEqual(resolve(empty, {}).web, {
        timeoutMs: 15_000,
        fetch: { enabled: true, allowHosts: [], maxBytes: 2 * 1024 * 1024, maxRedirects: 5, maxMarkdownChars: 100_000 },
        search: { backend: undefined, maxResults: 8, chunkChars: 1000 }
      })
    })

    it("each backend form decodes: searxng with its URL, brave and tavily with their default key variables and base URLs", () => {
      assert.deepStrictEqual(resolve(withWeb({ search: { backend: "searxng", url: "http://localhost:8080" } }), {}).web.search.backend, {
        name: "searxng",
        url: "http://localhost:8080"
      })
      const brave = resolve(withWeb({ search: { backend: "brave", maxResults: 5 } }), { BRAVE_SEARCH_API_KEY: "bk" }).web.search
      assert.strictEqual(brave.maxResults, 5)
      assert.deepStrictEqual({ ...brave.backend, apiKey: undefined }, { name: "brave", baseUrl: "https://api.search.brave.com", apiKeyEnv: "BRAVE_SEARCH_API_KEY", apiKey: undefined })
      const tavily = resolve(withWeb({ search: { backend: "tavily", apiKeyEnv: "MY_TAVILY", baseUrl: "https://tavily.internal" } }), { MY_TAVILY: "tk" }).web.search.backend
      assert.deepStrictEqual({ ...tavily, apiKey: undefined }, { name: "tavily", baseUrl: "https://tavily.internal", apiKeyEnv: "MY_TAVILY", apiKey: undefined })
      assert.strictEqual(tavily?.name === "tavily" ? Redacted.value(tavily.apiKey) : "", "tk")
      assert.deepStrictEqual(resolve(withWeb({ fetch: { allowHosts: ["wiki.corp", "127.0.0.1:9000"] } }), {}).web.fetch.allowHosts, ["wiki.corp", "127.0.0.1:9000"])
    })

    it("a search key never shows when the configuration is printed", () => {
      const config = resolve(withWeb({ search: { backend: "brave" } }), { BRAVE_SEARCH_API_KEY: "brave-secret-42" })
      assert.notInclude(JSON.stringify(config), "brave-secret-42")
    })

    it("BYOK_WEB_SEARCH picks the backend: searxng=<url>, brave, tavily, or off over the file's", () => {
      assert.deepStrictEqual(resolve(empty, { BYOK_WEB_SEARCH: "searxng=http://127.0.0.1:8888" }).web.search.backend, { name: "searxng", url: "http://127.0.0.1:8888" })
      assert.strictEqual(resolve(empty, { BYOK_WEB_SEARCH: "brave", BRAVE_SEARCH_API_KEY: "k" }).web.search.backend?.name, "brave")
      assert.strictEqual(resolve(empty, { BYOK_WEB_SEARCH: "Tavily", TAVILY_API_KEY: "k" }).web.search.backend?.name, "tavily")
      const file = withWeb({ search: { backend: "brave", apiKeyEnv: "CORP_BRAVE", maxResults: 3 } })
      assert.isUndefined(resolve(file, { BYOK_WEB_SEARCH: "off" }).web.search.backend)
      // The same backend keeps the file's settings (its key variable), and the common ones always stay.
      const same = resolve(file, { BYOK_WEB_SEARCH: "brave", CORP_BRAVE: "k" }).web.search
      assert.strictEqual(same.backend?.name === "brave" ? same.backend.apiKeyEnv : "", "CORP_BRAVE")
      assert.strictEqual(resolve(file, { BYOK_WEB_SEARCH: "searxng=https://search.example" }).web.search.maxResults, 3)
    })

    it("a BYOK_WEB_SEARCH that is not one of the forms is refused in one line", () => {
      assert.strictEqual(refusal(empty, { BYOK_WEB_SEARCH: "bing" }), "BYOK_WEB_SEARCH must be searxng=<http(s) URL>, brave, tavily or off, got bing")
      assert.strictEqual(refusal(empty, { BYOK_WEB_SEARCH: "searxng=localhost:8080" }), "BYOK_WEB_SEARCH must be searxng=<http(s) URL>, brave, tavily or off, got searxng=localhost:8080")
      assert.strictEqual(refusal(empty, { BYOK_WEB_SEARCH: "searxng" }), "BYOK_WEB_SEARCH must be searxng=<http(s) URL>, brave, tavily or off, got searxng")
    })

    it("a backend whose key variable is not set is refused in one line naming the variable", () => {
      assert.strictEqual(refusal(empty, { BYOK_WEB_SEARCH: "brave" }), "web search: the brave backend reads its API key from BRAVE_SEARCH_API_KEY, which is not set")
      assert.strictEqual(refusal(withWeb({ search: { backend: "tavily", apiKeyEnv: "MY_TAVILY" } }), {}), "web search: the tavily backend reads its API key from MY_TAVILY, which is not set")
      const fine = resolve(withWeb({ search: { backend: "tavily" } }), { TAVILY_API_KEY: "k" })
      assert.strictEqual(Effect.runSync(validate(fine, { TAVILY_API_KEY: "k" })).web.search.backend?.name, "tavily")
    })
  })
})
