/**
 * The tool catalog and the client operations behind each tool.
 *
 * The model is offered Cursor's native tools (Shell, Read, Write, StrReplace, Delete, Grep,
 * Glob, Ls, TodoWrite, and the MCP tools the run request lists), filtered by the Cursor mode.
 * One tool call then runs as a small pure state machine: `startTool` says which exec to send
 * to the client (or finishes at once, for TodoWrite and for invalid arguments), `onExecReply`
 * takes each exec result and says the next exec, a streamed chunk to show, or the final
 * outcome. An outcome is two views of one result: text for the model (`ToolResultMessage`)
 * and Cursor's typed `ToolCall` (args and result) for the UI.
 *
 * Pure: no I/O, no clock, no ids. Exec ids, times and framing belong to the Dialect and the
 * transport; this module only decides *what* to ask the client and *what* its answer means.
 */
import { create, fromJson, toJson } from "@bufbuild/protobuf"
import type { JsonValue, MessageInitShape } from "@bufbuild/protobuf"
import { ValueSchema } from "@bufbuild/protobuf/wkt"
import type { Value } from "@bufbuild/protobuf/wkt"
import { Data, Either, Schema } from "effect"
import {
  DeleteArgsSchema,
  DeleteResultSchema,
  DeleteToolCallSchema,
  EditArgsSchema,
  EditResultSchema,
  EditToolCallSchema,
  GlobToolArgsSchema,
  GlobToolCallSchema,
  GlobToolResultSchema,
  GrepArgsSchema,
  GrepResultSchema,
  GrepToolCallSchema,
  LsArgsSchema,
  LsResultSchema,
  LsToolCallSchema,
  McpArgsSchema,
  McpToolCallSchema,
  McpToolResultSchema,
  ReadArgsSchema,
  ReadToolArgsSchema,
  ReadToolCallSchema,
  ReadToolResultSchema,
  ShellArgsSchema,
  ShellResultSchema,
  ShellToolCallSchema,
  TimeoutBehavior,
  TodoItemSchema,
  TodoStatus,
  ToolCallDeltaSchema,
  ToolCallSchema,
  UpdateTodosArgsSchema,
  UpdateTodosResultSchema,
  UpdateTodosToolCallSchema,
  WriteArgsSchema
} from "./gen/agent/v1/agent_pb.js"
import type {
  ExecClientMessage,
  ExecServerMessage,
  GrepResult,
  GrepUnionResult,
  LsDirectoryTreeNode,
  McpResult,
  ShellStream,
  TodoItem,
  ToolCall as CursorToolCall,
  ToolCallDelta
} from "./gen/agent/v1/agent_pb.js"
import type { ToolCall, ToolDefinition, ToolResultMessage } from "./Llm.js"
import { TurnMcpTool, TurnMode } from "./Loop.js"

export type { CursorToolCall }

// =============================================================================
// Modes, kinds and MCP descriptors
// =============================================================================

/** The Cursor modes that change what the model may do (the turn settings' `mode`). */
export const CursorMode = TurnMode
export type CursorMode = TurnMode

export const ToolKind = Schema.Literal("shell", "read", "write", "edit", "grep", "glob", "ls", "delete", "mcp", "todoWrite")
export type ToolKind = typeof ToolKind.Type

/**
 * Read-only kinds may be re-run after a crash without asking; the others changed the
 * workspace (or an MCP server) and must not be repeated blindly.
 */
export const isIdempotent = (kind: ToolKind): boolean =>
  kind === "read" || kind === "grep" || kind === "glob" || kind === "ls" || kind === "todoWrite"

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

const findMcp = (name: string, mcpTools: ReadonlyArray<McpToolDescriptor>): McpToolDescriptor | undefined =>
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
  TodoWrite: "todoWrite"
}

/** The kind of a model tool name, or undefined for a name we never offered. */
export const kindOf = (name: string, mcpTools: ReadonlyArray<McpToolDescriptor>): ToolKind | undefined =>
  BUILTIN[name] ?? (findMcp(name, mcpTools) !== undefined ? "mcp" : undefined)

// =============================================================================
// The catalog
// =============================================================================

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

// =============================================================================
// Arguments
// =============================================================================

const OptInt = Schema.optional(Schema.Int)
const OptString = Schema.optional(Schema.String)
const OptBool = Schema.optional(Schema.Boolean)

const ShellInput = Schema.Struct({
  command: Schema.String,
  working_directory: OptString,
  block_until_ms: OptInt,
  description: OptString
})
const ReadInput = Schema.Struct({ path: Schema.String, offset: OptInt, limit: OptInt })
const WriteInput = Schema.Struct({ path: Schema.String, contents: Schema.String })
const EditInput = Schema.Struct({
  path: Schema.String,
  old_string: Schema.String,
  new_string: Schema.String,
  replace_all: OptBool
})
const DeleteInput = Schema.Struct({ path: Schema.String })
const GrepInput = Schema.Struct({
  pattern: Schema.String,
  path: OptString,
  glob: OptString,
  output_mode: Schema.optional(Schema.Literal("content", "files_with_matches", "count")),
  case_insensitive: OptBool,
  context_before: OptInt,
  context_after: OptInt,
  context: OptInt,
  type: OptString,
  head_limit: OptInt,
  multiline: OptBool
})
const GlobInput = Schema.Struct({ glob_pattern: Schema.String, target_directory: OptString })
const LsInput = Schema.Struct({ path: Schema.String, ignore: Schema.optional(Schema.Array(Schema.String)) })
const TodoStatusInput = Schema.Literal("pending", "in_progress", "completed", "cancelled")
const TodoInput = Schema.Struct({
  todos: Schema.Array(Schema.Struct({ id: Schema.String, content: Schema.String, status: TodoStatusInput })),
  merge: OptBool
})
const McpInput = Schema.Record({ key: Schema.String, value: Schema.Unknown })

type GrepInput = typeof GrepInput.Type

/** Parses the model's raw argument text against a schema; the error text is meant for the model. */
const parseArgs = <A, I>(schema: Schema.Schema<A, I>, text: string): Either.Either<A, string> => {
  let json: unknown
  try {
    json = text.trim() === "" ? {} : JSON.parse(text)
  } catch (error) {
    return Either.left(`the arguments are not valid JSON (${error instanceof Error ? error.message : String(error)})`)
  }
  return Schema.decodeUnknownEither(schema, { onExcessProperty: "ignore" })(json).pipe(
    Either.mapLeft((error) => error.message)
  )
}

