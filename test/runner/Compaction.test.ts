/**
 * Compaction through the runner: a real store, a scripted fake model (wrapped here to record
 * the stream options each call gets, so a summary call's output limit is visible) and a
 * recording client gateway. The user's summarize, a summary that fails, a restart while the
 * summary streams, and an automatic compaction before a turn's first call.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Ref, Scope, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { canonicalJson, Llm, messageHash, serializeMessage } from "../../src/Llm.js"
import type { Message, RequestMessages, StreamOptions, ToolResultMessage, UserMessage } from "../../src/Llm.js"
import { Command, Input, originSegment, summaryInstruction, summaryMessage } from "../../src/Loop.js"
import type { CompactionPolicy, Policy, TurnSettings } from "../../src/Loop.js"
import * as RunnerModule from "../../src/Runner.js"
import { Runner } from "../../src/Runner.js"
import type { CompactionProgress, DispatchedOperation } from "../../src/Runner.js"
import * as StoreModule from "../../src/Store.js"
import { Store } from "../../src/Store.js"
import { testPolicy } from "../support/LoopScenario.js"
import { makeFakeGateway, makeFakeLlm, providerDown, text, toolResult, usage } from "../support/FakeRuntime.js"
import type { Script } from "../support/FakeRuntime.js"

// =============================================================================
// The runtime
// =============================================================================

const knobs = (window: number | undefined, overrides: Partial<CompactionPolicy> = {}): CompactionPolicy => ({
  contextWindowOf: () => window,
  auto: true,
  threshold: 0.8,
  tailShare: 0.15,
  summaryMaxTokens: 777,
  elideToolResultChars: 2048,
  ...overrides
})

/**
 * The test policy with compaction knobs and prompt ids; its system prompt does not name the
 * turn (as `Prompt.buildPrompt` does not), so a summarize turn's summary call can reuse the
 * previous turn's prompt exactly.
 */
const policyWith = (compaction: CompactionPolicy): Policy => ({
  ...testPolicy,
  buildPrompt: (context) => `You are a coding agent. Model: ${context.settings.model}.`,
  compaction,
  promptIdOf: (message) => messageHash(message)
})

const optionsFor = (policy: Policy): RunnerModule.RunnerOptions => ({
  policy,
  classifyTool: (toolCall) => ({ kind: toolCall.name, idempotent: toolCall.name === "read" }),
  interruptedResult: (toolCall) => ({
    role: "toolResult",
    toolCallId: toolCall.id,
    toolName: toolCall.name,
    content: [{ type: "text", text: "interrupted by a server restart" }],
    isError: true
  })
})

const settings: TurnSettings = { model: "fake-model", mode: "agent" }
const user = (value: string): UserMessage => ({ role: "user", content: [{ type: "text", text: value }] })
const start = (value: string) => Input.Start({ message: user(value), context: [], settings })
const summarize = (instructions = "") => Input.Summarize({ instructions, settings })

/** What the model was asked, with the stream options (output limit) it was given. */
interface SeenCall {
  readonly callId: string
  readonly request: RequestMessages
  readonly options: StreamOptions
}

/** The scripted fake model of `FakeRuntime`, wrapped to record each call's stream options. */
const recordingLlm = (scripts: ReadonlyArray<Script>) =>
  Effect.gen(function*() {
    const fake = yield* makeFakeLlm(scripts)
    const seen = yield* Ref.make<ReadonlyArray<SeenCall>>([])
    const layer = Layer.effect(
      Llm,
      Effect.map(Llm, (inner) => ({
        stream: (request: RequestMessages, options: StreamOptions) =>
          Stream.unwrap(Ref.update(seen, (all) => [...all, { callId: options.callId, request, options }]).pipe(
            Effect.as(inner.stream(request, options))
          ))
      }))
    ).pipe(Layer.provide(fake.layer))
    return { layer, seen, interrupted: fake.interrupted }
  })

