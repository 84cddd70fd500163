import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { performance } from "node:perf_hooks"
import { SlicedScheduler, STREAM_MAX_WAIT_MS, URGENT } from "../src/internal/Scheduler.js"

/** Keeps the CPU busy for `ms` (a task that takes longer than a slice). */
const busy = (ms: number) => {
  const until = performance.now() + ms
  while (performance.now() < until) {
    // spin
  }
}

describe("SlicedScheduler", () => {
  it("runs every urgent task before the next normal one, each queue in order", async () => {
    const scheduler = new SlicedScheduler(50)
    // The scheduler only asks whether a task has a fiber: one without is a wake-up, run as urgent.
    const fiber = {} as Fiber.RuntimeFiber<unknown, unknown>
    const ran: Array<string> = []
    await new Promise<void>((done) => {
      scheduler.scheduleTask(() => ran.push("n1"), 0, fiber)
      scheduler.queueNormal(() => {
        ran.push("n2")
        // Queued while a drain runs: the urgent ones still go first.
        scheduler.scheduleTask(() => ran.push("n4"), 0, fiber)
        scheduler.scheduleTask(() => ran.push("u3"), URGENT, fiber)
        scheduler.scheduleTask(() => ran.push("wake"), 0)
      })
      scheduler.scheduleTask(() => ran.push("u1"), URGENT, fiber)
      scheduler.scheduleTask(() => ran.push("u2"), URGENT + 1, fiber)
      scheduler.scheduleTask(() => ran.push("n3"), -1, fiber)
      scheduler.queueNormal(() => done())
    })
    assert.deepStrictEqual(ran, ["u1", "u2", "n1", "n2", "u3", "wake", "n3", "n4"])
    assert.strictEqual(scheduler.pending, 0)
  })

  it("runs the streams' reads after the urgent tasks and before the normal ones, and a read that waited too long first", async () => {
    const scheduler = new SlicedScheduler(50)
    const fiber = {} as Fiber.RuntimeFiber<unknown, unknown>
    const ran: Array<string> = []
    await new Promise<void>((done) => {
      // Queued from a drain, so that none runs in a microtask of its own.
      scheduler.queueNormal(() => {
        scheduler.queueNormal(() => ran.push("n1"))
        scheduler.queueStream(() => ran.push("s1"))
        scheduler.scheduleTask(() => ran.push("u1"), URGENT, fiber)
        scheduler.queueStream(() => ran.push("s2"))
        scheduler.scheduleTask(() => ran.push("u2"), URGENT, fiber)
        scheduler.queueNormal(() => {
          // A read queued now waits behind the urgent task that runs first, and then goes ahead
          // of the next one: it waited longer than STREAM_MAX_WAIT_MS.
          scheduler.queueStream(() => ran.push("s3"))
          scheduler.scheduleTask(() => {
            busy(STREAM_MAX_WAIT_MS + 1)
            ran.push("u3")
          }, URGENT, fiber)
          scheduler.scheduleTask(() => ran.push("u4"), URGENT, fiber)
          scheduler.queueNormal(done)
        })
      })
    })
    assert.deepStrictEqual(ran, ["u1", "u2", "s1", "s2", "n1", "u3", "s3", "u4"])
    assert.strictEqual(scheduler.pending, 0)
  })

  it("gives the event loop back between slices, and goes on after it", async () => {
    const scheduler = new SlicedScheduler(0.5)
    const ran: Array<string> = []
    await new Promise<void>((done) => {
      setImmediate(() => ran.push("io"))
      // Each task outlasts the slice: the drain stops after each one.
      for (let i = 0; i < 4; i++) scheduler.scheduleTask(() => {
        busy(2)
        ran.push(`t${i}`)
        if (i === 0) assert.isFalse(scheduler.backlogged, "not behind while the first slice runs")
        if (i === 3) done()
      }, URGENT, {} as Fiber.RuntimeFiber<unknown, unknown>)
    })
    const io = ran.indexOf("io")
    assert.isAbove(io, 0, "the first slice ran before the event loop's check phase")
    assert.isBelow(io, ran.length - 1, "the check phase ran before the last task")
    assert.deepStrictEqual(ran.filter((r) => r !== "io"), ["t0", "t1", "t2", "t3"])
    assert.isFalse(scheduler.backlogged)
  })

  it("runs urgent tasks at once and normal ones in the check phase, after the ticks and microtasks of the iteration", async () => {
    const scheduler = new SlicedScheduler(50)
    const fiber = {} as Fiber.RuntimeFiber<unknown, unknown>
    const ran: Array<string> = []
    // As from an I/O callback (a macrotask): then ticks run first, then microtasks.
    await new Promise<void>((done) => setImmediate(() => {
      scheduler.scheduleTask(() => ran.push("normal"), 0, fiber)
      scheduler.scheduleTask(() => ran.push("urgent"), URGENT, fiber)
      process.nextTick(() => ran.push("tick"))
      void Promise.resolve().then(() => ran.push("microtask"))
      scheduler.queueNormal(done)
    }))
    // The urgent task's microtask was queued before the promise's; the normal task runs in the next check phase.
    assert.deepStrictEqual(ran, ["tick", "urgent", "microtask", "normal"])
  })

  it("is behind only once a drain ran out of its slice with tasks left; urgent tasks then wait for the check phase", async () => {
    const scheduler = new SlicedScheduler(0.5)
    const fiber = {} as Fiber.RuntimeFiber<unknown, unknown>
    const ran: Array<string> = []
    scheduler.queueNormal(() => ran.push("queued"))
    assert.isFalse(scheduler.backlogged, "queued for the check phase is not behind")
    await new Promise<void>((done) => {
      for (let i = 0; i < 3; i++) scheduler.queueNormal(() => {
        busy(2)
        ran.push(`n${i}`)
        if (i === 0) {
          // Queued while behind work waits: it runs in a later check phase, not in a microtask before it.
          setTimeout(() => {
            assert.isTrue(scheduler.backlogged)
            scheduler.scheduleTask(() => ran.push("urgent"), URGENT, fiber)
            void Promise.resolve().then(() => ran.push("microtask"))
          }, 0)
        }
      })
      scheduler.queueNormal(done)
    })
    assert.isFalse(scheduler.backlogged)
    assert.isBelow(ran.indexOf("queued"), ran.indexOf("n0"))
    assert.isBelow(ran.indexOf("microtask"), ran.indexOf("urgent"))
  })

  it("runs fibers: an urgent fiber's steps go ahead of a normal fiber's", async () => {
    const scheduler = new SlicedScheduler(0.5)
    const steps: Array<string> = []
    const worker = (name: string) =>
      Effect.forEach([1, 2, 3], (step) => Effect.zipRight(Effect.yieldNow(), Effect.sync(() => steps.push(`${name}${step}`))), { discard: true })
    const program = Effect.gen(function*() {
      const normal = yield* Effect.fork(Effect.withSchedulingPriority(worker("n"), 0))
      const urgent = yield* Effect.fork(Effect.withSchedulingPriority(worker("u"), URGENT))
      yield* Fiber.joinAll([normal, urgent])
      // Semaphores and interruption work as on Effect's own scheduler.
      const lock = yield* Effect.makeSemaphore(1)
      const holders = yield* Effect.forEach([1, 2, 3, 4], (i) => Effect.fork(lock.withPermits(1)(Effect.as(Effect.yieldNow(), i))))
      const waiting = yield* Effect.fork(lock.withPermits(1)(Effect.never))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(waiting)
      return [yield* Fiber.joinAll(holders), yield* lock.withPermits(1)(Effect.succeed("free"))] as const
    })
    const [held, free] = await Effect.runPromise(Effect.withScheduler(program, scheduler))
    assert.deepStrictEqual(held, [1, 2, 3, 4])
    assert.strictEqual(free, "free")
    assert.deepStrictEqual(steps.filter((s) => s.startsWith("u")), ["u1", "u2", "u3"])
    assert.isBelow(steps.indexOf("u3"), steps.indexOf("n3"), "the urgent fiber finished first")
  })
})