// =============================================================================
// The state machine
// =============================================================================

/** An exec the client is asked to run: the `ExecServerMessage` oneof, without id and exec_id. */
export type ExecRequest = Exclude<ExecServerMessage["message"], { case: undefined }>
/** One exec answer from the client: the `ExecClientMessage` oneof (a shell stream arrives as several). */
export type ExecReply = Exclude<ExecClientMessage["message"], { case: undefined }>

/** What a server-side tool needs to know besides its arguments. */
export interface ToolContext {
  readonly mcpTools: ReadonlyArray<McpToolDescriptor>
  /** The conversation's todo list as TodoWrite last left it. */
  readonly todos: ReadonlyArray<TodoItem>
}

export interface ToolOutcome {
  /** What the model reads. */
  readonly message: ToolResultMessage
  /** What the Cursor UI shows in `tool_call_completed`: the typed args and result. */
  readonly cursor: CursorToolCall
  /** Set by TodoWrite: the conversation's new todo list, for the runner to keep. */
  readonly todos?: ReadonlyArray<TodoItem>
}

interface ShellOutput {
  readonly stdout: string
  readonly stderr: string
  readonly interleaved: string
}

/** Where a running tool call stands: plain data, so the runner can keep it beside the operation. */
export type ToolRun = Data.TaggedEnum<{
  Shell: { readonly call: ToolCall; readonly command: string; readonly workingDirectory: string; readonly description: string; readonly output: ShellOutput }
  Read: { readonly call: ToolCall; readonly path: string; readonly offset: number | undefined; readonly limit: number | undefined }
  /** Write and StrReplace: read the current content, apply on the server, write it back. */
  Edit: {
    readonly call: ToolCall
    readonly path: string
    readonly change: { readonly kind: "write"; readonly contents: string } | { readonly kind: "replace"; readonly oldString: string; readonly newString: string; readonly replaceAll: boolean }
    readonly phase: "reading" | "writing"
    /** The file before the change; undefined when it did not exist. */
    readonly before: string | undefined
    readonly after: string
  }
  Delete: { readonly call: ToolCall; readonly path: string }
  Grep: { readonly call: ToolCall; readonly input: GrepInput }
  Glob: { readonly call: ToolCall; readonly pattern: string; readonly directory: string }
  Ls: { readonly call: ToolCall; readonly path: string; readonly ignore: ReadonlyArray<string> }
  Mcp: { readonly call: ToolCall; readonly tool: McpToolDescriptor; readonly args: Record<string, unknown> }
}>
export const ToolRun = Data.taggedEnum<ToolRun>()

export type ToolStep = Data.TaggedEnum<{
  /** Send this exec to the client and feed its replies to `onExecReply` with `run`. */
  Exec: { readonly run: ToolRun; readonly exec: ExecRequest }
  /** A streamed chunk was taken in: show `delta` (if any) as `tool_call_delta`, keep waiting on the same exec. */
  Continue: { readonly run: ToolRun; readonly delta: ToolCallDelta | undefined }
  /** The tool call is finished. */
  Done: { readonly outcome: ToolOutcome }
}>
export const ToolStep = Data.taggedEnum<ToolStep>()

export interface ToolStart {
  /** The typed call with its arguments, for `tool_call_started`. */
  readonly started: CursorToolCall
  readonly step: ToolStep
}

const SHELL_DEFAULT_TIMEOUT_MS = 30_000
const SHELL_HARD_TIMEOUT_MS = 86_400_000
const SHELL_FILE_OUTPUT_THRESHOLD = 40_000n
/** Output kept for the model from one command; the middle is elided beyond this. */
const MODEL_OUTPUT_LIMIT = 30_000

const resultMessage = (call: ToolCall, text: string, isError: boolean): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: call.id,
  toolName: call.name,
  content: [{ type: "text", text }],
  isError
})

const withId = (call: ToolCall, tool: CursorToolCall["tool"]): CursorToolCall =>
  create(ToolCallSchema, { tool, toolCallId: call.id })

/** The typed case with empty args: what `partial_tool_call` carries as soon as the tool name is known. */
export const partialCursorToolCall = (name: string, mcpTools: ReadonlyArray<McpToolDescriptor>): CursorToolCall => {
  switch (kindOf(name, mcpTools)) {
    case "shell":
      return create(ToolCallSchema, { tool: { case: "shellToolCall", value: {} } })
    case "read":
      return create(ToolCallSchema, { tool: { case: "readToolCall", value: {} } })
    case "write":
    case "edit":
      return create(ToolCallSchema, { tool: { case: "editToolCall", value: {} } })
    case "delete":
      return create(ToolCallSchema, { tool: { case: "deleteToolCall", value: {} } })
    case "grep":
      return create(ToolCallSchema, { tool: { case: "grepToolCall", value: {} } })
    case "glob":
      return create(ToolCallSchema, { tool: { case: "globToolCall", value: {} } })
    case "ls":
      return create(ToolCallSchema, { tool: { case: "lsToolCall", value: {} } })
    case "mcp":
      return create(ToolCallSchema, { tool: { case: "mcpToolCall", value: {} } })
    case "todoWrite":
      return create(ToolCallSchema, { tool: { case: "updateTodosToolCall", value: {} } })
    case undefined:
      return create(ToolCallSchema, {})
  }
}

