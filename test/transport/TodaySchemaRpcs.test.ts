/**
 * The side RPCs of issue 39 item 5: `AiService/NameTab`, `AgentService/GetPromptContextUsage`, and
 * the model list's context limits in both modes.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { GetPromptContextUsageRequestSchema, GetPromptContextUsageResponseSchema } from "../../src/gen/agent/v1/agent_pb.js"
import {
  AvailableModelsRequestSchema,
  AvailableModelsResponseSchema,
  ConversationMessage_MessageType,
  NameTabRequestSchema,
  NameTabResponseSchema
} from "../../src/gen/aiserver/v1/aiserver_pb.js"
import * as Metrics from "../../src/Metrics.js"
import * as Titles from "../../src/naming/Titles.js"
import * as SideRpcs from "../../src/transport/SideRpcs.js"
import { sideServer } from "../support/SideServer.js"

const asked: Array<string> = []
const catalogue: SideRpcs.CatalogueOptions = {
  models: [
    { id: "big", displayName: "Big", contextWindow: 1_000_000, supportsThinking: false, supportsImages: false },
    { id: "unsized", displayName: "Unsized", contextWindow: undefined, supportsThinking: false, supportsImages: false }
  ],
  defaultModel: "big",
  contextUsage: {
    snapshotOf: (conversationId) =>
      Effect.sync(() => {
        asked.push(conversationId)
        return conversationId !== "known" ? undefined : [
          { id: "systemPrompt", parentId: undefined, kind: "category", label: "System prompt", categoryId: "systemPrompt", estimatedTokens: 120, characterCount: 480 },
          { id: "tools/0", parentId: "tools", kind: "tool", label: "Read", categoryId: "tools", estimatedTokens: 30, characterCount: 120 }
        ]
      })
  }
}

const { dispose, handler } = sideServer(catalogue, Metrics.layerRoutes)
afterAll(() => dispose())

const post = async (path: string, body: Uint8Array) => {
  const response = await handler(new Request(`http://localhost${path}`, { method: "POST", body, headers: { "content-type": "application/proto" } }))
  assert.strictEqual(response.status, 200, `${path} answered ${response.status}`)
  return new Uint8Array(await response.arrayBuffer())
}

describe("today's side RPCs", () => {
  it("AvailableModels gives each model's real window as its context limit in both modes (fields 15 and 16)", async () => {
    const models = fromBinary(AvailableModelsResponseSchema, await post("/aiserver.v1.AiService/AvailableModels", toBinary(AvailableModelsRequestSchema, create(AvailableModelsRequestSchema))))
    assert.strictEqual(models.models[0]!.contextTokenLimit, 1_000_000)
    assert.strictEqual(models.models[0]!.contextTokenLimitForMaxMode, 1_000_000)
    assert.isUndefined(models.models[1]!.contextTokenLimit)
    assert.isUndefined(models.models[1]!.contextTokenLimitForMaxMode)
  })

  it("NameTab names a tab from its opening user message (the plain fallback without a model)", async () => {
    const request = create(NameTabRequestSchema, {
      messages: [
        { text: "Sure, here is the plan.", type: ConversationMessage_MessageType.AI },
        { text: "Fix the flaky login test in auth.spec.ts", type: ConversationMessage_MessageType.HUMAN }
      ],
      conversationId: "c-tab"
    })
    const answer = fromBinary(NameTabResponseSchema, await post("/aiserver.v1.AiService/NameTab", toBinary(NameTabRequestSchema, request)))
    assert.strictEqual(answer.name, Titles.fallbackTitle("Fix the flaky login test in auth.spec.ts"))
    assert.notStrictEqual(answer.name, "")
    assert.include(SideRpcs.localProcedures, "/aiserver.v1.AiService/NameTab")
  })

  it("GetPromptContextUsage answers the conversation's breakdown as a tree; an unknown conversation gets an empty tree", async () => {
    const ask = async (conversationId: string) =>
      fromBinary(
        GetPromptContextUsageResponseSchema,
        await post("/agent.v1.AgentService/GetPromptContextUsage", toBinary(GetPromptContextUsageRequestSchema, create(GetPromptContextUsageRequestSchema, { conversationId })))
      )
    const known = await ask("known")
    const tree = known.snapshot?.promptContextUsageTree
    assert.strictEqual(tree?.schemaVersion, 1)
    assert.deepStrictEqual(tree?.nodes.map((n) => [n.id, n.parentId, n.kind, n.categoryId, n.estimatedTokens, n.characterCount]), [
      ["systemPrompt", undefined, "category", "systemPrompt", 120, 480],
      ["tools/0", "tools", "tool", "tools", 30, 120]
    ])
    const unknown = await ask("never-seen")
    assert.deepStrictEqual(unknown.snapshot?.promptContextUsageTree?.nodes, [])
    assert.deepStrictEqual(asked, ["known", "never-seen"])
    assert.include(SideRpcs.localProcedures, "/agent.v1.AgentService/GetPromptContextUsage")
  })
})
