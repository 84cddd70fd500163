/**
 * In-process fakes for the runner's services: a scripted `Llm` (each call takes the next
 * script: events, a failure, or a stream that stalls), and a `ClientGateway` that records what
 * the runner publishes and answers dispatched tool calls through the runner like a client.
 */
import { Deferred, Effect, Layer, Ref, Stream } from "effect"
import { Llm, LlmError } from "../../src/Llm.js"
import type { AssistantMessage, RequestMessages, ResponseEvent, ToolCall, ToolResultMessage, Usage } from "../../src/Llm.js"
import type { ConversationState } from "../../src/Loop.js"
import { ClientGateway } from "../../src/Runner.js"
import type { CompactionProgress, DispatchedOperation, TurnOutcome, TurnRef } from "../../src/Runner.js"

export type Script =
  | { readonly _tag: "Events"; readonly events: ReadonlyArray<ResponseEvent> }
  | { readonly _tag: "Fail"; readonly error: LlmError }
  /**
   * Emits the events, then never ends until interrupted (records the interruption). With
   * `closing`, an interrupted stream takes until `closing` completes to close (a provider's
   * connection slow to go away): it counts as open until then.
   */
  | { readonly _tag: "Stall"; readonly events: ReadonlyArray<ResponseEvent>; readonly closing?: Deferred.Deferred<void> }

export interface LlmCallRecord {
  readonly callId: string
  readonly model: string
  readonly request: RequestMessages
}

export const usage = (input: number, output: number): Usage => ({ input, output, cacheRead: 0, cacheWrite: 0, reasoning: 0 })

export const assistant = (content: AssistantMessage["content"], stopReason: AssistantMessage["stopReason"] = "stop", used = usage(10, 5)): AssistantMessage => ({
  role: "assistant",
  content,
  api: "fake",
  provider: "fake",
  model: "fake-model",
  usage: used,
  stopReason
})

/** A model answer as a provider adapter would stream it. */
export const answerEvents = (message: AssistantMessage): Array<ResponseEvent> => {
  const events: Array<ResponseEvent> = [{ _tag: "Start" }]
  message.content.forEach((block, index) => {
    if (block.type === "text") {
      events.push({ _tag: "TextStart", index }, { _tag: "TextDelta", index, delta: block.text }, { _tag: "TextEnd", index })
    } else if (block.type === "thinking") {
      events.push({ _tag: "ThinkingStart", index }, { _tag: "ThinkingDelta", index, delta: block.thinking }, { _tag: "ThinkingEnd", index })
    } else {
      events.push(
        { _tag: "ToolCallStart", index, id: block.id, name: block.name },
        { _tag: "ToolCallDelta", index, delta: block.arguments },
        { _tag: "ToolCallEnd", index, toolCall: block }
      )
    }
  })
  events.push({ _tag: "Done", reason: message.stopReason, message })
  return events
}

export const text = (value: string, used?: Usage): Script => ({ _tag: "Events", events: answerEvents(assistant([{ type: "text", text: value }], "stop", used)) })
export const toolCalls = (...calls: ReadonlyArray<ToolCall>): Script => ({ _tag: "Events", events: answerEvents(assistant(calls, "toolUse")) })
export const call = (id: string, name = "read", args = `{"path":"a.ts"}`): ToolCall => ({ type: "toolCall", id, name, arguments: args })

/**
 * A scripted model: each call takes the next script; once they run out, `respond` (if given)
 * answers from the request itself, which keeps concurrent conversations deterministic. `open`
 * counts the streams of each conversation open now (from the call until its stream has closed),
 * `peakOpen` the most that were ever open at once for one conversation.
 */
