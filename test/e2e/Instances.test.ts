/**
 * Several instances on one PostgreSQL database (issue 42), as real processes (`node dist/main.js`)
 * behind a test balancer that sends each request to the next instance in turn, so a turn's
 * RunSSE and its appends land on different instances: the instance holding the request serves
 * them, the other forwards. A SIGKILL of the instance holding a live turn: the client's reconnect
 * reaches the other, which takes the request over and re-issues the model call from the store.
 * Two instances given inputs of one conversation at once: one model stream at a time. Skipped
 * when the run has no PostgreSQL (never in CI).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { inject } from "vitest"
import * as Dialect from "../../src/Dialect.js"
import * as AppHarness from "../support/AppHarness.js"
import * as Balancer from "../support/Balancer.js"
import * as ChildServer from "../support/ChildServer.js"
import { LocalWorkspace } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { sseTurn, transportOf } from "../support/OfficialClients.js"
import { freshDatabase } from "../support/Postgres.js"
import { holderAddress } from "../support/Registry.js"
import { assertCleanOk, clientFor, endCode, shape, tempDirectory } from "../support/Transcripts.js"

const postgresUrl = inject("postgresUrl")

interface ChatBody {
  readonly messages: ReadonlyArray<Record<string, unknown>>
}

/** Two server processes on one fresh PostgreSQL database, and the fake provider they both call. */
const twoInstances = Effect.gen(function*() {
  const provider = yield* FakeProvider.make
  const database = yield* Effect.promise(() => freshDatabase(postgresUrl!, "instances"))
  const start = () =>
    ChildServer.make({ config: AppHarness.fileConfigJson(provider.baseUrl), database, h2c: true, env: { [AppHarness.API_KEY_ENV]: AppHarness.API_KEY } })
  const [a, b] = yield* Effect.all([start(), start()], { concurrency: 2 })
  return { provider, database, a, b }
})

const bodyOf = (provider: FakeProvider.FakeProvider, index: number): ChatBody => JSON.parse(provider.requests[index]!.body) as ChatBody

