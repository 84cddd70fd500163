/**
 * The thin HTTP shell every adapter shares: POST one request body, turn a non-2xx answer into a
 * typed `LlmError`, pipe the SSE body through the adapter's pure state machine, end a stream
 * that goes silent (idle timeout), and retry — only before the first event has been emitted,
 * with exactly the same request bytes.
 *
 * "Before the first event" is before the first event after `Start`: `Start` is held back until
 * content (or `Done`) follows, so a stream that fails right after its preamble (an Anthropic
 * `overloaded_error` after `message_start`, a connection dropped after the first bytes) is
 * retried invisibly, while anything the client has seen is never silently replayed.
 */
import { Chunk, Duration, Effect, Either, ExecutionStrategy, Exit, Mailbox, Metric, Random, Scope, Stream } from "effect"
import type { LlmError, ResponseEvent } from "../Llm.js"
import * as Metrics from "../Metrics.js"
import { classifyHttpError, llmError, type Machine } from "./Common.js"
import { makeSseDecoder, SseEventTooLarge } from "./Sse.js"
import type * as Undici from "undici"

/** Retry and timeout policy; every number is configurable so tests run in milliseconds. */
export interface RetrySettings {
  /** Retries after the first attempt. */
  readonly maxRetries: number
  readonly initialDelayMs: number
  /** Cap of the exponential backoff. */
  readonly maxDelayMs: number
  /** A server asking for a longer wait than this fails fast instead (and says how long it asked). */
  readonly maxRetryAfterMs: number
  /** Fraction of the delay randomized either way. */
  readonly jitter: number
  /** A stream (or a response head) silent for this long ends with `idleTimeout`. */
  readonly idleTimeoutMs: number
}

export const defaultRetrySettings: RetrySettings = {
  maxRetries: 3,
  initialDelayMs: 500,
  maxDelayMs: 8_000,
  maxRetryAfterMs: 60_000,
  jitter: 0.2,
  idleTimeoutMs: 120_000
}

/** One prepared call: the bytes are fixed before the first attempt and reused by every retry. */
export interface ProviderRequest {
  readonly provider: string
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly makeMachine: () => Machine
}

const networkError = (provider: string, cause: unknown): LlmError =>
  llmError("network", `${provider}: connection failed: ${describe(cause)}`, { retryable: true, provider })

const describe = (cause: unknown): string => {
  if (typeof cause === "object" && cause !== null) {
    const error = cause as { message?: unknown; cause?: unknown }
    const inner = error.cause !== undefined && error.cause !== cause ? describe(error.cause) : ""
    const own = typeof error.message === "string" ? error.message : String(cause)
    return inner.length > 0 && !own.includes(inner) ? `${own} (${inner})` : own
  }
  return String(cause)
}

const idleError = (provider: string, settings: RetrySettings): LlmError =>
  llmError("idleTimeout", `${provider}: no data for ${settings.idleTimeoutMs} ms`, { retryable: true, provider })

/** A provider's answer head: status, headers (lower-case names, repeated ones joined) and the raw body. */
interface Head {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: Undici.Dispatcher.ResponseData["body"]
}

/**
 * POSTs the request with undici (the dispatcher's own keep-alive pool); aborted when the scope
 * closes. The body is handed over raw: the attempt reads it in its own `data` callback.
 */
const post = (dispatcher: Undici.Dispatcher, request: ProviderRequest): Effect.Effect<Head, LlmError, Scope.Scope> =>
  Effect.gen(function*() {
    const controller = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
    const url = new URL(request.url)
    const response = yield* Effect.tryPromise({
      try: () =>
        dispatcher.request({
          origin: url.origin,
          path: url.pathname + url.search,
          method: "POST",
          headers: { ...request.headers, "content-type": "application/json" },
          body: request.body,
          signal: controller.signal,
          // The idle timeout below covers the head and the body.
          headersTimeout: 0,
          bodyTimeout: 0
        }),
      catch: (cause) => networkError(request.provider, cause)
    })
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(response.headers)) {
      if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value
    }
    return { status: response.statusCode, headers, body: response.body }
  })

/** One attempt's events: a mailbox the stream reads, and the switch to handing them to a callback instead. */
export interface Attempt {
  readonly events: Mailbox.ReadonlyMailbox<ResponseEvent, LlmError>
  /**
   * From now on, events go to `sink` as they come off the network (in the body's `data`
   * callback), those already in the mailbox first; the mailbox then only ends or fails.
   */
  readonly pushTo: (sink: (events: ReadonlyArray<ResponseEvent>) => void) => Effect.Effect<void>
}

