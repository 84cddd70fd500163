/**
 * The data of one tool call's state machine: the exec it asks the client to run and the
 * replies it takes, where the call stands (`ToolRun`, plain data the runner keeps beside the
 * operation), the next step, and the outcome in its two views (text for the model, Cursor's
 * typed `ToolCall` for the UI).
 */
import type { MessageInitShape } from "@bufbuild/protobuf"
import { Data } from "effect"
import type {
  AskQuestionArgs,
  CreatePlanArgs,
  DiagnosticsResult,
  ExecClientMessage,
  ExecServerMessage,
  InteractionQuerySchema,
  InteractionResponse,
  SwitchModeArgs,
  TodoItem,
  ToolCall as CursorToolCall,
  ToolCallDelta
} from "../gen/agent/v1/agent_pb.js"
import type { ToolCall, ToolResultMessage } from "../Llm.js"
import type { GrepInput } from "./Arguments.js"
import type { CursorMode, McpToolDescriptor } from "./Kinds.js"
import type { SubagentArgs, TaskArgs } from "../gen/agent/v1/agent_pb.js"
import type { TurnSubagentInfo } from "../Loop.js"

/** A subagent a Task ran, as the parent's checkpoint keeps it (`SubagentRunState`, by the Task's tool call id). */
export interface SubagentRun {
  readonly toolCallId: string
  /** The child's agent id (its conversation), as `subagent_result` named it; "" when unknown. */
  readonly agentId: string
  readonly status: "success" | "backgrounded" | "error" | "aborted"
  readonly title: string
  readonly completedAtMs: number
}

/** What starting a Task needs besides its arguments. */
export interface TaskContext {
  /** The model the child runs on (the configured subagent model, else the parent's). */
  readonly subagentModel: string
  /** The subagents the model may name: Cursor's and the user's. */
  readonly customSubagents: ReadonlyArray<TurnSubagentInfo>
  /** The parent's conversation, for the child's link. */
  readonly conversationId: string
}

export type { CursorToolCall }

/** An exec the client is asked to run: the `ExecServerMessage` oneof, without id and exec_id. */
export type ExecRequest = Exclude<ExecServerMessage["message"], { case: undefined }>
/** One exec answer from the client: the `ExecClientMessage` oneof (a shell stream arrives as several). */
export type ExecReply = Exclude<ExecClientMessage["message"], { case: undefined }>
/** A question to the client: the `InteractionQuery` oneof, without its id (as init data: the Dialect makes the message). */
export type QueryRequest = Exclude<NonNullable<MessageInitShape<typeof InteractionQuerySchema>["query"]>, { case: undefined }>
/** The client's answer to a question: the `InteractionResponse` oneof. */
export type QueryReply = Exclude<InteractionResponse["result"], { case: undefined }>

/** Work the server does itself once the client approved it (a web search or fetch). */
export type ServerWork = Data.TaggedEnum<{
  Search: { readonly query: string }
  Fetch: { readonly url: string }
  /** Wait before reading a background shell's output again. */
  Sleep: { readonly ms: number }
}>
export const ServerWork = Data.taggedEnum<ServerWork>()

/** What the server's work gave: search results, a page, or why it failed (a sentence for the model). */
export type WorkResult = Data.TaggedEnum<{
  Searched: { readonly references: ReadonlyArray<{ readonly title: string; readonly url: string; readonly chunk: string }> }
  Fetched: { readonly url: string; readonly markdown: string; readonly truncated: boolean }
  Failed: { readonly error: string; readonly refused: boolean }
  Slept: {}
}>
export const WorkResult = Data.taggedEnum<WorkResult>()

/** What a server-side tool needs to know besides its arguments. */
export interface ToolContext {
  readonly mcpTools: ReadonlyArray<McpToolDescriptor>
  /** The conversation's todo list as TodoWrite last left it. */
  readonly todos: ReadonlyArray<TodoItem>
  /** The mode the model is in now (SwitchMode says where it switches from); agent when not said. */
  readonly mode?: CursorMode
  /** Where Cursor keeps the terminal output of background shells (`RequestContextEnv.terminals_folder`); "" when not said. */
  readonly terminalsFolder?: string
  /** Task: the model the child runs on, the user's subagents, the parent's conversation. */
  readonly subagents?: TaskContext
}

