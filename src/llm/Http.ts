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
import { Clock, Duration, Effect, Either, ExecutionStrategy, Exit, Mailbox, Metric, Random, Scope, Stream } from "effect"
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

/** Longer than this, a JS timer would fire at once: like Effect's clock, the timers here treat it as never. */
const MAX_TIMER_MS = 2 ** 31 - 1

/**
 * POSTs the request with undici (the dispatcher's own keep-alive pool); aborted when the scope
 * closes. The body is handed over raw: the attempt reads it in its own `data` callback. `onHead`
 * sees the head as soon as undici has it, before the fiber that asked resumes (which may wait
 * its turn on a busy server). No head within `timeoutMs`: fails with `onTimeout()` (a plain
 * timer, cleared by the head, a failure or an interruption: no racing fibers), and a head that
 * comes after that is left unread (the scope's close aborts it).
 */
const post = (
  dispatcher: Undici.Dispatcher,
  request: ProviderRequest,
  timeoutMs: number,
  onTimeout: () => LlmError,
  onHead: (head: Head) => void
): Effect.Effect<Head, LlmError, Scope.Scope> =>
  Effect.gen(function*() {
    const controller = new AbortController()
    let answer: Head["body"] | undefined
    // An exchange whose body was read to its end needs no abort (an abort makes a DOMException,
    // with its stack: ~1% of a short turn's CPU in a profile).
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        if (answer === undefined || !answer.readableEnded) controller.abort()
      })
    )
    const url = new URL(request.url)
    return yield* Effect.async<Head, LlmError>((resume) => {
      // The first of the head, a failure, the timeout and an interruption settles the call.
      let pending = true
      const timer = timeoutMs <= MAX_TIMER_MS
        ? setTimeout(() => {
          if (!pending) return
          pending = false
          resume(Effect.fail(onTimeout()))
        }, timeoutMs)
        : undefined
      const fail = (cause: unknown) => {
        if (!pending) return
        pending = false
        clearTimeout(timer)
        resume(Effect.fail(networkError(request.provider, cause)))
      }
      try {
        dispatcher.request({
          origin: url.origin,
          path: url.pathname + url.search,
          method: "POST",
          headers: { ...request.headers, "content-type": "application/json" },
          body: request.body,
          signal: controller.signal,
          // The idle timeout covers the head (here) and the body (the attempt's watchdog).
          headersTimeout: 0,
          bodyTimeout: 0
        }).then((response) => {
          if (!pending) return
          let head: Head
          try {
            const headers: Record<string, string> = {}
            for (const [name, value] of Object.entries(response.headers)) {
              if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value
            }
            head = { status: response.statusCode, headers, body: response.body }
            answer = response.body
            onHead(head)
          } catch (cause) {
            return fail(cause)
          }
          pending = false
          clearTimeout(timer)
          resume(Effect.succeed(head))
        }, fail)
      } catch (cause) {
        fail(cause)
      }
      return Effect.sync(() => {
        pending = false
        clearTimeout(timer)
      })
    })
  })

/**
 * One attempt's events: a mailbox the stream reads, or, when the attempt was opened with a
 * `sink`, a mailbox that only ends or fails while the events go to the sink.
 */
export interface Attempt {
  readonly events: Mailbox.ReadonlyMailbox<ResponseEvent, LlmError>
}

/**
 * One attempt: the raw events of one HTTP exchange, in a mailbox that ends (or fails) with the
 * exchange. The request is aborted when the scope closes.
 *
 * The body is read in its own `data` callback: each network read is decoded there (SSE decoder
 * and the adapter's machine, synchronously) and its events are offered to the mailbox, or,
 * with a `sink`, handed to the sink in that same call (the delta fast path: no fiber runs
 * between the socket read and the sink). A sink gets nothing before the answer's first
 * content: the `Start` events before it are held, so that an attempt that fails before
 * answering has handed nothing out and can be retried; the first content goes out with them,
 * in the read that brought it. A watchdog timer fails the stream with `idleTimeout` once no
 * byte has come for the idle timeout: it wakes once per timeout period, where
 * `Stream.timeoutFail` raced a timer against every read (~100 µs per chunk, measured), and is a
 * plain JS timer (no fiber, no `Effect.sleep`), cleared when the scope closes. The head has the
 * same limit (`post`'s own timer). The idle clock is the wall clock, as the timers are real ones.
 */
