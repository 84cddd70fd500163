/**
 * The console's Tab page over HTTP (`/console/tab`): with a `tab` section, a StreamCpp request
 * answered by the fake FIM provider and its fate reported, the page shows the model, provider
 * and FIM API in use and the model's figures (1 request, 1 upstream call, tokens, the acceptance
 * rate); without one it says Tab is off and how to turn it on. The pure parts are
 * `test/console/TabPage.test.ts`.
 */
import { create } from "@bufbuild/protobuf"
import { createClient } from "@connectrpc/connect"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { AiService } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { CppFate, CppService, StreamCppRequestSchema } from "../../src/gen/aiserver/v1/tab_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import { get } from "../support/ConsoleSession.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { transportOf } from "../support/OfficialClients.js"

const FILE = "export function total(items: Array<number>) {\n  let sum = 0\n  for (const item of items) {\n    sum += \n  }\n  return sum\n}\n"

const streamRequest = create(StreamCppRequestSchema, {
  currentFile: { relativeWorkspacePath: "src/total.ts", contents: FILE, cursorPosition: { line: 3, column: 11 }, languageId: "typescript", relyOnFilesync: false },
  workspaceId: "ws-console",
  modelName: "page-fim"
})

/** The text of the model row's cell `col` (tags stripped). */
const cell = (body: string, model: string, col: string): string | undefined => {
  const row = body.slice(body.indexOf(`<tr data-model="${model}">`))
  const match = row.match(new RegExp(`data-col="${col}"[^>]*>(.*?)</td>`, "s"))
  return match?.[1]?.replace(/<[^>]+>/g, " ").replace(/&middot;/g, "·").replace(/\s+/g, " ").trim()
}

describe("Console: the Tab page", () => {
  it.scopedLive("Tab on: one StreamCpp request and its fate show as 1 request, 1 call, the model, tokens and the acceptance rate", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { tab: { provider: "fake-openai", model: "page-fim" } } })
      const transport = transportOf("connect", app.baseUrl, "1.1")
      const ai = createClient(AiService, transport)
      const cpp = createClient(CppService, transport)

      // Before any request: on, the configured model listed with nothing counted.
      const before = yield* get(app, "/console/tab")
      assert.strictEqual(before.status, 200)
      assert.include(before.body, `data-tab="on"`)
      assert.include(before.body, `<tr data-model="fake-openai/page-fim">`)
      assert.strictEqual(cell(before.body, "fake-openai/page-fim", "requests"), "0")

      app.provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["item", "\n"])))
      yield* Effect.promise(async () => {
        for await (const _ of ai.streamCpp(streamRequest, { headers: { "x-request-id": "console-tab-1" } })) void _
      })
      yield* Effect.promise(() => cpp.recordCppFate({ requestId: "console-tab-1", fate: CppFate.ACCEPT }))

      const { body, status } = yield* get(app, "/console/tab")
      assert.strictEqual(status, 200)
      assert.include(body, `data-tab="on"`)
      assert.include(body, "fake-openai/page-fim")
      assert.include(body, "<code>page-fim</code>")
      assert.include(body, "<code>fake-openai</code>")
      assert.include(body, `<code data-col="api">openai-completions</code>`)
      const model = "fake-openai/page-fim"
      assert.strictEqual(cell(body, model, "requests"), "1")
      assert.strictEqual(cell(body, model, "calls"), "1")
      assert.strictEqual(cell(body, model, "suggested"), "1")
      assert.strictEqual(cell(body, model, "without-call"), "0 0 typed · 0 shared")
      assert.strictEqual(cell(body, model, "failed"), "0")
      assert.match(cell(body, model, "first-p50") ?? "", /^\d+ ms$|^\d+\.\d+ s$/)
      assert.match(cell(body, model, "first-p90") ?? "", /^\d+ ms$|^\d+\.\d+ s$/)
      assert.match(cell(body, model, "input") ?? "", /^[1-9][\d,]*$/)
      assert.strictEqual(cell(body, model, "acceptance"), "100% (1 of 1) 1 accepted · 0 partly · 0 rejected")
      assert.notInclude(body, AppHarness.API_KEY)
      // The navigation links to it from every page.
      assert.include((yield* get(app, "/console")).body, `href="/console/tab">Tab</a>`)
    }))

  it.scopedLive("Tab off: the page says so and how to turn it on", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const { body, status } = yield* get(app, "/console/tab")
      assert.strictEqual(status, 200)
      assert.include(body, `data-tab="off"`)
      assert.include(body, "Tab is off")
      assert.include(body, "<code>tab</code> section")
      assert.include(body, "No Tab request yet.")
    }))

  it.scopedLive("a non-loopback host: the Tab page needs the token like the others, and its links carry it", () =>
    Effect.gen(function*() {
      const token = "console-token-0123456789"
      const app = yield* AppHarness.make({ config: { host: "0.0.0.0", console: { token } } })
      assert.strictEqual((yield* get(app, "/console/tab")).status, 401)
      const page = yield* get(app, `/console/tab?token=${token}`)
      assert.strictEqual(page.status, 200)
      assert.include(page.body, `href="/console/tab?token=${token}">Tab</a>`)
    }))
})
