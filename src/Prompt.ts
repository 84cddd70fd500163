/**
 * The system prompt and the tool list of each model request, built from the turn's settings
 * (mode, workspace, rules, MCP tools) and never from the history. Pure and deterministic:
 * equal settings give the same bytes, so the provider's prompt cache (which covers the system
 * prompt and tools before the messages) stays warm across turns. No clock: a date in the
 * prompt would change the cached prefix every day.
 */
import type { ToolDefinition, ToolResultMessage } from "./Llm.js"
import type { Policy, PromptContext, TurnSettings, TurnSubagentRun, TurnWorkspace } from "./Loop.js"
import { mcpToolsOf, modeOfSettings } from "./Loop.js"
import { switchedModeOf, taskDefinition, toolCatalog } from "./Tools.js"
import type { CursorMode } from "./Tools.js"

const PLAN_GUIDANCE =
  "Investigate the workspace (read, search, ask the user with AskQuestion when a decision is theirs), then present a concrete plan with CreatePlan: the approach, the files to change and how, in order, and how to verify it. You do not change files or run commands in this mode. After CreatePlan, stop: the user reviews the plan and presses Build to have it carried out."

const MODE_GUIDANCE: Record<CursorMode, string> = {
  agent:
    "You are in agent mode: make the change the user asks for. Read before you edit, keep edits minimal and focused, and run the project's checks when they exist. When the task is done, say briefly what you changed.",
  ask:
    "You are in ask mode: answer the question. You may read and search the workspace, but you do not change files or run commands. If the user wants changes made, suggest switching to agent mode with SwitchMode.",
  plan: `You are in plan mode. ${PLAN_GUIDANCE}`,
  project:
    `You are in project mode: the user is planning a larger piece of work. ${PLAN_GUIDANCE} Break the work into phases a reviewer can check one at a time.`,
  debug:
    "You are in debug mode: find the root cause before you fix anything. Reproduce the problem, form hypotheses, add targeted logging or checks to test them, read the evidence, then make the smallest fix that addresses the cause and verify it. Remove the temporary instrumentation when you are done, and say what the cause was.",
  triage:
    "You are in triage mode: investigate the reported problem without changing anything. Find where it comes from, how severe it is and who or what it affects, and report your findings with the evidence (files, lines, commands) and a recommended next step.",
  multitask:
    "You are in multitask mode: the user gave several tasks. Keep them in a todo list (TodoWrite), work through them one at a time, mark each done as you finish it, and keep the tasks' changes separate.",
  custom: "You are in a custom mode the user defined: follow its instructions below."
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

const attribute = (value: string): string => value.replace(/"/g, "'")

/**
 * The system prompt for a turn's settings. A client's `system_prompt_spec` replaces it (its text,
 * byte for byte) or is appended after it; either way the same settings give the same bytes.
 */
export const buildPrompt = (context: PromptContext): string => {
  const spec = context.settings.systemPromptSpec
  if (spec?.mode === "replace") return spec.text
  const own = serverPrompt(context)
  return spec?.mode === "append" && spec.text.trim() !== "" ? `${own}\n\n${spec.text}` : own
}

/** The server's own system prompt: guidance for the mode, the environment, the rules, the custom prompt. */
const serverPrompt = (context: PromptContext): string => {
  const { customMode, customSystemPrompt, rules = [], workspace } = context.settings
  const mode = modeOfSettings(context.settings)
  const sections: Array<string> = [
    "You are a coding agent working in the user's editor. You act through the tools you are given; the user sees every tool call and its result.",
    MODE_GUIDANCE[mode],
    "Use paths relative to the workspace root or absolute paths inside it. Prefer Grep and Glob over reading whole directories. Quote code with its file path."
  ]
  const subagent = context.settings.subagent
  if (subagent !== undefined) sections.splice(1, 1, subagentGuidance(subagent))
  if (mode === "custom" && customMode !== undefined && subagent === undefined) {
    sections.push(customMode.instructions.trim() === ""
      ? `<custom_mode name="${attribute(customMode.label)}">\n(The editor did not send this mode's instructions: work as in agent mode.)\n</custom_mode>`
      : `<custom_mode name="${attribute(customMode.label)}">\n${customMode.instructions.trim()}\n</custom_mode>`)
  }
  const environment = workspaceLines(workspace)
  if (environment.length > 0) sections.push(`<environment>\n${environment.join("\n")}\n</environment>`)
  const ruleTexts = rules.filter((rule) => rule.content !== "").map((rule) =>
    rule.path === "" ? `<rule>\n${rule.content}\n</rule>` : `<rule path="${rule.path}">\n${rule.content}\n</rule>`
  )
  if (ruleTexts.length > 0) sections.push(`The user's rules for this workspace; follow them:\n${ruleTexts.join("\n")}`)
  if (customSystemPrompt !== undefined && customSystemPrompt.trim() !== "") sections.push(customSystemPrompt.trim())
  return sections.join("\n\n")
}

/**
 * A subagent's guidance in place of its mode's: it works alone on the task its parent gave, and
 * its last message is the report the parent reads. A user-defined subagent's own instructions follow.
 */
const subagentGuidance = (subagent: TurnSubagentRun): string => {
  const lines = [
    `You are a subagent (${subagent.type}) working for another agent, not for the user directly. The user message is the task your parent agent gave you; you cannot ask it or the user questions.`,
    subagent.readonly
      ? "Only read and search: do not change files or run commands that change anything."
      : "Do the task with the tools you have, keeping changes to what it asks.",
    "When you are done, your last message is the report your parent reads: state what you found or did, with file paths and line numbers, concisely. Never end without that report."
  ]
  return subagent.instructions.trim() === ""
    ? lines.join(" ")
    : `${lines.join(" ")}\n<subagent_instructions>\n${subagent.instructions.trim()}\n</subagent_instructions>`
}

/** The modes whose model may hand work to subagents (in plan and project modes they only read). */
const TASK_MODES: ReadonlyArray<CursorMode> = ["agent", "debug", "multitask", "custom", "plan", "project"]
/** What a subagent never gets: questions to the user, mode changes, plans, subagents of its own. */
const PARENT_ONLY: ReadonlyArray<string> = ["AskQuestion", "SwitchMode", "CreatePlan", "Task"]
const READ_ONLY_TOOLS: ReadonlyArray<string> = ["Read", "Grep", "Glob", "Ls", "ReadLints", "WebSearch", "WebFetch", "TodoWrite"]

const taskDefinitions = new Map<string, ToolDefinition>()
/** The Task tool for a workspace's subagents, built once per list (its bytes are part of the cache key). */
const taskDefinitionFor = (subagents: TurnSettings["subagents"]): ToolDefinition => {
  const key = JSON.stringify(subagents ?? [])
  const cached = taskDefinitions.get(key)
  if (cached !== undefined) return cached
  const definition = taskDefinition(subagents ?? [])
  taskDefinitions.set(key, definition)
  return definition
}

/**
 * The tools offered in a turn: Cursor's native tools for its mode and the web tools allowed, the
 * MCP tools it brought, then Task where the mode hands work to subagents. A subagent's own run
 * gets its mode's tools without the parent's (questions, mode switches, plans, Task), read-only
 * ones only when it only reads, and only those a user-defined subagent lists.
 */
export const buildTools = (context: PromptContext): ReadonlyArray<ToolDefinition> => {
  const { settings } = context
  const mode = modeOfSettings(settings)
  const catalog = toolCatalog(mode, mcpToolsOf(settings), settings.webTools)
  const subagent = settings.subagent
  if (subagent !== undefined) {
    const allowed = subagent.tools.map((name) => name.toLowerCase())
    return catalog.filter((tool) =>
      !PARENT_ONLY.includes(tool.name) &&
      (!subagent.readonly || READ_ONLY_TOOLS.includes(tool.name)) &&
      (allowed.length === 0 || allowed.includes(tool.name.toLowerCase()))
    )
  }
  return TASK_MODES.includes(mode) ? withTask(catalog, taskDefinitionFor(settings.subagents)) : catalog
}

const withTasks = new WeakMap<ReadonlyArray<ToolDefinition>, Map<ToolDefinition, ReadonlyArray<ToolDefinition>>>()
/** The catalog with Task after it: the same list object for the same two parts, so its hash (`Llm.toolsHash`) is computed once. */
const withTask = (catalog: ReadonlyArray<ToolDefinition>, task: ToolDefinition): ReadonlyArray<ToolDefinition> => {
  const byTask = withTasks.get(catalog) ?? new Map<ToolDefinition, ReadonlyArray<ToolDefinition>>()
  withTasks.set(catalog, byTask)
  const known = byTask.get(task)
  if (known !== undefined) return known
  const list = [...catalog, task]
  byTask.set(task, list)
  return list
}

/** The settings after a tool result: an approved SwitchMode puts the turn in its target mode from the next request on. */
export const settingsAfter = (settings: TurnSettings, result: ToolResultMessage): TurnSettings => {
  const text = result.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("")
  const mode = switchedModeOf(result.toolName, result.isError, text)
  return mode === undefined || mode === settings.mode ? settings : { ...settings, mode }
}

export const policy = (maxLlmCallsPerTurn: number): Policy => ({ buildPrompt, buildTools, maxLlmCallsPerTurn, settingsAfter })
