/**
 * Task: the model hands a piece of work to a subagent. The server asks the client to run it
 * (`subagent_args`); Cursor opens the child as its own agent run, which comes back to this server
 * as a conversation of its own (with the subagent's prompt and tools, on the model configured
 * for subagents), and the child's end returns here as `subagent_result`, folded into the Task
 * card and the model's tool result. Cursor's subagent types (explore, shell, debug, the general
 * purpose one) and the user's custom subagents (`.cursor/agents`) are offered by name.
 */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { Either, Schema } from "effect"
import {
  ConversationStepSchema,
  SubagentArgsSchema,
  SubagentBackgroundReason,
  TaskArgsSchema,
  TaskMode,
  TaskResultSchema,
  TaskToolCallSchema
} from "../gen/agent/v1/agent_pb.js"
import type { SubagentArgs, SubagentType, TaskArgs } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall, ToolDefinition } from "../Llm.js"
import type { TurnSubagentInfo } from "../Loop.js"
import { parseArgs } from "./Arguments.js"
import { ToolStep } from "./Model.js"
import type { CursorToolCall, ExecReply, TaskContext, ToolOutcome, ToolRunOf } from "./Model.js"
import { resultMessage, withId } from "./Results.js"

/** Cursor's own subagent types the model may name, with what each is for. */
export const BUILTIN_SUBAGENTS: ReadonlyArray<TurnSubagentInfo> = [
  { name: "generalPurpose", description: "a general agent for a self-contained task: research, a change across several files, a check" },
  { name: "explore", description: "a fast read-only explorer: finds where and how something is done in the codebase and reports back" },
  { name: "shell", description: "runs and watches commands (builds, tests, installs) and reports their outcome" },
  { name: "debug", description: "reproduces a problem, finds its root cause and reports it (with a fix when asked)" }
]

/** The subagent types that only read (their child runs get read-only tools). */
export const READ_ONLY_SUBAGENTS: ReadonlyArray<string> = ["explore"]

export const TaskInput = Schema.Struct({
  description: Schema.String.pipe(Schema.minLength(1, { message: () => "description must not be empty" })),
  prompt: Schema.String.pipe(Schema.minLength(1, { message: () => "prompt must not be empty" })),
  subagent_type: Schema.optional(Schema.String),
  readonly: Schema.optional(Schema.Boolean)
})

/** The Task tool, naming the subagents this workspace has: Cursor's, then the user's (sorted, so the bytes are stable). */
export const taskDefinition = (custom: ReadonlyArray<TurnSubagentInfo>): ToolDefinition => {
  const all = [...BUILTIN_SUBAGENTS, ...[...custom].filter((agent) => !BUILTIN_SUBAGENTS.some((b) => b.name === agent.name)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))]
  return {
    name: "Task",
    description: [
      "Hand a self-contained piece of work to a subagent, which works on its own with its own context and returns a final report.",
      "Use it for broad searches, parallelizable investigations or long checks, so your own context stays focused.",
      "Give the subagent everything it needs in the prompt: it does not see this conversation.",
      "Subagents:",
      ...all.map((agent) => `- ${agent.name}: ${agent.description || "a subagent the user defined"}`)
    ].join("\n"),
    parameters: {
      type: "object",
      properties: {
        description: { type: "string", description: "A few words saying what the subagent does, shown to the user." },
        prompt: { type: "string", description: "The whole task for the subagent, with the context it needs." },
        subagent_type: { type: "string", enum: all.map((agent) => agent.name), description: "Which subagent runs it (default generalPurpose)." },
        readonly: { type: "boolean", description: "The subagent only reads: no edits, no commands that change anything." }
      },
      required: ["description", "prompt"],
      additionalProperties: false
    }
  }
}

/** Cursor's typed subagent type for a name: its own types, else a custom one by name. */
export const subagentTypeOf = (name: string): SubagentType["type"] => {
  switch (name) {
    case "explore":
      return { case: "explore", value: {} as never }
    case "shell":
      return { case: "shell", value: {} as never }
    case "debug":
      return { case: "debug", value: {} as never }
    default:
      return { case: "custom", value: { name } as never }
  }
}


export interface TaskStart {
  readonly args: TaskArgs
  readonly exec: SubagentArgs
}

