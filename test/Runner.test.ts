import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Option, Ref, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { canonicalJson, serializeMessage } from "../src/Llm.js"
import type { ToolCall, ToolResultMessage } from "../src/Llm.js"
import { Command, Input, SUPERSEDED_REASON } from "../src/Loop.js"
import type { TurnSettings } from "../src/Loop.js"
import * as RunnerModule from "../src/Runner.js"
import { Runner, StartedTurn } from "../src/Runner.js"
import type { DispatchedOperation } from "../src/Runner.js"
import * as StoreModule from "../src/Store.js"
import { Store } from "../src/Store.js"
import { testPolicy } from "./support/LoopScenario.js"
import {
  answerEvents,
  assistant,
  call,
  makeFakeGateway,
  makeFakeLlm,
  providerDown,
  text,
  toolCalls,
  toolResult,
  usage
} from "./support/FakeRuntime.js"
import type { Script } from "./support/FakeRuntime.js"

const options: RunnerModule.RunnerOptions = {
  policy: testPolicy,
  classifyTool: (toolCall) => ({ kind: toolCall.name, idempotent: toolCall.name === "read" }),
  interruptedResult: (toolCall) => ({
    role: "toolResult",
    toolCallId: toolCall.id,
    toolName: toolCall.name,
    content: [{ type: "text", text: "interrupted by a server restart; it may or may not have run" }],
    isError: true
  })
}
const settings: TurnSettings = { model: "fake-model", mode: "agent" }
const start = (textValue: string) =>
  Input.Start({ message: { role: "user", content: [{ type: "text", text: textValue }] }, context: [], settings })

const harness = (
  scripts: ReadonlyArray<Script>,
  answer: (operation: DispatchedOperation) => ToolResultMessage | null = (op) => toolResult(op.toolCall),
  storeLayer: Layer.Layer<Store, StoreModule.StoreError> = StoreModule.layerMemory
) =>
  Effect.gen(function*() {
    const llm = yield* makeFakeLlm(scripts)
    const holder: { runner?: Context.Tag.Service<Runner> } = {}
    const gateway = yield* makeFakeGateway(answer, (turn, operationId, result) =>
      Effect.suspend(() => holder.runner!.submit(turn.conversationId, Input.ToolResult({ message: result }), `${operationId}:result`)))
    const context = yield* Layer.build(
      RunnerModule.layer(options).pipe(Layer.provideMerge(Layer.mergeAll(llm.layer, gateway.layer, storeLayer)))
    )
    const runner = Context.get(context, Runner)
    holder.runner = runner
    return { runner, store: Context.get(context, Store), llm, gateway }
  })

const history = (store: Context.Tag.Service<Store>, conversationId: string) =>
  store.load(conversationId).pipe(Effect.map((loaded) => Option.getOrThrow(loaded).state))

