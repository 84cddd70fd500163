/**
 * The redactor (`internal/Secrets.ts`): exact, URL-encoded and masked forms of each secret
 * replaced by its readable marker, short values left alone, a text without secrets returned
 * as it is; the configuration's `secretHeaders`; the process-wide registry as a union by owner
 * that follows an applied reload.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Redacted, Scope } from "effect"
import { decodeFile, resolve } from "../../src/Config.js"
import * as Secrets from "../../src/internal/Secrets.js"

const OPENAI = "sk-proj-abc1DEF2ghi3JKL4mno5wxyz"
const ANTHROPIC = "sk-ant-api03-Zz9Yy8Xx7Ww6Vv5Uu4-Q1R2"
const SLASHED = "key/with+plus=and/slash:colon"

const provider = (id: string, key: string, headers: Record<string, string> = {}, secretHeaders?: ReadonlyArray<string>) => ({
  id,
  api: "openai-chat" as const,
  baseUrl: "http://127.0.0.1:1/v1",
  apiKey: Redacted.make(key),
  headers,
  ...(secretHeaders === undefined ? {} : { secretHeaders }),
  extraBody: {},
  compat: {}
})

const sourceOf = (...providers: ReadonlyArray<ReturnType<typeof provider>>): Secrets.SecretSource => ({ router: { providers } })

const redactorOf = (...providers: ReadonlyArray<ReturnType<typeof provider>>) => Secrets.makeRedactor(Secrets.secretsOf(sourceOf(...providers)))

describe("Secrets.makeRedactor", () => {
  const redact = redactorOf(provider("openai", OPENAI), provider("anthropic", ANTHROPIC), provider("odd", SLASHED))

  it("replaces every exact occurrence with the provider's marker", () => {
    assert.strictEqual(
      redact(`fake-openai: authentication failed (HTTP 401): Incorrect API key provided: ${OPENAI}. Again: ${OPENAI}`),
      "fake-openai: authentication failed (HTTP 401): Incorrect API key provided: [key of provider openai]. Again: [key of provider openai]"
    )
  })

  it("tells several providers apart", () => {
    assert.strictEqual(redact(`${ANTHROPIC} then ${OPENAI}`), "[key of provider anthropic] then [key of provider openai]")
  })

  it("replaces the URL-encoded form", () => {
    const encoded = encodeURIComponent(SLASHED)
    assert.notStrictEqual(encoded, SLASHED)
    assert.strictEqual(redact(`GET /v1/models?key=${encoded}&alt=sse`), "GET /v1/models?key=[key of provider odd]&alt=sse")
    assert.strictEqual(redact(`raw ${SLASHED}`), "raw [key of provider odd]")
  })

  it("replaces masked echoes: the key's first characters, 3 or more `*` (with `...` inside or not), its last 4", () => {
    assert.strictEqual(redact("Incorrect API key provided: sk-proj-abc1***...***wxyz."), "Incorrect API key provided: [key of provider openai].")
    assert.strictEqual(redact("provided: sk-pr*************************wxyz, check"), "provided: [key of provider openai], check")
    assert.strictEqual(redact("key=sk-proj-a****wxyz"), "key=[key of provider openai]")
    assert.strictEqual(redact(`"sk-ant-api03-Z***Q1R2"`), `"[key of provider anthropic]"`)
  })

  it("leaves masks that are not one of the keys: other last characters, another start, fewer than 3 stars", () => {
    for (const text of ["sk-proj-abc1***...***abcd", "pk-live-abc1*****wxyz", "sk-proj**wxyz", "**bold** and ***wxyz***", "a***wxyz"]) {
      assert.strictEqual(redact(text), text)
    }
  })

  it("returns a text without secrets unchanged", () => {
    const text = "openai: rate limited (HTTP 429): Rate limit reached for gpt in organization org-x on requests per min. ***"
    assert.strictEqual(redact(text), text)
    assert.strictEqual(redact(""), "")
  })

  it("ignores secrets shorter than 8 characters (a dummy key for a local server)", () => {
    const local = redactorOf(provider("ollama", "ollama"), provider("vllm", "EMPTY"), provider("blank", ""))
    const text = "ollama answered: the EMPTY model is not loaded"
    assert.strictEqual(local(text), text)
    assert.strictEqual(redactorOf(provider("eight", "12345678"))("id 12345678"), "id [key of provider eight]")
  })

  it("names every provider sharing a key in one marker", () => {
    const shared = redactorOf(provider("openai", OPENAI), provider("proxy", OPENAI), provider("anthropic", ANTHROPIC))
    assert.strictEqual(shared(`${OPENAI} ${ANTHROPIC}`), "[key of providers openai, proxy] [key of provider anthropic]")
  })

  it("replaces a longer secret before one it contains", () => {
    const nested = redactorOf(provider("a", "inner-secret-1"), provider("b", "outer-inner-secret-1-tail"))
    assert.strictEqual(nested("x outer-inner-secret-1-tail y inner-secret-1"), "x [key of provider b] y [key of provider a]")
  })

  it("takes the header values a provider marks secret, by name in any case, and no other header", () => {
    const secrets = Secrets.secretsOf(sourceOf(provider("azure", "azure-key-0123456789", { "Api-Key": "header-secret-987654321", "x-team": "platform-team-name" }, ["api-key"])))
    assert.deepStrictEqual(secrets.map((s) => s.marker), ["[key of provider azure]", "[header Api-Key of provider azure]"])
    const redact = Secrets.makeRedactor(secrets)
    assert.strictEqual(redact("header-secret-987654321 platform-team-name"), "[header Api-Key of provider azure] platform-team-name")
  })
})

describe("Secrets registry", () => {
  it("redacts the union of the registered owners' secrets, and forgets an owner that unregisters", () => {
    const a = {}
    const b = {}
    Secrets.register(a, () => sourceOf(provider("p-a", OPENAI)))
    Secrets.register(b, () => sourceOf(provider("p-b", ANTHROPIC)))
    try {
      assert.strictEqual(Secrets.redact(`${OPENAI} ${ANTHROPIC}`), "[key of provider p-a] [key of provider p-b]")
      Secrets.unregister(a)
      assert.strictEqual(Secrets.redact(`${OPENAI} ${ANTHROPIC}`), `${OPENAI} [key of provider p-b]`)
    } finally {
      Secrets.unregister(a)
      Secrets.unregister(b)
    }
    assert.strictEqual(Secrets.redact(ANTHROPIC), ANTHROPIC)
  })

  it("follows a reload at its next use (a new configuration object), keeping the replaced key", () => {
    const owner = {}
    let running = sourceOf(provider("openai", OPENAI))
    Secrets.register(owner, () => running)
    try {
      assert.strictEqual(Secrets.redact(OPENAI), "[key of provider openai]")
      running = sourceOf(provider("openai", ANTHROPIC))
      // A call started before the reload may still fail quoting the old key.
      assert.strictEqual(Secrets.redact(`${ANTHROPIC} ${OPENAI}`), "[key of provider openai] [key of provider openai]")
    } finally {
      Secrets.unregister(owner)
    }
  })

  it.effect("registered: for the life of a scope", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      yield* Secrets.registered(() => sourceOf(provider("scoped", OPENAI))).pipe(Scope.extend(scope))
      assert.strictEqual(Secrets.redact(OPENAI), "[key of provider scoped]")
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(Secrets.redact(OPENAI), OPENAI)
    }))
})

describe("Config secretHeaders", () => {
  const file = (secretHeaders: ReadonlyArray<string>) =>
    JSON.stringify({
      providers: [{ id: "azure", api: "openai-chat", baseUrl: "https://x.openai.azure.com/v1", headers: { "api-key": "header-secret-987654321" }, secretHeaders }],
      models: [{ id: "m", provider: "azure", upstreamModel: "m" }]
    })

  it.effect("are carried to the running configuration, names in any case", () =>
    Effect.gen(function*() {
      const config = resolve(yield* decodeFile("byok.config.json", file(["API-KEY"])), {})
      assert.deepStrictEqual(config.router.providers[0]!.secretHeaders, ["API-KEY"])
      assert.include(Secrets.secretsOf(config).map((s) => s.marker), "[header api-key of provider azure]")
    }))

  it.effect("must each name one of the provider's headers", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(decodeFile("byok.config.json", file(["authorization"])))
      assert.strictEqual(error.message, `byok.config.json: providers[0].secretHeaders: names header "authorization", which is not one of this provider's headers`)
    }))
})
