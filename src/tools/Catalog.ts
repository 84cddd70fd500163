/**
 * The tool catalog: the tool definitions the model is offered in each Cursor mode, Cursor's
 * native tools first, then (in agent mode) the MCP tools the run request lists.
 */
import { jsonKeyOf, recentMap } from "../internal/JsonKey.js"
import type { RecentMap } from "../internal/JsonKey.js"
import type { ToolDefinition } from "../Llm.js"
import { mcpModelName } from "./Kinds.js"
import { SWITCHABLE_MODES } from "./Kinds.js"
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

/** Task's definition names the workspace's subagents: built per list (`Task.taskDefinition`), not here. */
const definitions: Record<Exclude<ToolKind, "mcp" | "task">, ToolDefinition> = {
  shell: {
    name: "Shell",
    description:
      "Run a shell command in the user's workspace and return its output and exit code. Long-running commands move to the background after block_until_ms; AwaitShell waits for them and reads their output.",
    parameters: object({
      command: str("The command to run."),
      working_directory: str("Absolute directory to run in; defaults to the workspace root."),
      block_until_ms: int("How long to wait before backgrounding the command (default 30000)."),
      description: str("A few words saying what the command does, shown to the user."),
      run_in_background: bool("Start it in the background at once (a dev server, a watcher) and get its shell id without waiting.")
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
  readLints: {
    name: "ReadLints",
    description:
      "Read the editor's problems (linter and type-checker errors and warnings) for files, for example the files you just edited. Errors come first; lines and columns are 1-based.",
    parameters: object({
      paths: {
        type: "array",
        items: { type: "string" },
        minItems: 1,
        maxItems: 20,
        description: "The files to check (1 to 20): absolute paths, or paths relative to the workspace root."
      }
    }, ["paths"])
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
  },
  createPlan: {
    name: "CreatePlan",
    description:
      "Present your finished plan to the user as a plan document they can review, edit and then build (carry out). Call it once, when your investigation is done; then stop and wait for the user.",
    parameters: object({
      name: str("A short title for the plan."),
      overview: str("One or two sentences saying what the plan achieves."),
      plan: str("The plan in Markdown: the approach, the files to change and how, in order, and how to verify the result."),
      todos: {
        type: "array",
        description: "The plan's steps as a todo list, in order.",
        items: object({ id: str("Stable id of the step."), content: str("What to do.") }, ["id", "content"])
      }
    }, ["name", "plan"])
  },
  askQuestion: {
    name: "AskQuestion",
    description:
      "Ask the user one or more multiple-choice questions when a decision is theirs to make and you cannot find the answer yourself. The user may also type a free answer. With run_async the questions stay open while you go on, and the answers arrive later as a message.",
    parameters: object({
      title: str("A short title for the questions."),
      questions: {
        type: "array",
        items: object({
          id: str("Stable id of the question."),
          prompt: str("The question."),
          options: { type: "array", items: object({ id: str("Stable id of the option."), label: str("What the user sees.") }, ["id", "label"]) },
          allow_multiple: bool("The user may pick several options.")
        }, ["id", "prompt", "options"])
      },
      run_async: bool("Do not wait for the answers: go on, and read them when they arrive.")
    }, ["questions"])
  },
  switchMode: {
    name: "SwitchMode",
    description:
      "Ask the user to switch to another mode when the task needs it (for example from plan or ask mode to agent mode to make changes). The user approves or declines; an approved switch applies from your next step.",
    parameters: object({
      target_mode_id: { type: "string", enum: SWITCHABLE_MODES, description: "The mode to switch to." },
      explanation: str("Why the switch is needed, shown to the user.")
    }, ["target_mode_id"])
  },
  webSearch: {
    name: "WebSearch",
    description: "Search the web for current information (documentation, releases, errors). Returns titles, links and excerpts; fetch a page with WebFetch to read it whole.",
    parameters: object({ search_term: str("What to search for.") }, ["search_term"])
  },
  webFetch: {
    name: "WebFetch",
    description: "Fetch a web page (http or https) and read it as Markdown. Addresses on the user's private network are refused.",
    parameters: object({ url: str("The absolute URL to fetch.") }, ["url"])
  },
  writeShellStdin: {
    name: "WriteShellStdin",
    description:
      "Type characters into a command that is still running in the background (a Shell call whose result gave a shell id). Include \"\\n\" to press Enter; control characters such as \"\\u0003\" (Ctrl-C) are sent as they are.",
    parameters: object({
      shell_id: int("The shell id the Shell result gave."),
      chars: str("The characters to type.")
    }, ["shell_id", "chars"])
  },
  awaitShell: {
    name: "AwaitShell",
    description:
      "Wait for a command that is running in the background (a Shell call whose result gave a shell id) and read its output: returns when it finishes, when its output matches pattern, or after block_until_ms, whichever comes first.",
    parameters: object({
      shell_id: int("The shell id the Shell result gave."),
      block_until_ms: int("How long to wait at most (default 30000, at most 600000)."),
      pattern: str("A regular expression: stop waiting as soon as the output matches it (e.g. a server's 'listening on').")
    }, ["shell_id"])
  }
}

const isJsonObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * An MCP tool's definition. No provider API takes a tool's output schema or MCP annotations
 * (read-only, destructive...), so they go in the description, as compact JSON after the text:
 * the same tool gives the same bytes every turn.
 */
const mcpDefinition = (tool: McpToolDescriptor): ToolDefinition => {
  const extras = [
    ...(tool.annotations !== undefined ? [`Annotations: ${JSON.stringify(tool.annotations)}`] : []),
    ...(tool.outputSchema !== undefined ? [`Output schema: ${JSON.stringify(tool.outputSchema)}`] : [])
  ]
  const description = tool.description || `MCP tool ${tool.toolName} from ${tool.providerIdentifier}.`
  return {
    name: mcpModelName(tool),
    description: extras.length === 0 ? description : `${description}\n\n${extras.join("\n")}`,
    parameters: isJsonObject(tool.inputSchema) ? tool.inputSchema : { type: "object", properties: {} }
  }
}

type NativeKind = Exclude<ToolKind, "mcp" | "task">

const READ_ONLY: ReadonlyArray<NativeKind> = ["read", "grep", "glob", "ls", "readLints"]
// ReadLints sits with the tools that read; WriteShellStdin, which only a backgrounded Shell command needs, goes last.
const AGENT: ReadonlyArray<NativeKind> = [
  "shell",
  "read",
  "write",
  "edit",
  "delete",
  "grep",
  "glob",
  "ls",
  "readLints",
  "todoWrite",
  "askQuestion",
  "switchMode",
  "writeShellStdin",
  "awaitShell"
]
const PLAN: ReadonlyArray<NativeKind> = [...READ_ONLY, "todoWrite", "createPlan", "askQuestion", "switchMode"]

/**
 * Each mode's native tools, in a fixed order (the tool list is part of the provider's prompt
 * cache key). Ask, plan, project and triage are read-only, as Cursor's are: plan and project
 * end in a plan document (CreatePlan), triage in findings. Agent, debug, multitask and a custom
 * mode change the workspace, and get the MCP tools.
 */
const MODE_TOOLS: Readonly<Record<CursorMode, ReadonlyArray<NativeKind>>> = {
  agent: AGENT,
  debug: AGENT,
  multitask: AGENT,
  custom: AGENT,
  ask: [...READ_ONLY, "askQuestion", "switchMode"],
  plan: PLAN,
  project: PLAN,
  triage: [...READ_ONLY, "todoWrite", "askQuestion", "switchMode"]
}

/** The modes that may change the workspace, and so get the MCP tools. */
const WRITES: ReadonlyArray<CursorMode> = ["agent", "debug", "multitask", "custom"]

/** The server-side web tools a turn may offer (both off when not said). */
export interface WebTools {
  readonly search: boolean
  readonly fetch: boolean
}

/**
 * Each mode's native tools with the web tools it may offer, built once per combination: the
 * same list object every turn, so what is derived from it (its canonical JSON and hash,
 * `Llm.toolsHash`) is computed once, not per model call.
 */
const nativeCatalogs = new Map<string, ReadonlyArray<ToolDefinition>>()

const nativeCatalog = (mode: CursorMode, web: WebTools): ReadonlyArray<ToolDefinition> => {
  const key = `${mode}:${web.search}:${web.fetch}`
  const cached = nativeCatalogs.get(key)
  if (cached !== undefined) return cached
  const kinds: Array<NativeKind> = [...MODE_TOOLS[mode]]
  if (web.search) kinds.push("webSearch")
  if (web.fetch) kinds.push("webFetch")
  const catalog = kinds.map((kind) => definitions[kind])
  nativeCatalogs.set(key, catalog)
  return catalog
}

const NO_WEB: WebTools = { search: false, fetch: false }

/** Whether a mode offers a native tool (its web tools aside). */
export const offers = (mode: CursorMode, kind: NativeKind): boolean => MODE_TOOLS[mode].includes(kind)

/** Catalogs with MCP tools already made, by native catalog and then by the MCP tools' JSON (the last few of each). */
const withMcps = new Map<ReadonlyArray<ToolDefinition>, RecentMap<string, ReadonlyArray<ToolDefinition>>>()
const MCP_CATALOGS_KEPT = 16

/**
 * The tools offered in a mode: Cursor's native tools for it, the web tools allowed, then (in the
 * modes that write) the MCP tools.
 *
 * The same list object for the same tools, from call to call and turn to turn: a run request
 * brings its MCP tools afresh each turn, and a catalog is hashed (`Llm.toolsHash`), made into
 * wire JSON (`llm/Adapter.ts`) and estimated in tokens once per list object. With 60 MCP tools
 * (~120 KB) a new list per model call cost ~36 ms of server CPU per short turn (a scratch bench),
 * most of it the canonical JSON and SHA-256 of the list at each commit. The MCP tools' JSON is
 * made once per list object (`jsonKeyOf`): the turn's settings keep theirs from call to call.
 */
export const toolCatalog = (mode: CursorMode, mcpTools: ReadonlyArray<McpToolDescriptor>, web: WebTools = NO_WEB): ReadonlyArray<ToolDefinition> => {
  const native = nativeCatalog(mode, web)
  if (!WRITES.includes(mode) || mcpTools.length === 0) return native
  let byMcps = withMcps.get(native)
  if (byMcps === undefined) {
    byMcps = recentMap(MCP_CATALOGS_KEPT)
    withMcps.set(native, byMcps)
  }
  const key = jsonKeyOf(mcpTools)
  const known = byMcps.get(key)
  if (known !== undefined) return known
  const catalog = [...native, ...mcpTools.map(mcpDefinition)]
  byMcps.set(key, catalog)
  return catalog
}
