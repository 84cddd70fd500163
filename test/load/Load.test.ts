/**
 * Load: 200 conversations at once for 30 s (issue 7), each running turns back to back until
 * the 30 s are up (at least three each): a tool round trip (a Read answered by a real
 * temp-directory workspace) and a streamed answer of many deltas per turn. Asserts that
 * nothing fails and nothing is lost: every turn ends cleanly, every delta's text arrives in
 * order, every tool call completes, every turn ends with turn_ended and its checkpoint (each
 * run request carrying the previous checkpoint, as Cursor's does), each conversation's history
 * holds exactly four messages per turn it ran, and the model was called exactly twice per turn. Nothing about how long
 * anything took is asserted: the 30 s only decide how much work is offered
 * (`BYOK_LOAD_SECONDS` changes them).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { ConversationStateStructure } from "../../src/gen/agent/v1/agent_pb.js"
import type { AssistantMessage, RequestMessages, ResponseEvent } from "../../src/Llm.js"
import { CursorClient, LocalWorkspace } from "../support/CursorClient.js"
import { assistant, call, toolCalls, usage } from "../support/FakeRuntime.js"
import type { Script } from "../support/FakeRuntime.js"
import * as Transport from "../../src/Transport.js"
import * as ServerHarness from "../support/ServerHarness.js"

const CONVERSATIONS = Number(process.env["BYOK_LOAD_CONVERSATIONS"] ?? 200)
const MIN_TURNS = 3
const SECONDS = Number(process.env["BYOK_LOAD_SECONDS"] ?? 30)
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
  it.scopedLive(`${CONVERSATIONS} concurrent conversations for ${SECONDS} s (at least ${MIN_TURNS} turns each) with tool round trips: no error, no lost frame`, () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(join(tmpdir(), "byok-load-"))),
        (path) => Effect.sync(() => rmSync(path, { recursive: true, force: true }))
      )
      writeFileSync(join(dir, "notes.txt"), "line one\nline two\n")
      const harness = yield* ServerHarness.make({ respond, transport: { heartbeatMs: 1_000, blobAckTimeoutMs: Transport.defaultTransportOptions.blobAckTimeoutMs } })
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
      const turnsRun: Array<number> = Array.from({ length: CONVERSATIONS }, () => 0)
      // From turn_ended to the checkpoint (the wait for the set_blob acknowledgements): printed, not asserted.
      const checkpointWaits: Array<number> = []
      const until = Date.now() + SECONDS * 1000
      const conversation = async (n: number) => {
        const client = clients[n]!
        const conversationId = `load-${n}`
        // As Cursor does, each turn's run request carries the checkpoint the previous turn ended with.
        let conversationState: ConversationStateStructure | undefined
        for (let turn = 0; turn < MIN_TURNS || Date.now() < until; turn++) {
          turnsRun[n] = turn + 1
          const transcript = await client.run({ conversationId, text: `question ${turn}`, ...(conversationState !== undefined ? { conversationState } : {}) })
          conversationState = transcript.checkpoints[transcript.checkpoints.length - 1]
          const where = `${conversationId} turn ${turn}`
          if (transcript.problems.length > 0) failures.push(`${where}: ${transcript.problems.join("; ")}`)
          if (transcript.end?._tag !== "Ok") failures.push(`${where}: ended ${JSON.stringify(transcript.end)}`)
          // The final answer was asked with 3 + 4 * turn messages; its deltas must all arrive, in order.
          const expected = words(3 + 4 * turn).join("")
          if (transcript.text !== expected) failures.push(`${where}: text ${JSON.stringify(transcript.text.slice(0, 80))}`)
          if (!transcript.events.some((e) => e.kind === "tool_call_completed")) failures.push(`${where}: no tool_call_completed`)
          const ended = transcript.frames.find((f) => f.event.kind === "turn_ended")
          const checkpoint = transcript.frames.find((f) => f.event.kind === "checkpoint")
          if (ended === undefined || checkpoint === undefined) failures.push(`${where}: ${ended === undefined ? "no turn_ended" : "no checkpoint"}`)
          else checkpointWaits.push(checkpoint.at - ended.at)
        }
      }
      yield* Effect.promise(() => Promise.all(Array.from({ length: CONVERSATIONS }, (_, n) => conversation(n))))
      assert.deepStrictEqual(failures.slice(0, 5), [], `${failures.length} failures: ${failures.slice(0, 5).join(" | ")}`)
      for (let n = 0; n < CONVERSATIONS; n++) {
        const loaded = yield* harness.store.load(`load-${n}`)
        const roles = Option.getOrThrow(loaded).state.messages.map((m) => m.role)
        assert.strictEqual(roles.length, 4 * turnsRun[n]!, `load-${n} history: ${roles.join(",")}`)
      }
      const turns = turnsRun.reduce((a, b) => a + b, 0)
      assert.strictEqual((yield* harness.llmCalls).length, turns * 2)
      checkpointWaits.sort((a, b) => a - b)
      const waitAt = (q: number) => (checkpointWaits[Math.min(checkpointWaits.length - 1, Math.floor(q * checkpointWaits.length))]! / 1000).toFixed(1)
      console.log(`[load] ${CONVERSATIONS} conversations, ${turns} turns in all (${Math.min(...turnsRun)}-${Math.max(...turnsRun)} each) over ${SECONDS} s of offered work, no failure, every turn checkpointed; turn_ended to checkpoint p50 ${waitAt(0.5)} s, max ${waitAt(1)} s`)
    }), 300_000)
})