const harness = (
  scripts: ReadonlyArray<Script>,
  policy: Policy,
  storeLayer: Layer.Layer<Store, StoreModule.StoreError> = StoreModule.layerMemory,
  answer: (operation: DispatchedOperation) => ToolResultMessage | null = (op) => toolResult(op.toolCall)
) =>
  Effect.gen(function*() {
    const llm = yield* recordingLlm(scripts)
    const holder: { runner?: Context.Tag.Service<Runner> } = {}
    const gateway = yield* makeFakeGateway(answer, (turn, operationId, result) =>
      Effect.suspend(() => holder.runner!.submit(turn.conversationId, Input.ToolResult({ message: result }), `${operationId}:result`)))
    const context = yield* Layer.build(
      RunnerModule.layer(optionsFor(policy)).pipe(Layer.provideMerge(Layer.mergeAll(llm.layer, gateway.layer, storeLayer)))
    )
    const runner = Context.get(context, Runner)
    holder.runner = runner
    return { runner, store: Context.get(context, Store), llm, gateway }
  })

const stateOf = (store: Context.Tag.Service<Store>, conversationId: string) =>
  store.load(conversationId).pipe(Effect.map((loaded) => Option.getOrThrow(loaded).state))

const serialized = (messages: ReadonlyArray<Message>) => messages.map(serializeMessage)

/** The progress tags the gateway was told, in order. */
const progressTags = (log: ReadonlyArray<{ readonly progress: CompactionProgress }>) => log.map((entry) => entry.progress._tag)

const withDatabase = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "byok-compaction-"))),
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

/** Two one-call turns on `conv`, answered "first answer" and "second answer". */
const twoTurns = (runner: Context.Tag.Service<Runner>, finishedAtLeast: (count: number) => Effect.Effect<void>) =>
  Effect.gen(function*() {
    yield* runner.submit("conv", start("first question"), "r1:0")
    yield* finishedAtLeast(1)
    yield* runner.submit("conv", start("second question"), "r2:0")
    yield* finishedAtLeast(2)
  })

const manual = policyWith(knobs(undefined))

// =============================================================================
// Tests
// =============================================================================