describe("Runner", () => {
  it.scoped("a text turn: events published in order, one assistant message committed, usage summed", () =>
    Effect.gen(function*() {
      const { gateway, runner, store } = yield* harness([text("Hello there", usage(7, 3))])
      yield* runner.submit("conv", start("hi"), "r1:0")
      yield* gateway.finishedAtLeast(1)
      const finished = gateway.log.finished[0]!
      assert.strictEqual(finished.outcome._tag, "Final")
      assert.deepStrictEqual(finished.usage, usage(7, 3))
      const events = gateway.log.published.flatMap((p) => p.events.map((e) => e._tag))
      assert.deepStrictEqual(events, ["Start", "TextStart", "TextDelta", "TextEnd", "Done"])
      const state = yield* history(store, "conv")
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user", "assistant"])
      assert.strictEqual(state.status, "final")
    }))

  it.scoped("a tool round trip: the second request's history is a byte extension of the first's; usage sums both calls", () =>
    Effect.gen(function*() {
      const { gateway, llm, runner, store } = yield* harness([toolCalls(call("t1")), text("It has 3 lines")])
      yield* runner.submit("conv", start("read a.ts"), "r1:0")
      yield* gateway.finishedAtLeast(1)
      const calls = yield* Ref.get(llm.calls)
      assert.strictEqual(calls.length, 2)
      const bytes = (i: number) => calls[i]!.request.messages.map(serializeMessage).join("\n")
      assert.isTrue(bytes(1).startsWith(bytes(0)) && bytes(1).length > bytes(0).length)
      assert.deepStrictEqual(gateway.log.dispatched.map((d) => d.operation.toolCall.id), ["t1"])
      assert.deepStrictEqual(gateway.log.finished[0]!.usage, usage(20, 10))
      const state = yield* history(store, "conv")
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user", "assistant", "toolResult", "assistant"])
      const operation = yield* store.loadOperation(gateway.log.dispatched[0]!.operation.operationId)
      assert.strictEqual(Option.getOrThrow(operation).status, "completed")
    }))

  it.scoped("two tool calls answered out of order are appended in call order", () =>
    Effect.gen(function*() {
      const a = call("a", "read"), b = call("b", "shell", `{"command":"ls"}`)
      const { gateway, llm, runner } = yield* harness([toolCalls(a, b), text("done")], () => null)
      yield* runner.submit("conv", start("go"), "r1:0")
      // Only `a` is dispatched; `b`'s result arrives first anyway (held), then `a`'s.
      yield* Effect.repeat(Effect.sync(() => gateway.log.dispatched.length), { until: (n) => n >= 1 })
      const opA = gateway.log.dispatched[0]!.operation.operationId
      yield* runner.submit("conv", Input.ToolResult({ message: toolResult(b) }), "late-b")
      yield* runner.submit("conv", Input.ToolResult({ message: toolResult(a) }), `${opA}:result`)
      yield* gateway.finishedAtLeast(1)
      const second = (yield* Ref.get(llm.calls))[1]!
      assert.deepStrictEqual(second.request.messages.slice(2).map((m) => (m.role === "toolResult" ? m.toolCallId : m.role)), ["a", "b"])
    }))

  it.scoped("a provider failure ends the turn Failed and commits nothing half-received", () =>
    Effect.gen(function*() {
      const { gateway, runner, store } = yield* harness([{ _tag: "Fail", error: providerDown }])
      yield* runner.submit("conv", start("hi"), "r1:0")
      yield* gateway.finishedAtLeast(1)
      const outcome = gateway.log.finished[0]!.outcome
      assert.strictEqual(outcome._tag, "Failed")
      assert.include(outcome._tag === "Failed" ? outcome.error : "", "503")
      const state = yield* history(store, "conv")
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user"])
      assert.strictEqual(state.status, "failed")
    }))

  it.scoped("a stream that ends without Done fails the turn instead of hanging", () =>
    Effect.gen(function*() {
      const partial = answerEvents(assistant([{ type: "text", text: "cut" }])).slice(0, 3)
      const { gateway, runner } = yield* harness([{ _tag: "Events", events: partial }])
      yield* runner.submit("conv", start("hi"), "r1:0")
      yield* gateway.finishedAtLeast(1)
      assert.strictEqual(gateway.log.finished[0]!.outcome._tag, "Failed")
    }))

  it.scoped("cancel mid-stream interrupts the model stream and ends the turn Canceled", () =>
    Effect.gen(function*() {
      const { gateway, llm, runner, store } = yield* harness([{ _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextDelta", index: 0, delta: "thinking about" }] }])
      yield* runner.submit("conv", start("hi"), "r1:0")
      yield* Effect.repeat(Effect.sync(() => gateway.log.published.flatMap((p) => p.events).length), { until: (n) => n >= 2 })
      yield* runner.submit("conv", Input.Cancel({ reason: "user_stopped_generation" }), "r1:1")
      yield* gateway.finishedAtLeast(1)
      assert.strictEqual(gateway.log.finished[0]!.outcome._tag, "Canceled")
      assert.strictEqual(gateway.log.aborted.length, 1)
      yield* Effect.repeat(Ref.get(llm.interrupted), { until: (n) => n === 1 })
      const state = yield* history(store, "conv")
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user"])
    }))

  it.scoped("a redelivered input (same input id) is applied once", () =>
    Effect.gen(function*() {
      const { gateway, llm, runner, store } = yield* harness([text("one"), text("two")])
      yield* runner.submit("conv", start("hi"), "r1:0")
      yield* gateway.finishedAtLeast(1)
      yield* runner.submit("conv", start("hi"), "r1:0")
      yield* runner.awaitIdle("conv")
      assert.strictEqual((yield* Ref.get(llm.calls)).length, 1)
      assert.strictEqual((yield* history(store, "conv")).messages.length, 2)
    }))

  it.scoped("conversations run concurrently; a new turn on a busy conversation supersedes it", () =>
    Effect.gen(function*() {
      const stall: Script = { _tag: "Stall", events: [{ _tag: "Start" }] }
      const { gateway, llm, runner } = yield* harness([stall, stall, text("second turn")])
      yield* runner.submit("a", start("first"), "ra:0")
      yield* runner.submit("b", start("other"), "rb:0")
      yield* Effect.repeat(Ref.get(llm.calls), { until: (calls) => calls.length === 2 })
      yield* runner.submit("b", start("actually, this"), "rb2:0")
      yield* gateway.finishedAtLeast(2)
      const byTurn = gateway.log.finished.map((f) => [f.turn.turnId, f.outcome._tag])
      assert.deepStrictEqual(byTurn, [["b/t1", "Canceled"], ["b/t2", "Final"]])
      assert.strictEqual(yield* Ref.get(llm.interrupted), 1)
    }))

  /**
   * The first call's stream is slow to close once interrupted (`closing`): the second call must
   * not open before it has. `settle` is what comes between the two turns (a new turn at once, or
   * a cancel and then a new turn); the first call has streamed "Half an".
   */
  const oneStreamAtATime = (settle: ReadonlyArray<Input>) =>
    Effect.gen(function*() {
      const closing = yield* Deferred.make<void>()
      const streamed: Script = { _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextDelta", index: 0, delta: "Half an" }], closing }
      const { gateway, llm, runner, store } = yield* harness([streamed, text("second answer")])
      yield* runner.submit("conv", start("first"), "r1:0")
      yield* Effect.repeat(Effect.sync(() => gateway.log.published.flatMap((p) => p.events).length), { until: (n) => n >= 2 })
      yield* Effect.forEach(settle, (input, index) => runner.submit("conv", input, `r2:${index}`), { discard: true })
      // Not a duration asserted: a bounded wait for the second call, which must not come while the first is closing.
      yield* Effect.repeat(Ref.get(llm.calls), { until: (calls) => calls.length === 2 }).pipe(Effect.timeout("300 millis"), Effect.ignore)
      assert.strictEqual((yield* Ref.get(llm.calls)).length, 1, "the second model call opened while the first one's stream was still closing")
      yield* Deferred.succeed(closing, undefined)
      yield* Effect.repeat(Effect.sync(() => gateway.log.finished.length), { until: (n) => n >= 2 })
      assert.strictEqual(yield* Ref.get(llm.peakOpen), 1)
      // And every stream closes in the end (the second's once its turn ended).
      yield* Effect.repeat(Effect.sync(() => llm.openOf("conv")), { until: (n) => n === 0 })
      return { finished: gateway.log.finished, calls: yield* Ref.get(llm.calls), state: yield* history(store, "conv") }
    })

  it.scopedLive("a new turn on a streaming conversation: the old stream has closed before the new call opens; its streamed text is kept as its partial answer", () =>
    Effect.gen(function*() {
      const { calls, finished, state } = yield* oneStreamAtATime([start("second")])
      assert.deepStrictEqual(finished.map((f) => [f.turn.turnId, f.outcome._tag]), [["conv/t1", "Canceled"], ["conv/t2", "Final"]])
      const canceled = finished[0]!.outcome
      assert.strictEqual(canceled._tag === "Canceled" ? canceled.reason : "", SUPERSEDED_REASON)
      assert.deepStrictEqual(calls[1]!.request.messages.map((m) => m.role === "assistant" ? m.content : m.role), ["user", [{ type: "text", text: "Half an" }], "user"])
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user", "assistant", "user", "assistant"])
    }))

  it.scopedLive("a cancel and a new turn at once: the canceled stream has closed before the new call opens; a cancel keeps no partial answer", () =>
    Effect.gen(function*() {
      const { calls, finished } = yield* oneStreamAtATime([Input.Cancel({ reason: "user_stopped_generation" }), start("second")])
      assert.deepStrictEqual(finished.map((f) => [f.turn.turnId, f.outcome._tag]), [["conv/t1", "Canceled"], ["conv/t2", "Final"]])
      assert.deepStrictEqual(calls[1]!.request.messages.map((m) => m.role), ["user", "user"])
    }))
})

describe("Runner recovery", () => {
  const withDatabase = Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "byok-runner-"))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  ).pipe(Effect.map((dir) => StoreModule.layerSqlite({ filename: join(dir, "byok.sqlite") })))

  /** Runs `body` against a runner in its own scope, closed afterwards as a crash would leave it. */
  const lifetime = <A, E>(body: Effect.Effect<A, E, Scope.Scope>) =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const result = yield* Scope.extend(body, scope)
      yield* Scope.close(scope, { _tag: "Success", value: undefined } as never)
      return result
    })

  it.scoped("an in-flight model call is re-issued once with the exact saved request", () =>
    Effect.gen(function*() {
      const database = yield* withDatabase
      const first = yield* lifetime(Effect.gen(function*() {
        const { llm, runner } = yield* harness([{ _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextDelta", index: 0, delta: "half" }] }], undefined, database)
        yield* runner.submit("conv", start("hi"), "r1:0")
        yield* Effect.repeat(Ref.get(llm.calls), { until: (calls) => calls.length === 1 })
        return (yield* Ref.get(llm.calls))[0]!
      }))
      const { gateway, llm, runner, store } = yield* harness([text("answer after restart")], undefined, database)
      const report = yield* runner.recover
      assert.strictEqual(report.llmCallsReissued, 1)
      yield* gateway.finishedAtLeast(1)
      const again = (yield* Ref.get(llm.calls))[0]!
      assert.strictEqual(again.callId, first.callId)
      assert.strictEqual(canonicalJson(again.request), canonicalJson(first.request))
      const state = yield* history(store, "conv")
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user", "assistant"])
      const saved = Option.getOrThrow(yield* store.loadLlmCall(first.callId))
      assert.strictEqual(saved.status, "committed")
    }))

  it.scoped("a turn whose model call a restart interrupted reports the usage of all its committed model calls, those before the restart included", () =>
    Effect.gen(function*() {
      const database = yield* withDatabase
      const toolAnswer = assistant([call("t1", "read")], "toolUse", usage(3, 2))
      // Call 1 (a tool call) is committed and its result applied; call 2 is in flight when the process goes.
      yield* lifetime(Effect.gen(function*() {
        const { llm, runner } = yield* harness([
          { _tag: "Events", events: answerEvents(toolAnswer) },
          { _tag: "Stall", events: [{ _tag: "Start" }] }
        ], undefined, database)
        yield* runner.submit("conv", start("read a.ts"), "r1:0")
        yield* Effect.repeat(Ref.get(llm.calls), { until: (calls) => calls.length === 2 })
      }))
      const { gateway, runner, store } = yield* harness([text("a.ts has 3 lines", usage(11, 7))], undefined, database)
      assert.strictEqual((yield* runner.recover).llmCallsReissued, 1)
      yield* gateway.finishedAtLeast(1)
      assert.deepStrictEqual(gateway.log.finished[0]!.usage, usage(14, 9))
      assert.deepStrictEqual((yield* history(store, "conv")).messages.map((m) => m.role), ["user", "assistant", "toolResult", "assistant"])
    }))

  it.scoped("a turn whose tool call a restart interrupted reports the usage of the call before the restart and the one after", () =>
    Effect.gen(function*() {
      const database = yield* withDatabase
      const toolAnswer = assistant([call("t1", "read")], "toolUse", usage(3, 2))
      yield* lifetime(Effect.gen(function*() {
        const { gateway, runner } = yield* harness([{ _tag: "Events", events: answerEvents(toolAnswer) }], () => null, database)
        yield* runner.submit("conv", start("read a.ts"), "r1:0")
        yield* Effect.repeat(Effect.sync(() => gateway.log.dispatched.length), { until: (n) => n === 1 })
      }))
      const { gateway, runner } = yield* harness([text("a.ts has 3 lines", usage(11, 7))], undefined, database)
      assert.strictEqual((yield* runner.recover).operationsResent, 1)
      yield* gateway.finishedAtLeast(1)
      assert.deepStrictEqual(gateway.log.finished[0]!.usage, usage(14, 9))
    }))

  const crashWhileToolRuns = (tool: ToolCall) =>
    Effect.gen(function*() {
      const database = yield* withDatabase
      yield* lifetime(Effect.gen(function*() {
        const { gateway, runner } = yield* harness([toolCalls(tool)], () => null, database)
        yield* runner.submit("conv", start("go"), "r1:0")
        yield* Effect.repeat(Effect.sync(() => gateway.log.dispatched.length), { until: (n) => n === 1 })
      }))
      return yield* harness([text("recovered")], (op) => toolResult(op.toolCall, "fresh result"), database)
    })

  it.scoped("a read-only operation in flight is re-sent after a restart", () =>
    Effect.gen(function*() {
      const { gateway, runner, store } = yield* crashWhileToolRuns(call("t1", "read"))
      const report = yield* runner.recover
      assert.strictEqual(report.operationsResent, 1)
      yield* gateway.finishedAtLeast(1)
      assert.isTrue(gateway.log.dispatched[0]!.operation.resend)
      const result = (yield* history(store, "conv")).messages[2]!
      assert.deepStrictEqual(result.role === "toolResult" ? result.content : null, [{ type: "text", text: "fresh result" }])
    }))

  it.scoped("a non-idempotent operation in flight is answered as interrupted, never run twice", () =>
    Effect.gen(function*() {
      const { gateway, runner, store } = yield* crashWhileToolRuns(call("t1", "shell", `{"command":"rm -rf build"}`))
      const report = yield* runner.recover
      assert.strictEqual(report.operationsInterrupted, 1)
      yield* gateway.finishedAtLeast(1)
      assert.strictEqual(gateway.log.dispatched.length, 0)
      const result = (yield* history(store, "conv")).messages[2]!
      assert.isTrue(result.role === "toolResult" && result.isError)
    }))
})

/**
 * After a restart, the transport asks the runner where a request's turn stands, to replay the
 * end a crash kept from the client. What `findStartedTurn` rebuilds from the store must be
 * what `ClientGateway.finish` was given when the turn ended.
 */
describe("Runner: turns found by the input that started them", () => {
  const withDatabase = Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "byok-runner-started-"))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  ).pipe(Effect.map((dir) => StoreModule.layerSqlite({ filename: join(dir, "byok.sqlite") })))

  const cut = assistant([{ type: "text", text: "cut off" }], "length", usage(4, 4096))

  it.scoped("a fresh runner on the same store rebuilds each ended turn's outcome, state and usage as finish had them; running, past and unknown turns are told apart", () =>
    Effect.gen(function*() {
      const database = yield* withDatabase
      const scope = yield* Scope.make()
      const finished = yield* Scope.extend(Effect.gen(function*() {
        const { gateway, llm, runner } = yield* harness([
          toolCalls(call("t1", "read")),
          text("done", usage(7, 3)),
          { _tag: "Events", events: answerEvents(cut) },
          { _tag: "Fail", error: providerDown },
          { _tag: "Stall", events: [{ _tag: "Start" }] },
          toolCalls(call("t2", "shell", `{"command":"sleep 60"}`)),
          text("past one"),
          text("past two"),
          { _tag: "Stall", events: [{ _tag: "Start" }] }
        ], (op) => (op.toolCall.name === "shell" ? null : toolResult(op.toolCall)), database)
        const turn = (conversationId: string, inputId: string, count: number) =>
          runner.submit(conversationId, start(`hello ${conversationId}`), inputId).pipe(Effect.zipRight(gateway.finishedAtLeast(count)))
        yield* turn("conv-final", "req-final/m1:0", 1)
        yield* turn("conv-length", "req-length/m1:0", 2)
        yield* turn("conv-failed", "req-failed/m1:0", 3)
        yield* runner.submit("conv-canceled", start("wait"), "req-canceled/m1:0")
        yield* Effect.repeat(Ref.get(llm.calls), { until: (calls) => calls.length === 5 })
        yield* runner.submit("conv-canceled", Input.Cancel({ reason: "user_stopped_generation" }), "req-canceled/m1:1")
        yield* gateway.finishedAtLeast(4)
        yield* runner.submit("conv-tool-canceled", start("run it"), "req-tool/m1:0")
        yield* Effect.repeat(Effect.sync(() => gateway.log.dispatched.length), { until: (n) => n === 2 })
        yield* runner.submit("conv-tool-canceled", Input.Cancel({ reason: "stop" }), "req-tool/m1:1")
        yield* gateway.finishedAtLeast(5)
        yield* turn("conv-past", "req-past-1/m1:0", 6)
        yield* turn("conv-past", "req-past-2/m2:0", 7)
        yield* runner.submit("conv-running", start("slow"), "req-running/m1:0")
        yield* Effect.repeat(Ref.get(llm.calls), { until: (calls) => calls.length === 9 })
        return gateway.log.finished.slice()
      }), scope)
      yield* Scope.close(scope, Exit.void)

      const { runner } = yield* harness([], undefined, database)
      const found = (prefix: string) => runner.findStartedTurn(prefix, () => true).pipe(Effect.map(Option.getOrThrow))
      const ended = (prefix: string) =>
        Effect.map(found(prefix), (turn) => {
          if (turn._tag !== "Ended") throw new Error(`${prefix}: expected Ended, got ${turn._tag}`)
          return turn
        })
      const byConversation = (conversationId: string) => finished.find((f) => f.turn.conversationId === conversationId)!

      const cases = [
        ["req-final/", "conv-final", "req-final/m1:0"],
        ["req-length/", "conv-length", "req-length/m1:0"],
        ["req-canceled/", "conv-canceled", "req-canceled/m1:0"],
        ["req-past-2/", "conv-past", "req-past-2/m2:0"]
      ] as const
      for (const [prefix, conversationId, startInputId] of cases) {
        const turn = yield* ended(prefix)
        // The conversation's last finished turn (conv-past had two).
        const original = finished.filter((f) => f.turn.conversationId === conversationId).at(-1)!
        assert.deepStrictEqual(turn.outcome, original.outcome, prefix)
        assert.deepStrictEqual(turn.usage, original.usage, prefix)
        assert.deepStrictEqual(turn.state, original.state, prefix)
        assert.strictEqual(turn.turn.turnId, original.turn.turnId, prefix)
        assert.strictEqual(turn.startInputId, startInputId)
      }
      assert.strictEqual((yield* ended("req-past-2/")).turn.turnId, "conv-past/t2")
      assert.deepStrictEqual((yield* ended("req-final/")).usage, usage(17, 8), "both answers of the turn")
      assert.deepStrictEqual((yield* ended("req-length/")).outcome, Command.Final({ message: cut, reason: "length" }))
      // A failure keeps its text; whether it was retryable is not recorded (never sent to the client as such).
      const failed = yield* ended("req-failed/")
      const originalFailure = byConversation("conv-failed").outcome
      assert.deepStrictEqual(failed.outcome, Command.Failed({ error: originalFailure._tag === "Failed" ? originalFailure.error : "?", retryable: false }))
      assert.deepStrictEqual(failed.usage, byConversation("conv-failed").usage)
      // A cancel while a tool ran leaves no reason in the store.
      assert.deepStrictEqual(byConversation("conv-tool-canceled").outcome, Command.Canceled({ reason: "stop" }))
      assert.deepStrictEqual((yield* ended("req-tool/")).outcome, Command.Canceled({ reason: "" }))
      assert.deepStrictEqual(yield* found("req-past-1/"), StartedTurn.Past({ conversationId: "conv-past", turnId: "conv-past/t1", startInputId: "req-past-1/m1:0" }))
      const running = yield* found("req-running/")
      assert.strictEqual(running._tag, "Running")
      assert.isTrue(Option.isNone(yield* runner.findStartedTurn("req-nobody/", () => true)))
      // `accept` picks among the prefix's starts, newest first.
      assert.isTrue(Option.isNone(yield* runner.findStartedTurn("req-past-", (id) => id === "req-nobody/m:0")))
      assert.strictEqual((yield* runner.findStartedTurn("req-past-", () => true)).pipe(Option.getOrThrow).startInputId, "req-past-2/m2:0")
      assert.strictEqual((yield* runner.findStartedTurn("req-past-", (id) => id.startsWith("req-past-1/"))).pipe(Option.getOrThrow)._tag, "Past")
      assert.isTrue(yield* runner.isCommitted("conv-canceled", "req-canceled/m1:1"))
      assert.isFalse(yield* runner.isCommitted("conv-canceled", "req-canceled/m1:2"))
    }))
})
