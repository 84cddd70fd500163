/**
 * `ClientInput.acceptAtOnce`: the one-step path of an append that carries no input. What it
 * takes it takes as `accept` would (in order, settled, the KV answer applied); what it does not
 * take it leaves untouched for `accept`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Metric, MetricLabel, Option } from "effect"
import { ClientMessage } from "../../src/Dialect.js"
import * as Metrics from "../../src/Metrics.js"
import { acceptAtOnce } from "../../src/transport/ClientInput.js"
import type { InputEnv } from "../../src/transport/InputEnv.js"
import { defaultTransportOptions } from "../../src/transport/Options.js"
import { Lifecycle, makeSession } from "../../src/transport/Session.js"
import { Settlement } from "../../src/transport/Settlement.js"
import type { Session } from "../../src/transport/Session.js"

/** What `acceptAtOnce` reads of the env: the session registry and the append window. */
const envOf = (session: Session): InputEnv =>
  ({ options: defaultTransportOptions, sessions: { get: (id: string) => (id === session.requestId ? session : undefined) } }) as unknown as InputEnv

const live = Effect.map(makeSession("req-1", 0), (session) => {
  session.lifecycle = Lifecycle.Running()
  return session
})

const setBlobResult = (id: number, error?: string) => ClientMessage.KvResult({ id, kind: "setBlob", data: undefined, error })
const heartbeat = ClientMessage.Heartbeat()
const atOnceCount = Metric.value(Metric.taggedWithLabels(Metrics.appends, [MetricLabel.make("path", "at_once")])).pipe(Effect.map((state) => state.count))

describe("acceptAtOnce", () => {
  it.effect("takes the next append without an input: the inbox moves on, a duplicate's wait is settled, the metric counts it", () =>
    Effect.gen(function*() {
      const session = yield* live
      const env = envOf(session)
      const before = yield* atOnceCount
      assert.isTrue(yield* acceptAtOnce(env, "req-1", 0, heartbeat))
      assert.strictEqual(session.inbox.next, 1)
      // A copy of seqno 1 waits on its settlement (as `accept` records for a duplicate of a held append).
      const waiting = new Settlement()
      session.unsettled.set(1, waiting)
      assert.isTrue(yield* acceptAtOnce(env, "req-1", 1, ClientMessage.ExecHeartbeat({ id: 3 })))
      assert.isTrue(waiting.isSettled)
      assert.isFalse(session.unsettled.has(1))
      assert.strictEqual(session.inbox.next, 2)
      assert.strictEqual((yield* atOnceCount) - before, 2)
    }))

  it.effect("a blob's acknowledgement settles it (a failed one as failed); a read back completes its wait; the KV request is resolved", () =>
    Effect.gen(function*() {
      const session = yield* live
      const env = envOf(session)
      const acked: Array<[number, boolean]> = []
      session.blobAcks.set(5, (ok) => acked.push([5, ok]))
      session.blobAcks.set(6, (ok) => acked.push([6, ok]))
      session.correlation = { ...session.correlation, kvs: [{ id: 5, kind: "setBlob", blobId: "05" }, { id: 6, kind: "setBlob", blobId: "06" }] }
      assert.isTrue(yield* acceptAtOnce(env, "req-1", 0, setBlobResult(5)))
      assert.isTrue(yield* acceptAtOnce(env, "req-1", 1, setBlobResult(6, "disk full")))
      assert.deepStrictEqual(acked, [[5, true], [6, false]])
      assert.strictEqual(session.blobAcks.size, 0)
      assert.deepStrictEqual(session.correlation.kvs, [])
      const read = yield* Deferred.make<Uint8Array | undefined>()
      session.blobReads.set(7, read)
      const data = new Uint8Array([1, 2, 3])
      assert.isTrue(yield* acceptAtOnce(env, "req-1", 2, ClientMessage.KvResult({ id: 7, kind: "getBlob", data, error: undefined })))
      assert.deepStrictEqual(yield* Deferred.await(read), data)
      assert.strictEqual(session.inbox.next, 3)
    }))

  it.effect("leaves to `accept`, changing nothing: an input, a gap, a duplicate, a KV answer that needs a log line, an ended or replaying request, an unknown request", () =>
    Effect.gen(function*() {
      const session = yield* live
      const env = envOf(session)
      const untouched = () => {
        assert.strictEqual(session.inbox.next, 0)
        assert.strictEqual(session.inbox.held.size, 0)
      }
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, ClientMessage.Cancel({ reason: "stop" })))
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 1, heartbeat))
      assert.isFalse(yield* acceptAtOnce(env, "req-2", 0, heartbeat))
      // A KV answer that matches nothing, and a failed read back: both are logged by `accept`.
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, setBlobResult(9)))
      session.blobReads.set(8, yield* Deferred.make<Uint8Array | undefined>())
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, ClientMessage.KvResult({ id: 8, kind: "getBlob", data: undefined, error: "gone" })))
      assert.isTrue(session.blobReads.has(8))
      untouched()
      session.recovery.adoptFirstAppend = true
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, heartbeat))
      session.recovery.adoptFirstAppend = false
      session.lifecycle = Lifecycle.Ending({ turnId: "t", replayed: true })
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, heartbeat))
      session.lifecycle = Lifecycle.Ended({ atMs: 0, replayed: false })
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, heartbeat))
      untouched()
      // Below `next`: a duplicate.
      session.lifecycle = Lifecycle.Running()
      assert.isTrue(yield* acceptAtOnce(env, "req-1", 0, heartbeat))
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, heartbeat))
      assert.strictEqual(session.inbox.next, 1)
    }))

  it.effect("while another message of the request holds its lock, nothing is taken; once it is released, the append is", () =>
    Effect.gen(function*() {
      const session = yield* live
      const env = envOf(session)
      session.blobAcks.set(5, () => undefined)
      yield* session.lock.take(1)
      assert.isFalse(yield* acceptAtOnce(env, "req-1", 0, setBlobResult(5)))
      assert.strictEqual(session.inbox.next, 0)
      assert.isTrue(session.blobAcks.has(5))
      yield* session.lock.release(1)
      assert.isTrue(yield* acceptAtOnce(env, "req-1", 0, setBlobResult(5)))
      assert.isFalse(session.blobAcks.has(5))
      // The lock is free again for `accept`.
      assert.isTrue(Option.isSome(yield* session.lock.withPermitsIfAvailable(1)(Effect.void)))
    }))
})