describe.skipIf(postgresUrl === undefined)("several instances on one PostgreSQL database (child processes, a balancer with no affinity)", () => {
  it.scopedLive("a tool turn and the next one through a balancer that alternates requests: both instances serve, the requests' bytes extend", () =>
    Effect.gen(function*() {
      const { a, b, provider } = yield* twoInstances
      const balancer = yield* Balancer.make([a.baseUrl, b.baseUrl])
      const dir = yield* tempDirectory("cursor-byok-instances-ws-")
      writeFileSync(join(dir, "a.ts"), "export const a = 1\n")
      provider.enqueue(
        FakeProvider.sse(FakeProvider.openAiChat.toolCall("call-read", "Read", `{"path":"a.ts"}`)),
        FakeProvider.sse(FakeProvider.openAiChat.text("a is 1")),
        FakeProvider.sse(FakeProvider.openAiChat.text("and b is not there"))
      )
      const client = yield* clientFor(balancer, { workspace: new LocalWorkspace(dir), turnTimeoutMs: 30_000 })
      const first = yield* Effect.promise(() => client.run({ conversationId: "conv-lb", text: "what is a?" }))
      const diagnostics = `\n${balancer.log.join("\n")}\nA:\n${a.stdout()}\nB:\n${b.stdout()}`
      assert.deepStrictEqual(first.problems, [], diagnostics)
      assert.deepStrictEqual(first.end, Dialect.EndStream.Ok(), diagnostics)
      assert.deepStrictEqual(shape(first), ["partial_tool_call", "tool_call_started", "exec", "tool_call_completed", "text_delta", "kv_set", "turn_ended", "checkpoint"], diagnostics)
      assert.strictEqual(first.text, "a is 1")
      const second = yield* Effect.promise(() => client.run({ conversationId: "conv-lb", text: "and b?", conversationState: first.checkpoints[0]! }))
      assertCleanOk(second)
      assert.strictEqual(second.text, "and b is not there")
      // Each instance answered some of the calls; the requests still extend one another byte for byte.
      assert.isAbove(balancer.served.get(a.baseUrl)!, 0, diagnostics)
      assert.isAbove(balancer.served.get(b.baseUrl)!, 0, diagnostics)
      assert.strictEqual(provider.requests.length, 3)
      for (const k of [1, 2]) {
        const before = provider.requests[k - 1]!.body
        assert.isTrue(provider.requests[k]!.body.startsWith(before.slice(0, -2)), `request ${k} does not extend request ${k - 1}`)
      }
      assert.deepStrictEqual(bodyOf(provider, 2).messages.slice(1).map((m) => m["role"]), ["user", "assistant", "tool", "assistant", "user"])
    }), { timeout: 90_000 })

  it.scopedLive("the official Connect clients in Connect, gRPC-Web and gRPC: appends to one instance, the stream read from the other", () =>
    Effect.gen(function*() {
      const { a, b, provider } = yield* twoInstances
      const cases = [["connect", "1.1", a.baseUrl, b.baseUrl], ["grpc-web", "1.1", a.baseUrl, b.baseUrl], ["grpc", "2", a.h2cUrl!, b.h2cUrl!]] as const
      for (const [protocol, httpVersion, appendsTo, readsFrom] of cases) {
        provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text(`answered over ${protocol}`)))
        const messages = yield* Effect.promise(() =>
          sseTurn(transportOf(protocol, appendsTo, httpVersion), `conv-${protocol}`, "hello", `req-${protocol}`, transportOf(protocol, readsFrom, httpVersion)))
        const text = messages.flatMap((m) => m.message.case === "interactionUpdate" && m.message.value.message.case === "textDelta" ? [m.message.value.message.value.text] : []).join("")
        assert.strictEqual(text, `answered over ${protocol}`, `${protocol}\nA:\n${a.stdout()}\nB:\n${b.stdout()}`)
        assert.isTrue(messages.some((m) => m.message.case === "interactionUpdate" && m.message.value.message.case === "turnEnded"), protocol)
      }
    }), { timeout: 90_000 })

  it.scopedLive("SIGKILL of the instance holding a live turn: the reconnect reaches the other, which re-issues the model call once and finishes the turn", () =>
    Effect.gen(function*() {
      const { a, b, provider, database } = yield* twoInstances
      const balancer = yield* Balancer.make([a.baseUrl, b.baseUrl])
      provider.enqueue(
        FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 100 }, (_, k) => `slow${k} `), 200)),
        FakeProvider.sse(FakeProvider.openAiChat.text("the complete answer", 3))
      )
      const client = yield* clientFor(balancer, { turnTimeoutMs: 40_000, delivery: { _tag: "sequential" } })
      const turn = client.turn({ conversationId: "conv-failover", requestId: "req-failover", messageId: "msg-failover", text: "tell me everything" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta", 20_000))
      const holder = yield* Effect.promise(() => holderAddress(database, "req-failover"))
      const [dead, alive] = holder === new URL(a.baseUrl).origin ? [a, b] : [b, a]
      assert.strictEqual(holder, new URL(dead.baseUrl).origin)
      turn.disconnect()
      yield* Effect.promise(() => dead.kill("SIGKILL"))
      assert.strictEqual(provider.requests.length, 1)
      const resumedAt = Date.now()
      yield* Effect.promise(() => turn.reconnect())
      const transcript = yield* Effect.promise(() => turn.done)
      const diagnostics = `\n${balancer.log.join("\n")}\nalive:\n${alive.stdout()}\n${alive.stderr()}`
      console.log(`[e2e measure] failover: the reconnect to the turn's end on the other instance took ${Date.now() - resumedAt} ms`)
      assert.deepStrictEqual(transcript.problems, [], diagnostics)
      assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok(), diagnostics)
      assert.strictEqual(transcript.text, "the complete answer")
      // Re-issued exactly once, with the very same request bytes, by the instance that is left.
      assert.strictEqual(provider.requests.length, 2, diagnostics)
      assert.strictEqual(provider.requests[1]!.body, provider.requests[0]!.body)
      assert.include(alive.stdout(), "took over req-failover", diagnostics)
      assert.strictEqual(yield* Effect.promise(() => holderAddress(database, "req-failover")), new URL(alive.baseUrl).origin)
      // The conversation goes on there.
      provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("and more")))
      const next = yield* Effect.promise(() => client.run({ conversationId: "conv-failover", text: "go on", conversationState: transcript.checkpoints[0]! }))
      assertCleanOk(next)
      assert.deepStrictEqual(bodyOf(provider, 2).messages.slice(1).map((m) => [m["role"], m["content"]]), [
        ["user", "tell me everything"],
        ["assistant", "the complete answer"],
        ["user", "go on"]
      ])
    }), { timeout: 90_000 })

  it.scopedLive("SIGKILL, then resume_action from a new request on the other instance: the turn is taken over and finishes there", () =>
    Effect.gen(function*() {
      const { a, b, provider } = yield* twoInstances
      provider.enqueue(
        FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 100 }, (_, k) => `slow${k} `), 200)),
        FakeProvider.sse(FakeProvider.openAiChat.text("the complete answer", 3))
      )
      const onA = yield* clientFor(a, { turnTimeoutMs: 40_000 })
      const turn = onA.turn({ conversationId: "conv-resume", text: "tell me everything" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta", 20_000))
      turn.disconnect()
      yield* Effect.promise(() => a.kill("SIGKILL"))
      const onB = yield* clientFor(b, { turnTimeoutMs: 40_000 })
      const resumed = yield* Effect.promise(() => onB.run({ conversationId: "conv-resume", text: "", resume: true }))
      const diagnostics = `\nB:\n${b.stdout()}\n${b.stderr()}`
      assert.deepStrictEqual(resumed.problems, [], diagnostics)
      assert.deepStrictEqual(resumed.end, Dialect.EndStream.Ok(), diagnostics)
      assert.strictEqual(resumed.text, "the complete answer")
      assert.strictEqual(provider.requests.length, 2, diagnostics)
      assert.strictEqual(provider.requests[1]!.body, provider.requests[0]!.body)
    }), { timeout: 90_000 })

  it.scopedLive("a new message of a chat on the other instance while its turn streams: superseded as on one instance, one model stream at a time", () =>
    Effect.gen(function*() {
      const { a, b, provider } = yield* twoInstances
      const { chunk } = FakeProvider.openAiChat
      // A slow answer that never ends unless the server aborts it, then the second turn's.
      provider.enqueue(
        FakeProvider.sse([chunk({ role: "assistant", content: "" }), { delayMs: 20 }, chunk({ content: "Partial " }), { delayMs: 20 }, chunk({ content: "answer" })], { end: "stall" }),
        FakeProvider.sse(FakeProvider.openAiChat.text("Second answer"))
      )
      const onA = yield* clientFor(a, { turnTimeoutMs: 30_000 })
      const onB = yield* clientFor(b, { turnTimeoutMs: 30_000 })
      const first = onA.turn({ conversationId: "conv-both", text: "first question" })
      yield* Effect.promise(() =>
        first.waitFor(() => first.frames.filter((f) => f.event.kind === "text_delta").map((f) => (f.event as { text: string }).text).join("") === "Partial answer", 20_000)
      )
      // The next message, as a new request on the same chat, sent to the other instance.
      const second = yield* Effect.promise(() => onB.run({ conversationId: "conv-both", text: "second question" }))
      const firstDone = yield* Effect.promise(() => first.done)
      const diagnostics = `\nA:\n${a.stdout()}\nB:\n${b.stdout()}`
      assertCleanOk(second)
      assert.strictEqual(second.text, "Second answer")
      assert.strictEqual(provider.requests.length, 2)
      assert.strictEqual(provider.peakOpen(), 1, diagnostics)
      // The second call's history: the first question, the first turn's partial answer, the second question.
      assert.deepStrictEqual(bodyOf(provider, 1).messages.slice(1).map((m) => [m["role"], m["content"]]), [
        ["user", "first question"],
        ["assistant", "Partial answer"],
        ["user", "second question"]
      ])
      // The old turn's stream ended canceled, as on one instance, its partial answer kept.
      assert.deepStrictEqual(firstDone.problems, [], diagnostics)
      assert.strictEqual(endCode(firstDone), "canceled", diagnostics)
      assert.strictEqual(firstDone.text, "Partial answer")
    }), { timeout: 90_000 })
})
