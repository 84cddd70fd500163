/**
 * A mutex per key (one per conversation), created on first use and released a while after its
 * last holder and waiter leave: an `RcMap` of `Semaphore(1)`.
 *
 * The permit is taken with `uninterruptibleMask`/`restore` rather than inside `acquireRelease`
 * so that a fiber queued behind the holder stays interruptible (a client that goes away must be
 * able to abandon its place in the queue).
 */
import { Effect, RcMap, Scope } from "effect"
import type { Duration } from "effect"

export interface KeyedLock {
  /** Holds the key's lock for the rest of the current scope. */
  readonly lockScoped: (key: string) => Effect.Effect<void, never, Scope.Scope>
  /** Runs `self` holding the key's lock. */
  readonly withLock: (key: string) => <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

export const makeKeyedLock = (idleTimeToLive: Duration.DurationInput): Effect.Effect<KeyedLock, never, Scope.Scope> =>
  Effect.gen(function*() {
    const semaphores = yield* RcMap.make({
      lookup: (_key: string) => Effect.makeSemaphore(1),
      idleTimeToLive
    })
    const lockScoped = (key: string) =>
      Effect.flatMap(RcMap.get(semaphores, key), (semaphore) =>
        Effect.uninterruptibleMask((restore) =>
          restore(semaphore.take(1)).pipe(Effect.zipRight(Effect.addFinalizer(() => semaphore.release(1))))
        ))
    const withLock = (key: string) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(
        Scope.make(),
        (scope) => Effect.zipRight(Scope.extend(lockScoped(key), scope), self),
        (scope, exit) => Scope.close(scope, exit)
      )
    return { lockScoped, withLock }
  })
