/**
 * The tools that are questions to the client (`InteractionQuery`) rather than execs: CreatePlan
 * (the plan card with its Build button), AskQuestion (multiple-choice questions to the user, at
 * once or answered later), SwitchMode (the agent asks to change mode), and WebSearch / WebFetch
 * (the user approves, then the server does the work itself). Each starts with its query, takes
 * the client's answer (`onQueryReply`) and, for the web tools, what the server's work gave
 * (`onWorkDone`). Pure, as the rest of the tool machines.
 */
import { create } from "@bufbuild/protobuf"
import { Either } from "effect"
import {
  AskQuestionArgsSchema,
  AskQuestionToolCallSchema,
  CreatePlanArgsSchema,
  CreatePlanToolCallSchema,
  SwitchModeArgsSchema,
  SwitchModeToolCallSchema,
  TodoItemSchema,
  TodoStatus,
  WebFetchArgsSchema,
  WebFetchToolCallSchema,
  WebSearchArgsSchema,
  WebSearchToolCallSchema
} from "../gen/agent/v1/agent_pb.js"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { SwitchModeResultSchema, WebFetchResultSchema, WebSearchResultSchema } from "../gen/agent/v1/agent_pb.js"
import type { AskQuestionArgs, AskQuestionResult, CreatePlanResult } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import { AskQuestionInput, CreatePlanInput, parseArgs, SwitchModeInput, WebFetchInput, WebSearchInput } from "./Arguments.js"
import { SWITCHABLE_MODES } from "./Kinds.js"
import type { CursorMode, ToolKind } from "./Kinds.js"
import { ServerWork, ToolRun, ToolStep } from "./Model.js"
import type { CursorToolCall, QueryReply, ToolContext, ToolRunOf, ToolStart, WorkResult } from "./Model.js"
import { clip, done, resultMessage, withId } from "./Results.js"


type QueryKind = Extract<ToolKind, "createPlan" | "askQuestion" | "switchMode" | "webSearch" | "webFetch">

