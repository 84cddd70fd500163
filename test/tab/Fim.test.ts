/**
 * The FIM calls end to end against the loopback fake provider: each wire's request and its
 * decoded stream, the errors a user reads (key, path, network, timeouts, malformed events),
 * events cut across network reads, and the abort of an interrupted call as the provider sees
 * it. Nothing asserts a duration: waits are bounded polls for what must happen.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Either, Fiber, Redacted, Stream } from "effect"
import * as Net from "node:net"
import { Agent, buildConnector } from "undici"
import * as Fim from "../../src/tab/Fim.js"
import type { FimError, FimEvent, FimPrompt } from "../../src/Tab.js"
import * as Fake from "../support/FakeProvider.js"

const prompt: FimPrompt = {
  context: "// b.ts\nexport const b = 2\n",
  prefix: "function add(a: number, b: number) {\n  return ",
  suffix: "\n}\n",
  path: "src/a.ts",
  languageId: "typescript",
  stop: ["\n\n", "```"],
  maxTokens: 64
}

/** A target on the fake (or any server at `url`): llama.cpp at the root, the others under `/v1`. */
const targetFor = (provider: { readonly url: string; readonly baseUrl: string }, api: Fim.FimApi, overrides: Partial<Fim.FimTarget> = {}): Fim.FimTarget => ({
  provider: "local",
  api,
  baseUrl: api === "llamacpp-infill" ? provider.url : provider.baseUrl,
  apiKey: Redacted.make("sk-tab-key"),
  headers: { "X-Extra": "1" },
  model: "fim-model",
  timeoutMs: 5_000,
  ...overrides
})

/** A dispatcher of its own per test (its pool dies with the scope). */
const agent = (options?: Agent.Options) =>
  Effect.acquireRelease(Effect.sync(() => new Agent(options)), (dispatcher) => Effect.promise(() => dispatcher.destroy()))

const call = (dispatcher: Agent, target: Fim.FimTarget, fimPrompt: FimPrompt = prompt) =>
  Fim.stream(dispatcher, target, fimPrompt).pipe(
    Stream.runCollect,
    Effect.map(Chunk.toArray),
    Effect.either
  )

/** Runs a call that must succeed; returns its events. */
const answer = (dispatcher: Agent, target: Fim.FimTarget, fimPrompt: FimPrompt = prompt) =>
  Effect.flatMap(call(dispatcher, target, fimPrompt), Either.match({
    onLeft: (error) => Effect.die(new Error(`expected an answer, got ${error.kind}: ${error.message}`)),
    onRight: Effect.succeed
  }))

/** Runs a call that must fail; returns its error. */
const failure = (dispatcher: Agent, target: Fim.FimTarget) =>
  Effect.flatMap(call(dispatcher, target), Either.match({
    onLeft: (error): Effect.Effect<FimError> => Effect.succeed(error),
    onRight: (events) => Effect.die(new Error(`expected a failure, got ${JSON.stringify(events)}`))
  }))

const textOf = (events: ReadonlyArray<FimEvent>) => events.flatMap((event) => (event._tag === "Text" ? [event.text] : [])).join("")

/** Everything after the texts: exactly one `Done`, last. */
const endOf = (events: ReadonlyArray<FimEvent>) => {
  expect(events.filter((event) => event._tag === "Done")).toHaveLength(1)
  return events.at(-1)
}

/** Polls (every 10 ms, 5 s at most) until `check` holds; returns whether it did. */
const eventually = (check: () => boolean) =>
  Effect.gen(function*() {
    for (let tries = 0; tries < 500; tries++) {
      if (check()) return true
      yield* Effect.sleep("10 millis")
    }
    return check()
  })

const bodyOf = (provider: Fake.FakeProvider, index = 0) => JSON.parse(provider.requests[index]?.body ?? "{}")

