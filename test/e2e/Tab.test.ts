/**
 * Tab on the user's FIM model, end to end: the real server (`AppHarness`) with a `tab` section
 * pointing at a loopback fake FIM provider, and Cursor's Tab calls made by the official Connect
 * clients in Connect, gRPC (h2c) and gRPC-Web: the prompt the provider gets, the suggestion's
 * messages field by field, a superseding request aborting the first call, typing through a
 * suggestion with no second call, file sync reaching the prompt, Tab off, bad requests.
 */
import { create } from "@bufbuild/protobuf"
import { Code, ConnectError, createClient } from "@connectrpc/connect"
import type { Client } from "@connectrpc/connect"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { AiService } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { CppFate, CppService, FileSyncService, StreamCppRequestSchema } from "../../src/gen/aiserver/v1/tab_pb.js"
import type { StreamCppRequest, StreamCppResponse } from "../../src/gen/aiserver/v1/tab_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { transportOf } from "../support/OfficialClients.js"

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

const streamRequest = (fields: Partial<{ contents: string; line: number; column: number; path: string; rely: boolean }> = {}): StreamCppRequest =>
  create(StreamCppRequestSchema, {
    currentFile: {
      relativeWorkspacePath: fields.path ?? "src/total.ts",
      contents: fields.contents ?? FILE,
      cursorPosition: { line: fields.line ?? 3, column: fields.column ?? 11 },
      languageId: "typescript",
      relyOnFilesync: fields.rely ?? false
    },
    workspaceId: "ws-1",
    modelName: "coder-fim"
  })

const collect = (client: Client<typeof AiService>, request: StreamCppRequest, signal?: AbortSignal) =>
  Effect.promise(async () => {
    const out: Array<StreamCppResponse> = []
    for await (const message of client.streamCpp(request, signal === undefined ? {} : { signal })) out.push(message)
    return out
  })

