/**
 * The HTTP shell of one FIM call: POST with undici, a response head within the timeout, the
 * body decoded in undici's own `data` callback (SSE decoder, then the wire's decoder,
 * synchronously) and handed to a sink (the Tab service's callback, or a mailbox a stream
 * reads), a watchdog for a silent body, and the request aborted when it is closed before the
 * answer is complete, so an interrupted Tab
 * request frees the provider at once. `llm/Http.ts`'s shape without retries: a failed Tab
 * request is superseded by the next keystroke.
 */
import { Effect, Exit, Mailbox, type Scope } from "effect"
import type * as Undici from "undici"
import { excerpt, readableBody } from "../../llm/common/Errors.js"
import { makeSseDecoder, SseEventTooLarge } from "../../llm/Sse.js"
import { FimError, type FimEvent } from "../../Tab.js"
import type { FimTarget } from "../../Tab.js"
import { decodeError, isObject, type FimDecoder } from "./Wire.js"

/** One prepared call: the exact request and the decoder of its answer. */
export interface FimCall {
  readonly target: FimTarget
  readonly url: URL
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly decoder: FimDecoder
}

type Body = Undici.Dispatcher.ResponseData["body"]


/** Longer than this, a JS timer would fire at once: treated as no timeout. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** What a complete answer may still send before its close: read so the keep-alive connection is reused. */
const DRAIN_LIMIT_BYTES = 1024 * 1024

const isOk = (status: number) => status >= 200 && status < 300

/** Why a call is aborted: it is no longer wanted (superseded, or its client went away). */
const ABORTED = Object.freeze({ name: "AbortError", message: "the Tab request no longer wants this call" })

/** Where a call's events go: each network read's events at once, then the call's end (a failure, or none). */
export interface FimSink {
  readonly events: (events: ReadonlyArray<FimEvent>) => void
  readonly done: (error: FimError | undefined) => void
}

/**
 * Starts the call: POSTs it with undici, its events handed to `sink` in the network read that
 * brought them (no fiber between), then its end: the `Done`, or a `FimError` (no head within
 * the timeout, a non-2xx answer in the provider's words, a lost connection, a silent body).
 * Plain callbacks, no fiber: a Tab request's whole path to the provider runs in the call that
 * asked. The returned `close` ends it: an answer read to its final event has the rest of its
 * body drained (bounded, keeping the keep-alive connection), any other is aborted, so the
 * provider stops at once.
 */
export const start = (dispatcher: Undici.Dispatcher, call: FimCall, sink: FimSink): { readonly close: () => void } => {
  const reader = makeReader(call, sink)
  const controller = new AbortController()
  let body: Body | undefined
  let pending = true
  const { timeoutMs } = call.target
  const settle = (error: FimError) => {
    if (!pending) return
    pending = false
    clearTimeout(timer)
    sink.done(error)
  }
  const timer = timeoutMs <= MAX_TIMER_MS ? setTimeout(() => settle(timeoutError(call, `no answer within ${timeoutMs} ms`)), timeoutMs) : undefined
  const fail = (cause: unknown) => settle(networkError(call, "cannot reach", cause))
  try {
    dispatcher.request({
      origin: call.url.origin,
      path: call.url.pathname + call.url.search,
      method: "POST",
      headers: call.headers,
      body: call.body,
      signal: controller.signal,
      // The timeout covers the head (here) and the body (the reader's watchdog).
      headersTimeout: 0,
      bodyTimeout: 0
    }).then((response) => {
      if (!pending) return
      pending = false
      clearTimeout(timer)
      body = response.body
      if (isOk(response.statusCode)) return reader.attach(response.body)
      const status = response.statusCode
      const read = setTimeout(() => controller.abort(ABORTED), timeoutMs <= MAX_TIMER_MS ? timeoutMs : MAX_TIMER_MS)
      response.body.text().catch(() => "").then((text) => {
        clearTimeout(read)
        sink.done(httpError(call, status, text))
      })
    }, fail)
  } catch (cause) {
    fail(cause)
  }
  return {
    close: () => {
      pending = false
      clearTimeout(timer)
      reader.stop()
      if (body?.readableEnded === true) return
      if (body !== undefined && call.decoder.finished()) {
        body.dump({ limit: DRAIN_LIMIT_BYTES, signal: AbortSignal.timeout(timeoutMs) }).catch(() => undefined)
      } else {
        // A reason of our own: with none, the abort makes a DOMException and undici an error, each with its stack.
        controller.abort(ABORTED)
      }
    }
  }
}

/** The call's events into `sink` until the scope closes (`start`, closed with the scope). */
export const openInto = (dispatcher: Undici.Dispatcher, call: FimCall, sink: FimSink): Effect.Effect<void, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.sync(() => start(dispatcher, call, sink)), (handle) => Effect.sync(handle.close)).pipe(Effect.asVoid)

/** Opens the call: the mailbox of its events (`start`'s, offered to it), ending with the `Done` or failing with a `FimError`. */
export const open = (
  dispatcher: Undici.Dispatcher,
  call: FimCall
): Effect.Effect<Mailbox.ReadonlyMailbox<FimEvent, FimError>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const events = yield* Mailbox.make<FimEvent, FimError>()
    yield* openInto(dispatcher, call, {
      events: (out) => void events.unsafeOfferAll(out),
      done: (error) => void events.unsafeDone(error === undefined ? Exit.void : Exit.fail(error))
    })
    return events
  })

