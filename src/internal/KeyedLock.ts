/**
 * A mutex per key (one per conversation): a `Semaphore(1)` made on first use and forgotten as
 * soon as no fiber holds it or waits for it.
 *
 * The permit is taken by `Semaphore.withPermits`, which waits interruptibly, so a fiber queued
 * behind the holder can abandon its place (a client that goes away). An earlier version kept
 * the semaphores in an `RcMap` with an idle time to live: each use built a scope and, on
 * release, forked the fiber that expires the entry, the larger part of the runner's own fiber
 * operations for a short turn (counted with a scratch run-loop hook); a semaphore is cheap to
 * make again.
 */
import { Effect } from "effect"

export interface KeyedLock {
  /** Runs `self` holding the key's lock. */
  readonly withLock: (key: string) => <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** The keys with a holder or a waiter. */
  readonly size: () => number
}

interface Entry {
  readonly semaphore: Effect.Semaphore
  /** The holder and the waiters. */
  users: number
}

export const makeKeyedLock = (): Effect.Effect<KeyedLock> =>
  Effect.sync(() => {
    const entries = new Map<string, Entry>()
    const withLock = (key: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      Effect.suspend(() => {
        let entry = entries.get(key)
        if (entry === undefined) {
          entry = { semaphore: Effect.unsafeMakeSemaphore(1), users: 0 }
          entries.set(key, entry)
        }
        const held = entry
        held.users++
        return Effect.ensuring(
          held.semaphore.withPermits(1)(self),
          Effect.sync(() => {
            if (--held.users === 0 && entries.get(key) === held) entries.delete(key)
          })
        )
      })
    return { withLock, size: () => entries.size }
  })
