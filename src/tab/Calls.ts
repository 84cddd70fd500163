/**
 * The FIM calls in flight, shared: a call runs in a fiber of its own and keeps the completion
 * it has so far; each request served from it is a consumer that is told every change, in the
 * upstream read that brought it (no fiber between the provider's bytes and the client's
 * frame). A call whose last consumer leaves is interrupted, which aborts its HTTP request;
 * a call can also be superseded (interrupted whatever its consumers). Kept a short while after
 * its end, so an identical request answers from it.
 */
import { Cause, Effect, Exit, Option } from "effect"
import type { Fiber } from "effect"
import type { FimError, FimEvent } from "../Tab.js"

export type CallEnd =
  | { readonly _tag: "Done"; readonly inputTokens: number; readonly outputTokens: number }
  | { readonly _tag: "Failed"; readonly error: FimError }
  | { readonly _tag: "Interrupted" }

export class Call {
  /** The raw completion so far. */
  text = ""
  end: CallEnd | undefined = undefined
  endedAt = 0
  /** Its usage is counted (once, by the first request that saw its end). */
  counted = false
  /** The requests following the call (`follow`): the call is interrupted when the last one leaves early. */
  private readonly listeners = new Set<() => void>()
  private fiber: Fiber.RuntimeFiber<void, FimError> | undefined = undefined
  /** Aborts the upstream request at once (set once the request is sent). */
  private abort: (() => void) | undefined = undefined

  constructor(readonly key: string, readonly file: string) {}

  /**
   * Runs the upstream call in a fiber of `runFork`'s: `run` hands it the callback its events
   * go to (in the network read that brought them); `now` stamps the end.
   */
  start(
    run: (onEvents: (events: ReadonlyArray<FimEvent>) => void, onAbort: (abort: () => void) => void) => Effect.Effect<void, FimError>,
    runFork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>,
    now: () => number
  ) {
    const fiber = runFork(run((events) => {
      let text = false
      for (const event of events) {
        if (event._tag === "Text") {
          if (event.text === "") continue
          this.text += event.text
          text = true
        } else {
          // The answer is whole: its consumers are told now (with its text), not once the request's scope closes.
          return this.finish({ _tag: "Done", inputTokens: event.inputTokens, outputTokens: event.outputTokens }, now())
        }
      }
      if (text) this.notify()
    }, (abort) => {
      this.abort = abort
    }))
    this.fiber = fiber
    fiber.addObserver((exit) => {
      if (this.end !== undefined) return
      if (Exit.isSuccess(exit)) return this.finish({ _tag: "Done", inputTokens: 0, outputTokens: 0 }, now())
      const failure = Cause.failureOption(exit.cause)
      this.finish(Option.isSome(failure) ? { _tag: "Failed", error: failure.value } : { _tag: "Interrupted" }, now())
    })
  }

  /** Stops the upstream call (its request aborted); the consumers are told it was interrupted. */
  interrupt(now: number) {
    if (this.end !== undefined) return
    this.finish({ _tag: "Interrupted" }, now)
    // The provider is told now; the fiber's interruption (a later task) only tidies up.
    this.abort?.()
    const fiber = this.fiber
    if (fiber !== undefined) fiber.unsafeInterruptAsFork(fiber.id())
  }

  /**
   * Follows the call until its end: `onChange` at once with what it has, then at every change
   * (in the call that brought it). Leaving early (interruption) interrupts the call when no
   * other consumer follows it.
   */
  follow(onChange: (call: Call) => void, now: () => number): Effect.Effect<CallEnd> {
    return Effect.async<CallEnd>((resume) => {
      const listener = () => {
        onChange(this)
        if (this.end === undefined) return
        this.listeners.delete(listener)
        resume(Effect.succeed(this.end))
      }
      this.listeners.add(listener)
      listener()
      return Effect.sync(() => {
        if (this.listeners.delete(listener) && this.listeners.size === 0) this.interrupt(now())
      })
    })
  }

  private finish(end: CallEnd, at: number) {
    if (this.end !== undefined) return
    this.end = end
    this.endedAt = at
    this.notify()
  }

  private notify() {
    for (const listener of [...this.listeners]) listener()
  }
}
