/**
 * What the store's segment tests share: a SQLite file with the SQL beside the Store, the real
 * loop with compaction knobs and prompt ids, and a driver that commits each transition as the
 * runner does (`commitOf`).
 */
import { FileSystem, Path } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { assert } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import {
  messageHash,
  
  serializeMessage,
  
  
} from "../../src/Llm.js"
import type { AssistantMessage, Message, ResponseEvent, ToolCall, ToolResultMessage, UserMessage } from "../../src/Llm.js"
import {
  initialRuntime,
  Input,
  makeTransition,
  
  
  
  
} from "../../src/Loop.js"
import type { Command, CompactionPolicy, ConversationState, Policy, Transition, TurnSettings } from "../../src/Loop.js"
import type { RunnerOptions } from "../../src/Runner.js"
import type { ActorState } from "../../src/runner/Actor.js"
import { commitOf } from "../../src/runner/Commits.js"
import * as Store from "../../src/Store.js"
import type { CommitInput } from "../../src/Store.js"
import { testPolicy } from "../support/LoopScenario.js"

// =============================================================================
// The database
// =============================================================================

/** The Store and the SQL beside it, on one connection (so tests can count and damage rows). */
export const withSql = (filename: string) => Store.layerSql.pipe(Layer.provideMerge(Store.layerSqliteClient({ filename })))

export const tempDatabase = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-segments-" })
  return path.join(directory, "store.db")
})

export const loadSome = (conversationId: string) =>
  Effect.flatMap(Store.Store, (store) => store.load(conversationId)).pipe(Effect.map(Option.getOrThrow))

/** What the journal holds for a conversation, row by row. */
export const journalOf = (conversationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ seq: number; message_json: string }>`
      SELECT seq, message_json FROM messages WHERE conversation_id = ${conversationId} ORDER BY seq`)

export const conversationRow = (conversationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ version: number; message_count: number; segment_start: number; messages_hash: string }>`
      SELECT version, message_count, segment_start, messages_hash FROM conversations WHERE conversation_id = ${conversationId}`).pipe(
      Effect.map((rows) => rows[0]!)
    )

