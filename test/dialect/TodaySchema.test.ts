/**
 * Issue 39 item 5, "today's schema": the fields newer clients send and the answers they expect,
 * encoded with their field numbers (raw, with protobuf-es's BinaryWriter, so a wrong number in our
 * .proto fails here), decoded and acted on.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire"
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import * as ContextUsageModule from "../../src/ContextUsage.js"
import { decodeClientMessage } from "../../src/dialect/Decode.js"
import { initialCorrelation } from "../../src/dialect/Correlation.js"
import { encodeResponseEvent } from "../../src/dialect/Encode.js"
import { decodeRunRequest } from "../../src/dialect/RunRequest.js"
import { AgentRunRequestSchema, AgentServerMessageSchema, AskQuestionArgsSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { RequestMessages } from "../../src/Llm.js"
import * as Router from "../../src/llm/Router.js"
import type { TurnSettings } from "../../src/Loop.js"
import * as Prompt from "../../src/Prompt.js"
import * as Tools from "../../src/Tools.js"

/** A run request's bytes with more fields appended by number (what a newer client adds). */
const runRequestWith = (extra: (writer: BinaryWriter) => void): Uint8Array => {
  const base = toBinary(
    AgentRunRequestSchema,
    create(AgentRunRequestSchema, {
      conversationId: "conv-1",
      requestedModel: { modelId: "fake-model" },
      action: { action: { case: "userMessageAction", value: { userMessage: { text: "hi", messageId: "m1" } } } }
    })
  )
  const writer = new BinaryWriter()
  extra(writer)
  const more = writer.finish()
  const all = new Uint8Array(base.length + more.length)
  all.set(base)
  all.set(more, base.length)
  return all
}

const settingsOf = (bytes: Uint8Array): TurnSettings => {
  const run = decodeRunRequest(fromBinary(AgentRunRequestSchema, bytes))
  assert.strictEqual(run.action._tag, "StartTurn")
  return (run.action as Extract<typeof run.action, { _tag: "StartTurn" }>).start.settings
}

const specBytes = (field: 1 | 2, text: string) => new BinaryWriter().tag(field, WireType.LengthDelimited).string(text).finish()

describe("AgentRunRequest 26-29", () => {
  it("agent_session_id (26), client_supports_routed_model_update (28) and system_prompt_spec (29) reach the turn's settings", () => {
    const settings = settingsOf(runRequestWith((w) => {
      w.tag(26, WireType.LengthDelimited).string("session-7")
      w.tag(27, WireType.Varint).bool(true)
      w.tag(28, WireType.Varint).bool(true)
      w.tag(29, WireType.LengthDelimited).bytes(specBytes(2, "Always answer in French."))
    }))
    assert.strictEqual(settings.agentSessionId, "session-7")
    assert.strictEqual(settings.routedModelUpdates, true)
    assert.deepStrictEqual(settings.systemPromptSpec, { mode: "append", text: "Always answer in French." })
    const replaced = settingsOf(runRequestWith((w) => w.tag(29, WireType.LengthDelimited).bytes(specBytes(1, "You are a pirate."))))
    assert.deepStrictEqual(replaced.systemPromptSpec, { mode: "replace", text: "You are a pirate." })
    const plain = settingsOf(runRequestWith(() => {}))
    assert.isUndefined(plain.systemPromptSpec)
    assert.isUndefined(plain.agentSessionId)
    assert.isUndefined(plain.routedModelUpdates)
  })

  it("system_prompt_spec: replace is the client's text byte for byte, append follows the server's prompt; the same settings give the same bytes", () => {
    const base: TurnSettings = { model: "m", mode: "agent", rules: [{ path: "a.mdc", content: "Use tabs." }] }
    const own = Prompt.buildPrompt({ settings: base } as Parameters<typeof Prompt.buildPrompt>[0])
    const replace = Prompt.buildPrompt({ settings: { ...base, systemPromptSpec: { mode: "replace", text: "  Only this.\n" } } } as Parameters<typeof Prompt.buildPrompt>[0])
    assert.strictEqual(replace, "  Only this.\n")
    const append = (settings: TurnSettings) => Prompt.buildPrompt({ settings } as Parameters<typeof Prompt.buildPrompt>[0])
    const appended = append({ ...base, systemPromptSpec: { mode: "append", text: "Answer in French." } })
    assert.strictEqual(appended, `${own}\n\nAnswer in French.`)
    assert.strictEqual(append({ ...base, systemPromptSpec: { mode: "append", text: "Answer in French." } }), appended)
    assert.include(own, "Use tabs.")
  })
})

