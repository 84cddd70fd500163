/**
 * The user messages Cursor's actions stand for: the plan card's Build (`execute_plan_action`,
 * run in the mode it names), the late answers to an AskQuestion asked with `run_async`
 * (`async_ask_question_completion_action`), and background tasks that finished
 * (`background_task_completion_action`). Deterministic text, so a replayed action gives the same
 * bytes.
 */
import { create } from "@bufbuild/protobuf"
import { AgentMode, BackgroundTaskCompletionReason, BackgroundTaskKind, BackgroundTaskStatus, UserMessageSchema } from "../gen/agent/v1/agent_pb.js"
import type {
  AsyncAskQuestionCompletionAction,
  BackgroundTaskCompletionAction,
  ExecutePlanAction,
  UserMessage as CursorUserMessage
} from "../gen/agent/v1/agent_pb.js"
import { answersText } from "../Tools.js"

/** The message a Build starts its turn with: the plan as the user last saved it, to carry out. */
export const executePlanMessageOf = (action: ExecutePlanAction): CursorUserMessage => {
  const content = action.planFileContent !== undefined && action.planFileContent.trim() !== "" ? action.planFileContent : action.plan?.plan ?? ""
  const where = action.planFilePath ?? action.planFileUri ?? ""
  const text = content.trim() !== ""
    ? [
      `Build the plan${where !== "" ? ` (${where})` : ""}: carry it out step by step, keep the todo list up to date, and verify the result as the plan says.`,
      "",
      "<plan>",
      content.trim(),
      "</plan>"
    ].join("\n")
    : where !== ""
    ? `Build the plan saved at ${where}: read it first, then carry it out step by step, keeping the todo list up to date.`
    : "Build the plan we agreed on: carry it out step by step, keeping the todo list up to date."
  return create(UserMessageSchema, {
    text,
    messageId: action.kickoffMessageId ?? "",
    mode: action.executionMode === AgentMode.UNSPECIFIED ? AgentMode.AGENT : action.executionMode
  })
}

/** The message that hands the model the late answers to its AskQuestion (or says the user declined). */
export const asyncAnswersMessageOf = (action: AsyncAskQuestionCompletionAction, mode: AgentMode): CursorUserMessage => {
  const result = action.result?.result
  const call = action.originalToolCallId !== "" ? ` (AskQuestion ${action.originalToolCallId})` : ""
  const text = result?.case === "success" && action.originalArgs !== undefined
    ? `Here are my answers to the questions you asked${call}.\n${answersText(action.originalArgs, result.value.answers)}`
    : result?.case === "rejected"
    ? `I decline to answer the questions you asked${call}${result.value.reason.trim() !== "" ? `: ${result.value.reason.trim()}` : ""}. Decide without the answers.`
    : `The questions you asked${call} could not be answered${result?.case === "error" && result.value.errorMessage !== "" ? `: ${result.value.errorMessage}` : ""}. Decide without the answers.`
  return create(UserMessageSchema, { text, messageId: action.originalToolCallId !== "" ? `answers-${action.originalToolCallId}` : "", mode })
}

const KIND: Record<number, string> = { [BackgroundTaskKind.SHELL]: "command", [BackgroundTaskKind.SUBAGENT]: "subagent" }
const STATUS: Record<number, string> = {
  [BackgroundTaskStatus.SUCCESS]: "finished",
  [BackgroundTaskStatus.ERROR]: "failed",
  [BackgroundTaskStatus.ABORTED]: "was stopped"
}

/**
 * The message background tasks' completions stand for (`background_task_completion_action`): each
 * task (a command or a subagent moved to the background) with how it ended, where its output
 * is, and for a shell how to read it. Progress reports say the task is still running.
 */
export const backgroundCompletionsMessageOf = (action: BackgroundTaskCompletionAction, mode: AgentMode): CursorUserMessage => {
  const lines = action.completions.map((completion) => {
    const kind = KIND[completion.kind] ?? "background task"
    const name = completion.title.trim() !== "" ? `${kind} "${completion.title.trim()}"` : kind
    const id = completion.kind === BackgroundTaskKind.SUBAGENT && (completion.subagentId ?? "") !== "" ? completion.subagentId! : completion.taskId
    const state = completion.reason === BackgroundTaskCompletionReason.TASK_PROGRESS
      ? "made progress and is still running"
      : STATUS[completion.status] ?? "ended"
    const parts = [`- The ${name} (${id}) ${state}.`]
    if ((completion.detail ?? "").trim() !== "") parts.push(completion.detail!.trim())
    if ((completion.outputPath ?? "") !== "") parts.push(`Its output: ${completion.outputPath}.`)
    if (completion.kind === BackgroundTaskKind.SHELL && /^\d+$/.test(completion.taskId)) parts.push(`AwaitShell with shell_id ${completion.taskId} reads it.`)
    return parts.join(" ")
  })
  const text = lines.length === 0 ? "A background task reported, without details." : `Background tasks reported:\n${lines.join("\n")}`
  return create(UserMessageSchema, { text, messageId: "", mode })
}
