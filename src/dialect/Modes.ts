/**
 * Cursor's modes: the `AgentMode` of a message (or of a plan's Build), the mode the checkpoint
 * records, and a custom mode's instructions (a skill the request context carries).
 */
import { AgentMode } from "../gen/agent/v1/agent_pb.js"
import type { RequestContext, UserMessage as CursorUserMessage } from "../gen/agent/v1/agent_pb.js"
import type { TurnCustomMode } from "../Loop.js"
import type { CursorMode } from "../Tools.js"

const MODES: Record<number, CursorMode> = {
  [AgentMode.AGENT]: "agent",
  [AgentMode.ASK]: "ask",
  [AgentMode.PLAN]: "plan",
  [AgentMode.DEBUG]: "debug",
  [AgentMode.TRIAGE]: "triage",
  [AgentMode.PROJECT]: "project",
  [AgentMode.MULTITASK]: "multitask",
  [AgentMode.CUSTOM]: "custom"
}

const AGENT_MODES: Record<CursorMode, AgentMode> = {
  agent: AgentMode.AGENT,
  ask: AgentMode.ASK,
  plan: AgentMode.PLAN,
  debug: AgentMode.DEBUG,
  triage: AgentMode.TRIAGE,
  project: AgentMode.PROJECT,
  multitask: AgentMode.MULTITASK,
  custom: AgentMode.CUSTOM
}

/** The mode of a message (unspecified, or a value newer than this server: agent, Cursor's default). */
export const cursorModeOf = (mode: AgentMode): CursorMode => MODES[mode] ?? "agent"

/** The `AgentMode` the checkpoint records for a mode. */
export const agentModeOf = (mode: CursorMode): AgentMode => AGENT_MODES[mode]

/**
 * The custom mode a message enters, with its instructions: the skill its `source_path` names in
 * the request context (`agent_skills`), else none (the prompt then says so). Undefined when the
 * message enters no custom mode.
 */
export const customModeOf = (message: CursorUserMessage | undefined, context: RequestContext | undefined): TurnCustomMode | undefined => {
  const intent = message?.customModeIntent?.intent
  if (intent?.case !== "enter") return undefined
  const { id, label, sourcePath } = intent.value
  const skill = sourcePath === undefined || sourcePath === "" ? undefined : context?.agentSkills.find((candidate) => candidate.fullPath === sourcePath)
  return { id, label: label !== "" ? label : id, instructions: skill?.content ?? "" }
}

/** The mode a message's custom-mode exit goes to, if it leaves one. */
export const exitModeOf = (message: CursorUserMessage | undefined): CursorMode | undefined => {
  const intent = message?.customModeIntent?.intent
  return intent?.case === "exit" ? cursorModeOf(intent.value.nextMode) : undefined
}
