/**
 * The Dialect's side of questions to the client: each query kind survives the wire (encode,
 * frame bytes, decode) with its id; each response kind decodes from a client message to the
 * reply the tool machine takes; ids are per request and an answered query matches no more. And
 * the actions around them: a plan's Build and the late answers to an async AskQuestion.
 */
import { create, toBinary } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import * as Dialect from "../../src/Dialect.js"
import {
  AgentClientMessageSchema,
  AgentMode,
  BackgroundTaskCompletionReason,
  BackgroundTaskKind,
  BackgroundTaskStatus
} from "../../src/gen/agent/v1/agent_pb.js"
import type { InteractionResponseSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { QueryRequest } from "../../src/Tools.js"

const QUERIES: ReadonlyArray<QueryRequest> = [
  { case: "webSearchRequestQuery", value: { args: { searchTerm: "effect", toolCallId: "c1" } } },
  { case: "askQuestionInteractionQuery", value: { args: { title: "T", questions: [{ id: "q", prompt: "P?", options: [{ id: "a", label: "A" }], allowMultiple: true }], runAsync: true, asyncOriginalToolCallId: "c2" }, toolCallId: "c2" } },
  { case: "switchModeRequestQuery", value: { args: { targetModeId: "agent", explanation: "why", toolCallId: "c3" } } },
  { case: "createPlanRequestQuery", value: { args: { name: "N", overview: "O", plan: "# P", todos: [{ id: "t", content: "do", status: 1 }], isProject: false }, toolCallId: "c4" } },
  { case: "webFetchRequestQuery", value: { args: { url: "https://example.com/", toolCallId: "c5" }, skipApproval: false } }
]

type Answer = NonNullable<MessageInitShape<typeof InteractionResponseSchema>["result"]>
const ANSWERS: ReadonlyArray<Answer> = [
  { case: "webSearchRequestResponse", value: { result: { case: "approved", value: {} } } },
  { case: "askQuestionInteractionResponse", value: { result: { result: { case: "success", value: { answers: [{ questionId: "q", selectedOptionIds: ["a"], freeformText: "x" }] } } } } },
  { case: "switchModeRequestResponse", value: { result: { case: "rejected", value: { reason: "no" } } } },
  { case: "createPlanRequestResponse", value: { result: { planUri: "file:///p.md", result: { case: "success", value: {} } } } },
  { case: "webFetchRequestResponse", value: { result: { case: "rejected", value: { reason: "not now" } } } }
]

const decode = (message: MessageInitShape<typeof AgentClientMessageSchema>) =>
  Either.getOrThrow(Dialect.decodeClientMessage(toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, message))))

describe("interaction queries on the wire", () => {
  it("each query kind round-trips through the frame bytes with its own id, counting from 1 per request", () => {
    let correlation = Dialect.initialCorrelation("req-1")
    QUERIES.forEach((query, index) => {
      const sent = Dialect.encodeQuery(correlation, { operationId: `op-${index}`, toolCallId: `c${index + 1}`, query })
      correlation = sent.correlation
      assert.strictEqual(sent.query.id, index + 1)
      const back = Either.getOrThrow(Dialect.fromFrame(Dialect.toFrame(sent.message)))
      assert.strictEqual(back.message.case, "interactionQuery")
      if (back.message.case !== "interactionQuery") return
      assert.strictEqual(back.message.value.id, index + 1)
      assert.strictEqual(back.message.value.query.case, query.case)
      assert.deepStrictEqual(back, sent.message)
    })
    assert.deepStrictEqual(correlation.queries.map((q) => q.operationId), ["op-0", "op-1", "op-2", "op-3", "op-4"])
  })

  it("an answered query matches no more; an unknown id never matched", () => {
    const sent = Dialect.encodeQuery(Dialect.initialCorrelation("req-1"), { operationId: "op", toolCallId: "c", query: QUERIES[0]! })
    assert.strictEqual(Dialect.resolveQuery(sent.correlation, 1)?.operationId, "op")
    assert.isUndefined(Dialect.resolveQuery(sent.correlation, 2))
    const answered = Dialect.completeQuery(sent.correlation, 1)
    assert.isUndefined(Dialect.resolveQuery(answered, 1))
  })

  it("each response kind decodes to the reply its tool machine takes; an unknown case keeps its field number", () => {
    ANSWERS.forEach((result, index) => {
      const decoded = decode({ message: { case: "interactionResponse", value: { id: index + 7, result } } })
      assert.strictEqual(decoded._tag, "InteractionResponse")
      if (decoded._tag !== "InteractionResponse") return
      assert.strictEqual(decoded.id, index + 7)
      assert.strictEqual(decoded.reply?.case, result.case)
      assert.isUndefined(decoded.field)
    })
    // A response case this server does not declare (setup_vm_environment_result = 8): no reply, its number kept.
    const unknown = Either.getOrThrow(Dialect.decodeClientMessage(new Uint8Array([0x32, 0x04, 0x08, 0x05, 0x42, 0x00])))
    assert.strictEqual(unknown._tag, "InteractionResponse")
    if (unknown._tag === "InteractionResponse") {
      assert.isUndefined(unknown.reply)
      assert.strictEqual(unknown.field, 8)
    }
  })
})