/** Starts a question tool: its typed call for `tool_call_started` and the query to send (or an error at once). */
export const startQuery = (kind: QueryKind, call: ToolCall, context: ToolContext): ToolStart => {
  switch (kind) {
    case "createPlan": {
      const parsed = parseArgs(CreatePlanInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(call, { case: "createPlanToolCall", value: create(CreatePlanToolCallSchema, {}) }, parsed.left)
      const input = parsed.right
      const args = create(CreatePlanArgsSchema, {
        name: input.name,
        overview: input.overview ?? "",
        plan: input.plan,
        isProject: context.mode === "project",
        // Cursor's plan card shows its own todos: pending, no times (the times would change the bytes on a re-ask).
        todos: (input.todos ?? []).map((todo) => create(TodoItemSchema, { id: todo.id, content: todo.content, status: TodoStatus.PENDING }))
      })
      const run = ToolRun.CreatePlan({ call, args })
      return {
        started: startedOf(run),
        step: ToolStep.Query({ run, query: { case: "createPlanRequestQuery", value: { args, toolCallId: call.id } } })
      }
    }
    case "askQuestion": {
      const parsed = parseArgs(AskQuestionInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(call, { case: "askQuestionToolCall", value: create(AskQuestionToolCallSchema, {}) }, parsed.left)
      const input = parsed.right
      const args = create(AskQuestionArgsSchema, {
        title: input.title ?? "",
        questions: input.questions.map((question) => ({
          id: question.id,
          prompt: question.prompt,
          options: question.options.map((option) => ({ id: option.id, label: option.label })),
          allowMultiple: question.allow_multiple ?? false
        })),
        runAsync: input.run_async ?? false,
        asyncOriginalToolCallId: input.run_async === true ? call.id : ""
      })
      const run = ToolRun.AskQuestion({ call, args })
      return {
        started: startedOf(run),
        step: ToolStep.Query({ run, query: { case: "askQuestionInteractionQuery", value: { args, toolCallId: call.id } } })
      }
    }
    case "switchMode": {
      const parsed = parseArgs(SwitchModeInput, call.arguments)
      const started = { case: "switchModeToolCall" as const, value: create(SwitchModeToolCallSchema, {}) }
      if (Either.isLeft(parsed)) return invalid(call, started, parsed.left)
      const target = parsed.right.target_mode_id.trim().toLowerCase()
      if (!SWITCHABLE_MODES.includes(target as CursorMode)) {
        return invalid(call, started, `target_mode_id must be one of ${SWITCHABLE_MODES.join(", ")}`)
      }
      const from = context.mode ?? "agent"
      if (target === from) return invalid(call, started, `you are in ${target} mode already`)
      const args = create(SwitchModeArgsSchema, {
        targetModeId: target,
        toolCallId: call.id,
        ...(parsed.right.explanation !== undefined ? { explanation: parsed.right.explanation } : {})
      })
      const run = ToolRun.SwitchMode({ call, args, from })
      return { started: startedOf(run), step: ToolStep.Query({ run, query: { case: "switchModeRequestQuery", value: { args } } }) }
    }
    case "webSearch": {
      const parsed = parseArgs(WebSearchInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(call, { case: "webSearchToolCall", value: create(WebSearchToolCallSchema, {}) }, parsed.left)
      const run = ToolRun.WebSearch({ call, query: parsed.right.search_term, phase: "approval" })
      return {
        started: startedOf(run),
        step: ToolStep.Query({ run, query: { case: "webSearchRequestQuery", value: { args: { searchTerm: run.query, toolCallId: call.id } } } })
      }
    }
    case "webFetch": {
      const parsed = parseArgs(WebFetchInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(call, { case: "webFetchToolCall", value: create(WebFetchToolCallSchema, {}) }, parsed.left)
      const run = ToolRun.WebFetch({ call, url: parsed.right.url.trim(), phase: "approval" })
      return {
        started: startedOf(run),
        step: ToolStep.Query({ run, query: { case: "webFetchRequestQuery", value: { args: { url: run.url, toolCallId: call.id }, skipApproval: false } } })
      }
    }
  }
}

const invalid = (call: ToolCall, started: CursorToolCall["tool"], reason: string): ToolStart => {
  const text = `Invalid arguments for ${call.name}: ${reason}`
  return { started: withId(call, started), step: done({ message: resultMessage(call, text, true), cursor: withId(call, failedCase(started, text)) }) }
}

type QueryRun = ToolRunOf<"CreatePlan" | "AskQuestion" | "SwitchMode" | "WebSearch" | "WebFetch">

export const isQueryRun = (run: ToolRun): run is QueryRun =>
  run._tag === "CreatePlan" || run._tag === "AskQuestion" || run._tag === "SwitchMode" || run._tag === "WebSearch" || run._tag === "WebFetch"

/** The typed call with its args only, as `tool_call_started` showed it. */
export const startedOf = (run: QueryRun): CursorToolCall => {
  switch (run._tag) {
    case "CreatePlan":
      return withId(run.call, { case: "createPlanToolCall", value: create(CreatePlanToolCallSchema, { args: run.args }) })
    case "AskQuestion":
      return withId(run.call, { case: "askQuestionToolCall", value: create(AskQuestionToolCallSchema, { args: run.args }) })
    case "SwitchMode":
      return withId(run.call, { case: "switchModeToolCall", value: create(SwitchModeToolCallSchema, { args: run.args }) })
    case "WebSearch":
      return withId(run.call, { case: "webSearchToolCall", value: create(WebSearchToolCallSchema, { args: webSearchArgs(run) }) })
    case "WebFetch":
      return withId(run.call, { case: "webFetchToolCall", value: create(WebFetchToolCallSchema, { args: webFetchArgs(run) }) })
  }
}

const webSearchArgs = (run: ToolRunOf<"WebSearch">) => create(WebSearchArgsSchema, { searchTerm: run.query, toolCallId: run.call.id })
const webFetchArgs = (run: ToolRunOf<"WebFetch">) => create(WebFetchArgsSchema, { url: run.url, toolCallId: run.call.id })

/** The typed case with an error result, for a question tool (so its card never spins). */
export const failedCase = (tool: CursorToolCall["tool"], text: string): CursorToolCall["tool"] => {
  switch (tool.case) {
    case "createPlanToolCall":
      return { case: tool.case, value: create(CreatePlanToolCallSchema, { args: tool.value.args, result: { result: { case: "error", value: { error: text } } } }) }
    case "askQuestionToolCall":
      return { case: tool.case, value: create(AskQuestionToolCallSchema, { args: tool.value.args, result: { result: { case: "error", value: { errorMessage: text } } } }) }
    case "switchModeToolCall":
      return { case: tool.case, value: create(SwitchModeToolCallSchema, { args: tool.value.args, result: { result: { case: "error", value: { error: text } } } }) }
    case "webSearchToolCall":
      return { case: tool.case, value: create(WebSearchToolCallSchema, { args: tool.value.args, result: { result: { case: "error", value: { error: text } } } }) }
    case "webFetchToolCall":
      return {
        case: tool.case,
        value: create(WebFetchToolCallSchema, { args: tool.value.args, result: { result: { case: "error", value: { url: tool.value.args?.url ?? "", error: text } } } })
      }
    default:
      return tool
  }
}

/** What the case of a reply is called, for the wrong-kind message. */
const EXPECTED: Record<QueryRun["_tag"], QueryReply["case"]> = {
  CreatePlan: "createPlanRequestResponse",
  AskQuestion: "askQuestionInteractionResponse",
  SwitchMode: "switchModeRequestResponse",
  WebSearch: "webSearchRequestResponse",
  WebFetch: "webFetchRequestResponse"
}

/**
 * Whether a reply is of the kind the question waits for. One of another kind is not an answer:
 * the caller logs it and keeps waiting (bad input changes nothing).
 */
export const acceptsReply = (run: ToolRun, reply: QueryReply): boolean =>
  isQueryRun(run) && EXPECTED[run._tag] === reply.case && !((run._tag === "WebSearch" && run.phase !== "approval") || (run._tag === "WebFetch" && run.phase !== "approval"))

/** Takes the client's answer to a question (one `acceptsReply` accepted). */
export const onQueryReply = (run: QueryRun, reply: QueryReply): ToolStep => {
  switch (run._tag) {
    case "CreatePlan":
      return reply.case === "createPlanRequestResponse" ? createPlanDone(run, reply.value.result) : wrongKind(run, reply)
    case "AskQuestion":
      return reply.case === "askQuestionInteractionResponse" ? askQuestionDone(run, reply.value.result) : wrongKind(run, reply)
    case "SwitchMode": {
      if (reply.case !== "switchModeRequestResponse") return wrongKind(run, reply)
      const answer = reply.value.result
      const target = run.args.targetModeId
      const reason = answer.case === "rejected" ? answer.value.reason : ""
      const result = create(SwitchModeResultSchema, {
        result: answer.case === "approved"
          ? { case: "success", value: { fromModeId: run.from, toModeId: target } }
          : { case: "rejected", value: { reason } }
      })
      const cursor = withId(run.call, { case: "switchModeToolCall", value: create(SwitchModeToolCallSchema, { args: run.args, result }) })
      const text = answer.case === "approved"
        ? `${SWITCHED_PREFIX}${target} mode (from ${run.from} mode). From your next step on you work in ${target} mode, with its tools.`
        : `The user kept ${run.from} mode${reasonOf(reason)}. Go on in ${run.from} mode.`
      return done({ message: resultMessage(run.call, text, answer.case !== "approved"), cursor })
    }
    case "WebSearch": {
      if (reply.case !== "webSearchRequestResponse") return wrongKind(run, reply)
      const answer = reply.value.result
      if (answer.case !== "approved") return webSearchDone(run, { case: "rejected", value: { reason: answer.case === "rejected" ? answer.value.reason : "" } })
      const searching = ToolRun.WebSearch({ ...run, phase: "searching" })
      return ToolStep.Work({ run: searching, work: ServerWork.Search({ query: run.query }) })
    }
    case "WebFetch": {
      if (reply.case !== "webFetchRequestResponse") return wrongKind(run, reply)
      const answer = reply.value.result
      if (answer.case !== "approved") return webFetchDone(run, { case: "rejected", value: { reason: answer.case === "rejected" ? answer.value.reason : "" } })
      const fetching = ToolRun.WebFetch({ ...run, phase: "fetching" })
      return ToolStep.Work({ run: fetching, work: ServerWork.Fetch({ url: run.url }) })
    }
  }
}

/** The start of what a model reads after an approved SwitchMode: the loop's policy recognizes it (`switchedModeOf`). */
export const SWITCHED_PREFIX = "Switched to "

/** Takes what the server's web work gave. */
export const onWorkDone = (run: ToolRunOf<"WebSearch" | "WebFetch">, result: WorkResult): ToolStep => {
  if (run._tag === "WebSearch") {
    switch (result._tag) {
      case "Searched":
        return webSearchDone(run, { case: "success", value: { references: result.references.map((reference) => ({ ...reference })) } })
      case "Failed":
        return webSearchDone(run, { case: "error", value: { error: result.error } })
      case "Fetched":
      case "Slept":
        return webSearchDone(run, { case: "error", value: { error: "The search gave no results." } })
    }
  }
  const fetch = run as ToolRunOf<"WebFetch">
  switch (result._tag) {
    case "Fetched":
      return webFetchDone(fetch, { case: "success", value: { url: result.url, markdown: result.markdown } }, result.truncated)
    case "Failed":
      return webFetchDone(fetch, { case: "error", value: { url: fetch.url, error: result.error } })
    case "Searched":
    case "Slept":
      return webFetchDone(fetch, { case: "error", value: { url: fetch.url, error: "The fetch gave no page." } })
  }
}

/** The client could not take the question at all (or a reply of another kind came where only one was possible). */
const wrongKind = (run: QueryRun, reply: QueryReply): ToolStep => {
  const text = `The client answered ${run.call.name} with an unexpected ${reply.case}.`
  return done({ message: resultMessage(run.call, text, true), cursor: withId(run.call, failedCase(startedOf(run).tool, text)) })
}

const reasonOf = (reason: string): string => (reason.trim() === "" ? "" : ` (${reason.trim()})`)

const createPlanDone = (run: ToolRunOf<"CreatePlan">, result: CreatePlanResult | undefined): ToolStep => {
  const outcome = result?.result
  const cursor = withId(run.call, {
    case: "createPlanToolCall",
    value: create(CreatePlanToolCallSchema, { args: run.args, result: result ?? { result: { case: "error", value: { error: "no result" } } } })
  })
  if (outcome?.case !== "success") {
    const why = outcome?.case === "error" ? outcome.value.error : "the client gave no result"
    return done({ message: resultMessage(run.call, `The plan could not be created: ${why}`, true), cursor })
  }
  const uri = result?.planUri ?? ""
  const text = [
    `The plan "${run.args.name}" was created and shown to the user${uri !== "" ? ` (${uri})` : ""}.`,
    "Stop here and wait: the user reviews the plan and presses Build to have it carried out, or asks for changes."
  ].join(" ")
  return done({
    message: resultMessage(run.call, text, false),
    cursor,
    plan: { id: planIdOf(run.call.id), name: run.args.name, uri, plan: run.args.plan },
    ...(run.args.todos.length > 0 ? { todos: run.args.todos } : {})
  })
}

/** A plan's id in the checkpoint's registry: stable for its tool call. */
export const planIdOf = (toolCallId: string): string => `plan-${toolCallId.replace(/[^A-Za-z0-9_-]/g, "_")}`

const askQuestionDone = (run: ToolRunOf<"AskQuestion">, result: AskQuestionResult | undefined): ToolStep => {
  const outcome = result?.result
  const cursor = withId(run.call, {
    case: "askQuestionToolCall",
    value: create(AskQuestionToolCallSchema, { args: run.args, result: result ?? { result: { case: "error", value: { errorMessage: "no result" } } } })
  })
  switch (outcome?.case) {
    case "success":
      return done({ message: resultMessage(run.call, answersText(run.args, outcome.value.answers), false), cursor })
    case "async":
      return done({
        message: resultMessage(
          run.call,
          "The questions are shown to the user, who will answer later: the answers will come as a message of their own. Go on with what does not depend on them.",
          false
        ),
        cursor
      })
    case "rejected":
      return done({ message: resultMessage(run.call, `The user declined to answer${reasonOf(outcome.value.reason)}. Decide without the answers, or ask differently.`, true), cursor })
    case "error":
      return done({ message: resultMessage(run.call, `The questions could not be asked: ${outcome.value.errorMessage || "error"}`, true), cursor })
    case undefined:
      return done({ message: resultMessage(run.call, "The questions could not be asked: the client gave no result.", true), cursor })
  }
}

/** The user's answers as the model reads them: each question with the labels picked and what was typed. */
export const answersText = (
  args: AskQuestionArgs,
  answers: ReadonlyArray<{ readonly questionId: string; readonly selectedOptionIds: ReadonlyArray<string>; readonly freeformText: string }>
): string => {
  const lines = ["The user answered:"]
  for (const question of args.questions) {
    const answer = answers.find((candidate) => candidate.questionId === question.id)
    const picked = (answer?.selectedOptionIds ?? []).map((id) => question.options.find((option) => option.id === id)?.label ?? id)
    const typed = answer?.freeformText.trim() ?? ""
    const parts = [...(picked.length > 0 ? [picked.join(", ")] : []), ...(typed !== "" ? [`"${typed}"`] : [])]
    lines.push(`- ${question.prompt}: ${parts.length > 0 ? parts.join("; ") : "(no answer)"}`)
  }
  return lines.join("\n")
}

const webSearchDone = (run: ToolRunOf<"WebSearch">, init: MessageInitShape<typeof WebSearchResultSchema>["result"]): ToolStep => {
  const { result } = create(WebSearchResultSchema, { result: init } as MessageInitShape<typeof WebSearchResultSchema>)
  const cursor = withId(run.call, { case: "webSearchToolCall", value: create(WebSearchToolCallSchema, { args: webSearchArgs(run), result: { result } }) })
  switch (result.case) {
    case "success": {
      const references = result.value.references
      const text = references.length === 0
        ? `No results for "${run.query}".`
        : `Results for "${run.query}":\n\n${references.map((reference, index) => `${index + 1}. ${reference.title}\n${reference.url}\n${reference.chunk}`).join("\n\n")}`
      return done({ message: resultMessage(run.call, clip(text), false), cursor })
    }
    case "rejected":
      return done({ message: resultMessage(run.call, `The user did not allow this web search${reasonOf(result.value.reason)}.`, true), cursor })
    case "error":
      return done({ message: resultMessage(run.call, `The web search failed: ${result.value.error}`, true), cursor })
    case undefined:
      return done({ message: resultMessage(run.call, "The web search gave no result.", true), cursor })
  }
}

const webFetchDone = (run: ToolRunOf<"WebFetch">, init: MessageInitShape<typeof WebFetchResultSchema>["result"], truncated = false): ToolStep => {
  const { result } = create(WebFetchResultSchema, { result: init } as MessageInitShape<typeof WebFetchResultSchema>)
  const cursor = withId(run.call, { case: "webFetchToolCall", value: create(WebFetchToolCallSchema, { args: webFetchArgs(run), result: { result } }) })
  switch (result.case) {
    case "success": {
      const note = truncated ? "\n\n(The page was longer; only its beginning was read.)" : ""
      const from = result.value.url !== run.url ? ` (redirected to ${result.value.url})` : ""
      return done({ message: resultMessage(run.call, clip(`Contents of ${run.url}${from}:\n\n${result.value.markdown}${note}`), false), cursor })
    }
    case "rejected":
      return done({ message: resultMessage(run.call, `The user did not allow fetching ${run.url}${reasonOf(result.value.reason)}.`, true), cursor })
    case "error":
      return done({ message: resultMessage(run.call, result.value.error, true), cursor })
    case undefined:
      return done({ message: resultMessage(run.call, `Fetching ${run.url} gave no result.`, true), cursor })
  }
}

/** The mode an approved SwitchMode result switched to, if `text` is one (the policy's hook reads it). */
export const switchedModeOf = (toolName: string, isError: boolean, text: string): CursorMode | undefined => {
  if (toolName !== "SwitchMode" || isError || !text.startsWith(SWITCHED_PREFIX)) return undefined
  const mode = text.slice(SWITCHED_PREFIX.length).split(" ")[0] as CursorMode
  return SWITCHABLE_MODES.includes(mode) ? mode : undefined
}
