/**
 * The system prompt and the tool list of each model request, built from the turn's settings
 * (mode, workspace, rules, MCP tools) and never from the history. Pure and deterministic:
 * equal settings give the same bytes, so the provider's prompt cache (which covers the system
 * prompt and tools before the messages) stays warm across turns. No clock: a date in the
 * prompt would change the cached prefix every day.
 */
import type { ToolDefinition } from "./Llm.js"
import type { Policy, PromptContext, TurnWorkspace } from "./Loop.js"
import { mcpToolsOf, modeOfSettings } from "./Dialect.js"
import { toolCatalog } from "./Tools.js"
import type { CursorMode } from "./Tools.js"

const MODE_GUIDANCE: Record<CursorMode, string> = {
  agent:
    "You are in agent mode: make the change the user asks for. Read before you edit, keep edits minimal and focused, and run the project's checks when they exist. When the task is done, say briefly what you changed.",
  ask:
    "You are in ask mode: answer the question. You may read and search the workspace, but you do not change files or run commands.",
  plan:
    "You are in plan mode: investigate the workspace and write a concrete, ordered plan (a todo list) for the user to approve. Do not change files or run commands yet."
}

const workspaceLines = (workspace: TurnWorkspace | undefined): Array<string> => {
  const lines: Array<string> = []
  if (workspace === undefined) return lines
  const paths = workspace.workspacePaths.filter((p) => p !== "")
  if (paths.length > 0) lines.push(`Workspace folders: ${paths.join(", ")}`)
  if (workspace.projectFolder) lines.push(`Project folder: ${workspace.projectFolder}`)
  if (workspace.osVersion) lines.push(`Operating system: ${workspace.osVersion}`)
  if (workspace.shell) lines.push(`Shell: ${workspace.shell}`)
  if (workspace.timeZone) lines.push(`Time zone: ${workspace.timeZone}`)
  return lines
}

/** The system prompt for a turn's settings. */
export const buildPrompt = (context: PromptContext): string => {
  const { customSystemPrompt, rules = [], workspace } = context.settings
  const mode = modeOfSettings(context.settings)
  const sections: Array<string> = [
    "You are a coding agent working in the user's editor. You act through the tools you are given; the user sees every tool call and its result.",
    MODE_GUIDANCE[mode],
    "Use paths relative to the workspace root or absolute paths inside it. Prefer Grep and Glob over reading whole directories. Quote code with its file path."
  ]
  const environment = workspaceLines(workspace)
  if (environment.length > 0) sections.push(`<environment>\n${environment.join("\n")}\n</environment>`)
  const ruleTexts = rules.filter((rule) => rule.content !== "").map((rule) =>
    rule.path === "" ? `<rule>\n${rule.content}\n</rule>` : `<rule path="${rule.path}">\n${rule.content}\n</rule>`
  )
  if (ruleTexts.length > 0) sections.push(`The user's rules for this workspace; follow them:\n${ruleTexts.join("\n")}`)
  if (customSystemPrompt !== undefined && customSystemPrompt.trim() !== "") sections.push(customSystemPrompt.trim())
  return sections.join("\n\n")
}

/** The tools offered in a turn: Cursor's native tools for its mode, then the MCP tools it brought. */
export const buildTools = (context: PromptContext): ReadonlyArray<ToolDefinition> =>
  toolCatalog(modeOfSettings(context.settings), mcpToolsOf(context.settings))

export const policy = (maxLlmCallsPerTurn: number): Policy => ({ buildPrompt, buildTools, maxLlmCallsPerTurn })