/** A plan CreatePlan made: the checkpoint keeps it (`plan`, and `plans` by id). */
export interface CreatedPlan {
  readonly id: string
  readonly name: string
  readonly uri: string
  readonly plan: string
}

export interface ToolOutcome {
  /** What the model reads. */
  readonly message: ToolResultMessage
  /** What the Cursor UI shows in `tool_call_completed`: the typed args and result. */
  readonly cursor: CursorToolCall
  /** Set by TodoWrite (and CreatePlan's todos): the conversation's new todo list, for the runner to keep. */
  readonly todos?: ReadonlyArray<TodoItem>
  /** Set by CreatePlan when the client made the plan. */
  readonly plan?: CreatedPlan
  /** Set by Task: the subagent's run, for the checkpoint. */
  readonly subagent?: Omit<SubagentRun, "completedAtMs">
}

export interface ShellOutput {
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
    /** The success text ends with a hint to run ReadLints on the file (when the mode offers it). */
    readonly suggestLints: boolean
  }
  Delete: { readonly call: ToolCall; readonly path: string }
  Grep: { readonly call: ToolCall; readonly input: GrepInput }
  Glob: { readonly call: ToolCall; readonly pattern: string; readonly directory: string }
  Ls: { readonly call: ToolCall; readonly path: string; readonly ignore: ReadonlyArray<string> }
  /** One diagnostics exec per path, in order: `results` holds the answers so far (the next path is `paths[results.length]`). */
  ReadLints: { readonly call: ToolCall; readonly paths: ReadonlyArray<string>; readonly results: ReadonlyArray<DiagnosticsResult> }
  WriteShellStdin: { readonly call: ToolCall; readonly shellId: number; readonly chars: string }
  /** Waiting for a background shell: its terminal file read, then read again after each wait. */
  AwaitShell: {
    readonly call: ToolCall
    readonly shellId: number
    readonly path: string
    readonly blockUntilMs: number
    readonly pattern: string | undefined
    readonly waitedMs: number
  }
  /** A subagent the client runs as a child agent; its `subagent_result` ends the call. */
  Task: { readonly call: ToolCall; readonly args: TaskArgs; readonly exec: SubagentArgs }
  Mcp: { readonly call: ToolCall; readonly tool: McpToolDescriptor; readonly args: Record<string, unknown> }
  CreatePlan: { readonly call: ToolCall; readonly args: CreatePlanArgs }
  AskQuestion: { readonly call: ToolCall; readonly args: AskQuestionArgs }
  SwitchMode: { readonly call: ToolCall; readonly args: SwitchModeArgs; readonly from: CursorMode }
  WebSearch: { readonly call: ToolCall; readonly query: string; readonly phase: "approval" | "searching" }
  WebFetch: { readonly call: ToolCall; readonly url: string; readonly phase: "approval" | "fetching" }
}>
export const ToolRun = Data.taggedEnum<ToolRun>()

export type ToolStep = Data.TaggedEnum<{
  /** Send this exec to the client and feed its replies to `onExecReply` with `run`. */
  Exec: { readonly run: ToolRun; readonly exec: ExecRequest }
  /** Ask the client this question and feed its answer to `onQueryReply` with `run`. */
  Query: { readonly run: ToolRun; readonly query: QueryRequest }
  /** Do this work on the server and feed what it gave to `onWorkDone` with `run`. */
  Work: { readonly run: ToolRun; readonly work: ServerWork }
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

export type ToolRunOf<Tag extends ToolRun["_tag"]> = Extract<ToolRun, { readonly _tag: Tag }>
export type EditChange = ToolRunOf<"Edit">["change"]