/**
 * One attempt: the raw events of one HTTP exchange, in a mailbox that ends (or fails) with the
 * exchange. The request is aborted when the scope closes.
 *
 * The body is read in its own `data` callback: each network read is decoded there (SSE decoder
 * and the adapter's machine, synchronously) and its events are offered to the mailbox, or,
 * once `pushTo` was called, handed to the sink in that same call (the delta fast path: no
 * fiber runs between the socket read and the sink). A watchdog fiber fails the stream with
 * `idleTimeout` once no byte has come for the idle timeout: it wakes once per timeout period,
 * where `Stream.timeoutFail` raced a timer against every read (~100 µs per chunk, measured).
 */
export const openAttempt = (
  dispatcher: Undici.Dispatcher,
  request: ProviderRequest,
  settings: RetrySettings
): Effect.Effect<Attempt, LlmError, Scope.Scope> =>
    Effect.gen(function*() {
      const idle = Duration.millis(settings.idleTimeoutMs)
      const head = yield* post(dispatcher, request).pipe(
        Effect.timeoutFail({ duration: idle, onTimeout: () => idleError(request.provider, settings) })
      )
      if (head.status < 200 || head.status >= 300) {
        const text = yield* Effect.tryPromise(() => head.body.text()).pipe(
          Effect.timeoutFail({ duration: idle, onTimeout: () => idleError(request.provider, settings) }),
          Effect.orElseSucceed(() => "")
        )
        const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
        return yield* classifyHttpError(request.provider, head.status, head.headers, text, now)
      }
      const machine = request.makeMachine()
      const decoder = makeSseDecoder()
      const clock = yield* Effect.clock
      const events = yield* Mailbox.make<ResponseEvent, LlmError>()
      const body = head.body
      let lastReadAt = clock.unsafeCurrentTimeMillis()
      let settled = false
      let sink: ((events: ReadonlyArray<ResponseEvent>) => void) | undefined

      const settle = (out: ReadonlyArray<ResponseEvent>, failure: LlmError | undefined) => {
        let error = failure
        if (out.length > 0) {
          if (sink === undefined) events.unsafeOfferAll(out)
          else {
            try {
              sink(out)
            } catch (cause) {
              // In the body's callback no fiber would catch it: the call ends with it, the turn with an error.
              error = llmError("malformedStream", `the stream's events could not be handled: ${String(cause)}`)
            }
          }
        }
        if (error !== undefined) {
          settled = true
          events.unsafeDone(Exit.fail(error))
        } else if (machine.finished()) {
          settled = true
          events.unsafeDone(Exit.void)
        }
      }
      const onData = (bytes: Buffer) => {
        lastReadAt = clock.unsafeCurrentTimeMillis()
        if (settled) return
        const out: Array<ResponseEvent> = []
        let error: LlmError | undefined
        try {
          for (const event of decoder.feedBytes(bytes)) {
            error = machine.push(event, out)
            if (error !== undefined || machine.finished()) break
          }
        } catch (cause) {
          error = llmError("malformedStream", cause instanceof SseEventTooLarge ? cause.message : `SSE decoding failed: ${String(cause)}`)
        }
        settle(out, error)
      }
      const onEnd = () => {
        if (settled) return
        const out: Array<ResponseEvent> = []
        decoder.end()
        const error = machine.finished() ? undefined : machine.end(out)
        settle(out, error)
        if (!settled) {
          settled = true
          events.unsafeDone(Exit.void)
        }
      }
      const onError = (cause: Error) => {
        if (settled) return
        settled = true
        events.unsafeDone(Exit.fail(networkError(request.provider, cause)))
      }
      body.on("data", onData)
      body.once("end", onEnd)
      body.once("error", onError)
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          settled = true
          body.off("data", onData)
          body.destroy()
        })
      )
      const watchdog: Effect.Effect<void> = Effect.suspend(() => {
        if (settled) return Effect.void
        const quietFor = clock.unsafeCurrentTimeMillis() - lastReadAt
        if (quietFor >= settings.idleTimeoutMs) {
          return Effect.sync(() => {
            settled = true
            events.unsafeDone(Exit.fail(idleError(request.provider, settings)))
            body.destroy()
          })
        }
        return Effect.zipRight(Effect.sleep(Duration.millis(settings.idleTimeoutMs - quietFor)), watchdog)
      })
      yield* Effect.forkScoped(watchdog)
      const pushTo = (to: (events: ReadonlyArray<ResponseEvent>) => void) =>
        // A mailbox that has ended already keeps its end for the stream that follows.
        Effect.map(Effect.orElseSucceed(events.clear, () => Chunk.empty<ResponseEvent>()), (queued) => {
          if (queued.length > 0) to(Chunk.toReadonlyArray(queued))
          sink = to
        })
      return { events, pushTo }
    })

