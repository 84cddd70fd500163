/**
 * A broken configuration file reads as one line per problem: the file, the JSON path, what was
 * expected and what was there, never Schema's tree. Each case asserts every line.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { decodeFile } from "../src/Config.js"

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