describe("McpToolDefinition 7, 8", () => {
  it("output_schema_json and annotations_json are decoded and go to the model in the tool's description, byte-stable", () => {
    const tool = new BinaryWriter()
      .tag(1, WireType.LengthDelimited).string("search")
      .tag(2, WireType.LengthDelimited).string("Search the docs.")
      .tag(4, WireType.LengthDelimited).string("docs")
      .tag(5, WireType.LengthDelimited).string("search")
      .tag(6, WireType.LengthDelimited).string("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}")
      .tag(7, WireType.LengthDelimited).string("{ \"type\": \"object\", \"properties\": { \"hits\": { \"type\": \"array\" } } }")
      .tag(8, WireType.LengthDelimited).string("{\"readOnlyHint\":true}")
      .finish()
    const bytes = runRequestWith((w) => w.tag(4, WireType.LengthDelimited).bytes(new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(tool).finish()))
    const run = decodeRunRequest(fromBinary(AgentRunRequestSchema, bytes))
    const [descriptor] = run.mcpTools
    assert.deepStrictEqual(descriptor?.outputSchema, { type: "object", properties: { hits: { type: "array" } } })
    assert.deepStrictEqual(descriptor?.annotations, { readOnlyHint: true })
    const definition = Tools.toolCatalog("agent", run.mcpTools).find((t) => t.name === "mcp_docs_search")
    assert.strictEqual(
      definition?.description,
      "Search the docs.\n\nAnnotations: {\"readOnlyHint\":true}\nOutput schema: {\"type\":\"object\",\"properties\":{\"hits\":{\"type\":\"array\"}}}"
    )
    // The next turn brings the same definition: the same list, the same bytes.
    const again = decodeRunRequest(fromBinary(AgentRunRequestSchema, bytes))
    assert.strictEqual(JSON.stringify(Tools.toolCatalog("agent", again.mcpTools)), JSON.stringify(Tools.toolCatalog("agent", run.mcpTools)))
  })
})

describe("InteractionUpdate.routed_model (24)", () => {
  const start = { _tag: "Start" as const, routedModel: "fake-model" }
  it("is sent on a stream's start when the router says another model answers and the client shows it", () => {
    const encoded = encodeResponseEvent(initialCorrelation("r1"), "c1", start, { nowMs: 0, mcpTools: [], routedModelUpdates: true })
    assert.strictEqual(encoded.messages.length, 1)
    const bytes = toBinary(AgentServerMessageSchema, encoded.messages[0]!)
    // interaction_update (1) holding field 24 (tag 24 << 3 | 2 = 0xc2 0x01).
    assert.isTrue(Buffer.from(bytes).includes(Buffer.from([0xc2, 0x01])))
    const update = fromBinary(AgentServerMessageSchema, bytes).message
    assert.strictEqual(update.case, "interactionUpdate")
    assert.deepStrictEqual(
      update.case === "interactionUpdate" && update.value.message.case === "routedModel" ? update.value.message.value.displayName : undefined,
      "fake-model"
    )
  })

  it("is not sent to a client that did not say it shows it, nor when the model named answers", () => {
    assert.deepStrictEqual(encodeResponseEvent(initialCorrelation("r1"), "c1", start, { nowMs: 0, mcpTools: [] }).messages, [])
    assert.deepStrictEqual(encodeResponseEvent(initialCorrelation("r1"), "c1", { _tag: "Start" }, { nowMs: 0, mcpTools: [], routedModelUpdates: true }).messages, [])
  })

  it("the router names what answers: the model an alias or `*` resolves to, a fallback target; nothing for the model itself", () => {
    const target = (provider: string, model: string) => ({ settings: { provider, model } }) as unknown as Router.ResolvedTarget
    assert.strictEqual(Router.routedModelOf("my-alias", "fake-model", 0, target("p", "u")), "fake-model")
    assert.isUndefined(Router.routedModelOf("fake-model", "fake-model", 0, target("p", "u")))
    assert.strictEqual(Router.routedModelOf("fake-model", "fake-model", 1, target("backup", "other-upstream")), "backup/other-upstream")
  })
})