/** The error a stream ends with, as the Connect client reads it. */
const failureOf = (client: Client<typeof AiService>, request: StreamCppRequest) =>
  Effect.flip(Effect.tryPromise({
    try: async () => {
      for await (const _ of client.streamCpp(request)) void _
    },
    catch: (error) => ConnectError.from(error)
  }))

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
        const client = createClient(AiService, transportOf(protocol, base, protocol === "grpc" ? "2" : "1.1"))
        app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item", "\n"])))
        const frames = yield* collect(client, streamRequest())
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
        expect(frames.slice(2, -1).map((f) => f.text).join("")).toBe("    sum += item")
        expect(frames.at(-1)!.doneStream).toBe(true)
      }))
  }

  it.scopedLive("a request for the same file supersedes the one in flight: its upstream call is aborted", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const client = createClient(AiService, transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse([FakeProvider.fim.openAiCompletions(["ite"])[0]!], { end: "stall" }))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["tem"])))
      const first = yield* Effect.fork(collect(client, streamRequest()))
      expect(yield* eventually(() => app.provider.requests.length === 1)).toBe(true)
      const edited = FILE.replace("    sum += ", "    sum += i")
      const second = yield* collect(client, streamRequest({ contents: edited, column: 12 }))
      expect(yield* eventually(() => app.provider.lives[0]?.closedAt !== undefined)).toBe(true)
      expect(second.slice(2, -1).map((f) => f.text).join("")).toBe("    sum += item")
      const firstFrames = yield* first.await
      expect(firstFrames._tag).toBe("Success")
    }))

  it.scopedLive("typing through a suggestion is answered from it, with no second model call", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const client = createClient(AiService, transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item * 2"])))
      yield* collect(client, streamRequest())
      const typed = FILE.replace("    sum += ", "    sum += it")
      const again = yield* collect(client, streamRequest({ contents: typed, column: 13 }))
      expect(app.provider.requests).toHaveLength(1)
      expect(again.slice(2, -1).map((f) => f.text).join("")).toBe("    sum += item * 2")
    }))

  it.scopedLive("identical requests at once share one call", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const client = createClient(AiService, transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse([{ delayMs: 100 }, ...FakeProvider.fim.openAiCompletions(["item"])]))
      const [a, b] = yield* Effect.all([collect(client, streamRequest()), collect(client, streamRequest())], { concurrency: 2 })
      expect(app.provider.requests).toHaveLength(1)
      expect(a.slice(2, -1).map((f) => f.text).join("")).toBe("    sum += item")
      expect(b.slice(2, -1).map((f) => f.text).join("")).toBe("    sum += item")
    }))

  it.scopedLive("synced files: a request relying on sync reads the synced text; another synced file is context", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const transport = transportOf("connect", app.baseUrl, "1.1")
      const client = createClient(AiService, transport)
      const sync = createClient(FileSyncService, transport)
      // Not synced yet: FILE_NOT_FOUND, which Cursor answers by sending the contents.
      const missing = yield* failureOf(client, streamRequest({ contents: "", rely: true }))
      expect(missing.code).toBe(Code.NotFound)
      expect(yield* Effect.promise(async () => (await sync.fSIsEnabledForUser({ uuid: "ws-1" })).enabled)).toBe(true)
      yield* Effect.promise(() => sync.fSUploadFile({ uuid: "ws-1", relativeWorkspacePath: "src/total.ts", contents: FILE, modelVersion: 1 }))
      yield* Effect.promise(() => sync.fSUploadFile({ uuid: "ws-1", relativeWorkspacePath: "src/util.ts", contents: "export const twice = (n: number) => n * 2\n", modelVersion: 1 }))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["twice(item)"])))
      const frames = yield* collect(client, streamRequest({ contents: "", rely: true }))
      const prompt = String(bodyOf(app.provider, 0)["prompt"])
      expect(prompt).toContain("export const twice = (n: number) => n * 2")
      expect(prompt.endsWith("    sum += ")).toBe(true)
      expect(frames.slice(2, -1).map((f) => f.text).join("")).toBe("    sum += twice(item)")
    }))

  it.scopedLive("the companions: config, models, fates counted for the acceptance rate", () =>
    Effect.gen(function*() {
      // A model of its own: the metrics are the process's, shared with the other tests.
      const app = yield* AppHarness.make({ config: { tab: { provider: "fake-openai", model: "fate-fim" } } })
      const transport = transportOf("connect", app.baseUrl, "1.1")
      const ai = createClient(AiService, transport)
      const cpp = createClient(CppService, transport)
      const config = yield* Effect.promise(() => ai.cppConfig({}))
      expect(config.isOn).toBe(true)
      expect(config.cppUrl).toBe("")
      const models = yield* Effect.promise(() => cpp.availableModels({}))
      expect(models.models).toEqual(["fake-openai/fate-fim"])
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item"])))
      yield* Effect.promise(async () => {
        for await (const _ of ai.streamCpp(streamRequest(), { headers: { "x-request-id": "tab-req-1" } })) void _
      })
      yield* Effect.promise(() => cpp.recordCppFate({ requestId: "tab-req-1", fate: CppFate.ACCEPT }))
      const metrics = yield* Effect.promise(async () => (await fetch(`${app.baseUrl}/metrics`)).text())
      expect(metrics).toMatch(/byok_tab_fates_total\{model="fake-openai\/fate-fim",fate="accept"\} 1/)
      expect(metrics).toMatch(/byok_tab_requests_total\{model="fake-openai\/fate-fim",outcome="suggested"\} 1/)
    }))

  it.scopedLive("bad requests: an empty file, a cursor past the end, an empty answer: no crash", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const client = createClient(AiService, transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["const x = 1"])))
      const empty = yield* collect(client, streamRequest({ contents: "", line: 0, column: 0 }))
      expect(empty.slice(2, -1).map((f) => f.text).join("")).toBe("const x = 1")
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["   "])))
      const past = yield* collect(client, streamRequest({ line: 400, column: 99 }))
      // Nothing to suggest: only the end.
      expect(past).toHaveLength(1)
      expect(past[0]!.doneStream).toBe(true)
    }))

  it.scopedLive("a huge file: the prompt is cut to the limits; one past the request limit is refused readably", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const client = createClient(AiService, transportOf("connect", app.baseUrl, "1.1"))
      const filler = Array.from({ length: 60_000 }, (_, i) => `const v${i} = ${i}`).join("\n")
      const big = `${filler}\n${FILE}`
      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item"])))
      const frames = yield* collect(client, streamRequest({ contents: big, line: 60_003 }))
      const prompt = String(bodyOf(app.provider, 0)["prompt"])
      expect(big.length).toBeGreaterThan(1_000_000)
      expect(prompt.length).toBeLessThanOrEqual(6_000 + 4_000 + 100)
      expect(prompt.endsWith("    sum += ")).toBe(true)
      expect(frames[1]!.rangeToReplace?.startLineNumber).toBe(60_004)
      const refused = yield* failureOf(client, streamRequest({ contents: "x".repeat(5 * 1024 * 1024) }))
      expect(refused.code).toBe(Code.ResourceExhausted)
      expect(app.provider.requests).toHaveLength(1)
    }))

  it.scopedLive("the model failing is a readable unavailable error", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: tabConfig })
      const client = createClient(AiService, transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.status(404, { error: { message: "model coder-fim not found" } }))
      const error = yield* failureOf(client, streamRequest())
      expect(error.code).toBe(Code.Unavailable)
      expect(error.rawMessage).toContain("model coder-fim not found")
    }))
})

describe("Tab on a chat model (no FIM endpoint)", () => {
  it.scopedLive("an Anthropic provider serves Tab with an edit prompt; a fenced answer is unfenced", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { tab: { provider: "fake-anthropic", model: "claude-tab" } } })
      const client = createClient(AiService, transportOf("connect", app.baseUrl, "1.1"))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.anthropic.text("```ts\nitem\n```", 4)))
      const frames = yield* collect(client, streamRequest())
      expect(app.provider.requests[0]!.path).toBe("/v1/messages")
      const body = bodyOf(app.provider, 0)
      expect(body["model"]).toBe("claude-tab")
      const user = JSON.stringify(body["messages"])
      expect(user).toContain("sum += <|CURSOR|>\\n  }")
      expect(frames.slice(2, -1).map((f) => f.text).join("")).toBe("    sum += item")
      expect(frames.at(-1)!.doneStream).toBe(true)
    }))
})

describe("Tab off", () => {
  it.scopedLive("StreamCpp is refused readably and CppConfig says Tab is off", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const transport = transportOf("connect", app.baseUrl, "1.1")
      const client = createClient(AiService, transport)
      const error = yield* failureOf(client, streamRequest())
      expect(error.code).toBe(Code.FailedPrecondition)
      expect(error.rawMessage).toContain("Tab is off")
      expect((yield* Effect.promise(() => client.cppConfig({}))).isOn).toBe(false)
      expect(app.provider.requests).toHaveLength(0)
    }))
})