describe("plan and question actions", () => {
  const run = (action: MessageInitShape<typeof AgentClientMessageSchema>) => {
    const decoded = decode(action)
    if (decoded._tag !== "RunRequest") throw new Error(`expected a run request, got ${decoded._tag}`)
    return decoded
  }

  it("execute_plan_action: a turn in the execution mode (agent when unspecified) on the saved plan file's content", () => {
    for (const [mode, expected] of [[AgentMode.UNSPECIFIED, "agent"], [AgentMode.AGENT, "agent"], [AgentMode.DEBUG, "debug"]] as const) {
      const decoded = run({
        message: {
          case: "runRequest",
          value: {
            conversationId: "c",
            requestedModel: { modelId: "m" },
            action: { action: { case: "executePlanAction", value: { plan: { plan: "old" }, planFileContent: "new plan", executionMode: mode, kickoffMessageId: "k1" } } }
          }
        }
      })
      assert.strictEqual(decoded.mode, expected)
      assert.strictEqual(decoded.action._tag, "StartTurn")
      if (decoded.action._tag !== "StartTurn") continue
      assert.strictEqual(decoded.action.userMessageId, "k1")
      assert.strictEqual(decoded.action.start.settings.mode, expected)
      const text = decoded.action.start.message.content.map((c) => (c.type === "text" ? c.text : "")).join("")
      assert.include(text, "new plan")
      assert.notInclude(text, "old")
    }
  })

  it("async_ask_question_completion_action: a run request starts a turn with the answers; on a live request it is a follow-up", () => {
    const value = {
      originalToolCallId: "call-9",
      originalArgs: { questions: [{ id: "q", prompt: "Color?", options: [{ id: "r", label: "red" }] }] },
      result: { result: { case: "success" as const, value: { answers: [{ questionId: "q", selectedOptionIds: ["r"], freeformText: "" }] } } }
    }
    const decoded = run({
      message: { case: "runRequest", value: { conversationId: "c", requestedModel: { modelId: "m" }, action: { action: { case: "asyncAskQuestionCompletionAction", value } } } }
    })
    assert.strictEqual(decoded.action._tag, "StartTurn")
    const expected = "Here are my answers to the questions you asked (AskQuestion call-9).\nThe user answered:\n- Color?: red"
    if (decoded.action._tag === "StartTurn") assert.deepStrictEqual(decoded.action.start.message.content, [{ type: "text", text: expected }])
    const live = decode({ message: { case: "conversationAction", value: { action: { case: "asyncAskQuestionCompletionAction", value } } } })
    assert.strictEqual(live._tag, "UserMessage")
    if (live._tag === "UserMessage") assert.deepStrictEqual(live.message.content, [{ type: "text", text: expected }])
  })

  it("background_task_completion_action: the tasks that ended (or made progress) reach the model as a message, on a live request or as a new turn", () => {
    const value = {
      completions: [
        { taskId: "7", kind: BackgroundTaskKind.SHELL, status: BackgroundTaskStatus.SUCCESS, title: "npm run build", outputPath: "/t/7.txt", reason: BackgroundTaskCompletionReason.TASK_FINISHED },
        { taskId: "t-2", kind: BackgroundTaskKind.SUBAGENT, status: BackgroundTaskStatus.ERROR, title: "Explore the API", subagentId: "agent-9", detail: "ran out of time", reason: BackgroundTaskCompletionReason.TASK_FINISHED },
        { taskId: "8", kind: BackgroundTaskKind.SHELL, status: BackgroundTaskStatus.UNSPECIFIED, title: "npm run dev", reason: BackgroundTaskCompletionReason.TASK_PROGRESS }
      ]
    }
    const expected = [
      "Background tasks reported:",
      "- The command \"npm run build\" (7) finished. Its output: /t/7.txt. AwaitShell with shell_id 7 reads it.",
      "- The subagent \"Explore the API\" (agent-9) failed. ran out of time",
      "- The command \"npm run dev\" (8) made progress and is still running. AwaitShell with shell_id 8 reads it."
    ].join("\n")
    const live = decode({ message: { case: "conversationAction", value: { action: { case: "backgroundTaskCompletionAction", value } } } })
    assert.strictEqual(live._tag, "UserMessage")
    if (live._tag === "UserMessage") assert.deepStrictEqual(live.message.content, [{ type: "text", text: expected }])
    const decoded = run({ message: { case: "runRequest", value: { conversationId: "c", requestedModel: { modelId: "m" }, action: { action: { case: "backgroundTaskCompletionAction", value } } } } })
    assert.strictEqual(decoded.action._tag, "StartTurn")
    if (decoded.action._tag === "StartTurn") assert.deepStrictEqual(decoded.action.start.message.content, [{ type: "text", text: expected }])
  })

  it("web tools: what the client allows, kept only where the server can", () => {
    const decoded = run({
      message: {
        case: "runRequest",
        value: {
          conversationId: "c",
          requestedModel: { modelId: "m" },
          action: { action: { case: "userMessageAction", value: { userMessage: { text: "hi", messageId: "u" }, requestContext: { webSearchEnabled: false } } } }
        }
      }
    })
    const start = (server: { search: boolean; fetch: boolean }) => {
      const input = Dialect.turnInputOf(decoded, "req", server)
      if (input?._tag !== "Start") throw new Error("no start")
      return input.settings.webTools
    }
    assert.deepStrictEqual(start({ search: true, fetch: true }), { search: false, fetch: true })
    assert.deepStrictEqual(start({ search: true, fetch: false }), { search: false, fetch: false })
  })
})
