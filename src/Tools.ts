/**
 * The tool catalog and the client operations behind each tool.
 *
 * The model is offered Cursor's native tools (Shell, Read, Write, StrReplace, Delete, Grep,
 * Glob, Ls, ReadLints, TodoWrite, CreatePlan, AskQuestion, SwitchMode, WebSearch, WebFetch,
 * WriteShellStdin, and the MCP tools the run request lists), filtered by the Cursor mode. A
 * question tool sends an interaction query instead of an exec (`Queries.ts`); the web tools
 * then do the server's work.
 * One tool call then runs as a small pure state machine: `startTool` says which exec to send
 * to the client (or finishes at once, for TodoWrite and for invalid arguments), `onExecReply`
 * takes each exec result and says the next exec, a streamed chunk to show, or the final
 * outcome. An outcome is two views of one result: text for the model (`ToolResultMessage`)
 * and Cursor's typed `ToolCall` (args and result) for the UI.
 *
 * Pure: no I/O, no clock, no ids. Exec ids, times and framing belong to the Dialect and the
 * transport; this module only decides *what* to ask the client and *what* its answer means.
 *
 * The modules of `tools/`: `Kinds.ts` (modes, tool kinds, MCP names), `Catalog.ts`,
 * `Arguments.ts` (argument schemas, exec and typed args), `Model.ts` (the machine's data),
 * `Machine.ts` (the machine), `Results.ts` (what every outcome is made of), `Cards.ts` (each
 * kind of run's card, started or failed), `Shell.ts`,
 * `Edit.ts`, `Outcomes.ts` (Read, Grep, Glob, Ls and MCP results), `Lints.ts` (ReadLints),
 * `Stdin.ts` (WriteShellStdin), `Todo.ts` and `Diff.ts`.
 */
export { CursorMode, isIdempotent, kindOf, McpToolDescriptor, mcpModelName, SWITCHABLE_MODES, ToolKind } from "./tools/Kinds.js"
export { offers, toolCatalog } from "./tools/Catalog.js"
export type { WebTools } from "./tools/Catalog.js"
export { mcpArgsJson } from "./tools/Arguments.js"
export { ServerWork, ToolRun, ToolStep, WorkResult } from "./tools/Model.js"
export type { CreatedPlan, CursorToolCall, ExecReply, ExecRequest, QueryReply, QueryRequest, ToolContext, ToolOutcome, ToolStart } from "./tools/Model.js"
export { onAwaitSlept, parseTerminalFile } from "./tools/Await.js"
export { BUILTIN_SUBAGENTS, onSubagentStopped, recoveredTaskResult, taskDefinition } from "./tools/Task.js"
export type { SubagentStanding } from "./tools/Task.js"
export type { SubagentRun, TaskContext } from "./tools/Model.js"
export { acceptsReply, answersText, isQueryRun, onQueryReply, onWorkDone, planIdOf, switchedModeOf } from "./tools/Queries.js"
export { partialCursorToolCall } from "./tools/Results.js"
export { onExecReply, onExecThrow, onUnknownReply, startTool } from "./tools/Machine.js"
export { applyChange, LINTS_HINT } from "./tools/Edit.js"
export { LINTS_LIMIT } from "./tools/Lints.js"
export * from "./tools/Diff.js"
