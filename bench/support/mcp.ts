/**
 * MCP tools as a Cursor user with a few MCP servers sends them in every run request: 60 tools,
 * each with a paragraph of description and a JSON Schema of a dozen arguments (~115 KB of run
 * request, ~119 KB of canonical JSON as the server keeps them).
 */
import type { MessageInitShape } from "@bufbuild/protobuf"
import type { McpToolDefinitionSchema } from "../../src/gen/agent/v1/agent_pb.js"

export const mcpToolSet = (count = 60): ReadonlyArray<MessageInitShape<typeof McpToolDefinitionSchema>> =>
  Array.from({ length: count }, (_, i) => ({
    name: `mcp_server_tool_${i}`,
    providerIdentifier: "server",
    toolName: `tool_${i}`,
    description: `Tool ${i}. ${"Does a thing with the given arguments. ".repeat(20)}`,
    inputSchemaJson: JSON.stringify({
      type: "object",
      properties: Object.fromEntries(
        Array.from({ length: 12 }, (_, k) => [`arg_${k}`, { type: "string", description: `argument ${k} of tool ${i}, a path or a pattern` }])
      ),
      required: ["arg_0"]
    })
  }))