describe("Runner: compaction", () => {
  it.scoped("a Summarize input runs one summary call (the previous request's prompt, tools and messages, its answer, one instruction); the gateway hears Started then Completed; the turn ends Final with no message; the store holds [summary, tail]", () =>
    Effect.gen(function*() {
      const { gateway, llm, runner, store } = yield* harness([
        text("first answer"),
        text("second answer"),
        text("  The user asked two questions.  ", usage(300, 40))
      ], manual)
      yield* twoTurns(runner, gateway.finishedAtLeast)
      const before = yield* stateOf(store, "conv")
      yield* runner.submit("conv", summarize("keep the file names"), "r3:0")
      yield* gateway.finishedAtLeast(3)

      const calls = yield* Ref.get(llm.seen)
      assert.strictEqual(calls.length, 3)
      const [, previous, summary] = calls as [unknown, SeenCall, SeenCall]
      assert.strictEqual(summary.callId, "conv/t3/c0")
      assert.strictEqual(summary.options.maxOutputTokens, 777)
      assert.isUndefined(previous.options.maxOutputTokens)
      // The same prompt and tools; the same messages, then the answer to them, then one instruction.
      assert.strictEqual(summary.request.systemPrompt, previous.request.systemPrompt)
      assert.strictEqual(canonicalJson(summary.request.tools), canonicalJson(previous.request.tools))
      const answered = before.messages.at(-1)!
      assert.strictEqual(answered.role, "assistant")
      assert.deepStrictEqual(
        serialized(summary.request.messages),
        serialized([...previous.request.messages, answered, summaryInstruction("keep the file names")])
      )
      assert.deepStrictEqual(serialized(summary.request.messages.slice(0, -1)), serialized(before.messages))

      // The gateway: Started, then Completed with what the loop cut.
      const compactions = gateway.log.compactions
      assert.deepStrictEqual(progressTags(compactions), ["Started", "Completed"])
      assert.deepStrictEqual(compactions.map((c) => c.turnId), ["conv/t3", "conv/t3"])
      const [started, completed] = compactions.map((c) => c.progress)
      assert.deepStrictEqual(started, RunnerModule.CompactionProgress.Started({ trigger: "manual" }))
      if (completed?._tag !== "Completed") throw new Error(`expected Completed, got ${completed?._tag}`)
      assert.strictEqual(completed.trigger, "manual")
      assert.strictEqual(completed.summary, "The user asked two questions.")
      assert.strictEqual(completed.kept, 2)
      assert.deepStrictEqual(serialized(completed.summarized), serialized(before.messages.slice(0, 2)))
      assert.strictEqual(serializeMessage(completed.summaryMessage), serializeMessage(summaryMessage("The user asked two questions.")))
      // Nothing of the summary's stream is published as an answer.
      assert.deepStrictEqual(gateway.log.published.filter((p) => p.turnId === "conv/t3"), [])

      const finished = gateway.log.finished[2]!
      assert.strictEqual(finished.turn.turnId, "conv/t3")
      assert.deepStrictEqual(finished.outcome, Command.Final({ message: null, reason: "stop" }))

      const after = yield* stateOf(store, "conv")
      assert.strictEqual(after.status, "final")
      assert.deepStrictEqual(serialized(after.messages), serialized([summaryMessage("The user asked two questions."), ...before.messages.slice(2)]))
      assert.deepStrictEqual(after.segment, { start: 4, kind: "compaction", turnId: "conv/t3", summaryCallId: summary.callId, replaced: 2, kept: 2 })
      assert.strictEqual(after.summaries, 1)
      assert.deepStrictEqual(finished.state, after)
      assert.deepStrictEqual((yield* store.segments("conv")).map((s) => [s.start, s.kind, s.previousStart, s.summaryCallId]), [[4, "compaction", 0, summary.callId]])
      const saved = Option.getOrThrow(yield* store.loadLlmCall(summary.callId))
      assert.strictEqual(saved.status, "committed")
      assert.strictEqual(canonicalJson(saved.request), canonicalJson(summary.request))
    }))

  it.scoped("a summary call that fails: the gateway hears Started then Failed, the turn ends Failed, the stored history is unchanged", () =>
    Effect.gen(function*() {
      const { gateway, llm, runner, store } = yield* harness([
        text("first answer"),
        text("second answer"),
        { _tag: "Fail", error: providerDown }
      ], manual)
      yield* twoTurns(runner, gateway.finishedAtLeast)
      const before = yield* stateOf(store, "conv")
      yield* runner.submit("conv", summarize(), "r3:0")
      yield* gateway.finishedAtLeast(3)

      const calls = yield* Ref.get(llm.seen)
      assert.strictEqual(calls.length, 3)
      assert.strictEqual(calls[2]!.options.maxOutputTokens, 777)
      assert.deepStrictEqual(progressTags(gateway.log.compactions), ["Started", "Failed"])
      const failed = gateway.log.compactions[1]!.progress
      if (failed._tag !== "Failed") throw new Error("expected Failed")
      assert.strictEqual(failed.trigger, "manual")
      assert.include(failed.error, "503")

      const outcome = gateway.log.finished[2]!.outcome
      assert.strictEqual(outcome._tag, "Failed")
      assert.include(outcome._tag === "Failed" ? outcome.error : "", "could not be summarized")
      assert.include(outcome._tag === "Failed" ? outcome.error : "", "503")

      const after = yield* stateOf(store, "conv")
      assert.strictEqual(after.status, "failed")
      assert.deepStrictEqual(serialized(after.messages), serialized(before.messages))
      assert.strictEqual(after.messagesHash, before.messagesHash)
      assert.deepStrictEqual(after.segment, originSegment)
      assert.isNull(after.compaction)
      assert.strictEqual(after.summaries, 0)
      assert.deepStrictEqual(yield* store.segments("conv"), [])
      assert.strictEqual(Option.getOrThrow(yield* store.loadLlmCall(calls[2]!.callId)).status, "failed")
    }))

  it.scoped("a restart while the summary call streams re-issues it with the exact saved request and the summary's output limit, then completes the compaction once", () =>
    Effect.gen(function*() {
      const database = yield* withDatabase
      const first = yield* lifetime(Effect.gen(function*() {
        const { gateway, llm, runner } = yield* harness([
          text("first answer"),
          text("second answer"),
          { _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "The user" }] }
        ], manual, database)
        yield* twoTurns(runner, gateway.finishedAtLeast)
        yield* runner.submit("conv", summarize("mention the tests"), "r3:0")
        yield* Effect.repeat(Ref.get(llm.seen), { until: (calls) => calls.length === 3 })
        assert.deepStrictEqual(progressTags(gateway.log.compactions), ["Started"])
        return (yield* Ref.get(llm.seen))[2]!
      }))
      assert.strictEqual(first.options.maxOutputTokens, 777)

      const { gateway, llm, runner, store } = yield* harness([text("The user asked two questions; mention the tests.")], manual, database)
      const waiting = yield* stateOf(store, "conv")
      assert.strictEqual(waiting.status, "waitingLlm")
      assert.strictEqual(waiting.compaction?.callId, first.callId)
      const report = yield* runner.recover
      assert.strictEqual(report.llmCallsReissued, 1)
      yield* gateway.finishedAtLeast(1)

      const again = yield* Ref.get(llm.seen)
      assert.strictEqual(again.length, 1)
      assert.strictEqual(again[0]!.callId, first.callId)
      assert.strictEqual(canonicalJson(again[0]!.request), canonicalJson(first.request))
      assert.strictEqual(again[0]!.options.maxOutputTokens, 777)
      assert.strictEqual(serializeMessage(again[0]!.request.messages.at(-1)!), serializeMessage(summaryInstruction("mention the tests")))

      assert.deepStrictEqual(progressTags(gateway.log.compactions), ["Completed"])
      assert.deepStrictEqual(gateway.log.finished[0]!.outcome, Command.Final({ message: null, reason: "stop" }))
      const after = yield* stateOf(store, "conv")
      assert.strictEqual(after.status, "final")
      assert.strictEqual(after.segment.kind, "compaction")
      assert.strictEqual(after.segment.start, 4)
      assert.strictEqual(after.summaries, 1)
      assert.deepStrictEqual(after.messages.map((m) => m.role), ["user", "user", "assistant"])
      assert.strictEqual(serializeMessage(after.messages[0]!), serializeMessage(summaryMessage("The user asked two questions; mention the tests.")))
      assert.strictEqual((yield* store.segments("conv")).length, 1)
      assert.strictEqual(Option.getOrThrow(yield* store.loadLlmCall(first.callId)).status, "committed")
      // Nothing is left in flight to resume a second time.
      const inFlight = yield* store.listInFlight()
      assert.deepStrictEqual(inFlight.llmCalls, [])
    }))

  /**
   * A summarize turn has no assistant message after its `turnStart` (Loop.ts `compacted` sets it
   * to the new segment's length): `endedOutcome` must still rebuild its end (Final, no message),
   * or after a restart the transport would tell the client it has no turn for the request.
   */
  it.scoped("a summarize turn that ended is found again by its request (findStartedTurn, currentTurn) with the outcome finish was given", () =>
    Effect.gen(function*() {
      const { gateway, runner } = yield* harness([text("first answer"), text("second answer"), text("The summary.")], manual)
      yield* twoTurns(runner, gateway.finishedAtLeast)
      yield* runner.submit("conv", summarize(), "r3/m:0")
      yield* gateway.finishedAtLeast(3)
      const live = gateway.log.finished[2]!
      assert.deepStrictEqual(live.outcome, Command.Final({ message: null, reason: "stop" }))
      const current = Option.getOrThrow(yield* runner.currentTurn("conv"))
      assert.strictEqual(current._tag, "Ended")
      const found = Option.getOrThrow(yield* runner.findStartedTurn("r3/", () => true))
      if (found._tag !== "Ended") throw new Error(`expected Ended, got ${found._tag}`)
      assert.deepStrictEqual(found.outcome, live.outcome)
      assert.deepStrictEqual(found.state, live.state)
    }))

  it.scoped("automatic compaction: past the threshold, the next turn's first model call is a summary (its last message the instruction), then the answer call runs on the new segment", () =>
    Effect.gen(function*() {
      // A 1000-token window, compaction past 800; a tail of at most 10 tokens keeps only the new question.
      const policy = policyWith(knobs(1000, { tailShare: 0.01, summaryMaxTokens: 300 }))
      const { gateway, llm, runner, store } = yield* harness([
        text("first answer", usage(900, 50)),
        text("The user asked a first question."),
        text("second answer", usage(40, 5))
      ], policy)
      yield* runner.submit("conv", start("first question"), "r1:0")
      yield* gateway.finishedAtLeast(1)
      const before = yield* stateOf(store, "conv")
      assert.deepStrictEqual(before.context, { messages: 2, tokens: 950 })
      assert.deepStrictEqual(gateway.log.compactions, [])

      yield* runner.submit("conv", start("second question"), "r2:0")
      yield* gateway.finishedAtLeast(2)
      const calls = yield* Ref.get(llm.seen)
      assert.deepStrictEqual(calls.map((c) => c.callId), ["conv/t1/c0", "conv/t2/c0", "conv/t2/c1"])
      const [, summary, answer] = calls as [unknown, SeenCall, SeenCall]
      assert.strictEqual(serializeMessage(summary.request.messages.at(-1)!), serializeMessage(summaryInstruction("")))
      assert.deepStrictEqual(serialized(summary.request.messages), serialized([...before.messages, user("second question"), summaryInstruction("")]))
      assert.strictEqual(summary.options.maxOutputTokens, 300)
      assert.isUndefined(answer.options.maxOutputTokens)
      assert.deepStrictEqual(serialized(answer.request.messages), serialized([summaryMessage("The user asked a first question."), user("second question")]))

      assert.deepStrictEqual(progressTags(gateway.log.compactions), ["Started", "Completed"])
      const completed = gateway.log.compactions[1]!.progress
      if (completed._tag !== "Completed") throw new Error("expected Completed")
      assert.strictEqual(completed.trigger, "auto")
      assert.strictEqual(completed.kept, 1)
      assert.deepStrictEqual(serialized(completed.summarized), serialized(before.messages))

      const finished = gateway.log.finished[1]!
      assert.strictEqual(finished.outcome._tag, "Final")
      const message = finished.outcome._tag === "Final" ? finished.outcome.message : null
      assert.deepStrictEqual(message?.content, [{ type: "text", text: "second answer" }])
      assert.deepStrictEqual(finished.usage, usage(40, 5), "the turn's usage is its answer's")

      const after = yield* stateOf(store, "conv")
      assert.deepStrictEqual(after.segment, { start: 3, kind: "compaction", turnId: "conv/t2", summaryCallId: summary.callId, replaced: 2, kept: 1 })
      assert.deepStrictEqual(serialized(after.messages), serialized([...answer.request.messages, message!]))
      assert.isTrue(after.compactGuard === false, "the answer after the summary clears the guard")
      const saved = Option.getOrThrow(yield* store.loadLlmCall(answer.callId))
      assert.strictEqual(canonicalJson(saved.request), canonicalJson(answer.request))
      assert.strictEqual(saved.status, "committed")
    }))
})
