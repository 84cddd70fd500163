/**
 * What kind of tool a model tool name is: Cursor's native tools by name, MCP tools by their
 * provider-qualified name; which kinds are safe to run twice; and the Cursor modes.
 */
import { Schema } from "effect"
import { TurnMcpTool, TurnMode } from "../Loop.js"

/** The Cursor modes that change what the model may do (the turn settings' `mode`). */
export const CursorMode = TurnMode
export type CursorMode = TurnMode

/** The modes SwitchMode may go to (a custom mode is the user's to enter). */
export const SWITCHABLE_MODES: ReadonlyArray<CursorMode> = ["agent", "ask", "plan", "debug", "multitask"]

export const ToolKind = Schema.Literal(
  "shell",
  "read",
  "write",
  "edit",
  "grep",
  "glob",
  "ls",
  "readLints",
  "delete",
  "mcp",
  "todoWrite",
  "createPlan",
  "askQuestion",
  "switchMode",
  "webSearch",
  "webFetch",
  "writeShellStdin",
  "awaitShell",
  "task"
)
export type ToolKind = typeof ToolKind.Type

/** The kinds that are a question to the client (an `InteractionQuery`), not an exec. */
export const QUERY_KINDS: ReadonlyArray<ToolKind> = ["createPlan", "askQuestion", "switchMode", "webSearch", "webFetch"]

/**
 * Read-only kinds may be re-run after a crash without asking; the others changed the
 * workspace (or an MCP server, or typed into a running shell) and must not be repeated blindly. A question to the client is
 * asked again (its answer was never applied), and a web search or fetch only reads.
 */
export const isIdempotent = (kind: ToolKind): boolean =>
  kind === "read" || kind === "grep" || kind === "glob" || kind === "ls" || kind === "readLints" || kind === "todoWrite" || kind === "awaitShell" ||
  QUERY_KINDS.includes(kind)

/**
 * An MCP tool as the run request described it (`name` is what Cursor wants back in
 * `McpArgs.name`): plain JSON, the turn settings' `mcpTools`.
 */
export const McpToolDescriptor = TurnMcpTool
export type McpToolDescriptor = TurnMcpTool

/** The name the model sees for an MCP tool: provider-qualified, restricted to what every provider accepts. */
export const mcpModelName = (tool: McpToolDescriptor): string => {
  const raw = `mcp_${tool.providerIdentifier}_${tool.toolName || tool.name}`
  return raw.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64)
}

export const findMcp = (name: string, mcpTools: ReadonlyArray<McpToolDescriptor>): McpToolDescriptor | undefined =>
  mcpTools.find((tool) => mcpModelName(tool) === name)

const BUILTIN: Record<string, ToolKind> = {
  Shell: "shell",
  Read: "read",
  Write: "write",
  StrReplace: "edit",
  Delete: "delete",
  Grep: "grep",
  Glob: "glob",
  Ls: "ls",
  ReadLints: "readLints",
  TodoWrite: "todoWrite",
  CreatePlan: "createPlan",
  AskQuestion: "askQuestion",
  SwitchMode: "switchMode",
  WebSearch: "webSearch",
  WebFetch: "webFetch",
  WriteShellStdin: "writeShellStdin",
  AwaitShell: "awaitShell",
  Task: "task"
}

/** The kind of a model tool name, or undefined for a name we never offered. */
export const kindOf = (name: string, mcpTools: ReadonlyArray<McpToolDescriptor>): ToolKind | undefined =>
  BUILTIN[name] ?? (findMcp(name, mcpTools) !== undefined ? "mcp" : undefined)
