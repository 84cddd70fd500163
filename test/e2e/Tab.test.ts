/**
 * Tab on the user's FIM model, end to end: the real server (`AppHarness`) with a `tab` section
 * pointing at a loopback fake FIM provider, and Cursor's Tab calls made by the official Connect
 * clients in Connect, gRPC (h2c) and gRPC-Web: the prompt the provider gets, the suggestion's
 * messages field by field, a superseding request aborting the first call, typing through a
 * suggestion with no second call, file sync reaching the prompt, Tab off, bad requests.
 */
import { Code } from "@connectrpc/connect"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as AppHarness from "../support/AppHarness.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { transportOf } from "../support/OfficialClients.js"
import { sha256Hex } from "../../src/tab/Files.js"
import { applied, TabClient } from "../support/TabClient.js"
import type { TabAsk } from "../support/TabClient.js"

const tabConfig = { tab: { provider: "fake-openai", model: "coder-fim", maxLines: 8 } }

const FILE = [
  "export function total(items: Array<number>) {",
  "  let sum = 0",
  "  for (const item of items) {",
  "    sum += ",
  "  }",
  "  return sum",
  "}",
  ""
].join("\n")

const ask = (fields: Partial<TabAsk> = {}): TabAsk => ({ path: "src/total.ts", contents: FILE, line: 3, column: 11, ...fields })

const suggest = (tab: TabClient, request: TabAsk, signal?: AbortSignal) => Effect.promise(() => tab.suggest(request, signal))
const failureOf = (tab: TabClient, request: TabAsk) => Effect.promise(() => tab.failure(request))

const bodyOf = (provider: FakeProvider.FakeProvider, index: number) => JSON.parse(provider.requests[index]!.body) as Record<string, unknown>

const eventually = (check: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200 && !check(); i++) yield* Effect.sleep("25 millis")
    return check()
  })