describe("Fim wires: request and decoded stream", () => {
  it.scopedLive("openai-completions posts /completions with prompt = context + prefix, suffix, limits and stream usage", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.sse(Fake.fim.openAiCompletions(["a", " + ", "b"], { usage: { input: 42, output: 3 } })))
      const target = targetFor(provider, "openai-completions")
      const events = yield* answer(dispatcher, target)
      expect(textOf(events)).toBe("a + b")
      expect(endOf(events)).toEqual({ _tag: "Done", inputTokens: 42, outputTokens: 3, reason: "stop" })
      const [recorded] = provider.requests
      expect(recorded?.method).toBe("POST")
      expect(recorded?.path).toBe("/v1/completions")
      expect(recorded?.headers["authorization"]).toBe("Bearer sk-tab-key")
      expect(recorded?.headers["x-extra"]).toBe("1")
      expect(recorded?.headers["content-type"]).toBe("application/json")
      expect(bodyOf(provider)).toEqual({
        model: "fim-model",
        prompt: prompt.context + prompt.prefix,
        suffix: prompt.suffix,
        max_tokens: 64,
        temperature: 0,
        stop: ["\n\n", "```"],
        stream: true,
        stream_options: { include_usage: true }
      })
      // `requestOf` is what went on the wire, byte for byte.
      expect(Fim.requestOf(target, prompt)).toMatchObject({ url: `${provider.baseUrl}/completions`, body: recorded?.body })
    }))

  it.scopedLive("openai-completions: finish_reason length ends with reason length; no usage counts 0; no key sends no Authorization; empty stop is left out", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.sse(Fake.fim.openAiCompletions(["cut"], { finishReason: "length", usage: null })))
      const target = targetFor(provider, "openai-completions", { apiKey: Redacted.make(""), temperature: 0.2, baseUrl: `${provider.baseUrl}/` })
      const events = yield* answer(dispatcher, target, { ...prompt, stop: [] })
      expect(events).toEqual([{ _tag: "Text", text: "cut" }, { _tag: "Done", inputTokens: 0, outputTokens: 0, reason: "length" }])
      expect(provider.requests[0]?.path).toBe("/v1/completions")
      expect(provider.requests[0]?.headers["authorization"]).toBeUndefined()
      const body = bodyOf(provider)
      expect(body.temperature).toBe(0.2)
      expect("stop" in body).toBe(false)
    }))

  it.scopedLive("openai-completions: a stream that closes without [DONE] after answering still ends with Done", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.sse(Fake.fim.openAiCompletions(["x", "y"], { done: false, usage: { input: 5, output: 2 } })))
      const events = yield* answer(dispatcher, targetFor(provider, "openai-completions"))
      expect(textOf(events)).toBe("xy")
      expect(endOf(events)).toEqual({ _tag: "Done", inputTokens: 5, outputTokens: 2, reason: "stop" })
    }))

  it.scopedLive("mistral-fim posts /fim/completions and reads delta.content, usage from the last chunk", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.sse(Fake.fim.mistral(["a ", "+ b"], { finishReason: "length", usage: { input: 30, output: 2 } })))
      const target = targetFor(provider, "mistral-fim", { model: "codestral-latest" })
      const events = yield* answer(dispatcher, target)
      expect(textOf(events)).toBe("a + b")
      expect(endOf(events)).toEqual({ _tag: "Done", inputTokens: 30, outputTokens: 2, reason: "length" })
      expect(provider.requests[0]?.path).toBe("/v1/fim/completions")
      expect(provider.requests[0]?.headers["authorization"]).toBe("Bearer sk-tab-key")
      expect(bodyOf(provider)).toEqual({
        model: "codestral-latest",
        prompt: prompt.context + prompt.prefix,
        suffix: prompt.suffix,
        max_tokens: 64,
        temperature: 0,
        stop: ["\n\n", "```"],
        stream: true
      })
    }))

  it.scopedLive("llamacpp-infill posts /infill with input_prefix, input_suffix, the context as input_extra, n_predict", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.sse(Fake.fim.llamaCpp(["a", " + b"], { usage: { input: 120, output: 2 } })))
      const target = targetFor(provider, "llamacpp-infill")
      const events = yield* answer(dispatcher, target)
      expect(textOf(events)).toBe("a + b")
      expect(endOf(events)).toEqual({ _tag: "Done", inputTokens: 120, outputTokens: 2, reason: "stop" })
      expect(provider.requests[0]?.path).toBe("/infill")
      expect(bodyOf(provider)).toEqual({
        model: "fim-model",
        input_prefix: prompt.prefix,
        input_suffix: prompt.suffix,
        input_extra: [{ filename: "context", text: prompt.context }],
        prompt: "",
        n_predict: 64,
        temperature: 0,
        stop: ["\n\n", "```"],
        stream: true,
        cache_prompt: true
      })
    }))

  it.scopedLive("llamacpp-infill: no context leaves input_extra out; counts from timings; stop_type limit is length; an end without stop:true is Done", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(
        Fake.sse(Fake.fim.llamaCpp(["long"], { countsIn: "timings", stopType: "limit", usage: { input: 7, output: 64 } })),
        Fake.sse(Fake.fim.llamaCpp(["partial"], { final: false }))
      )
      const target = targetFor(provider, "llamacpp-infill")
      const limited = yield* answer(dispatcher, target, { ...prompt, context: "" })
      expect(limited).toEqual([{ _tag: "Text", text: "long" }, { _tag: "Done", inputTokens: 7, outputTokens: 64, reason: "length" }])
      expect("input_extra" in bodyOf(provider)).toBe(false)
      const cut = yield* answer(dispatcher, target)
      expect(cut).toEqual([{ _tag: "Text", text: "partial" }, { _tag: "Done", inputTokens: 0, outputTokens: 0, reason: "stop" }])
    }))

  it.scopedLive("events cut anywhere across network reads (CRLF split between CR and LF, a UTF-8 character split) decode the same", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      const crlf = (lines: ReadonlyArray<string>) => lines.join("").replace(/\n/g, "\r\n")
      const whole = Buffer.from(crlf(Fake.fim.openAiCompletions(["é✓", "😀 x"], { usage: { input: 3, output: 2 } })), "utf8")
      const cuts = new Set<number>()
      const emoji = whole.indexOf(Buffer.from("😀"))
      const accent = whole.indexOf(Buffer.from("é"))
      const crAt = whole.indexOf(Buffer.from("\r\n"))
      for (const at of [5, accent + 1, crAt + 1, emoji + 1, emoji + 3, whole.length - 3]) cuts.add(at)
      const steps: Array<Fake.Step> = []
      let from = 0
      for (const at of [...cuts].sort((a, b) => a - b)) {
        steps.push(whole.subarray(from, at))
        from = at
      }
      steps.push(whole.subarray(from))
      provider.enqueue(Fake.sse(steps))
      const events = yield* answer(dispatcher, targetFor(provider, "openai-completions"))
      expect(textOf(events)).toBe("é✓😀 x")
      expect(endOf(events)).toEqual({ _tag: "Done", inputTokens: 3, outputTokens: 2, reason: "stop" })
    }))

  it.scopedLive("a complete answer leaves its connection open for the next call", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      let connects = 0
      const connector = buildConnector({})
      // One connection at most: a second call waits for the first one's socket, or opens another if it was closed.
      const dispatcher = yield* agent({
        connections: 1,
        connect: (options, callback) => {
          connects++
          connector(options, callback)
        }
      })
      provider.enqueue(Fake.sse(Fake.fim.openAiCompletions(["one"])), Fake.sse(Fake.fim.openAiCompletions(["two"])))
      const target = targetFor(provider, "openai-completions")
      expect(textOf(yield* answer(dispatcher, target))).toBe("one")
      expect(textOf(yield* answer(dispatcher, target))).toBe("two")
      expect(connects).toBe(1)
    }))
})

