/**
 * Issue 39 item 5 end to end: a newer client's run request (capability flags, agent session id,
 * system prompt spec) through the reference client, the real server and the fake provider.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { GetPromptContextUsageRequestSchema, GetPromptContextUsageResponseSchema } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import type { Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

const { chunk } = FakeProvider.openAiChat

const answer = (text: string) =>
  FakeProvider.sse([
    chunk({ role: "assistant", content: "" }),
    chunk({ content: text }),
    chunk({}, "stop"),
    FakeProvider.event({ id: "chatcmpl-fake", model: "fake-upstream", choices: [], usage: { prompt_tokens: 400, completion_tokens: 3 } }),
    "data: [DONE]\n\n"
  ])

const routedNames = (transcript: Transcript) =>
  transcript.frames.flatMap((frame) => {
    const m = frame.message.message
    return m.case === "interactionUpdate" && m.value.message.case === "routedModel" ? [m.value.message.value.displayName] : []
  })

const systemOf = (app: AppHarness.AppHarness, index: number): unknown =>
  (JSON.parse(app.provider.requests[index]!.body) as { messages: Array<{ role: string; content: unknown }> }).messages[0]?.content

describe("today's schema, end to end", () => {
  it.scopedLive("routed_model: sent when the client says it shows it and an alias named the model; not otherwise", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { aliases: { "my-alias": "fake-model" } } })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      app.provider.enqueue(answer("one"))
      const routed = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-routed", text: "hi", model: "my-alias", runRequestExtras: { clientSupportsRoutedModelUpdate: true, agentSessionId: "sess-1" } })
      )
      assertCleanOk(routed)
      assert.deepStrictEqual(routedNames(routed), ["fake-model"])
      // The update comes before the answer's text.
      const kinds = routed.events.map((e) => (e.kind === "other" ? e.what : e.kind))
      assert.isBelow(kinds.indexOf("interactionUpdate.routedModel"), kinds.indexOf("text_delta"))
      app.provider.enqueue(answer("two"))
      const direct = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-direct", text: "hi", model: "fake-model", runRequestExtras: { clientSupportsRoutedModelUpdate: true } })
      )
      assertCleanOk(direct)
      assert.deepStrictEqual(routedNames(direct), [])
      app.provider.enqueue(answer("three"))
      const silent = yield* Effect.promise(() => client.run({ conversationId: "conv-silent", text: "hi", model: "my-alias" }))
      assertCleanOk(silent)
      assert.deepStrictEqual(routedNames(silent), [])
    }))

  it.scopedLive("system_prompt_spec replace: the provider sees the client's text as the system prompt, the same bytes each turn; GetPromptContextUsage breaks the last request down", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const spec = { systemPromptSpec: { spec: { case: "replace" as const, value: "You are a terse pirate." } } }
      app.provider.enqueue(answer("arr"))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "conv-spec", text: "hi", model: "fake-model", runRequestExtras: spec })))
      app.provider.enqueue(answer("arr again"))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "conv-spec", text: "again", model: "fake-model", runRequestExtras: spec })))
      assert.strictEqual(systemOf(app, 0), "You are a terse pirate.")
      assert.strictEqual(systemOf(app, 1), "You are a terse pirate.")

      const response = yield* Effect.promise(() =>
        fetch(`${app.baseUrl}/agent.v1.AgentService/GetPromptContextUsage`, {
          method: "POST",
          headers: { "content-type": "application/proto" },
          body: toBinary(GetPromptContextUsageRequestSchema, create(GetPromptContextUsageRequestSchema, { conversationId: "conv-spec" }))
        })
      )
      assert.strictEqual(response.status, 200)
      const usage = fromBinary(GetPromptContextUsageResponseSchema, new Uint8Array(yield* Effect.promise(() => response.arrayBuffer())))
      const nodes = usage.snapshot?.promptContextUsageTree?.nodes ?? []
      const category = (id: string) => nodes.find((n) => n.id === id)
      assert.strictEqual(category("systemPrompt")?.characterCount, "You are a terse pirate.".length)
      assert.isAbove(category("tools")?.estimatedTokens ?? 0, 0)
      assert.isAbove(category("userMessages")?.characterCount ?? 0, 0)
      // Scaled to what the provider counted of the last request (400 prompt tokens).
      const total = nodes.filter((n) => n.kind === "category").reduce((sum, n) => sum + n.estimatedTokens, 0)
      assert.approximately(total, 400, 6)
    }))
})
