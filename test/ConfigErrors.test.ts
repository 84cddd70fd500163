/**
 * A broken configuration file reads as one line per problem: the file, the JSON path, what was
 * expected and what was there, never Schema's tree. Each case asserts every line.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { decodeFile, FileConfig, resolve, validate } from "../src/Config.js"
import { defaultRetrySettings } from "../src/llm/Http.js"

const FILE = "byok.config.json"

const linesOf = (json: unknown) =>
  Effect.runSync(Effect.flip(decodeFile(FILE, typeof json === "string" ? json : JSON.stringify(json)))).message.split("\n")

const provider = { id: "ds", api: "openai-chat", baseUrl: "https://api.deepseek.com/v1", apiKeyEnv: "DEEPSEEK_API_KEY" }
const model = { id: "m", provider: "ds", upstreamModel: "deepseek-chat" }

const cases: ReadonlyArray<readonly [string, unknown, ReadonlyArray<string>]> = [
  ["an api kind with a typo", { providers: [{ ...provider, api: "openai-chatt" }] }, [
    `${FILE}: providers[0].api: expected one of "openai-chat", "anthropic", "gemini", "openai-responses", got "openai-chatt"`
  ]],
  ["a top-level key with a typo", { prot: 8787 }, [`${FILE}: prot: is not a known key: did you mean "port"?`]],
  ["a port given as a string", { port: "8787" }, [`${FILE}: port: expected number, got "8787"`]],
  ["a port out of range", { port: 70000 }, [`${FILE}: port: expected a number between 0 and 65535, got 70000`]],
  ["a model without its upstream model", { providers: [provider], models: [{ id: "m", provider: "ds" }] }, [`${FILE}: models[0].upstreamModel: is missing`]],
  ["a provider without a base URL, and one with an unknown key", { providers: [{ id: "a", api: "anthropic" }, { ...provider, apiKey: "sk-..." }] }, [
    `${FILE}: providers[0].baseUrl: is missing`,
    `${FILE}: providers[1].apiKey: is not a known key: did you mean "apiKeyEnv"?`
  ]],
  ["a negative price", { providers: [provider], models: [{ ...model, price: { input: -1, output: 2 } }] }, [
    `${FILE}: models[0].price.input: expected a non-negative number, got -1`
  ]],
  ["a thinking effort that does not exist", { providers: [provider], models: [{ ...model, thinking: { effort: "max" } }] }, [
    `${FILE}: models[0].thinking.effort: expected one of "minimal", "low", "medium", "high", got "max"`
  ]],
  ["providers given as an object", { providers: { ds: provider } }, [
    `${FILE}: providers: expected an array, got {"ds":{"id":"ds","api":"openai-chat","baseUrl":"https://api.deepseek.com/v1",...`
  ]],
  ["the proxy port as a word", { proxy: { port: "off" } }, [`${FILE}: proxy.port: expected one of number, null, got "off"`]],
  ["an alias naming a number", { aliases: { auto: 3 } }, [`${FILE}: aliases.auto: expected string, got 3`]],
  ["three problems at once", { port: -1, heartbeatMs: 0, limits: { appendWindow: 1.5 } }, [
    `${FILE}: port: expected a number between 0 and 65535, got -1`,
    `${FILE}: heartbeatMs: expected a positive number, got 0`,
    `${FILE}: limits.appendWindow: expected an integer, got 1.5`
  ]],
  ["a model given as a string", { providers: [provider], models: ["m"] }, [`${FILE}: models[0]: expected an object, got "m"`]],
  ["a search backend that does not exist", { web: { search: { backend: "bing" } } }, [
    `${FILE}: web.search.backend: expected one of "off", "searxng", "brave", "tavily", got "bing"`
  ]],
  ["a searxng backend without its URL", { web: { search: { backend: "searxng" } } }, [
    `${FILE}: web.search.url: is missing: the searxng backend needs the URL of a SearXNG instance`
  ]],
  ["a searxng URL without a scheme", { web: { search: { backend: "searxng", url: "localhost:8080" } } }, [
    `${FILE}: web.search.url: expected an http or https URL, got "localhost:8080"`
  ]],
  ["a brave backend given a url (brave takes baseUrl)", { web: { search: { backend: "brave", url: "https://api.search.brave.com" } } }, [
    `${FILE}: web.search.url: is for the searxng backend only (backend is "brave"); brave and tavily take baseUrl`
  ]],
  ["a base URL without a scheme", { providers: [{ ...provider, baseUrl: "api.deepseek.com/v1" }] }, [
    `${FILE}: providers[0].baseUrl: expected an http or https URL with the API's version segment, e.g. "https://api.openai.com/v1", got "api.deepseek.com/v1"`
  ]],
  ["a base URL that is not http or https, and one that does not parse", { providers: [{ ...provider, baseUrl: "ftp://api.deepseek.com/v1" }, { ...provider, id: "b", baseUrl: "http//x" }] }, [
    `${FILE}: providers[0].baseUrl: expected an http or https URL with the API's version segment, e.g. "https://api.openai.com/v1", got "ftp://api.deepseek.com/v1"`,
    `${FILE}: providers[1].baseUrl: expected an http or https URL with the API's version segment, e.g. "https://api.openai.com/v1", got "http//x"`
  ]],
  ["an allowed host written as a URL, and a zero time limit", { web: { timeoutMs: 0, fetch: { allowHosts: ["http://wiki.corp/"] } } }, [
    `${FILE}: web.timeoutMs: expected a positive number, got 0`,
    `${FILE}: web.fetch.allowHosts[0]: expected a host or host:port (no scheme, path or user), got "http://wiki.corp/"`
  ]]
]

describe("configuration errors", () => {
  it("a file that is not JSON: one line with where (the rest is Node's own message)", () => {
    const lines = linesOf("{\n  \"port\": 1,\n  oops\n}")
    assert.strictEqual(lines.length, 1)
    assert.match(lines[0]!, /^byok\.config\.json: not valid JSON at line 3, column 3: /)
  })

  for (const [name, json, expected] of cases) {
    it(`${name}: one line per problem`, () => {
      assert.deepStrictEqual(linesOf(json), [...expected])
    })
  }
})

/** What `serve` and a reload refuse past the decoding: the model table's references, checked on the resolved configuration. */
const refusedLines = (json: unknown, env: Readonly<Record<string, string>> = {}) =>
  Effect.runSync(Effect.flip(Effect.flatMap(decodeFile(FILE, JSON.stringify(json)), (file) => validate(resolve(file, env), env, FILE)))).message.split("\n")

