/**
 * Realistic commits for the store tests: a conversation played through the real loop
 * (`makeTransition` with the test policy), turned into the `commitInput` calls the runner
 * would make — each state change with its input id, the model call or client operation it
 * plans, and the status change of the call or operation it settles.
 */
import { messageHash, requestHash } from "../../src/Llm.js"
import type { AssistantMessage, ToolCall, ToolResultMessage, UserMessage } from "../../src/Llm.js"
import { initialRuntime, Input, makeTransition } from "../../src/Loop.js"
import type { Command, ConversationState, RuntimeState, TurnSettings } from "../../src/Loop.js"
import type { CommitInput, PlannedLlmCall, PlannedOperation } from "../../src/Store.js"
import { testPolicy } from "../support/LoopScenario.js"

const transition = makeTransition(testPolicy)

export const settings: TurnSettings = {
  model: "fake-model",
  mode: "agent",
  workspace: { workspacePaths: ["/home/u/é"], projectFolder: "/home/u/é", osVersion: "", shell: "", timeZone: "", terminalsFolder: "" }
}

export const user = (text: string): UserMessage => ({ role: "user", content: [{ type: "text", text }] })

export const assistant = (
  content: AssistantMessage["content"],
  stopReason: AssistantMessage["stopReason"]
): AssistantMessage => ({
  role: "assistant",
  content,
  api: "openai-chat",
  provider: "fake",
  model: "fake-model",
  responseId: "resp-1",
  usage: { input: 120, output: 40, cacheRead: 64, cacheWrite: 0, reasoning: 12 },
  stopReason
})

export const toolCall = (id: string, name: string, args: string): ToolCall => ({
  type: "toolCall",
  id,
  name,
  arguments: args,
  // Provider extras are kept verbatim: key order and nesting must survive the round trip.
  extras: { thoughtSignature: "c2lnbmF0dXJl", z: { b: 1, a: [true, null, "x"] } }
})

export const toolResult = (call: ToolCall, text: string): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: call.id,
  toolName: call.name,
  content: [{ type: "text", text }],
  isError: false
})

/** One `commitInput` call, minus the conversation id and expected version the test supplies. */
export type Step = Omit<CommitInput, "conversationId" | "expectedVersion">

export const plannedCall = (state: ConversationState, command: Extract<Command, { _tag: "CallLlm" }>): PlannedLlmCall => ({
  callId: command.callId,
  conversationId: state.conversationId,
  turnId: state.turnId,
  model: command.model,
  request: command.request,
  messagesHash: command.messagesHash,
  requestHash: requestHash(command.model, command.request, command.messagesHash, command.request.messages.length),
  segmentStart: state.segment.start,
  detached: command.purpose === "summary"
})

export const plannedOperation = (
  state: ConversationState,
  command: Extract<Command, { _tag: "CallClient" }>
): PlannedOperation => {
  const position = state.waiting?.toolCalls.findIndex((call) => call.operationId === command.operationId) ?? 0
  return {
    operationId: command.operationId,
    conversationId: state.conversationId,
    turnId: state.turnId,
    toolCallId: command.toolCall.id,
    toolIndex: position,
    kind: command.toolCall.name,
    idempotent: command.toolCall.name === "read",
    request: { tool: command.toolCall.name, arguments: JSON.parse(command.toolCall.arguments) as unknown }
  }
}

/**
 * Two turns: a tool-using step (thinking, text, two tool calls with provider extras, results
 * in order) then a plain answer; the second turn starts with a context supplement. Only
 * inputs that change the committed state become steps, as in the runner.
 */
export const journey = (conversationId: string): { readonly steps: ReadonlyArray<Step>; readonly final: ConversationState } => {
  let runtime: RuntimeState = initialRuntime(conversationId)
  const steps: Array<Step> = []
  let seqno = 0

  const feed = (input: Input, settle: Partial<Step> = {}) => {
    const before = runtime.committed
    const t = transition(runtime, input)
    runtime = t.state
    if (runtime.committed === before) return t
    const next = runtime.committed
    const command = t.command
    steps.push({
      inputId: `req-${conversationId}/${seqno++}`,
      next,
      result: { command: command._tag, emitted: t.emit.length },
      ...(command._tag === "CallLlm" ? { llmCall: plannedCall(next, command) } : {}),
      ...(command._tag === "CallClient" ? { clientOperations: [plannedOperation(next, command)] } : {}),
      ...settle
    })
    return t
  }
  const done = (message: AssistantMessage) => {
    const callId = runtime.committed.activeCallId!
    feed(Input.LlmEvent({ callId, event: { _tag: "Start", model: "fake-model" } }))
    feed(Input.LlmEvent({ callId, event: { _tag: "TextDelta", index: 0, delta: "partial" } }))
    return feed(Input.LlmEvent({ callId, event: { _tag: "Done", reason: message.stopReason, message } }), {
      llmCallUpdate: { callId, status: "committed", assistantHash: messageHash(message), usage: message.usage }
    })
  }
  const answerTool = (call: ToolCall, text: string) => {
    const pending = runtime.committed.waiting!.toolCalls.find((p) => p.toolCall.id === call.id)!
    const message = toolResult(call, text)
    return feed(Input.ToolResult({ message }), { operationCompletion: { operationId: pending.operationId, result: message } })
  }

  const read = toolCall("call_1", "read", `{"path":"src/é.ts"}`)
  const shell = toolCall("call_2", "shell", `{"command":"ls -la 🚀"}`)
  feed(Input.Start({ message: user("List the files, please 🚀"), context: [], settings }))
  done(assistant([
    { type: "thinking", thinking: "I should look.", signature: "sig-abc" },
    { type: "text", text: "Let me check." },
    read,
    shell
  ], "toolUse"))
  answerTool(read, "export const x = 1\n")
  answerTool(shell, "total 0\nfile\u00e9\u0000")
  done(assistant([{ type: "text", text: "Here they are: \"file\"." }], "stop"))
  feed(Input.Start({ message: user("Thanks. And now?"), context: [{ type: "text", text: "<open file a.ts>" }], settings }))
  done(assistant([{ type: "text", text: "Done." }], "stop"))
  return { steps, final: runtime.committed }
}
