/**
 * Load: 200 conversations at once, each three turns with a tool round trip (a Read answered by
 * a real temp-directory workspace) and a streamed answer of many deltas. Bounded by count, not
 * by time. Asserts that nothing fails and nothing is lost: every turn ends cleanly, every
 * delta's text arrives in order, every tool call completes, and each conversation's history
 * holds exactly its twelve messages.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { AssistantMessage, RequestMessages, ResponseEvent } from "../../src/Llm.js"
import { CursorClient, LocalWorkspace } from "../support/CursorClient.js"
import { assistant, call, toolCalls, usage } from "../support/FakeRuntime.js"
import type { Script } from "../support/FakeRuntime.js"
import * as ServerHarness from "../support/ServerHarness.js"

const CONVERSATIONS = 200
const TURNS = 3
const WORDS = 24

/** The answer after `messageCount` messages, streamed one word per delta. */
const words = (messageCount: number) => Array.from({ length: WORDS }, (_, i) => `w${messageCount}.${i} `)

const streamedAnswer = (messageCount: number): Script => {
  const parts = words(messageCount)
  const message: AssistantMessage = assistant([{ type: "text", text: parts.join("") }], "stop", usage(100, WORDS))
  const events: Array<ResponseEvent> = [
    { _tag: "Start" },
    { _tag: "TextStart", index: 0 },
    ...parts.map((delta): ResponseEvent => ({ _tag: "TextDelta", index: 0, delta })),
    { _tag: "TextEnd", index: 0 },
    { _tag: "Done", reason: "stop", message }
  ]
  return { _tag: "Events", events }
}

/** Asked after a user message: read the notes; asked after the tool result: answer. */
const respond = (request: RequestMessages, callId: string): Script => {
  const last = request.messages[request.messages.length - 1]
  return last?.role === "toolResult"
    ? streamedAnswer(request.messages.length)
    : toolCalls(call(`read-${callId.replace(/[^a-zA-Z0-9]/g, "-")}`, "Read", `{"path":"notes.txt"}`))
}

describe("load", () => {
  it.scopedLive(`${CONVERSATIONS} concurrent conversations x ${TURNS} turns with tool round trips: no error, no lost frame`, () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(join(tmpdir(), "byok-load-"))),
        (path) => Effect.sync(() => rmSync(path, { recursive: true, force: true }))
      )
      writeFileSync(join(dir, "notes.txt"), "line one\nline two\n")
      const harness = yield* ServerHarness.make({ respond, transport: { heartbeatMs: 1_000 } })
      // One client per conversation, as each Cursor window has its own connections (a shared
      // agent's socket limit would otherwise queue appends behind the open RunSSE streams).
      const clients = yield* Effect.acquireRelease(
        Effect.sync(() =>
          Array.from({ length: CONVERSATIONS }, () =>
            new CursorClient({ baseUrl: harness.baseUrl, workspace: new LocalWorkspace(dir), turnTimeoutMs: 120_000, requestTimeoutMs: 60_000 })
          )
        ),
        (all) => Effect.sync(() => all.forEach((c) => c.close()))
      )
      const failures: Array<string> = []
      const conversation = async (n: number) => {
        const client = clients[n]!
        const conversationId = `load-${n}`
        for (let turn = 0; turn < TURNS; turn++) {
          const transcript = await client.run({ conversationId, text: `question ${turn}` })
          const where = `${conversationId} turn ${turn}`
          if (transcript.problems.length > 0) failures.push(`${where}: ${transcript.problems.join("; ")}`)
          if (transcript.end?._tag !== "Ok") failures.push(`${where}: ended ${JSON.stringify(transcript.end)}`)
          // The final answer was asked with 3 + 4 * turn messages; its deltas must all arrive, in order.
          const expected = words(3 + 4 * turn).join("")
          if (transcript.text !== expected) failures.push(`${where}: text ${JSON.stringify(transcript.text.slice(0, 80))}`)
          if (!transcript.events.some((e) => e.kind === "tool_call_completed")) failures.push(`${where}: no tool_call_completed`)
        }
      }
      yield* Effect.promise(() => Promise.all(Array.from({ length: CONVERSATIONS }, (_, n) => conversation(n))))
      assert.deepStrictEqual(failures.slice(0, 5), [], `${failures.length} failures: ${failures.slice(0, 5).join(" | ")}`)
      for (let n = 0; n < CONVERSATIONS; n++) {
        const loaded = yield* harness.store.load(`load-${n}`)
        const roles = Option.getOrThrow(loaded).state.messages.map((m) => m.role)
        assert.strictEqual(roles.length, 4 * TURNS, `load-${n} history: ${roles.join(",")}`)
      }
      assert.strictEqual((yield* harness.llmCalls).length, CONVERSATIONS * TURNS * 2)
    }), 240_000)
})