/**
 * Reads a 2xx body into the mailbox: each network read is decoded at once and its events
 * offered in one batch. A watchdog fails the call once no byte has come for the timeout: it
 * wakes once per timeout period (no timer per read).
 */
const makeReader = (call: FimCall, sink: FimSink) => {
  const { decoder } = call
  const sse = makeSseDecoder()
  let lastReadAt = Date.now()
  let settled = false
  let watchdog: ReturnType<typeof setTimeout> | undefined
  let source: Body | undefined

  const settle = (out: ReadonlyArray<FimEvent>, error: FimError | undefined) => {
    if (out.length > 0) sink.events(out)
    if (error !== undefined) {
      settled = true
      sink.done(error)
    } else if (decoder.finished()) {
      settled = true
      sink.done(undefined)
    }
  }
  const onData = (bytes: Buffer) => {
    lastReadAt = Date.now()
    if (settled) return
    const out: Array<FimEvent> = []
    let error: FimError | undefined
    try {
      for (const event of sse.feedBytes(bytes)) {
        error = decoder.push(event.data, out)
        if (error !== undefined || decoder.finished()) break
      }
    } catch (cause) {
      error = decodeError(call.target.provider, cause instanceof SseEventTooLarge ? cause.message : `SSE decoding failed: ${String(cause)}`)
    }
    settle(out, error)
  }
  const onEnd = () => {
    if (settled) return
    sse.end()
    const out: Array<FimEvent> = []
    settle(out, decoder.end(out))
    if (!settled) {
      settled = true
      sink.done(undefined)
    }
  }
  const onError = (cause: Error) => {
    if (settled) return
    settled = true
    sink.done(networkError(call, "lost the connection to", cause))
  }
  const watch = () => {
    watchdog = undefined
    if (settled) return
    const quietFor = Date.now() - lastReadAt
    if (quietFor >= call.target.timeoutMs) {
      settled = true
      sink.done(timeoutError(call, `the answer stalled for ${call.target.timeoutMs} ms`))
      return
    }
    watchdog = setTimeout(watch, call.target.timeoutMs - quietFor)
  }
  return {
    attach: (body: Body) => {
      source = body
      lastReadAt = Date.now()
      body.on("data", onData)
      body.once("end", onEnd)
      body.once("error", onError)
      if (call.target.timeoutMs <= MAX_TIMER_MS) watch()
    },
    stop: () => {
      settled = true
      clearTimeout(watchdog)
      source?.off("data", onData)
    }
  }
}

// =============================================================================
// Errors a user can act on
// =============================================================================

const describe = (cause: unknown): string => {
  if (typeof cause === "object" && cause !== null) {
    const error = cause as { message?: unknown; cause?: unknown; code?: unknown }
    const inner = error.cause !== undefined && error.cause !== cause ? describe(error.cause) : ""
    const own = typeof error.message === "string" && error.message !== "" ? error.message : typeof error.code === "string" ? error.code : String(cause)
    return inner.length > 0 && !own.includes(inner) ? `${own} (${inner})` : own
  }
  return String(cause)
}

const networkError = (call: FimCall, what: string, cause: unknown): FimError =>
  new FimError({ kind: "network", message: `${call.target.provider}: ${what} ${call.url.href}: ${excerpt(describe(cause), 300)}` })

const timeoutError = (call: FimCall, what: string): FimError =>
  new FimError({ kind: "timeout", message: `${call.target.provider}: ${what} from ${call.url.href}` })

/** The provider's own words: `{error:{message}}`, `{error:"..."}`, `{message}`, `{detail}`, else the body as text; 300 characters at most. */
export const providerMessage = (text: string): string => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return readableBody(text)
  }
  if (!isObject(json)) return readableBody(text)
  const error = json["error"]
  const found = isObject(error) ? error["message"] : error ?? json["message"] ?? json["detail"]
  if (found === undefined || found === null) return readableBody(text)
  const message = typeof found === "string" ? found : JSON.stringify(found)
  return message.length > 300 ? `${excerpt(message, 300)}…` : excerpt(message, 300)
}

const httpError = (call: FimCall, status: number, text: string): FimError => {
  const { provider, model, api } = call.target
  const detail = providerMessage(text)
  const said = detail === "" ? "" : `: ${detail}`
  const where = `HTTP ${status} from ${call.url.href}`
  const message = status === 401 || status === 403
    ? `${provider}: the API key was refused (${where})${said}. Check the key tab uses for provider ${provider}`
    : status === 404
    ? `${provider}: not found (${where})${said}. Does this server have ${call.url.pathname}? Set tab.api (now ${api}) and tab.baseUrl to match the server, and check the model name "${model}"`
    : status === 429
    ? `${provider}: rate limited (${where})${said}`
    : status >= 500
    ? `${provider}: server error (${where})${said}`
    : `${provider}: request rejected (${where})${said}`
  return new FimError({ kind: "http", message, status })
}
