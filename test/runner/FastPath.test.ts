import { assert, describe, it } from "@effect/vitest"
import { Effect, Mailbox } from "effect"
import type { ResponseEvent } from "../../src/Llm.js"
import { initialRuntime, Input, makeTransition } from "../../src/Loop.js"
import type { RuntimeState, TurnSettings } from "../../src/Loop.js"
import type { Actor, Envelope, RunnerEnv } from "../../src/runner/Actor.js"
import { stepInline } from "../../src/runner/FastPath.js"
import { testPolicy } from "../support/LoopScenario.js"

const transition = makeTransition(testPolicy)
const settings: TurnSettings = { model: "fake-model", mode: "agent" }
const CALL = "c/t1/c0"

const streaming = (): RuntimeState => {
  const started = transition(initialRuntime("c"), Input.Start({ message: { role: "user", content: [{ type: "text", text: "hi" }] }, context: [], settings }))
  return transition(started.state, Input.LlmEvent({ callId: CALL, event: { _tag: "Start" } })).state
}

const text = (delta: string): ResponseEvent => ({ _tag: "TextDelta", index: 0, delta })

const setup = (options: { readonly open?: boolean; readonly live?: boolean } = {}) =>
  Effect.gen(function*() {
    const published: Array<ReadonlyArray<ResponseEvent>> = []
    const mailbox = yield* Mailbox.make<Envelope>()
    const actor: Actor = { conversationId: "c", mailbox, done: Effect.void, state: { runtime: streaming(), version: 3 }, pending: 0 }
    const env = {
      transition,
      isLive: () => options.live ?? true,
      gateway: {
        publishNow: (_turn: unknown, _callId: string, events: ReadonlyArray<ResponseEvent>) => {
          if (options.open === false) return false
          published.push(events)
          return true
        }
      }
    } as unknown as RunnerEnv
    return { actor, env, published }
  })

describe("the delta fast path", () => {
  it.effect("applies a read's deltas in the stream's call and publishes them once, coalesced", () =>
    Effect.gen(function*() {
      const { actor, env, published } = yield* setup()
      const before = actor.state!
      assert.strictEqual(stepInline(env, actor, CALL, [text("a"), text("b"), text("c")], 0), 3)
      assert.deepStrictEqual(published, [[text("abc")]])
      // Nothing committed: the committed state and version are the ones the actor had.
      assert.strictEqual(actor.state!.runtime.committed, before.runtime.committed)
      assert.strictEqual(actor.state!.version, 3)
      assert.strictEqual(actor.state!.runtime.pending?.blocks[0]?.text, "abc")
    }))

  it.effect("stops at the first event that commits: the rest goes to the actor", () =>
    Effect.gen(function*() {
      const { actor, env, published } = yield* setup()
      const done: ResponseEvent = {
        _tag: "Done",
        reason: "stop",
        message: {
          role: "assistant",
          content: [{ type: "text", text: "ab" }],
          api: "test",
          provider: "fake",
          model: "fake-model",
          usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
          stopReason: "stop"
        }
      }
      assert.strictEqual(stepInline(env, actor, CALL, [text("a"), text("b"), done, text("late")], 0), 2)
      assert.deepStrictEqual(published, [[text("ab")]])
    }))

  it.effect("takes nothing while the actor has envelopes queued or in hand, or is not the live one", () =>
    Effect.gen(function*() {
      const busy = yield* setup()
      busy.actor.pending = 1
      const before = busy.actor.state
      assert.strictEqual(stepInline(busy.env, busy.actor, CALL, [text("a")], 0), 0)
      assert.strictEqual(busy.actor.state, before)
      assert.deepStrictEqual(busy.published, [])
      const stale = yield* setup({ live: false })
      assert.strictEqual(stepInline(stale.env, stale.actor, CALL, [text("a")], 0), 0)
      assert.deepStrictEqual(stale.published, [])
    }))

  it.effect("changes nothing when the turn's request cannot take the frames now", () =>
    Effect.gen(function*() {
      const { actor, env, published } = yield* setup({ open: false })
      const before = actor.state
      assert.strictEqual(stepInline(env, actor, CALL, [text("a")], 0), 0)
      assert.strictEqual(actor.state, before)
      assert.deepStrictEqual(published, [])
    }))
})