export const makeFakeLlm = (scripts: ReadonlyArray<Script>, respond?: (request: RequestMessages, callId: string) => Script) =>
  Effect.gen(function*() {
    const queue = scripts.slice()
    const calls = yield* Ref.make<ReadonlyArray<LlmCallRecord>>([])
    const interrupted = yield* Ref.make(0)
    const open = new Map<string, number>()
    const peakOpen = yield* Ref.make(0)
    const conversationOf = (callId: string) => callId.replace(/\/t\d+\/c\d+$/, "")
    const opened = (callId: string) =>
      Effect.acquireRelease(
        Effect.flatMap(Effect.sync(() => {
          const now = (open.get(conversationOf(callId)) ?? 0) + 1
          open.set(conversationOf(callId), now)
          return now
        }), (now) => Ref.update(peakOpen, (peak) => Math.max(peak, now))),
        () => Effect.sync(() => void open.set(conversationOf(callId), open.get(conversationOf(callId))! - 1))
      )
    const layer = Layer.succeed(Llm, {
      stream: (request, options) =>
        Stream.unwrapScoped(Effect.gen(function*() {
          yield* opened(options.callId)
          yield* Ref.update(calls, (all) => [...all, { callId: options.callId, model: options.model, request }])
          const script = queue.shift() ?? respond?.(request, options.callId) ?? text("(no script left)")
          switch (script._tag) {
            case "Events":
              return Stream.fromIterable(script.events)
            case "Fail":
              return Stream.fail(script.error)
            case "Stall": {
              const closing = script.closing
              if (closing !== undefined) yield* Effect.addFinalizer(() => Deferred.await(closing))
              return Stream.concat(
                Stream.fromIterable(script.events),
                Stream.fromEffect(Effect.never.pipe(Effect.onInterrupt(() => Ref.update(interrupted, (n) => n + 1))))
              )
            }
          }
        }))
    })
    return { layer, calls, interrupted, peakOpen, openOf: (conversationId: string) => open.get(conversationId) ?? 0 }
  })

export interface Finished {
  readonly turn: TurnRef
  readonly outcome: TurnOutcome
  readonly state: ConversationState
  readonly usage: Usage
}

export interface GatewayLog {
  readonly published: Array<{ readonly turnId: string; readonly events: ReadonlyArray<ResponseEvent> }>
  readonly dispatched: Array<{ readonly turn: TurnRef; readonly operation: DispatchedOperation }>
  readonly aborted: Array<TurnRef>
  readonly finished: Array<Finished>
  readonly compactions: Array<{ readonly turnId: string; readonly progress: CompactionProgress }>
}

/**
 * `answer` decides what to do with a dispatched tool call: return a result to submit it at
 * once, or null to leave it pending (the test submits later).
 */
export const makeFakeGateway = (
  answer: (operation: DispatchedOperation) => ToolResultMessage | null,
  submitResult: (turn: TurnRef, operationId: string, result: ToolResultMessage) => Effect.Effect<void>
) =>
  Effect.gen(function*() {
    const log: GatewayLog = { published: [], dispatched: [], aborted: [], finished: [], compactions: [] }
    const waiters: Array<{ readonly count: number; readonly done: Deferred.Deferred<void> }> = []
    const notify = Effect.suspend(() =>
      Effect.forEach(waiters.filter((w) => log.finished.length >= w.count), (w) => Deferred.succeed(w.done, undefined), { discard: true })
    )
    const layer = Layer.succeed(ClientGateway, {
      publish: (turn, _callId, events) => Effect.sync(() => void log.published.push({ turnId: turn.turnId, events })),
      // The runner's delta fast path publishes here: the same log.
      publishNow: (turn, _callId, events) => {
        log.published.push({ turnId: turn.turnId, events })
        return true
      },
      dispatch: (turn, operation) =>
        Effect.gen(function*() {
          log.dispatched.push({ turn, operation })
          const result = answer(operation)
          if (result !== null) yield* Effect.forkDaemon(submitResult(turn, operation.operationId, result))
          return undefined
        }),
      compaction: (turn, progress) => Effect.sync(() => void log.compactions.push({ turnId: turn.turnId, progress })),
      abort: (turn) => Effect.sync(() => void log.aborted.push(turn)),
      finish: (turn, outcome, state, usage) =>
        Effect.sync(() => void log.finished.push({ turn, outcome, state, usage })).pipe(Effect.zipRight(notify))
    })
    /** Completes once `count` turns have finished. */
    const finishedAtLeast = (count: number) =>
      Effect.gen(function*() {
        const done = yield* Deferred.make<void>()
        waiters.push({ count, done })
        yield* notify
        yield* Deferred.await(done)
      })
    return { layer, log, finishedAtLeast }
  })

export const toolResult = (call: ToolCall, output = `output of ${call.id}`): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: call.id,
  toolName: call.name,
  content: [{ type: "text", text: output }],
  isError: false
})

export const providerDown = new LlmError({ reason: "overloaded", message: "upstream 503 after retries", retryable: true, status: 503 })