const accepted = (json: unknown, env: Readonly<Record<string, string>> = {}) =>
  Effect.runSync(Effect.flatMap(decodeFile(FILE, JSON.stringify(json)), (file) => validate(resolve(file, env), env, FILE)))

const second = { id: "an", api: "anthropic", baseUrl: "https://api.anthropic.com/v1" }

const referenceCases: ReadonlyArray<readonly [string, unknown, ReadonlyArray<string>]> = [
  ["a model naming a provider that is not configured", { providers: [provider], models: [{ ...model, provider: "dsx" }] }, [
    `${FILE}: models[0].provider: names provider "dsx", which is not configured: name one of providers[].id (ds) or add it to providers`
  ]],
  ["a fallback naming a provider that is not configured", { providers: [provider], models: [{ ...model, fallback: [{ provider: "or", upstreamModel: "x" }] }] }, [
    `${FILE}: models[0].fallback[0].provider: names provider "or", which is not configured: name one of providers[].id (ds) or add it to providers`
  ]],
  ["models with no providers at all (and no key variable set)", { models: [model] }, [
    `${FILE}: models[0].provider: names provider "ds", which is not configured: name one of providers[].id (none) or add it to providers`
  ]],
  ["a tab section naming a provider that is not configured", { providers: [provider], models: [model], tab: { provider: "ollama", model: "qwen2.5-coder" } }, [
    `${FILE}: tab.provider: names provider "ollama", which is not configured: name one of providers[].id (ds) or add it to providers`
  ]],
  ["a defaultModel that is not a model", { providers: [provider], models: [model], defaultModel: "deepseek-chat" }, [
    `${FILE}: defaultModel: names model "deepseek-chat", which is not configured: name one of models[].id (m)`
  ]],
  ["an alias naming no model, and one naming an alias", { providers: [provider], models: [model], aliases: { "*": "mm", auto: "*" } }, [
    `${FILE}: aliases["*"]: names model "mm", which is not configured: name one of models[].id (m)`,
    `${FILE}: aliases.auto: names model "*", which is not configured (it is an alias: name the model itself): name one of models[].id (m)`
  ]],
  ["duplicate model ids and duplicate provider ids", { providers: [provider, second, { ...provider, baseUrl: "http://127.0.0.1:8000/v1" }], models: [model, { ...model, provider: "an" }] }, [
    `${FILE}: providers[2].id: "ds" is providers[0].id too: give each provider its own id`,
    `${FILE}: models[1].id: "m" is models[0].id too: give each model its own id`
  ]],
  ["a subagentModel naming nothing", { providers: [provider], models: [model], subagentModel: "gpt-5" }, [
    `${FILE}: subagentModel: names model "gpt-5", which is not configured: name one of models[].id (m) or an alias`
  ]],
  ["four problems at once, each on its own line", { providers: [provider], models: [model, { ...model, id: "n", provider: "x" }, model], defaultModel: "z", aliases: { a: "y" } }, [
    `${FILE}: models[2].id: "m" is models[0].id too: give each model its own id`,
    `${FILE}: models[1].provider: names provider "x", which is not configured: name one of providers[].id (ds) or add it to providers`,
    `${FILE}: aliases.a: names model "y", which is not configured: name one of models[].id (m, n)`,
    `${FILE}: defaultModel: names model "z", which is not configured: name one of models[].id (m, n)`
  ]]
]