export const openAttempt = (
  dispatcher: Undici.Dispatcher,
  request: ProviderRequest,
  settings: RetrySettings,
  sink?: (events: ReadonlyArray<ResponseEvent>) => void
): Effect.Effect<Attempt, LlmError, Scope.Scope> =>
    Effect.gen(function*() {
      const machine = request.makeMachine()
      const decoder = makeSseDecoder()
      const events = yield* Mailbox.make<ResponseEvent, LlmError>()
      let lastReadAt = Date.now()
      let settled = false
      let answered = false
      /** With a sink: the `Start` events before the first content. */
      let held: Array<ResponseEvent> = []

      const handOut = (out: ReadonlyArray<ResponseEvent>): ReadonlyArray<ResponseEvent> | undefined => {
        if (answered) return out
        let content = false
        for (const event of out) {
          held.push(event)
          if (event._tag !== "Start") content = true
        }
        if (!content) return undefined
        answered = true
        const first = held
        held = []
        return first
      }
      const settle = (out: ReadonlyArray<ResponseEvent>, failure: LlmError | undefined) => {
        let error = failure
        if (out.length > 0) {
          if (sink === undefined) events.unsafeOfferAll(out)
          else {
            const batch = handOut(out)
            try {
              if (batch !== undefined) sink(batch)
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
        lastReadAt = Date.now()
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
      // A successful answer's body is read from the moment its head is in (in undici's
      // callback), not once this fiber resumes: under load that could be seconds later, with
      // the answer piling up unread meanwhile.
      const isOk = (status: number) => status >= 200 && status < 300
      const head = yield* post(dispatcher, request, settings.idleTimeoutMs, () => idleError(request.provider, settings), (head) => {
        if (!isOk(head.status)) return
        lastReadAt = Date.now()
        head.body.on("data", onData)
        head.body.once("end", onEnd)
        head.body.once("error", onError)
      })
      const body = head.body
      if (!isOk(head.status)) {
        const text = yield* Effect.tryPromise(() => body.text()).pipe(
          Effect.timeoutFail({ duration: Duration.millis(settings.idleTimeoutMs), onTimeout: () => idleError(request.provider, settings) }),
          Effect.orElseSucceed(() => "")
        )
        const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
        return yield* classifyHttpError(request.provider, head.status, head.headers, text, now)
      }
      let watchdog: ReturnType<typeof setTimeout> | undefined
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          settled = true
          clearTimeout(watchdog)
          body.off("data", onData)
          body.destroy()
        })
      )
      const watch = () => {
        watchdog = undefined
        if (settled) return
        const quietFor = Date.now() - lastReadAt
        if (quietFor >= settings.idleTimeoutMs) {
          settled = true
          events.unsafeDone(Exit.fail(idleError(request.provider, settings)))
          body.destroy()
          return
        }
        watchdog = setTimeout(watch, settings.idleTimeoutMs - quietFor)
      }
      if (settings.idleTimeoutMs <= MAX_TIMER_MS) watch()
      return { events }
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

/** An attempt that failed before answering (`streamWithRetry`'s `onFailed`). */
export interface AttemptFailure {
  /** 1 for the first attempt, 2 for the first retry... */
  readonly attempt: number
  readonly error: LlmError
  readonly startedAtMs: number
  readonly failedAtMs: number
}

/**
 * The full call: attempts until one yields an event beyond `Start`, then streams the rest of that
 * attempt. Failures before that point are retried when retryable; failures after it end the stream.
 * With `onEvents` (the delta fast path, `StreamOptions.onEvents`), the answering attempt's
 * events all go to it from the body's callback, the first content included, and the stream
 * emits nothing: it ends when the answer ends, or fails with what ended it.
 * Each retry is one log line (info) with the provider, the attempt that failed, its error and the
 * delay, annotated with `annotations` (the router's: conversation, call id, model).
 * `onFailed` hears of each attempt that failed before answering (not of an abort), before the
 * retry's delay: the router records them with the call.
 */
export const streamWithRetry = (
  dispatcher: Undici.Dispatcher,
  request: ProviderRequest,
  settings: RetrySettings,
  annotations: Readonly<Record<string, unknown>> = {},
  onEvents?: (events: ReadonlyArray<ResponseEvent>) => void,
  onFailed?: (failure: AttemptFailure) => Effect.Effect<void>
): Stream.Stream<ResponseEvent, LlmError> =>
  Stream.unwrapScoped(
    Effect.gen(function*() {
      const outer = yield* Effect.scope
      let retry = 0
      while (true) {
        const startedAtMs = yield* Clock.currentTimeMillis
        const scope = yield* Scope.fork(outer, ExecutionStrategy.sequential)
        const held: Array<ResponseEvent> = []
        const attempts = retry + 1
        // The attempt count rides on `Start` (the runner records it with the call).
        const stamped = (event: ResponseEvent): ResponseEvent =>
          attempts > 1 && event._tag === "Start" ? { ...event, attempts } : event
        // Taken straight from the attempt's mailbox (no pull-based stream stage in between).
        const primed = yield* Effect.gen(function*() {
          if (onEvents !== undefined) {
            // Every event goes to `onEvents` from the body's callback, the first content too
            // (with the `Start` before it, which carries the attempt count); the stream then
            // only ends or fails. A failure before anything went out is the attempt's, retried.
            let delivered = false
            const sink = (out: ReadonlyArray<ResponseEvent>) => {
              // Only the first delivery holds the `Start` events.
              const first = !delivered
              delivered = true
              onEvents(first ? out.map(stamped) : out)
            }
            // The body is read from undici's callback: content may have gone out before the
            // attempt failed (a stream that broke off or went silent after its first content).
            const end = yield* openAttempt(dispatcher, request, settings, sink).pipe(
              Scope.extend(scope),
              Effect.flatMap(({ events }) => events.await),
              Effect.either
            )
            if (Either.isRight(end)) return Stream.empty
            if (delivered) return Stream.fail(end.left)
            return yield* end.left
          }
          const { events } = yield* openAttempt(dispatcher, request, settings).pipe(Scope.extend(scope))
          const rest = Mailbox.toStream(events)
          while (true) {
            const [chunk, done] = yield* events.takeAll
            let content = false
            for (const event of chunk) {
              held.push(stamped(event))
              if (event._tag !== "Start") content = true
            }
            if (content) return done ? Stream.fromIterable(held) : Stream.concat(Stream.fromIterable(held), rest)
            if (done) return Stream.fromIterable(held)
          }
        }).pipe(Effect.either)
        if (Either.isRight(primed)) return primed.right
        const error = primed.left
        yield* Scope.close(scope, Exit.void)
        // Every attempt that failed before answering passes here (retried, or ending this target's
        // try): the one place they are reported. An abort is the caller's, not the provider's.
        if (onFailed !== undefined && error.reason !== "aborted") {
          yield* onFailed({ attempt: retry + 1, error, startedAtMs, failedAtMs: yield* Clock.currentTimeMillis })
        }
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
