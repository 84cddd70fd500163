import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Stream, TestClock } from "effect"
import { makeTurnChannel } from "../../src/transport/TurnChannel.js"

const frame = (n: number) => new Uint8Array([n])
const ids = (chunk: Chunk.Chunk<Uint8Array>) => Chunk.toArray(chunk).map((f) => f[0])

describe("TurnChannel", () => {
  it.effect("a reader gets the backlog, then live frames, then the end frame", () =>
    Effect.gen(function*() {
      const channel = makeTurnChannel("r1")
      yield* channel.write([frame(1), frame(2)])
      const reader = yield* channel.attach()
      const collected = yield* Effect.fork(Stream.runCollect(reader))
      yield* channel.write([frame(3)])
      yield* channel.close(frame(9))
      yield* channel.write([frame(4)])
      assert.deepStrictEqual(ids(yield* Fiber.join(collected)), [1, 2, 3, 9])
    }))

  it.effect("a reconnect replays everything from the start; the old reader ends", () =>
    Effect.gen(function*() {
      const channel = makeTurnChannel("r1")
      yield* channel.write([frame(1)])
      const first = yield* Effect.fork(Stream.runCollect(yield* channel.attach()))
      yield* channel.write([frame(2)])
      const second = yield* Effect.fork(Stream.runCollect(yield* channel.attach()))
      assert.deepStrictEqual(ids(yield* Fiber.join(first)), [1, 2])
      yield* channel.write([frame(3)])
      yield* channel.close(frame(9))
      assert.deepStrictEqual(ids(yield* Fiber.join(second)), [1, 2, 3, 9])
    }))

  it.effect("writes go on without a reader, and a late reader of a closed channel gets all of it", () =>
    Effect.gen(function*() {
      const channel = makeTurnChannel("r1")
      yield* channel.write([frame(1)])
      yield* channel.close(frame(9))
      yield* channel.close(frame(8))
      assert.isFalse(channel.isAttached())
      assert.deepStrictEqual(ids(yield* Stream.runCollect(yield* channel.attach())), [1, 9])
    }))

  it.effect("heartbeats: one at once when there is nothing to replay, then every interval; never kept in the backlog; the reader still ends after the end frame", () =>
    Effect.gen(function*() {
      const channel = makeTurnChannel("r1")
      const beat = { frame: frame(0), interval: "5 seconds" } as const
      const reader = yield* Effect.fork(Stream.runCollect(yield* channel.attach(beat)))
      yield* channel.write([frame(1)])
      yield* TestClock.adjust("5 seconds")
      yield* channel.write([frame(2)])
      yield* TestClock.adjust("10 seconds")
      yield* channel.close(frame(9))
      assert.deepStrictEqual(ids(yield* Fiber.join(reader)), [0, 1, 0, 2, 0, 0, 9])
      assert.isTrue(channel.endDelivered())
      assert.strictEqual(channel.size(), 3)
      // A reconnect with a backlog starts with the backlog, not a heartbeat.
      assert.deepStrictEqual(ids(yield* Stream.runCollect(yield* channel.attach(beat))), [1, 2, 9])
    }))

  it.effect("the end is delivered only once a reader has taken the end frame", () =>
    Effect.gen(function*() {
      const channel = makeTurnChannel("r1")
      yield* channel.close(frame(9))
      assert.isFalse(channel.endDelivered())
      yield* Stream.runCollect(yield* channel.attach())
      assert.isTrue(channel.endDelivered())
    }))
})