describe("unknown kinds are answered, never waited on", () => {
  it("an exec result of a kind this server cannot read (ExecClientMessage 56, adopt_result) fails the exec like a throw", () => {
    const exec = new BinaryWriter()
      .tag(1, WireType.Varint).uint32(3)
      .tag(56, WireType.LengthDelimited).bytes(new Uint8Array())
      .finish()
    const message = new BinaryWriter().tag(2, WireType.LengthDelimited).bytes(exec).finish()
    const decoded = decodeClientMessage(message)
    assert.isTrue(Either.isRight(decoded))
    const value = Either.getOrThrow(decoded)
    assert.strictEqual(value._tag, "ExecThrow")
    assert.strictEqual((value as Extract<typeof value, { _tag: "ExecThrow" }>).id, 3)
    assert.include((value as Extract<typeof value, { _tag: "ExecThrow" }>).error, "field 56")
    // Still dropped when it names no exec.
    const orphan = new BinaryWriter().tag(2, WireType.LengthDelimited).bytes(new BinaryWriter().tag(56, WireType.LengthDelimited).bytes(new Uint8Array()).finish()).finish()
    assert.strictEqual(Either.getOrThrow(decodeClientMessage(orphan))._tag, "Unknown")
  })

  it("a tool whose answer is of an unknown kind fails with a result the model reads", () => {
    const call = { type: "toolCall" as const, id: "t1", name: "AskQuestion", arguments: "{}" }
    const step = Tools.onUnknownReply(Tools.ToolRun.AskQuestion({ call, args: create(AskQuestionArgsSchema) }))
    assert.strictEqual(step._tag, "Done")
    const outcome = (step as Extract<typeof step, { _tag: "Done" }>).outcome
    assert.isTrue(outcome.message.isError)
    assert.include(JSON.stringify(outcome.message.content), "cannot read")
  })
})

describe("context usage", () => {
  const request: RequestMessages = {
    systemPrompt: `You are an agent.\n\n<rule path="a.mdc">\nUse tabs everywhere.\n</rule>`,
    tools: [{ name: "Read", description: "Reads a file.", parameters: { type: "object" } }],
    messages: [
      { role: "user", content: [{ type: "text", text: "read a.ts" }] },
      {
        role: "assistant",
        content: [{ type: "toolCall", id: "t1", name: "Read", arguments: "{\"path\":\"a.ts\"}" }],
        api: "openai-chat",
        provider: "p",
        model: "m",
        usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
        stopReason: "toolUse"
      },
      { role: "toolResult", toolCallId: "t1", toolName: "Read", content: [{ type: "text", text: "x".repeat(400) }], isError: false }
    ]
  }

  it("breaks the last request into system prompt, rules, tools, messages and tool results, scaled to the provider's count", () => {
    const nodes = ContextUsageModule.breakdownOf(request, undefined)
    const category = (id: string) => nodes.find((n) => n.id === id && n.kind === "category")!
    assert.deepStrictEqual(nodes.filter((n) => n.kind === "category").map((n) => n.id), [
      "systemPrompt",
      "rules",
      "tools",
      "userMessages",
      "assistantMessages",
      "toolResults"
    ])
    assert.strictEqual(category("toolResults").characterCount, 400)
    assert.strictEqual(category("toolResults").estimatedTokens, 100)
    assert.strictEqual(nodes.find((n) => n.kind === "rule")?.label, "a.mdc")
    assert.strictEqual(nodes.find((n) => n.kind === "tool")?.label, "Read")
    assert.strictEqual(category("systemPrompt").characterCount + category("rules").characterCount, request.systemPrompt.length)
    const scaled = ContextUsageModule.breakdownOf(request, 1000)
    const total = scaled.filter((n) => n.kind === "category").reduce((sum, n) => sum + n.estimatedTokens, 0)
    assert.approximately(total, 1000, 6)
  })
})
