/**
 * The user messages Cursor's plan and question actions stand for: the plan card's Build
 * (`execute_plan_action`, run in the mode it names) and the late answers to an AskQuestion asked
 * with `run_async` (`async_ask_question_completion_action`). Deterministic text, so a replayed
 * action gives the same bytes.
 */
import { create } from "@bufbuild/protobuf"
import { AgentMode, UserMessageSchema } from "../gen/agent/v1/agent_pb.js"
import type { AsyncAskQuestionCompletionAction, ExecutePlanAction, UserMessage as CursorUserMessage } from "../gen/agent/v1/agent_pb.js"
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
