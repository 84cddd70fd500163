/**
 * A one-shot signal settled by a plain call: what an append's acknowledgement waits on (the
 * commits of the inputs it carried, a run request's start while its context is read back).
 * Whoever completes the awaited work settles it where it stands (the conversation's actor once
 * it applied an input, in its own fiber), and a waiting answer is one wake-up of its fiber.
 *
 * The transport waited on Effect `Deferred`s instead: a fiber per append joined its commits,
 * then woke the answer's fiber, whose timeout raced two fibers more (a wake-up of each, and the
 * loser's interruption). On an idle server each wake-up is a microtask; under a burst of turns
 * (`bench/ack.ts`: 200 at once) each waits its turn in the run queue, and a scratch trace of
 * the server put ~0.1-0.3 s on each of the four between a run request's commit and its answer.
 */
import { Effect } from "effect"

export class Settlement {
  private done = false
  private listeners: Array<() => void> = []

  get isSettled(): boolean {
    return this.done
  }

  /** Settles it (once; later calls do nothing) and calls every listener, in the order they came. */
  settle(): void {
    if (this.done) return
    this.done = true
    const listeners = this.listeners
    this.listeners = []
    for (const listener of listeners) listener()
  }

  /** Calls `listener` once settled (now, when it is); returns what takes the listener back. */
  onSettled(listener: () => void): () => void {
    if (this.done) {
      listener()
      return () => {}
    }
    this.listeners.push(listener)
    return () => {
      const at = this.listeners.indexOf(listener)
      if (at >= 0) this.listeners.splice(at, 1)
    }
  }
}

/** Settles `target` once every one of `waits` is settled (now, when none is pending). */
export const settleAfter = (target: Settlement, waits: ReadonlyArray<Settlement>): void => {
  let pending = 0
  for (const wait of waits) if (!wait.isSettled) pending++
  if (pending === 0) return target.settle()
  for (const wait of waits) {
    if (wait.isSettled) continue
    wait.onSettled(() => {
      if (--pending === 0) target.settle()
    })
  }
}

/** Waits until `settlement` is settled. */
export const awaitSettlement = (settlement: Settlement): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    if (settlement.isSettled) return resume(Effect.void)
    const remove = settlement.onSettled(() => resume(Effect.void))
    return Effect.sync(remove)
  })

/** Waits until `settlement` is settled, at most `ms`; then fails with `onTimeout()` (made then). */
export const awaitSettlementFor = <E>(settlement: Settlement, ms: number, onTimeout: () => E): Effect.Effect<void, E> =>
  Effect.async<void, E>((resume) => {
    if (settlement.isSettled) return resume(Effect.void)
    let timer: ReturnType<typeof setTimeout> | undefined = undefined
    const remove = settlement.onSettled(() => {
      clearTimeout(timer)
      resume(Effect.void)
    })
    timer = setTimeout(() => {
      remove()
      resume(Effect.fail(onTimeout()))
    }, ms)
    return Effect.sync(() => {
      clearTimeout(timer)
      remove()
    })
  })
