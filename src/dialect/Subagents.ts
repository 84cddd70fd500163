/**
 * Subagents in a run request: the user's own subagents the Task tool may name (the request
 * context's `custom_subagents`), and, for a child run Cursor opened for a parent's Task (its
 * `subagent_type_name` is set), what that child is: its type, its instructions and tools when the
 * user defined it, and whether it only reads.
 */
import type { AgentRunRequest, CustomSubagent, RequestContext } from "../gen/agent/v1/agent_pb.js"
import type { TurnSubagentInfo, TurnSubagentRun } from "../Loop.js"

/** The types of Cursor's own subagents that only read. */
const READ_ONLY_TYPES: ReadonlyArray<string> = ["explore"]

/** The user's subagents, by name (the first of a name), for the Task tool's list. */
export const customSubagentsOf = (context: RequestContext | undefined): ReadonlyArray<CustomSubagent> => {
  const seen = new Set<string>()
  return (context?.customSubagents ?? []).filter((agent) => {
    const name = agent.name.trim()
    if (name === "" || seen.has(name)) return false
    seen.add(name)
    return true
  })
}

export const subagentInfosOf = (agents: ReadonlyArray<CustomSubagent>): ReadonlyArray<TurnSubagentInfo> =>
  agents.map((agent) => ({ name: agent.name.trim(), description: agent.description.trim() }))

/** What a child run is, when the run request is one (undefined for a user's own turn). */
export const subagentRunOf = (request: AgentRunRequest, agents: ReadonlyArray<CustomSubagent>): TurnSubagentRun | undefined => {
  const type = request.subagentTypeName?.trim() ?? ""
  if (type === "") return undefined
  const custom = agents.find((agent) => agent.name.trim() === type)
  return {
    type,
    instructions: custom?.prompt.trim() ?? "",
    tools: custom?.tools.map((tool) => tool.trim()).filter((tool) => tool !== "") ?? [],
    readonly: READ_ONLY_TYPES.includes(type)
  }
}