describe("Fim errors a user can act on", () => {
  it.scopedLive("401 names the key and carries the provider's message; 404 names the URL called and tab.api", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(
        Fake.status(401, { error: { message: "Invalid API key provided" } }),
        Fake.status(404, "404 page not found"),
        Fake.status(404, { detail: "Not Found" })
      )
      const auth = yield* failure(dispatcher, targetFor(provider, "openai-completions"))
      expect(auth.kind).toBe("http")
      expect(auth.status).toBe(401)
      expect(auth.message).toContain("Invalid API key provided")
      expect(auth.message).toMatch(/key/i)
      const missing = yield* failure(dispatcher, targetFor(provider, "openai-completions"))
      expect(missing).toMatchObject({ kind: "http", status: 404 })
      expect(missing.message).toContain(`${provider.baseUrl}/completions`)
      expect(missing.message).toContain("/v1/completions")
      expect(missing.message).toContain("tab.api")
      expect(missing.message).toContain("404 page not found")
      const fim = yield* failure(dispatcher, targetFor(provider, "mistral-fim"))
      expect(fim.message).toContain("/v1/fim/completions")
      expect(fim.message).toContain("Not Found")
    }))

  it.scopedLive("the provider's message is cut at 300 characters", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.status(400, { message: "x".repeat(2_000) }))
      const error = yield* failure(dispatcher, targetFor(provider, "mistral-fim"))
      expect(error).toMatchObject({ kind: "http", status: 400 })
      expect(error.message).toContain("x".repeat(300))
      expect(error.message).not.toContain("x".repeat(301))
    }))

  it.scopedLive("a closed port is a network error naming the URL", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => {
          const server = Net.createServer()
          server.listen(0, "127.0.0.1", () => {
            const { port } = server.address() as Net.AddressInfo
            server.close(() => resolve(port))
          })
        })
      )
      const dispatcher = yield* agent()
      const url = `http://127.0.0.1:${port}`
      const baseUrl = `${url}/v1`
      const error = yield* failure(dispatcher, targetFor({ url, baseUrl }, "openai-completions"))
      expect(error.kind).toBe("network")
      expect(error.message).toContain(`${baseUrl}/completions`)
    }))

  it.scopedLive("no response head within timeoutMs is a timeout; so is a body silent for timeoutMs after its first text", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.stall, Fake.sse(Fake.fim.llamaCpp(["half"], { final: false }), { end: "stall" }))
      const target = targetFor(provider, "llamacpp-infill", { timeoutMs: 200 })
      const head = yield* failure(dispatcher, target)
      expect(head.kind).toBe("timeout")
      expect(head.message).toContain(`${provider.url}/infill`)
      const seen: Array<FimEvent> = []
      const body = yield* Fim.stream(dispatcher, target, prompt).pipe(
        Stream.runForEach((event) => Effect.sync(() => seen.push(event))),
        Effect.flip
      )
      expect(seen).toEqual([{ _tag: "Text", text: "half" }])
      expect(body.kind).toBe("timeout")
    }))

  it.scopedLive("malformed JSON in an event is a decode error; an error object in the stream is an http error; a drop is a network error", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      const [first] = Fake.fim.openAiCompletions(["ok"])
      provider.enqueue(
        Fake.sse([first!, "data: {not json\n\n"]),
        Fake.sse([Fake.event({ error: "model 'fim-model' not found, try pulling it first" })]),
        Fake.sse([first!], { end: "drop" }),
        Fake.sse([])
      )
      const target = targetFor(provider, "openai-completions")
      const decode = yield* failure(dispatcher, target)
      expect(decode.kind).toBe("decode")
      expect(decode.message).toContain("{not json")
      const reported = yield* failure(dispatcher, target)
      expect(reported.kind).toBe("http")
      expect(reported.message).toContain("try pulling it first")
      const dropped = yield* failure(dispatcher, target)
      expect(dropped.kind).toBe("network")
      const empty = yield* failure(dispatcher, target)
      expect(empty.kind).toBe("decode")
    }))

  it.scopedLive("a base URL that is no URL is a config error", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      const error = yield* failure(dispatcher, targetFor(provider, "mistral-fim", { baseUrl: "codestral.mistral.ai/v1" }))
      expect(error.kind).toBe("config")
      expect(provider.requests).toHaveLength(0)
    }))
})