/** An error outcome in the typed shape the UI expects for this tool (so the card never spins). */
const failed = (call: ToolCall, text: string, started?: CursorToolCall): ToolOutcome => {
  const base = started ?? withId(call, partialCursorToolCall(call.name, []).tool)
  const tool = base.tool
  let typed: CursorToolCall["tool"] = tool
  switch (tool.case) {
    case "shellToolCall":
      typed = { case: "shellToolCall", value: create(ShellToolCallSchema, { ...tool.value, result: create(ShellResultSchema, { result: { case: "spawnError", value: { error: text } } }) }) }
      break
    case "readToolCall":
      typed = { case: "readToolCall", value: create(ReadToolCallSchema, { ...tool.value, result: create(ReadToolResultSchema, { result: { case: "error", value: { errorMessage: text } } }) }) }
      break
    case "editToolCall":
      typed = { case: "editToolCall", value: create(EditToolCallSchema, { ...tool.value, result: create(EditResultSchema, { result: { case: "error", value: { error: text, modelVisibleError: text } } }) }) }
      break
    case "deleteToolCall":
      typed = { case: "deleteToolCall", value: create(DeleteToolCallSchema, { ...tool.value, result: create(DeleteResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "grepToolCall":
      typed = { case: "grepToolCall", value: create(GrepToolCallSchema, { ...tool.value, result: create(GrepResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "globToolCall":
      typed = { case: "globToolCall", value: create(GlobToolCallSchema, { ...tool.value, result: create(GlobToolResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "lsToolCall":
      typed = { case: "lsToolCall", value: create(LsToolCallSchema, { ...tool.value, result: create(LsResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "mcpToolCall":
      typed = { case: "mcpToolCall", value: create(McpToolCallSchema, { ...tool.value, result: create(McpToolResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    case "updateTodosToolCall":
      typed = { case: "updateTodosToolCall", value: create(UpdateTodosToolCallSchema, { ...tool.value, result: create(UpdateTodosResultSchema, { result: { case: "error", value: { error: text } } }) }) }
      break
    default:
      break
  }
  return { message: resultMessage(call, text, true), cursor: withId(call, typed) }
}

const done = (outcome: ToolOutcome): ToolStep => ToolStep.Done({ outcome })

/**
 * Starts one tool call: returns the typed call for `tool_call_started` and the first step
 * (an exec to send, or the final outcome for server-side tools and invalid arguments).
 */
export const startTool = (call: ToolCall, context: ToolContext): ToolStart => {
  const kind = kindOf(call.name, context.mcpTools)
  const invalid = (reason: string): ToolStart => {
    const started = withId(call, partialCursorToolCall(call.name, context.mcpTools).tool)
    return { started, step: done(failed(call, `Invalid arguments for ${call.name}: ${reason}`, started)) }
  }
  switch (kind) {
    case undefined: {
      const started = create(ToolCallSchema, { toolCallId: call.id })
      return { started, step: done({ message: resultMessage(call, `Unknown tool: ${call.name}. Use one of the tools you were given.`, true), cursor: started }) }
    }
    case "shell": {
      const parsed = parseArgs(ShellInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const input = parsed.right
      const args = create(ShellArgsSchema, {
        command: input.command,
        workingDirectory: input.working_directory ?? "",
        timeout: input.block_until_ms ?? SHELL_DEFAULT_TIMEOUT_MS,
        toolCallId: call.id,
        timeoutBehavior: TimeoutBehavior.BACKGROUND,
        hardTimeout: SHELL_HARD_TIMEOUT_MS,
        fileOutputThresholdBytes: SHELL_FILE_OUTPUT_THRESHOLD,
        closeStdin: true,
        ...(input.description !== undefined ? { description: input.description } : {})
      })
      const description = input.description ?? input.command
      const run = ToolRun.Shell({
        call,
        command: input.command,
        workingDirectory: input.working_directory ?? "",
        description,
        output: { stdout: "", stderr: "", interleaved: "" }
      })
      return {
        started: withId(call, { case: "shellToolCall", value: create(ShellToolCallSchema, { args, description }) }),
        step: ToolStep.Exec({ run, exec: { case: "shellStreamArgs", value: args } })
      }
    }
    case "read": {
      const parsed = parseArgs(ReadInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const { limit, offset, path } = parsed.right
      const run = ToolRun.Read({ call, path, offset, limit })
      return {
        started: withId(call, { case: "readToolCall", value: create(ReadToolCallSchema, { args: readToolArgs(run) }) }),
        step: ToolStep.Exec({ run, exec: { case: "readArgs", value: readArgs(call, path, offset, limit) } })
      }
    }
    case "write":
    case "edit": {
      const change: Either.Either<{ readonly path: string; readonly change: EditChange }, string> = kind === "write"
        ? Either.map(parseArgs(WriteInput, call.arguments), (input) => ({ path: input.path, change: { kind: "write" as const, contents: input.contents } }))
        : Either.map(parseArgs(EditInput, call.arguments), (input) => ({
          path: input.path,
          change: { kind: "replace" as const, oldString: input.old_string, newString: input.new_string, replaceAll: input.replace_all ?? false }
        }))
      if (Either.isLeft(change)) return invalid(change.left)
      const { path } = change.right
      if (change.right.change.kind === "replace" && change.right.change.oldString === change.right.change.newString) {
        return invalid("old_string and new_string are identical")
      }
      const run = ToolRun.Edit({ call, path, change: change.right.change, phase: "reading", before: undefined, after: "" })
      const streamContent = change.right.change.kind === "write" ? change.right.change.contents : change.right.change.newString
      return {
        started: withId(call, { case: "editToolCall", value: create(EditToolCallSchema, { args: create(EditArgsSchema, { path, streamContent }) }) }),
        step: ToolStep.Exec({ run, exec: { case: "readArgs", value: readArgs(call, path, undefined, undefined) } })
      }
    }
    case "delete": {
      const parsed = parseArgs(DeleteInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const args = create(DeleteArgsSchema, { path: parsed.right.path, toolCallId: call.id })
      return {
        started: withId(call, { case: "deleteToolCall", value: create(DeleteToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Delete({ call, path: parsed.right.path }), exec: { case: "deleteArgs", value: args } })
      }
    }
    case "grep": {
      const parsed = parseArgs(GrepInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const args = grepArgs(call, parsed.right)
      return {
        started: withId(call, { case: "grepToolCall", value: create(GrepToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Grep({ call, input: parsed.right }), exec: { case: "grepArgs", value: args } })
      }
    }
    case "glob": {
      const parsed = parseArgs(GlobInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const directory = parsed.right.target_directory ?? ""
      // Cursor has no glob exec: a grep with an empty pattern listing matching files is what the client runs.
      const args = create(GrepArgsSchema, {
        pattern: "",
        glob: parsed.right.glob_pattern,
        outputMode: "files_with_matches",
        toolCallId: call.id,
        ...(directory !== "" ? { path: directory } : {})
      })
      return {
        started: withId(call, {
          case: "globToolCall",
          value: create(GlobToolCallSchema, { args: create(GlobToolArgsSchema, { globPattern: parsed.right.glob_pattern, targetDirectory: directory }) })
        }),
        step: ToolStep.Exec({ run: ToolRun.Glob({ call, pattern: parsed.right.glob_pattern, directory }), exec: { case: "grepArgs", value: args } })
      }
    }
    case "ls": {
      const parsed = parseArgs(LsInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const ignore = parsed.right.ignore ?? []
      const args = create(LsArgsSchema, { path: parsed.right.path, ignore: [...ignore], toolCallId: call.id })
      return {
        started: withId(call, { case: "lsToolCall", value: create(LsToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Ls({ call, path: parsed.right.path, ignore }), exec: { case: "lsArgs", value: args } })
      }
    }
    case "mcp": {
      const tool = findMcp(call.name, context.mcpTools)!
      const parsed = parseArgs(McpInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const args = mcpArgs(call, tool, parsed.right)
      return {
        started: withId(call, { case: "mcpToolCall", value: create(McpToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Mcp({ call, tool, args: parsed.right }), exec: { case: "mcpArgs", value: args } })
      }
    }
    case "todoWrite": {
      const parsed = parseArgs(TodoInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      return todoWrite(call, parsed.right, context.todos)
    }
  }
}

/**
 * Takes one exec reply for a running tool. A reply of the wrong kind (a newer client, or a
 * bug) ends the call with an error result rather than leaving the model waiting.
 */
export const onExecReply = (run: ToolRun, reply: ExecReply): ToolStep =>
  ToolRun.$match(run, {
    Shell: (shell) => onShell(shell, reply),
    Read: (read) => {
      if (reply.case !== "readResult" && reply.case !== "redactedReadResult") return unexpected(run, reply)
      return done(readOutcome(read, reply.value.result))
    },
    Edit: (edit) => onEdit(edit, reply),
    Delete: ({ call, path }) => {
      if (reply.case !== "deleteResult") return unexpected(run, reply)
      const result = reply.value.result
      const args = create(DeleteArgsSchema, { path, toolCallId: call.id })
      const cursor = withId(call, { case: "deleteToolCall", value: create(DeleteToolCallSchema, { args, result: reply.value }) })
      const text = result.case === "success"
        ? `Deleted ${result.value.path || path}.`
        : `Could not delete ${path}: ${describeFailure(result)}`
      return done({ message: resultMessage(call, text, result.case !== "success"), cursor })
    },
    Grep: ({ call, input }) => {
      if (reply.case !== "grepResult") return unexpected(run, reply)
      const cursor = withId(call, { case: "grepToolCall", value: create(GrepToolCallSchema, { args: grepArgs(call, input), result: reply.value }) })
      const result = reply.value.result
      if (result.case !== "success") {
        return done({ message: resultMessage(call, `Search failed: ${describeFailure(result)}`, true), cursor })
      }
      return done({ message: resultMessage(call, formatGrep(reply.value), false), cursor })
    },
    Glob: ({ call, directory, pattern }) => {
      if (reply.case !== "grepResult") return unexpected(run, reply)
      const args = create(GlobToolArgsSchema, { globPattern: pattern, targetDirectory: directory })
      const result = reply.value.result
      if (result.case !== "success") {
        const text = `Glob failed: ${describeFailure(result)}`
        const cursor = withId(call, {
          case: "globToolCall",
          value: create(GlobToolCallSchema, { args, result: create(GlobToolResultSchema, { result: { case: "error", value: { error: text } } }) })
        })
        return done({ message: resultMessage(call, text, true), cursor })
      }
      const files = filesOf(reply.value)
      const cursor = withId(call, {
        case: "globToolCall",
        value: create(GlobToolCallSchema, {
          args,
          result: create(GlobToolResultSchema, {
            result: { case: "success", value: { pattern, path: result.value.path || directory, files, totalFiles: files.length } }
          })
        })
      })
      const text = files.length === 0 ? `No files match ${pattern}.` : files.join("\n")
      return done({ message: resultMessage(call, text, false), cursor })
    },
    Ls: ({ call, ignore, path }) => {
      if (reply.case !== "lsResult") return unexpected(run, reply)
      const args = create(LsArgsSchema, { path, ignore: [...ignore], toolCallId: call.id })
      const cursor = withId(call, { case: "lsToolCall", value: create(LsToolCallSchema, { args, result: reply.value }) })
      const result = reply.value.result
      if (result.case !== "success") {
        return done({ message: resultMessage(call, `Could not list ${path}: ${describeFailure(result)}`, true), cursor })
      }
      const root = result.value.directoryTreeRoot
      return done({ message: resultMessage(call, root === undefined ? `${path} is empty.` : formatTree(root), false), cursor })
    },
    Mcp: ({ args, call, tool }) => {
      if (reply.case !== "mcpResult") return unexpected(run, reply)
      return done(mcpOutcome(call, mcpArgs(call, tool, args), reply.value))
    }
  })

/** The client could not run the exec at all (`exec_client_control_message.throw`). */
export const onExecThrow = (run: ToolRun, error: string): ToolStep =>
  done(failed(run.call, `The client failed to run ${run.call.name}: ${error}`, startedOf(run)))

/** The typed call with args only, as `startTool` announced it. */
const startedOf = (run: ToolRun): CursorToolCall =>
  ToolRun.$match(run, {
    Shell: ({ call, command, description, workingDirectory }) =>
      withId(call, { case: "shellToolCall", value: create(ShellToolCallSchema, { args: { command, workingDirectory, toolCallId: call.id }, description }) }),
    Read: (read) => withId(read.call, { case: "readToolCall", value: create(ReadToolCallSchema, { args: readToolArgs(read) }) }),
    Edit: ({ call, path }) => withId(call, { case: "editToolCall", value: create(EditToolCallSchema, { args: { path } }) }),
    Delete: ({ call, path }) => withId(call, { case: "deleteToolCall", value: create(DeleteToolCallSchema, { args: { path, toolCallId: call.id } }) }),
    Grep: ({ call, input }) => withId(call, { case: "grepToolCall", value: create(GrepToolCallSchema, { args: grepArgs(call, input) }) }),
    Glob: ({ call, directory, pattern }) =>
      withId(call, { case: "globToolCall", value: create(GlobToolCallSchema, { args: { globPattern: pattern, targetDirectory: directory } }) }),
    Ls: ({ call, ignore, path }) => withId(call, { case: "lsToolCall", value: create(LsToolCallSchema, { args: { path, ignore: [...ignore], toolCallId: call.id } }) }),
    Mcp: ({ args, call, tool }) => withId(call, { case: "mcpToolCall", value: create(McpToolCallSchema, { args: mcpArgs(call, tool, args) }) })
  })

const unexpected = (run: ToolRun, reply: ExecReply): ToolStep =>
  done(failed(run.call, `The client answered ${run.call.name} with an unexpected ${reply.case}.`, startedOf(run)))

// =============================================================================
// Per-tool details
// =============================================================================

const readArgs = (call: ToolCall, path: string, offset: number | undefined, limit: number | undefined) =>
  create(ReadArgsSchema, {
    path,
    toolCallId: call.id,
    ...(offset !== undefined ? { offset } : {}),
    ...(limit !== undefined ? { limit } : {})
  })

const readToolArgs = (read: { readonly path: string; readonly offset: number | undefined; readonly limit: number | undefined }) =>
  create(ReadToolArgsSchema, {
    path: read.path,
    ...(read.offset !== undefined ? { offset: read.offset } : {}),
    ...(read.limit !== undefined ? { limit: read.limit } : {})
  })

const grepArgs = (call: ToolCall, input: GrepInput) =>
  create(GrepArgsSchema, {
    pattern: input.pattern,
    toolCallId: call.id,
    outputMode: input.output_mode ?? "content",
    ...(input.path !== undefined ? { path: input.path } : {}),
    ...(input.glob !== undefined ? { glob: input.glob } : {}),
    ...(input.case_insensitive !== undefined ? { caseInsensitive: input.case_insensitive } : {}),
    ...(input.context_before !== undefined ? { contextBefore: input.context_before } : {}),
    ...(input.context_after !== undefined ? { contextAfter: input.context_after } : {}),
    ...(input.context !== undefined ? { context: input.context } : {}),
    ...(input.type !== undefined ? { type: input.type } : {}),
    ...(input.head_limit !== undefined ? { headLimit: input.head_limit } : {}),
    ...(input.multiline !== undefined ? { multiline: input.multiline } : {})
  })

const toValue = (json: unknown): Value => {
  try {
    return fromJson(ValueSchema, json as JsonValue)
  } catch {
    return fromJson(ValueSchema, null)
  }
}

const mcpArgs = (call: ToolCall, tool: McpToolDescriptor, args: Record<string, unknown>) =>
  create(McpArgsSchema, {
    name: tool.name,
    args: Object.fromEntries(Object.entries(args).map(([key, value]) => [key, toValue(value)])),
    toolCallId: call.id,
    providerIdentifier: tool.providerIdentifier,
    toolName: tool.toolName
  })

/** The name of a failed result case, plus its error text when it has one. */
const describeFailure = (result: { readonly case: string | undefined; readonly value?: unknown }): string => {
  const value = result.value as Record<string, unknown> | undefined
  const detail = value?.["error"] ?? value?.["reason"] ?? value?.["errorMessage"]
  const name = result.case === undefined ? "no result" : result.case.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`)
  return typeof detail === "string" && detail !== "" ? `${name}: ${detail}` : name
}

const clip = (text: string): string => {
  if (text.length <= MODEL_OUTPUT_LIMIT) return text
  const half = MODEL_OUTPUT_LIMIT / 2
  return `${text.slice(0, half)}\n... (${text.length - MODEL_OUTPUT_LIMIT} characters elided) ...\n${text.slice(-half)}`
}

const numbered = (content: string, firstLine: number): string => {
  const lines = content.split("\n")
  if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop()
  return lines.map((line, i) => `${String(firstLine + i).padStart(6)}|${line}`).join("\n")
}

const readOutcome = (read: ToolRunOf<"Read">, result: import("./gen/agent/v1/agent_pb.js").ReadResult["result"]): ToolOutcome => {
  const { call, path } = read
  const args = readToolArgs(read)
  if (result.case === "success") {
    const success = result.value
    const content = success.output.case === "content" ? success.output.value : ""
    const firstLine = read.offset !== undefined && read.offset > 0 ? read.offset : 1
    const readRange = success.rangeApplied || read.offset !== undefined || read.limit !== undefined
      ? { startLine: firstLine, endLine: firstLine + Math.max(0, content.split("\n").length - 1) }
      : undefined
    const cursor = withId(call, {
      case: "readToolCall",
      value: create(ReadToolCallSchema, {
        args,
        result: create(ReadToolResultSchema, {
          result: {
            case: "success",
            value: {
              output: success.output.case === "data" ? { case: "data", value: success.output.value } : { case: "content", value: content },
              isEmpty: content === "" && success.output.case !== "data",
              exceededLimit: success.truncated,
              totalLines: Math.max(0, success.totalLines),
              fileSize: Number(success.fileSize),
              path: success.path || path,
              ...(readRange !== undefined ? { readRange } : {})
            }
          }
        })
      })
    })
    const text = success.output.case === "data"
      ? `${path} is a binary file (${success.fileSize} bytes).`
      : content === ""
      ? `${path} is empty.`
      : clip(numbered(content, firstLine)) + (success.truncated ? `\n(truncated: the file has ${success.totalLines} lines; read on with offset)` : "")
    return { message: resultMessage(call, text, false), cursor }
  }
  const text = result.case === "fileNotFound" ? `File not found: ${path}` : `Could not read ${path}: ${describeFailure(result)}`
  const cursor = withId(call, {
    case: "readToolCall",
    value: create(ReadToolCallSchema, { args, result: create(ReadToolResultSchema, { result: { case: "error", value: { errorMessage: text } } }) })
  })
  return { message: resultMessage(call, text, true), cursor }
}

type ToolRunOf<Tag extends ToolRun["_tag"]> = Extract<ToolRun, { readonly _tag: Tag }>
type EditChange = ToolRunOf<"Edit">["change"]

const appendShell = (output: ShellOutput, stream: "stdout" | "stderr", data: string): ShellOutput => ({
  stdout: stream === "stdout" ? output.stdout + data : output.stdout,
  stderr: stream === "stderr" ? output.stderr + data : output.stderr,
  interleaved: output.interleaved + data
})

const onShell = (shell: ToolRunOf<"Shell">, reply: ExecReply): ToolStep => {
  const { call, command, description, output, workingDirectory } = shell
  const args = create(ShellArgsSchema, { command, workingDirectory, toolCallId: call.id, description })
  const finish = (result: import("./gen/agent/v1/agent_pb.js").ShellResult, text: string, isError: boolean): ToolStep =>
    done({
      message: resultMessage(call, text, isError),
      cursor: withId(call, { case: "shellToolCall", value: create(ShellToolCallSchema, { args, result, description }) })
    })
  if (reply.case === "shellResult") {
    // A client may answer a stream request with a whole ShellResult (the non-streaming shape).
    const result = reply.value.result
    if (result.case === "success" || result.case === "failure") {
      const v = result.value
      return finish(reply.value, shellText(v.exitCode, v.stdout, v.stderr, v.interleavedOutput ?? ""), result.case === "failure")
    }
    return finish(reply.value, `The command did not run: ${describeFailure(result)}`, true)
  }
  if (reply.case !== "shellStream") return unexpected(shell, reply)
  const event: ShellStream["event"] = reply.value.event
  switch (event.case) {
    case "start":
    case undefined:
      return ToolStep.Continue({ run: shell, delta: undefined })
    case "stdout":
    case "stderr": {
      const data = event.value.data
      const delta = create(ToolCallDeltaSchema, {
        delta: {
          case: "shellToolCallDelta",
          value: { delta: event.case === "stdout" ? { case: "stdout", value: { content: data } } : { case: "stderr", value: { content: data } } }
        }
      })
      return ToolStep.Continue({ run: ToolRun.Shell({ ...shell, output: appendShell(output, event.case, data) }), delta })
    }
    case "exit": {
      const { aborted, code, cwd } = event.value
      const common = {
        command,
        workingDirectory: cwd || workingDirectory,
        exitCode: code,
        stdout: output.stdout,
        stderr: output.stderr,
        interleavedOutput: output.interleaved,
        ...(event.value.localExecutionTimeMs !== undefined ? { localExecutionTimeMs: event.value.localExecutionTimeMs } : {})
      }
      const ok = code === 0 && !aborted
      const result = create(ShellResultSchema, {
        result: ok
          ? { case: "success", value: common }
          : { case: "failure", value: { ...common, aborted, ...(event.value.abortReason !== undefined ? { abortReason: event.value.abortReason } : {}) } }
      })
      const text = shellText(code, output.stdout, output.stderr, output.interleaved) + (aborted ? "\n(the command was aborted)" : "")
      return finish(result, text, !ok)
    }
    case "backgrounded": {
      const b = event.value
      const result = create(ShellResultSchema, {
        isBackground: true,
        result: {
          case: "success",
          value: {
            command,
            workingDirectory: b.workingDirectory || workingDirectory,
            stdout: output.stdout,
            stderr: output.stderr,
            interleavedOutput: output.interleaved,
            shellId: b.shellId,
            ...(b.pid !== undefined ? { pid: b.pid } : {}),
            ...(b.reason !== undefined ? { backgroundReason: b.reason } : {})
          }
        }
      })
      const text = `The command is still running in the background (shell id ${b.shellId}). Output so far:\n${clip(output.interleaved) || "(none)"}`
      return finish(result, text, false)
    }
    case "rejected":
      return finish(
        create(ShellResultSchema, { result: { case: "rejected", value: event.value } }),
        `The user rejected the command${event.value.reason ? `: ${event.value.reason}` : "."}`,
        true
      )
    case "permissionDenied":
      return finish(
        create(ShellResultSchema, { result: { case: "permissionDenied", value: event.value } }),
        `Permission denied: ${event.value.error || command}`,
        true
      )
    case "sandboxUnsupported":
      return finish(
        create(ShellResultSchema, { result: { case: "spawnError", value: { command, workingDirectory, error: "the sandbox is not supported on this machine" } } }),
        "The command could not run: the sandbox is not supported on this machine.",
        true
      )
  }
}

const shellText = (code: number, stdout: string, stderr: string, interleaved: string): string => {
  const body = interleaved !== "" ? interleaved : stdout + stderr
  return `Exit code: ${code}\n${body === "" ? "(no output)" : clip(body)}`
}

const onEdit = (edit: ToolRunOf<"Edit">, reply: ExecReply): ToolStep => {
  const { call, change, path } = edit
  const editFailure = (text: string, result: NonNullable<MessageInitShape<typeof EditResultSchema>["result"]>): ToolStep =>
    done({
      message: resultMessage(call, text, true),
      cursor: withId(call, {
        case: "editToolCall",
        value: create(EditToolCallSchema, { args: create(EditArgsSchema, { path }), result: create(EditResultSchema, { result }) })
      })
    })
  if (edit.phase === "reading") {
    if (reply.case !== "readResult") return unexpected(edit, reply)
    const result = reply.value.result
    let before: string | undefined
    if (result.case === "success") {
      // Writing back a truncated read would cut the file: refuse instead.
      if (result.value.truncated) {
        const text = `Cannot edit ${path}: the client returned only part of the file (${result.value.totalLines} lines).`
        return editFailure(text, { case: "error", value: { path, error: text, modelVisibleError: text } })
      }
      if (result.value.output.case === "content") before = result.value.output.value
      else if (change.kind === "write") before = undefined
      else return editFailure(`Cannot edit ${path}: it is not a text file.`, { case: "error", value: { path, error: "binary file" } })
    } else if (result.case === "fileNotFound") {
      before = undefined
    } else if (result.case === "permissionDenied") {
      return editFailure(`Cannot read ${path}: permission denied.`, { case: "readPermissionDenied", value: {} })
    } else if (result.case === "rejected") {
      return editFailure(`The user rejected reading ${path}.`, { case: "rejected", value: {} })
    } else {
      const text = `Cannot read ${path}: ${describeFailure(result)}`
      return editFailure(text, { case: "error", value: { path, error: text } })
    }
    const applied = applyChange(change, before)
    if (Either.isLeft(applied)) {
      if (before === undefined) return editFailure(`File not found: ${path}`, { case: "fileNotFound", value: {} })
      return editFailure(applied.left, { case: "error", value: { path, error: applied.left, modelVisibleError: applied.left } })
    }
    const after = applied.right
    return ToolStep.Exec({
      run: ToolRun.Edit({ ...edit, phase: "writing", before, after }),
      exec: {
        case: "writeArgs",
        value: create(WriteArgsSchema, { path, fileText: after, toolCallId: call.id, returnFileContentAfterWrite: true })
      }
    })
  }
  if (reply.case !== "writeResult") return unexpected(edit, reply)
  const result = reply.value.result
  if (result.case !== "success") {
    const text = `Could not write ${path}: ${describeFailure(result)}`
    return result.case === "permissionDenied"
      ? editFailure(text, { case: "writePermissionDenied", value: {} })
      : result.case === "rejected"
      ? editFailure(`The user rejected the change to ${path}.`, { case: "rejected", value: {} })
      : editFailure(text, { case: "error", value: { path, error: text } })
  }
  const after = result.value.fileContentAfterWrite ?? edit.after
  const diff = unifiedDiff(path, edit.before ?? "", after)
  const cursor = withId(call, {
    case: "editToolCall",
    value: create(EditToolCallSchema, {
      args: create(EditArgsSchema, { path }),
      result: create(EditResultSchema, {
        result: {
          case: "success",
          value: {
            path: result.value.path || path,
            linesAdded: diff.added,
            linesRemoved: diff.removed,
            diffString: diff.text,
            ...(edit.before !== undefined ? { beforeFullFileContent: edit.before } : {}),
            afterFullFileContent: after
          }
        }
      })
    })
  })
  const verb = edit.before === undefined ? "Created" : "Edited"
  return done({ message: resultMessage(call, `${verb} ${path} (+${diff.added} -${diff.removed}).`, false), cursor })
}

/** Applies a Write or StrReplace to the current content (undefined: the file does not exist). */
export const applyChange = (
  change: ToolRunOf<"Edit">["change"],
  before: string | undefined
): Either.Either<string, string> => {
  if (change.kind === "write") return Either.right(change.contents)
  if (before === undefined) return Either.left("the file does not exist")
  if (change.oldString === "") return Either.left("old_string is empty; use Write to create or replace a whole file")
  const count = before.split(change.oldString).length - 1
  if (count === 0) return Either.left("old_string was not found in the file; read it again and copy the text exactly")
  if (count > 1 && !change.replaceAll) {
    return Either.left(`old_string occurs ${count} times; add surrounding lines to make it unique, or set replace_all`)
  }
  return Either.right(
    change.replaceAll ? before.split(change.oldString).join(change.newString) : before.replace(change.oldString, () => change.newString)
  )
}

/** Files named by a grep result, across the workspace roots it covers. */
const filesOf = (result: GrepResult): Array<string> => {
  if (result.result.case !== "success") return []
  const unions: Array<GrepUnionResult> = Object.values(result.result.value.workspaceResults)
  const files: Array<string> = []
  for (const union of unions) {
    if (union.result.case === "files") files.push(...union.result.value.files)
    else if (union.result.case === "content") files.push(...union.result.value.matches.map((match) => match.file))
  }
  return files
}

const formatGrep = (result: GrepResult): string => {
  if (result.result.case !== "success") return ""
  const lines: Array<string> = []
  for (const union of Object.values(result.result.value.workspaceResults)) {
    switch (union.result.case) {
      case "files":
        lines.push(...union.result.value.files)
        break
      case "count":
        lines.push(`${union.result.value.totalMatches} matches in ${union.result.value.totalFiles} files`)
        break
      case "content":
        for (const file of union.result.value.matches) {
          lines.push(`${file.file}:`)
          for (const match of file.matches) lines.push(`${match.lineNumber}${match.isContextLine ? "-" : ":"}${match.content}`)
        }
        break
      case undefined:
        break
    }
  }
  return lines.length === 0 ? "No matches." : clip(lines.join("\n"))
}

const formatTree = (root: LsDirectoryTreeNode): string => {
  const lines: Array<string> = [`${root.absPath}/`]
  const walk = (node: LsDirectoryTreeNode, indent: string) => {
    for (const dir of node.childrenDirs) {
      const name = dir.absPath.startsWith(node.absPath) ? dir.absPath.slice(node.absPath.length).replace(/^\//, "") : dir.absPath
      lines.push(`${indent}- ${name}/`)
      walk(dir, indent + "  ")
    }
    for (const file of node.childrenFiles) lines.push(`${indent}- ${file.name}`)
  }
  walk(root, "  ")
  return clip(lines.join("\n"))
}

const mcpOutcome = (call: ToolCall, args: import("./gen/agent/v1/agent_pb.js").McpArgs, reply: McpResult): ToolOutcome => {
  const result = reply.result
  if (result.case === "success") {
    const text = result.value.content
      .map((item) => (item.content.case === "text" ? item.content.value.text : "[non-text content]"))
      .join("\n")
    const structured = result.value.structuredContent
    const body = text !== "" ? text : structured !== undefined ? JSON.stringify(structured) : "(no content)"
    const cursor = withId(call, {
      case: "mcpToolCall",
      value: create(McpToolCallSchema, { args, result: create(McpToolResultSchema, { result: { case: "success", value: result.value } }) })
    })
    return { message: resultMessage(call, clip(body), result.value.isError), cursor }
  }
  const text = `The MCP tool failed: ${describeFailure(result)}`
  const typed: MessageInitShape<typeof McpToolResultSchema>["result"] = result.case === "rejected"
    ? { case: "rejected", value: {} }
    : result.case === "permissionDenied"
    ? { case: "permissionDenied", value: {} }
    : { case: "error", value: { error: text } }
  const cursor = withId(call, { case: "mcpToolCall", value: create(McpToolCallSchema, { args, result: create(McpToolResultSchema, { result: typed }) }) })
  return { message: resultMessage(call, text, true), cursor }
}

const TODO_STATUS: Record<typeof TodoStatusInput.Type, TodoStatus> = {
  pending: TodoStatus.PENDING,
  in_progress: TodoStatus.IN_PROGRESS,
  completed: TodoStatus.COMPLETED,
  cancelled: TodoStatus.CANCELLED
}
const TODO_LABEL: Record<number, string> = { 1: "pending", 2: "in_progress", 3: "completed", 4: "cancelled" }

/** TodoWrite never leaves the server: the list lives in the conversation and the UI gets the typed result. */
const todoWrite = (call: ToolCall, input: typeof TodoInput.Type, current: ReadonlyArray<TodoItem>): ToolStart => {
  const merge = input.merge ?? false
  const incoming = input.todos.map((todo) => create(TodoItemSchema, { id: todo.id, content: todo.content, status: TODO_STATUS[todo.status] }))
  let todos: Array<TodoItem>
  if (merge) {
    todos = current.map((item) => incoming.find((next) => next.id === item.id) ?? item)
    for (const item of incoming) if (!current.some((old) => old.id === item.id)) todos.push(item)
  } else {
    todos = incoming
  }
  const args = create(UpdateTodosArgsSchema, { todos: incoming, merge })
  const cursor = withId(call, {
    case: "updateTodosToolCall",
    value: create(UpdateTodosToolCallSchema, {
      args,
      result: create(UpdateTodosResultSchema, { result: { case: "success", value: { todos, totalCount: todos.length, wasMerge: merge } } })
    })
  })
  const text = `Todo list updated:\n${todos.map((todo) => `- [${TODO_LABEL[todo.status] ?? "pending"}] ${todo.content} (${todo.id})`).join("\n")}`
  return {
    started: withId(call, { case: "updateTodosToolCall", value: create(UpdateTodosToolCallSchema, { args }) }),
    step: done({ message: resultMessage(call, text, false), cursor, todos })
  }
}

/** JSON of an MCP argument value as the client sent it back (for tests and logs). */
export const mcpArgsJson = (args: { readonly [key: string]: Value }): Record<string, unknown> =>
  Object.fromEntries(Object.entries(args).map(([key, value]) => [key, toJson(ValueSchema, value)]))

// =============================================================================
// Diff
// =============================================================================

export interface LineDiff {
  /** Unified diff text (`--- a/path`, `+++ b/path`, `@@` hunks with 3 lines of context). */
  readonly text: string
  readonly added: number
  readonly removed: number
}

type Op = { readonly kind: " " | "-" | "+"; readonly line: string }

const splitLines = (text: string): Array<string> => {
  if (text === "") return []
  const lines = text.split("\n")
  if (lines[lines.length - 1] === "") lines.pop()
  return lines
}

/** Line operations turning `a` into `b`: common prefix and suffix trimmed, LCS in between. */
const diffLines = (a: ReadonlyArray<string>, b: ReadonlyArray<string>): Array<Op> => {
  let start = 0
  while (start < a.length && start < b.length && a[start] === b[start]) start++
  let endA = a.length, endB = b.length
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB-- }
  const ops: Array<Op> = a.slice(0, start).map((line) => ({ kind: " ", line }))
  const midA = a.slice(start, endA), midB = b.slice(start, endB)
  const n = midA.length, m = midB.length
  if (n * m > 4_000_000) {
    // Too large for a quadratic table: show the changed middle as one replacement.
    for (const line of midA) ops.push({ kind: "-", line })
    for (const line of midB) ops.push({ kind: "+", line })
  } else {
    const width = m + 1
    const lcs = new Uint32Array((n + 1) * width)
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * width + j] = midA[i] === midB[j]
          ? lcs[(i + 1) * width + j + 1]! + 1
          : Math.max(lcs[(i + 1) * width + j]!, lcs[i * width + j + 1]!)
      }
    }
    let i = 0, j = 0
    while (i < n || j < m) {
      if (i < n && j < m && midA[i] === midB[j]) { ops.push({ kind: " ", line: midA[i]! }); i++; j++ }
      // Removals first, as unified diffs conventionally show them.
      else if (i < n && (j === m || lcs[(i + 1) * width + j]! >= lcs[i * width + j + 1]!)) { ops.push({ kind: "-", line: midA[i]! }); i++ }
      else { ops.push({ kind: "+", line: midB[j]! }); j++ }
    }
  }
  for (const line of a.slice(endA)) ops.push({ kind: " ", line })
  return ops
}

/** A unified diff of two file contents, with the added and removed line counts. */
export const unifiedDiff = (path: string, before: string, after: string, context = 3): LineDiff => {
  const ops = diffLines(splitLines(before), splitLines(after))
  let added = 0, removed = 0
  for (const op of ops) {
    if (op.kind === "+") added++
    else if (op.kind === "-") removed++
  }
  if (added === 0 && removed === 0) return { text: "", added, removed }
  const out: Array<string> = [`--- a/${path}`, `+++ b/${path}`]
  // Line numbers before each op, in the old and the new file.
  const oldAt: Array<number> = [], newAt: Array<number> = []
  let o = 1, nw = 1
  for (const op of ops) {
    oldAt.push(o); newAt.push(nw)
    if (op.kind !== "+") o++
    if (op.kind !== "-") nw++
  }
  let index = 0
  while (index < ops.length) {
    while (index < ops.length && ops[index]!.kind === " ") index++
    if (index >= ops.length) break
    let from = Math.max(0, index - context)
    let to = index
    // Extend the hunk while the next change is within 2*context unchanged lines.
    while (to < ops.length) {
      if (ops[to]!.kind !== " ") { to++; continue }
      let run = to
      while (run < ops.length && ops[run]!.kind === " ") run++
      if (run >= ops.length || run - to > 2 * context) { to = Math.min(ops.length, to + context); break }
      to = run
    }
    const hunk = ops.slice(from, to)
    const oldCount = hunk.filter((op) => op.kind !== "+").length
    const newCount = hunk.filter((op) => op.kind !== "-").length
    const oldStart = oldCount === 0 ? oldAt[from]! - 1 : oldAt[from]!
    const newStart = newCount === 0 ? newAt[from]! - 1 : newAt[from]!
    out.push(`@@ -${oldStart},${oldCount} +${newStart},${newCount} @@`)
    for (const op of hunk) out.push(`${op.kind}${op.line}`)
    index = to
    from = to
  }
  return { text: out.join("\n") + "\n", added, removed }
}
