/**
 * The operator's line per finished turn: what it says is read from the committed state (calls,
 * tool calls, tokens, cost, the answering target) and this process's clock (first delta,
 * duration); a failed turn is a warning carrying its error; the annotations are the fields.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, HashMap, Logger, LogLevel } from "effect"
import type { AssistantMessage, Usage } from "../src/Llm.js"
import { Command, initialConversation } from "../src/Loop.js"
import type { ConversationState } from "../src/Loop.js"
import { logTurn, makeTurnClock, turnOfCall, turnSummary } from "../src/runner/TurnLog.js"

const usage: Usage = { input: 100, output: 20, cacheRead: 900, cacheWrite: 0, reasoning: 5 }

const answer = (content: AssistantMessage["content"], provider = "ds", model = "deepseek-chat"): AssistantMessage => ({
  role: "assistant", content, api: "openai-chat", provider, model, usage, stopReason: content.some((c) => c.type === "toolCall") ? "toolUse" : "stop"
})

const state: ConversationState = {
  ...initialConversation("conv-log"),
  status: "final",
  turnSeq: 2,
  turnId: "conv-log/t2",
  turnStart: 1,
  settings: { model: "cursor-auto", requestId: "req-9" },
  llmCallSeq: 2,
  messages: [
    { role: "user", content: [{ type: "text", text: "earlier turn" }] },
    { role: "user", content: [{ type: "text", text: "read a" }] },
    answer([{ type: "toolCall", id: "t1", name: "read_file", arguments: "{\"path\":\"a\"}" }]),
    { role: "toolResult", toolCallId: "t1", toolName: "read_file", content: [{ type: "text", text: "1" }], isError: false },
    answer([{ type: "text", text: "a is 1" }], "or", "deepseek/deepseek-chat")
  ]
}

const options = { costOf: (_model: string, message: AssistantMessage) => ({ usd: message.usage.input * 1e-6, model: "deepseek-chat" }) }

describe("the turn's log line", () => {
  it("counts calls, tool calls and cost from the committed turn, names the last target, and times from this process's clock", () => {
    const summary = turnSummary(options, state, Command.Final({ message: state.messages[4] as AssistantMessage, reason: "stop" }), usage, {
      startedAt: 1_000,
      firstDeltaAt: 1_250,
      now: 3_000
    })
    assert.deepStrictEqual(summary, {
      conversationId: "conv-log",
      turnId: "conv-log/t2",
      requestId: "req-9",
      model: "cursor-auto",
      target: "or/deepseek/deepseek-chat",
      modelCalls: 2,
      toolCalls: 1,
      inputTokens: 100,
      outputTokens: 20,
      cacheReadTokens: 900,
      cacheWriteTokens: 0,
      costUsd: 0.0002,
      firstDeltaMs: 250,
      durationMs: 2_000,
      outcome: "stop"
    })
    // A turn this process did not start (finished after a restart): no times, the rest from the store.
    const recovered = turnSummary({}, state, Command.Canceled({ reason: "user" }), usage, { startedAt: undefined, firstDeltaAt: undefined, now: 3_000 })
    assert.notProperty(recovered, "durationMs")
    assert.notProperty(recovered, "costUsd")
    assert.strictEqual(recovered["outcome"], "canceled")
    assert.strictEqual(turnOfCall("conv-log/t2/c1"), "conv-log/t2")
  })

  it.effect("is logged once per turn: info when it ended well, a warning with the error when it failed; its clock readings are then forgotten", () =>
    Effect.gen(function*() {
      const lines: Array<{ level: string; message: unknown; annotations: Record<string, unknown> }> = []
      const capture = Logger.make(({ annotations, logLevel, message }) =>
        void lines.push({ level: logLevel.label, message, annotations: Object.fromEntries(HashMap.toEntries(annotations)) })
      )
      const clock = makeTurnClock()
      clock.started.set("conv-log/t2", 0)
      yield* logTurn(clock, options, state, Command.Final({ message: state.messages[4] as AssistantMessage, reason: "stop" }), usage).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, capture)),
        Logger.withMinimumLogLevel(LogLevel.Info)
      )
      yield* logTurn(clock, options, { ...state, status: "failed" }, Command.Failed({ error: "provider said 500", retryable: false }), usage).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, capture)),
        Logger.withMinimumLogLevel(LogLevel.Info)
      )
      assert.deepStrictEqual(lines.map((l) => l.level), ["INFO", "WARN"])
      assert.deepStrictEqual(lines.map((l) => l.message), [["turn stop"], ["turn failed: provider said 500"]])
      assert.strictEqual(lines[0]!.annotations["requestId"], "req-9")
      assert.property(lines[0]!.annotations, "durationMs")
      assert.notProperty(lines[1]!.annotations, "durationMs")
      assert.strictEqual(clock.started.size, 0)
    }))
})