/** The delay before retry number `retry` (0-based), or a fail-fast error when the server asks too much. */
export const retryDelay = (error: LlmError, retry: number, settings: RetrySettings): Effect.Effect<number, LlmError> =>
  Effect.gen(function*() {
    if (error.retryAfterMs !== undefined) {
      if (error.retryAfterMs > settings.maxRetryAfterMs) {
        return yield* llmError(error.reason, `${error.message} (server asked to retry after ${Math.round(error.retryAfterMs)} ms, more than the ${settings.maxRetryAfterMs} ms allowed)`, {
          retryable: false,
          ...(error.provider !== undefined ? { provider: error.provider } : {}),
          ...(error.status !== undefined ? { status: error.status } : {}),
          retryAfterMs: error.retryAfterMs
        })
      }
      return error.retryAfterMs
    }
    const base = Math.min(settings.maxDelayMs, settings.initialDelayMs * 2 ** retry)
    const spread = yield* Random.nextRange(-settings.jitter, settings.jitter)
    return Math.max(0, Math.round(base * (1 + spread)))
  })

/**
 * The full call: attempts until one yields an event beyond `Start`, then streams the rest of that
 * attempt. Failures before that point are retried when retryable; failures after it end the stream.
 * Each retry is one log line (info) with the provider, the attempt that failed, its error and the
 * delay, annotated with `annotations` (the router's: conversation, call id, model).
 */
export const streamWithRetry = (
  dispatcher: Undici.Dispatcher,
  request: ProviderRequest,
  settings: RetrySettings,
  annotations: Readonly<Record<string, unknown>> = {},
  onEvents?: (events: ReadonlyArray<ResponseEvent>) => void
): Stream.Stream<ResponseEvent, LlmError> =>
  Stream.unwrapScoped(
    Effect.gen(function*() {
      const outer = yield* Effect.scope
      let retry = 0
      while (true) {
        const scope = yield* Scope.fork(outer, ExecutionStrategy.sequential)
        const held: Array<ResponseEvent> = []
        // Taken straight from the attempt's mailbox (no pull-based stream stage in between).
        const primed = yield* Effect.gen(function*() {
          const { events, pushTo } = yield* openAttempt(dispatcher, request, settings).pipe(Scope.extend(scope))
          // With a sink, the events after the held ones go to it as they come off the network; the
          // switch is pulled once the held ones were taken, so none is overtaken.
          const rest = onEvents === undefined
            ? Mailbox.toStream(events)
            : Stream.concat(Stream.drain(Stream.fromEffect(pushTo(onEvents))), Mailbox.toStream(events))
          while (true) {
            const [chunk, done] = yield* events.takeAll
            let content = false
            for (const event of chunk) {
              // The attempt count rides on `Start` (the runner records it with the call).
              held.push(retry > 0 && event._tag === "Start" ? { ...event, attempts: retry + 1 } : event)
              if (event._tag !== "Start") content = true
            }
            if (content) return done ? Stream.fromIterable(held) : Stream.concat(Stream.fromIterable(held), rest)
            if (done) return Stream.fromIterable(held)
          }
        }).pipe(Effect.either)
        if (Either.isRight(primed)) return primed.right
        const error = primed.left
        yield* Scope.close(scope, Exit.void)
        if (!error.retryable || retry >= settings.maxRetries) return yield* error
        const delay = yield* retryDelay(error, retry, settings)
        yield* Effect.logInfo(
          `model call: ${request.provider} attempt ${retry + 1} failed before answering (${error.reason}: ${error.message}); retrying in ${delay} ms`
        ).pipe(
          Effect.annotateLogs({
            ...annotations,
            provider: request.provider,
            attempt: retry + 1,
            maxRetries: settings.maxRetries,
            reason: error.reason,
            error: error.message,
            ...(error.status === undefined ? {} : { status: error.status }),
            delayMs: delay
          })
        )
        yield* Metric.increment(Metrics.llmRetries)
        yield* Effect.sleep(Duration.millis(delay))
        retry++
      }
    })
  )
