/**
 * The tool catalog: the tool definitions the model is offered in each Cursor mode, Cursor's
 * native tools first, then (in agent mode) the MCP tools the run request lists.
 */
import type { ToolDefinition } from "../Llm.js"
import { mcpModelName } from "./Kinds.js"
import type { CursorMode, McpToolDescriptor, ToolKind } from "./Kinds.js"

const str = (description: string) => ({ type: "string", description })
const int = (description: string) => ({ type: "integer", description })
const bool = (description: string) => ({ type: "boolean", description })
const object = (properties: Record<string, unknown>, required: ReadonlyArray<string>) => ({
  type: "object",
  properties,
  required,
  additionalProperties: false
})

const definitions: Record<Exclude<ToolKind, "mcp">, ToolDefinition> = {
  shell: {
    name: "Shell",
    description:
      "Run a shell command in the user's workspace and return its output and exit code. Long-running commands move to the background after block_until_ms.",
    parameters: object({
      command: str("The command to run."),
      working_directory: str("Absolute directory to run in; defaults to the workspace root."),
      block_until_ms: int("How long to wait before backgrounding the command (default 30000)."),
      description: str("A few words saying what the command does, shown to the user.")
    }, ["command"])
  },
  read: {
    name: "Read",
    description: "Read a file from the workspace. Lines are numbered from 1; use offset and limit for large files.",
    parameters: object({
      path: str("Absolute path, or a path relative to the workspace root."),
      offset: int("First line to read (1-based)."),
      limit: int("Number of lines to read.")
    }, ["path"])
  },
  write: {
    name: "Write",
    description: "Create a file or replace its whole content.",
    parameters: object({
      path: str("Absolute path, or a path relative to the workspace root."),
      contents: str("The complete new content of the file.")
    }, ["path", "contents"])
  },
  edit: {
    name: "StrReplace",
    description:
      "Replace an exact string in a file. old_string must match the file exactly (whitespace included) and be unique unless replace_all is true.",
    parameters: object({
      path: str("Absolute path, or a path relative to the workspace root."),
      old_string: str("The exact text to replace."),
      new_string: str("The replacement text."),
      replace_all: bool("Replace every occurrence instead of exactly one.")
    }, ["path", "old_string", "new_string"])
  },
  delete: {
    name: "Delete",
    description: "Delete a file.",
    parameters: object({ path: str("The file to delete.") }, ["path"])
  },
  grep: {
    name: "Grep",
    description: "Search file contents with a regular expression (ripgrep syntax).",
    parameters: object({
      pattern: str("The regular expression."),
      path: str("File or directory to search; defaults to the workspace root."),
      glob: str("Only search files matching this glob, e.g. *.ts."),
      output_mode: { type: "string", enum: ["content", "files_with_matches", "count"], description: "What to return (default content)." },
      case_insensitive: bool("Ignore case."),
      context_before: int("Lines of context before each match."),
      context_after: int("Lines of context after each match."),
      context: int("Lines of context before and after each match."),
      type: str("Only search files of this ripgrep type, e.g. ts."),
      head_limit: int("Return at most this many results."),
      multiline: bool("Let patterns span lines.")
    }, ["pattern"])
  },
  glob: {
    name: "Glob",
    description: "Find files whose path matches a glob pattern.",
    parameters: object({
      glob_pattern: str("The glob, e.g. **/*.test.ts."),
      target_directory: str("Directory to search; defaults to the workspace root.")
    }, ["glob_pattern"])
  },
  ls: {
    name: "Ls",
    description: "List a directory as a tree.",
    parameters: object({
      path: str("The directory to list."),
      ignore: { type: "array", items: { type: "string" }, description: "Glob patterns to leave out." }
    }, ["path"])
  },
  todoWrite: {
    name: "TodoWrite",
    description: "Create or update the task list shown to the user. With merge, items are updated by id; otherwise the list is replaced.",
    parameters: object({
      todos: {
        type: "array",
        items: object({
          id: str("Stable id of the item."),
          content: str("What to do."),
          status: { type: "string", enum: ["pending", "in_progress", "completed", "cancelled"] }
        }, ["id", "content", "status"])
      },
      merge: bool("Merge into the existing list instead of replacing it.")
    }, ["todos"])
  }
}

const isJsonObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const mcpDefinition = (tool: McpToolDescriptor): ToolDefinition => ({
  name: mcpModelName(tool),
  description: tool.description || `MCP tool ${tool.toolName} from ${tool.providerIdentifier}.`,
  parameters: isJsonObject(tool.inputSchema) ? tool.inputSchema : { type: "object", properties: {} }
})

const READ_ONLY: ReadonlyArray<Exclude<ToolKind, "mcp">> = ["read", "grep", "glob", "ls"]
const AGENT: ReadonlyArray<Exclude<ToolKind, "mcp">> = ["shell", "read", "write", "edit", "delete", "grep", "glob", "ls", "todoWrite"]

/**
 * The tools offered in a mode. Ask is read-only; plan may also keep a todo list; agent gets
 * everything including MCP tools. The order is fixed so that the tool list (part of the
 * provider's prompt cache key) is stable across turns.
 */
export const toolCatalog = (mode: CursorMode, mcpTools: ReadonlyArray<McpToolDescriptor>): ReadonlyArray<ToolDefinition> =>
  mode === "agent" && mcpTools.length > 0 ? [...nativeCatalogs.agent, ...mcpTools.map(mcpDefinition)] : nativeCatalogs[mode]

/**
 * Each mode's native tools, built once: the same list object every turn, so what is derived
 * from it (its canonical JSON and hash, `Llm.toolsHash`) is computed once, not per model call.
 */
const nativeCatalogs: Readonly<Record<CursorMode, ReadonlyArray<ToolDefinition>>> = {
  ask: READ_ONLY.map((kind) => definitions[kind]),
  plan: [...READ_ONLY, "todoWrite" as const].map((kind) => definitions[kind]),
  agent: AGENT.map((kind) => definitions[kind])
}