describe("configuration references", () => {
  for (const [name, json, expected] of referenceCases) {
    it(`${name}: refused, one line per problem`, () => {
      assert.deepStrictEqual(refusedLines(json), [...expected])
    })
  }

  it("models without providers may name the default catalogue's providers whose key is set", () => {
    const config = accepted({ models: [{ id: "mine", provider: "deepseek", upstreamModel: "deepseek-chat" }], defaultModel: "mine" }, { DEEPSEEK_API_KEY: "k" })
    assert.deepStrictEqual(config.models.map((m) => m.id), ["mine"])
    assert.deepStrictEqual(config.router.providers.map((p) => p.id), ["deepseek"])
  })
})

describe("nested objects merge with their defaults", () => {
  const defaults = Schema.decodeSync(FileConfig)({})

  it("retry: one field given, the other five defaulted", () => {
    const config = accepted({ providers: [provider], models: [model], retry: { maxRetries: 1 } })
    assert.deepStrictEqual(config.router.retry, { ...defaultRetrySettings, maxRetries: 1 })
  })

  const partials: ReadonlyArray<readonly [keyof typeof defaults, Record<string, unknown>]> = [
    ["limits", { appendWindow: 8 }],
    ["compaction", { threshold: 0.5 }],
    ["http2", { cleartextPort: null }],
    ["proxy", { offline: true }],
    ["console", {}],
    ["web", { timeoutMs: 1000 }]
  ]
  for (const [key, partial] of partials) {
    it(`${key}: ${JSON.stringify(partial)} keeps the other fields' defaults`, () => {
      const file = Schema.decodeUnknownSync(FileConfig)({ [key]: partial }, { onExcessProperty: "error" })
      assert.deepStrictEqual(file[key], { ...(defaults[key] as object), ...partial })
    })
  }

  it("one level deeper: http2.tls, web.fetch and web.search", () => {
    const file = Schema.decodeUnknownSync(FileConfig)({ http2: { tls: { port: 9443 } }, web: { fetch: { maxRedirects: 1 }, search: { maxResults: 3 } } })
    assert.deepStrictEqual(file.http2, { ...defaults.http2, tls: { port: 9443 } })
    assert.deepStrictEqual(file.web.fetch, { ...defaults.web.fetch, maxRedirects: 1 })
    assert.deepStrictEqual(file.web.search, { ...defaults.web.search, maxResults: 3 })
  })
})