/** Parses a Task call: the card's args and the exec the client runs the child from; or why not. */
export const startTask = (call: ToolCall, context: TaskContext): Either.Either<TaskStart, string> =>
  Either.flatMap(parseArgs(TaskInput, call.arguments), (input) => {
    const type = input.subagent_type?.trim() || "generalPurpose"
    const known = BUILTIN_SUBAGENTS.some((agent) => agent.name === type) || context.customSubagents.some((agent) => agent.name === type)
    if (!known) {
      return Either.left(`subagent_type must be one of ${[...BUILTIN_SUBAGENTS, ...context.customSubagents].map((agent) => agent.name).join(", ")}`)
    }
    const readonly = input.readonly ?? READ_ONLY_SUBAGENTS.includes(type)
    const mode = readonly ? TaskMode.PLAN : TaskMode.AGENT
    const args = create(TaskArgsSchema, {
      description: input.description,
      prompt: input.prompt,
      subagentType: { type: subagentTypeOf(type) },
      model: context.subagentModel,
      mode
    })
    const exec = create(SubagentArgsSchema, {
      toolCallId: call.id,
      subagentType: type,
      modelId: context.subagentModel,
      prompt: input.prompt,
      readonly,
      mode,
      ...(context.conversationId !== "" ? { parentConversationId: context.conversationId, rootParentConversationId: context.conversationId } : {})
    })
    return Either.right({ args, exec })
  })

export const taskCard = (call: ToolCall, args: TaskArgs, result?: MessageInitShape<typeof TaskResultSchema>): CursorToolCall =>
  withId(call, { case: "taskToolCall", value: create(TaskToolCallSchema, result === undefined ? { args } : { args, result }) })

/** The subagent's end: the model reads its final report (or why there is none); the card shows it. */
export const onSubagentReply = (call: ToolCall, args: TaskArgs, reply: ExecReply): ToolOutcome | undefined => {
  if (reply.case !== "subagentResult") return undefined
  const result = reply.value.result
  switch (result.case) {
    case "success": {
      const { agentId, backgroundReason, finalMessage, toolCallCount } = result.value
      const background = backgroundReason !== SubagentBackgroundReason.UNSPECIFIED
      const final = finalMessage ?? ""
      const text = background
        ? `The subagent (${agentId}) moved to the background; its report will come later as a message of its own. Go on with what does not depend on it.`
        : final.trim() === ""
        ? `The subagent (${agentId}) finished after ${toolCallCount} tool calls without a final report.`
        : `The subagent (${agentId}) finished after ${toolCallCount} tool calls. Its report:\n\n${final}`
      const card = taskCard(call, create(TaskArgsSchema, { ...args, agentId }), {
        result: {
          case: "success",
          value: {
            agentId,
            isBackground: background,
            backgroundReason,
            conversationSteps: final === "" ? [] : [create(ConversationStepSchema, { message: { case: "assistantMessage", value: { text: final } } })],
            ...(result.value.transcriptPath !== undefined ? { transcriptPath: result.value.transcriptPath } : {})
          }
        }
      })
      return { message: resultMessage(call, text, false), cursor: card, subagent: { toolCallId: call.id, agentId, status: background ? "backgrounded" : "success", title: args.description } }
    }
    case "error":
    case undefined: {
      const error = result.case === "error" ? result.value.error : "the client gave no result"
      const agentId = result.case === "error" ? result.value.agentId ?? "" : ""
      const card = taskCard(call, args, { result: { case: "error", value: { error } } })
      return {
        message: resultMessage(call, `The subagent failed: ${error}`, true),
        cursor: card,
        subagent: { toolCallId: call.id, agentId, status: "error", title: args.description }
      }
    }
  }
}

/** The user stopped the subagent: the Task ends with a result saying so (a later `subagent_result` finds no waiting call). */
export const onSubagentStopped = (run: ToolRunOf<"Task">, subagentId: string): ToolStep => {
  const text = `The user stopped the subagent (${subagentId}) before it finished. Do not start it again unless the user asks.`
  return ToolStep.Done({
    outcome: {
      message: resultMessage(run.call, text, true),
      cursor: taskCard(run.call, run.args, { result: { case: "error", value: { error: "Stopped by the user." } } }),
      subagent: { toolCallId: run.call.id, agentId: subagentId, status: "aborted", title: run.args.description }
    }
  })
}

/** Where a Task's subagent stood when a restart interrupted the parent: its conversation's state as the store has it. */
export type SubagentStanding =
  | { readonly _tag: "Finished"; readonly agentId: string; readonly report: string }
  | { readonly _tag: "Unfinished"; readonly agentId: string; readonly status: string }

/**
 * The Task's result after a restart: a subagent that finished hands its report back (once: the
 * result's input id is the operation's); one that had not finished is not run again, and the
 * model is told so, with its agent id.
 */
export const recoveredTaskResult = (call: ToolCall, standing: SubagentStanding) =>
  standing._tag === "Finished"
    ? resultMessage(
      call,
      standing.report.trim() === ""
        ? `The subagent (${standing.agentId}) finished without a final report (the server restarted meanwhile).`
        : `The subagent (${standing.agentId}) finished. Its report:\n\n${standing.report}`,
      false
    )
    : resultMessage(
      call,
      `The subagent (${standing.agentId}) had not finished (${standing.status}) when the server restarted; it was not started again. Check what it changed before running it again.`,
      true
    )