describe("Tab: StreamCpp from the user's FIM model", () => {
  for (const protocol of ["connect", "grpc", "grpc-web"] as const) {
    it.scopedLive(`a suggestion in ${protocol}: the prompt around the cursor, the frames field by field`, () =>
      Effect.gen(function*() {
        const app = yield* AppHarness.make({ config: tabConfig })
        const base = protocol === "grpc" ? app.h2cUrl : app.baseUrl
        const tab = new TabClient(transportOf(protocol, base, protocol === "grpc" ? "2" : "1.1"))
        app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item", "\n"])))
        const suggestion = yield* suggest(tab, ask())
        const frames = suggestion.frames
        // The provider got the file before and after the cursor, at /completions, with the model.
        expect(app.provider.requests[0]!.path).toBe("/v1/completions")
        const body = bodyOf(app.provider, 0)
        expect(body["model"]).toBe("coder-fim")
        expect(String(body["prompt"]).endsWith("for (const item of items) {\n    sum += ")).toBe(true)
        expect(body["suffix"]).toBe("\n  }\n  return sum\n}\n")
        expect(body["stream"]).toBe(true)
        // model_info, the line replaced (1-based), the line's new text, the end.
        expect(frames[0]!.modelInfo).toEqual(expect.objectContaining({ isFusedCursorPredictionModel: false, isMultidiffModel: false }))
        expect(frames[1]!.rangeToReplace).toEqual(expect.objectContaining({ startLineNumber: 4, endLineNumberInclusive: 4 }))
        expect(suggestion.text).toBe("    sum += item")
        expect(frames.at(-1)!.doneStream).toBe(true)
        // Accepted, as Cursor applies it: the cursor's line completed, nothing else changed.
        expect(applied(FILE, suggestion)).toBe(FILE.replace("    sum += \n", "    sum += item\n"))
      }))
  }

  it.scopedLive("a request for the same file supersedes the one in flight: its upstream call is aborted", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse([FakeProvider.fim.openAiCompletions(["ite"])[0]!], { end: "stall" }))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["tem"])))
      const first = yield* Effect.fork(suggest(tab, ask()))
      expect(yield* eventually(() => app.provider.requests.length === 1)).toBe(true)
      const edited = FILE.replace("    sum += ", "    sum += i")
      const second = yield* suggest(tab, ask({ contents: edited, column: 12 }))
      expect(yield* eventually(() => app.provider.lives[0]?.closedAt !== undefined)).toBe(true)
      expect(second.text).toBe("    sum += item")
      const firstFrames = yield* first.await
      expect(firstFrames._tag).toBe("Success")
    }))

  it.scopedLive("typing through a suggestion is answered from it, with no second model call", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item * 2"])))
      yield* suggest(tab, ask())
      const typed = FILE.replace("    sum += ", "    sum += it")
      const again = yield* suggest(tab, ask({ contents: typed, column: 13 }))
      expect(app.provider.requests).toHaveLength(1)
      expect(again.text).toBe("    sum += item * 2")
    }))

  it.scopedLive("identical requests at once share one call", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse([{ delayMs: 100 }, ...FakeProvider.fim.openAiCompletions(["item"])]))
      const [a, b] = yield* Effect.all([suggest(tab, ask()), suggest(tab, ask())], { concurrency: 2 })
      expect(app.provider.requests).toHaveLength(1)
      expect(a.text).toBe("    sum += item")
      expect(b.text).toBe("    sum += item")
    }))

  it.scopedLive("synced files: a request relying on sync reads the synced text; another synced file is context", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      // Not synced yet: FILE_NOT_FOUND, which Cursor answers by sending the contents.
      const missing = yield* failureOf(tab, ask({ contents: "", relyOnFilesync: true }))
      expect(missing.code).toBe(Code.NotFound)
      expect(yield* Effect.promise(async () => (await tab.sync.fSIsEnabledForUser({ uuid: "ws-1" })).enabled)).toBe(true)
      yield* Effect.promise(() => tab.upload("ws-1", "src/total.ts", FILE))
      yield* Effect.promise(() => tab.upload("ws-1", "src/util.ts", "export const twice = (n: number) => n * 2\n"))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["twice(item)"])))
      const frames = yield* suggest(tab, ask({ contents: "", relyOnFilesync: true }))
      const prompt = String(bodyOf(app.provider, 0)["prompt"])
      expect(prompt).toContain("export const twice = (n: number) => n * 2")
      expect(prompt.endsWith("    sum += ")).toBe(true)
      expect(frames.text).toBe("    sum += twice(item)")
    }))

  it.scopedLive("file sync under another workspace id than the request's: found by path, checked by the request's hash", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      yield* Effect.promise(() => tab.upload("fs-client-uuid", "src/total.ts", FILE))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item"])))
      const found = yield* suggest(tab, ask({ contents: "", relyOnFilesync: true, sha256: sha256Hex(FILE) }))
      expect(found.text).toBe("    sum += item")
      // A hash that is not the synced copy's: FILE_NOT_FOUND, and Cursor sends the file.
      const stale = yield* failureOf(tab, ask({ contents: "", relyOnFilesync: true, sha256: sha256Hex(`${FILE}// edited\n`) }))
      expect(stale.code).toBe(Code.NotFound)
      expect(app.provider.requests).toHaveLength(1)
    }))

  it.scopedLive("the companions: config, models, fates counted for the acceptance rate", () =>
    Effect.gen(function*() {
      // A model of its own: the metrics are the process's, shared with the other tests.
      const app = yield* AppHarness.make({ config: { tab: { provider: "fake-openai", model: "fate-fim" } } })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      const config = yield* Effect.promise(() => tab.ai.cppConfig({}))
      expect(config.isOn).toBe(true)
      expect(config.cppUrl).toBe("")
      const models = yield* Effect.promise(() => tab.cpp.availableModels({}))
      expect(models.models).toEqual(["fake-openai/fate-fim"])
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item"])))
      yield* suggest(tab, ask({ requestId: "tab-req-1" }))
      yield* Effect.promise(() => tab.fate("tab-req-1", "accept"))
      const metrics = yield* Effect.promise(async () => (await fetch(`${app.baseUrl}/metrics`)).text())
      expect(metrics).toMatch(/byok_tab_fates_total\{model="fake-openai\/fate-fim",fate="accept"\} 1/)
      expect(metrics).toMatch(/byok_tab_requests_total\{model="fake-openai\/fate-fim",outcome="suggested"\} 1/)
    }))

  it.scopedLive("bad requests: an empty file, a cursor past the end, an empty answer: no crash", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["const x = 1"])))
      const empty = yield* suggest(tab, ask({ contents: "", line: 0, column: 0 }))
      expect(empty.text).toBe("const x = 1")
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["   "])))
      const past = yield* suggest(tab, ask({ line: 400, column: 99 }))
      // Nothing to suggest: only the end.
      expect(past.frames).toHaveLength(1)
      expect(past.done).toBe(true)
      expect(past.range).toBeUndefined()
    }))

  it.scopedLive("a huge file: the prompt is cut to the limits; one past the request limit is refused readably", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      const filler = Array.from({ length: 60_000 }, (_, i) => `const v${i} = ${i}`).join("\n")
      const big = `${filler}\n${FILE}`
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item"])))
      const frames = yield* suggest(tab, ask({ contents: big, line: 60_003 }))
      const prompt = String(bodyOf(app.provider, 0)["prompt"])
      expect(big.length).toBeGreaterThan(1_000_000)
      expect(prompt.length).toBeLessThanOrEqual(6_000 + 4_000 + 100)
      expect(prompt.endsWith("    sum += ")).toBe(true)
      expect(frames.range?.start).toBe(60_004)
      const refused = yield* failureOf(tab, ask({ contents: "x".repeat(5 * 1024 * 1024) }))
      expect(refused.code).toBe(Code.ResourceExhausted)
      expect(app.provider.requests).toHaveLength(1)
    }))

  it.scopedLive("the model failing is a readable unavailable error", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.status(404, { error: { message: "model coder-fim not found" } }))
      const error = yield* failureOf(tab, ask())
      expect(error.code).toBe(Code.Unavailable)
      expect(error.rawMessage).toContain("model coder-fim not found")
    }))
})

describe("Tab on a chat model (no FIM endpoint)", () => {
  it.scopedLive("an Anthropic provider serves Tab with an edit prompt; a fenced answer is unfenced", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { tab: { provider: "fake-anthropic", model: "claude-tab" } } })
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.anthropic.text("```ts\nitem\n```", 4)))
      const frames = yield* suggest(tab, ask())
      expect(app.provider.requests[0]!.path).toBe("/v1/messages")
      const body = bodyOf(app.provider, 0)
      expect(body["model"]).toBe("claude-tab")
      const user = JSON.stringify(body["messages"])
      expect(user).toContain("sum += <|CURSOR|>\\n  }")
      expect(frames.text).toBe("    sum += item")
      expect(frames.done).toBe(true)
    }))
})

describe("Tab off", () => {
  it.scopedLive("StreamCpp is refused readably and CppConfig says Tab is off", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const tab = new TabClient(transportOf("connect", app.baseUrl, "1.1"))
      const error = yield* failureOf(tab, ask())
      expect(error.code).toBe(Code.FailedPrecondition)
      expect(error.rawMessage).toContain("Tab is off")
      expect((yield* Effect.promise(() => tab.ai.cppConfig({}))).isOn).toBe(false)
      expect(app.provider.requests).toHaveLength(0)
    }))
})
