/**
 * Capture mode (`capture` in the configuration, `cursor-byok capture on|off`): each agent
 * request written to a file under `<home>/captures/` (`Recorder.ts`, format `Format.ts`), from
 * two places only: the front door, which wraps a call's protocol while capture is on
 * (`Tap.ts`), and the model, whose answers (the neutral response events, as the runner receives
 * them) are recorded beside so `cursor-byok replay` can script the provider (`Replay.ts`). Off,
 * it costs one boolean test per request and one per model call.
 */
import { Chunk, Context, Effect, Layer, Runtime, Stream } from "effect"
import { LiveConfig } from "../config/Live.js"
import { Llm } from "../Llm.js"
import type { LlmError, ResponseEvent } from "../Llm.js"
import { HttpFront } from "../transport/Front.js"
import type { Json } from "./Json.js"
import { Recorder } from "./Recorder.js"
import { redactAny } from "./Redact.js"
import { tapAgent, tapRpc } from "./Tap.js"

export { Recorder } from "./Recorder.js"

export class CaptureRecorder extends Context.Tag("cursor-byok/CaptureRecorder")<CaptureRecorder, Recorder>() {}

/** The recorder on the running configuration; a failed write is logged (once) through the server's logger. */
export const layer: Layer.Layer<CaptureRecorder, never, LiveConfig> = Layer.effect(CaptureRecorder, Effect.gen(function*() {
  const { current } = yield* LiveConfig
  const runtime = yield* Effect.runtime<never>()
  return new Recorder(current, (message) => void Runtime.runFork(runtime)(Effect.logWarning(message)))
}))

/** Installs capture at the front door for the scope's lifetime. */
export const layerFront: Layer.Layer<never, never, CaptureRecorder | HttpFront> = Layer.scopedDiscard(Effect.gen(function*() {
  const front = yield* HttpFront
  const recorder = yield* CaptureRecorder
  front.capture = {
    get on() {
      return recorder.on
    },
    agent: (call, protocol, request, response) => tapAgent(recorder, call, protocol, request, response),
    rpc: (path, protocol, request) => tapRpc(recorder, path, protocol, request)
  }
  yield* Effect.addFinalizer(() => Effect.sync(() => void (front.capture = undefined)))
}))

/** The events with their redaction applied (a tool call's streamed arguments are contents). */
const eventsJson = (events: ReadonlyArray<ResponseEvent>, contents: boolean): Json =>
  contents
    ? (events as unknown as Json)
    : events.map((event) => redactAny((event._tag === "ToolCallDelta" && event.delta.length > 0 ? { ...event, delta: `[redacted ${event.delta.length} chars]` } : event) as unknown as Json, false))

const errorOf = (error: LlmError): Json => ({
  reason: error.reason,
  message: error.message,
  retryable: error.retryable,
  ...(error.status === undefined ? {} : { status: error.status })
})

/**
 * `inner`'s model, recording each call's answer to the capture of the request its
 * conversation belongs to (a call of no captured conversation goes as it is): the events of
 * each read, whether they came on the stream or through the delta fast path (`onEvents`).
 */
export const recordingLlm = <E, R>(inner: Layer.Layer<Llm, E, R>): Layer.Layer<Llm, E, R | CaptureRecorder> =>
  Layer.effect(Llm, Effect.gen(function*() {
    const llm = yield* Llm
    const recorder = yield* CaptureRecorder
    return Llm.of({
      stream: (request, options) => {
        const file = recorder.on ? recorder.fileOfCall(options.callId) : undefined
        if (file === undefined) return llm.stream(request, options)
        const chunks: Array<Json> = []
        let failure: Json | undefined
        const onEvents = options.onEvents
        const tapped = onEvents === undefined ? options : {
          ...options,
          onEvents: (events: ReadonlyArray<ResponseEvent>) => {
            chunks.push(eventsJson(events, file.contents))
            onEvents(events)
          }
        }
        return llm.stream(request, tapped).pipe(
          Stream.mapChunks((chunk) => {
            if (Chunk.isNonEmpty(chunk)) chunks.push(eventsJson(Chunk.toReadonlyArray(chunk), file.contents))
            return chunk
          }),
          Stream.tapError((error) => Effect.sync(() => void (failure = errorOf(error)))),
          Stream.ensuring(Effect.sync(() =>
            file.write({ kind: "model", callId: options.callId, model: options.model, chunks, ...(failure === undefined ? {} : { error: failure }) })))
        )
      }
    })
  })).pipe(Layer.provide(inner))