export const countOf = (table: "input_commits" | "llm_calls" | "segments" | "turn_starts" | "messages", conversationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*) AS n FROM ${sql(table)} WHERE conversation_id = ${conversationId}`).pipe(
      Effect.map((rows) => Number(rows[0]!.n))
    )

/** The segment records, with the fields a compaction or a rewind sets (not the timestamp). */
export const segmentsOf = (conversationId: string) =>
  Effect.flatMap(Store.Store, (store) => store.segments(conversationId)).pipe(
    Effect.map((records) =>
      records.map(({ kept, kind, previousStart, replaced, start, summaryCallId, turnId }) => ({
        start,
        kind,
        turnId,
        summaryCallId,
        previousStart,
        replaced,
        kept
      }))
    )
  )

export const failure = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error(`expected a failure, got ${JSON.stringify(exit.value)}`)
  const error = Cause.failureOption(exit.cause)
  if (Option.isNone(error)) throw new Error(`expected a typed failure, got ${Cause.pretty(exit.cause)}`)
  return error.value
}

export const serialized = (messages: ReadonlyArray<Message>) => messages.map(serializeMessage)

// =============================================================================
// The loop, committed as the runner commits it
// =============================================================================

export const knobs = (window: number | undefined, overrides: Partial<CompactionPolicy> = {}): CompactionPolicy => ({
  contextWindowOf: () => window,
  auto: true,
  threshold: 0.8,
  tailShare: 0.15,
  summaryMaxTokens: 321,
  elideToolResultChars: 40,
  ...overrides
})

export const policyWith = (compaction: CompactionPolicy): Policy => ({
  ...testPolicy,
  compaction,
  promptIdOf: (message) => messageHash(message)
})

/** Manual compaction only (no window known). */
export const manualPolicy = policyWith(knobs(undefined))

export const optionsFor = (policy: Policy): RunnerOptions => ({
  policy,
  classifyTool: () => ({ kind: "read", idempotent: true }),
  interruptedResult: (toolCall) => ({
    role: "toolResult",
    toolCallId: toolCall.id,
    toolName: toolCall.name,
    content: [{ type: "text", text: "interrupted" }],
    isError: true
  })
})

export const settings: TurnSettings = { model: "fake-model", mode: "agent" }
export const user = (text: string): UserMessage => ({ role: "user", content: [{ type: "text", text }] })
export const answer = (content: AssistantMessage["content"], input = 10, stopReason: AssistantMessage["stopReason"] = "stop"): AssistantMessage => ({
  role: "assistant",
  content,
  api: "test",
  provider: "fake",
  model: "fake-model",
  usage: { input, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  stopReason
})
export const text = (value: string) => ({ type: "text" as const, text: value })
export const readCall = (id: string): ToolCall => ({ type: "toolCall", id, name: "read", arguments: `{"path":"${id}.log"}` })
export const readResult = (id: string, body: string): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: id,
  toolName: "read",
  content: [text(body)],
  isError: false
})

export const expectTag = <T extends Command["_tag"]>(command: Command, tag: T): Extract<Command, { _tag: T }> => {
  assert.strictEqual(command._tag, tag, `expected ${tag}, got ${command._tag}`)
  return command as Extract<Command, { _tag: T }>
}

/** One input through the loop, and the commit the runner would make of it (none when nothing committed changed). */
export interface Prepared {
  readonly t: Transition
  readonly commit: CommitInput | undefined
}

/**
 * Drives the real transition for one conversation and commits each state change through the
 * store, exactly as the runner does (`commitOf` with the state and version before the input).
 */
export const makeDriver = (conversationId: string, policy: Policy, initial?: ActorState) =>
  Effect.gen(function*() {
    const store = yield* Store.Store
    const transition = makeTransition(policy)
    const options = optionsFor(policy)
    let acc: ActorState = initial ?? { runtime: initialRuntime(conversationId), version: 0 }
    let seq = 0

    const prepare = (input: Input): Prepared => {
      const t = transition(acc.runtime, input)
      const commit = t.state.committed === acc.runtime.committed
        ? undefined
        : commitOf(options, conversationId, `${conversationId}/in-${seq++}`, acc.version, t)
      return { t, commit }
    }
    const apply = (prepared: Prepared) =>
      Effect.gen(function*() {
        if (prepared.commit === undefined) {
          acc = { ...acc, runtime: prepared.t.state }
          return prepared.t
        }
        const version = yield* store.commitInput(prepared.commit)
        acc = { runtime: prepared.t.state, version }
        return prepared.t
      })
    const feed = (input: Input) => Effect.suspend(() => apply(prepare(input)))
    const event = (event: ResponseEvent) => Effect.suspend(() => feed(Input.LlmEvent({ callId: acc.runtime.committed.activeCallId!, event })))
    const done = (message: AssistantMessage) => event({ _tag: "Done", reason: message.stopReason, message })
    /** A turn answered in one call. */
    const turn = (prompt: string, reply: string, inputTokens = 10) =>
      Effect.gen(function*() {
        expectTag((yield* feed(Input.Start({ message: user(prompt), context: [], settings }))).command, "CallLlm")
        return yield* done(answer([text(reply)], inputTokens))
      })
    return {
      prepare,
      apply,
      feed,
      event,
      done,
      turn,
      get state(): ConversationState {
        return acc.runtime.committed
      },
      get version(): number {
        return acc.version
      }
    }
  })

/** Two one-call turns, then the user's summarize answered with `summary`: the new segment is [summary, u2, a2] at 4. */
export const twoTurnsThenSummarize = (conversationId: string, summary = "The user asked two questions.") =>
  Effect.gen(function*() {
    const d = yield* makeDriver(conversationId, manualPolicy)
    yield* d.turn("first question", "first answer")
    yield* d.turn("second question", "second answer")
    const before = d.state
    const summaryCall = expectTag((yield* d.feed(Input.Summarize({ instructions: "", settings }))).command, "CallLlm")
    const cut = d.state.compaction!.cut
    const final = expectTag((yield* d.done(answer([text(summary)]))).command, "Final")
    assert.isNull(final.message)
    return { d, before, summaryCall, cut }
  })

// =============================================================================
// Tests
// =============================================================================