describe("Fim abort: the provider sees an interrupted call close", () => {
  const streamingForever = () => Fake.sse([Fake.fim.openAiCompletions(["first"])[0]!], { end: "stall" })

  it.scopedLive("a consumer that stops after the first text (Stream.take) closes the request", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(streamingForever())
      const taken = yield* Fim.stream(dispatcher, targetFor(provider, "openai-completions"), prompt).pipe(Stream.take(1), Stream.runCollect)
      expect(Chunk.toArray(taken)).toEqual([{ _tag: "Text", text: "first" }])
      expect(yield* eventually(() => provider.lives[0]?.closedAt !== undefined)).toBe(true)
    }))

  it.scopedLive("interrupting the consuming fiber mid-stream closes the request", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.sse(Fake.fim.mistral(["first"]).slice(0, 2), { end: "stall" }))
      const firstText = yield* Deferred.make<void>()
      const fiber = yield* Fim.stream(dispatcher, targetFor(provider, "mistral-fim"), prompt).pipe(
        Stream.runForEach(() => Deferred.succeed(firstText, undefined)),
        Effect.fork
      )
      yield* Deferred.await(firstText)
      expect(provider.lives[0]?.closedAt).toBeUndefined()
      yield* Fiber.interrupt(fiber)
      expect(yield* eventually(() => provider.lives[0]?.closedAt !== undefined)).toBe(true)
    }))

  it.scopedLive("interrupting before the response head closes the request", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const dispatcher = yield* agent()
      provider.enqueue(Fake.stall)
      const fiber = yield* Fim.stream(dispatcher, targetFor(provider, "llamacpp-infill"), prompt).pipe(Stream.runDrain, Effect.fork)
      expect(yield* eventually(() => provider.requests.length === 1)).toBe(true)
      yield* Fiber.interrupt(fiber)
      expect(yield* eventually(() => provider.lives[0]?.closedAt !== undefined)).toBe(true)
    }))
})
