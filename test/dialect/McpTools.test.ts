/**
 * A run request's MCP tools: the same tools turn after turn become the same list object (what is
 * made of a list once per object, its JSON, catalog and stored part, is then made once), and a
 * list differs as soon as anything the model sees of a tool does.
 */
import { create, fromJson } from "@bufbuild/protobuf"
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf"
import { ValueSchema } from "@bufbuild/protobuf/wkt"
import { assert, describe, it } from "@effect/vitest"
import { AgentRunRequestSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { McpToolDefinitionSchema } from "../../src/gen/agent/v1/agent_pb.js"
import { decodeRunRequest } from "../../src/dialect/RunRequest.js"

type Tool = MessageInitShape<typeof McpToolDefinitionSchema>

const tool = (i: number, schema: object = { type: "object", properties: { q: { type: "string" } } }): Tool => ({
  name: `docs_${i}`,
  description: `Looks up ${i}`,
  providerIdentifier: "docs",
  toolName: `lookup_${i}`,
  inputSchemaJson: JSON.stringify(schema)
})

const toolsOf = (tools: ReadonlyArray<Tool>, contextTools: ReadonlyArray<Tool> = []) =>
  decodeRunRequest(create(AgentRunRequestSchema, {
    conversationId: "c",
    mcpTools: { mcpTools: [...tools] },
    action: {
      action: {
        case: "userMessageAction",
        value: { userMessage: { text: "go", messageId: "m" }, requestContext: { tools: [...contextTools] } }
      }
    }
  })).mcpTools

describe("a run request's MCP tools", () => {
  it("the same tools in a later run request are the same list object; any change the model would see makes another", () => {
    const tools = [tool(1), tool(2)]
    const first = toolsOf(tools)
    assert.strictEqual(toolsOf(tools.map((t) => ({ ...t }))), first)
    assert.deepStrictEqual(first.map((t) => t.inputSchema), [tool(1), tool(2)].map((t) => JSON.parse(t.inputSchemaJson!)))
    const changes: ReadonlyArray<ReadonlyArray<Tool>> = [
      [tool(1), { ...tool(2), description: "Looks up 2 better" }],
      [tool(1), tool(2, { type: "object" })],
      [tool(1), { ...tool(2), name: "docs_two" }],
      [tool(1), { ...tool(2), toolName: "find_2" }],
      [tool(1), { ...tool(2), providerIdentifier: "wiki" }],
      [tool(2), tool(1)],
      [tool(1)]
    ]
    for (const changed of changes) {
      const other = toolsOf(changed)
      assert.notStrictEqual(other, first)
      assert.deepStrictEqual(other.map((t) => [t.name, t.description, t.providerIdentifier, t.toolName, t.inputSchema]), changed.map((t) => [t.name, t.description, t.providerIdentifier, t.toolName, JSON.parse(t.inputSchemaJson!)]))
    }
    assert.strictEqual(toolsOf(tools), first, "still known after other lists")
  })

  it("a schema that is not JSON falls back to the Value form, and two such tools with different Values are told apart", () => {
    const broken = (schema: JsonObject): Tool => ({ ...tool(3), inputSchemaJson: "{not json", inputSchema: fromJson(ValueSchema, schema) })
    const a = toolsOf([broken({ type: "object" })])
    const b = toolsOf([broken({ type: "object", title: "B" })])
    assert.deepStrictEqual(a[0]!.inputSchema, { type: "object" })
    assert.deepStrictEqual(b[0]!.inputSchema, { type: "object", title: "B" })
    const none = toolsOf([{ ...tool(4), inputSchemaJson: "" }])
    assert.deepStrictEqual(none[0]!.inputSchema, { type: "object", properties: {} })
  })

  it("a tool the request context repeats is kept once, the run request's first", () => {
    const tools = toolsOf([tool(1)], [{ ...tool(1), description: "again" }, tool(5)])
    assert.deepStrictEqual(tools.map((t) => [t.name, t.description]), [["docs_1", "Looks up 1"], ["docs_5", "Looks up 5"]])
  })
})
