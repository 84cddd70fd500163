/**
 * `state_json` keeps a turn's MCP tools and rules out of itself: each list is a request part,
 * written once, named by the SHA-256 of its canonical JSON, read back and checked on load.
 */
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import { createHash } from "node:crypto"
import { canonicalJson, messagesHash } from "../../src/Llm.js"
import { initialConversation, turnIdOf } from "../../src/Loop.js"
import type { ConversationState, TurnSettings } from "../../src/Loop.js"
import * as Store from "../../src/Store.js"
import { user } from "./journey.js"
import { loadSome, withSql } from "./segmentsHarness.js"

const memory = withSql(":memory:")

const partName = (list: unknown) => `settings:${createHash("sha256").update(canonicalJson(list)).digest("hex")}`

/** Sixty MCP tools with JSON schemas of a dozen arguments: ~66 KB of canonical JSON, as a client with a few MCP servers sends. */
const mcpTools = Array.from({ length: 60 }, (_, i) => ({
  name: `mcp_docs_tool_${i}`,
  description: `Tool ${i}. ${"Looks things up in the docs. ".repeat(10)}`,
  providerIdentifier: "docs",
  toolName: `tool_${i}`,
  inputSchema: {
    type: "object",
    properties: Object.fromEntries(Array.from({ length: 12 }, (_, k) => [`arg_${k}`, { type: "string", description: `argument ${k}` }])),
    required: ["arg_0"]
  }
}))
const rules = [{ path: ".cursor/rules/style.mdc", content: "Use tabs. ".repeat(200) }, { path: "", content: "Answer briefly." }]
const settings: TurnSettings = { model: "m", mode: "agent", mcpTools, rules, requestId: "req-1" }

/** A state at turn `turn` of `conversationId` with `texts` as its history. */
const stateWith = (conversationId: string, turn: number, texts: ReadonlyArray<string>, turnSettings: TurnSettings): ConversationState => {
  const messages = texts.map(user)
  return {
    ...initialConversation(conversationId),
    status: "final",
    turnSeq: turn,
    turnId: turnIdOf(conversationId, turn),
    settings: turnSettings,
    messages,
    messagesHash: messagesHash(messages)
  }
}

const commit = (conversationId: string, expectedVersion: number, next: ConversationState) =>
  Effect.flatMap(Store.Store, (store) => store.commitInput({ conversationId, inputId: `i${expectedVersion}`, expectedVersion, next, result: null }))

const stateJsonOf = (conversationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ state_json: string }>`SELECT state_json FROM conversations WHERE conversation_id = ${conversationId}`).pipe(
      Effect.map((rows) => rows[0]!.state_json)
    )

const settingsPartsStored = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ hash: string; body: string }>`SELECT hash, body FROM request_parts WHERE hash LIKE 'settings:%' ORDER BY hash`)

const corruptionOf = (exit: Exit.Exit<unknown, unknown>) => {
  assert.isTrue(Exit.isFailure(exit), "the load fails")
  const error = Option.getOrThrow(Cause.failureOption((exit as Exit.Failure<unknown, unknown>).cause)) as Store.CorruptRow
  assert.strictEqual(error._tag, "CorruptRow")
  assert.strictEqual(error.table, "request_parts")
  return error
}

describe("state_json: a turn's MCP tools and rules as request parts", () => {
  it.effect("stored once, however many commits and conversations name them; state_json stays small; loads back equal", () =>
    Effect.gen(function*() {
      let version = 0
      for (let step = 1; step <= 3; step++) {
        version = yield* commit("conv-a", version, stateWith("conv-a", 1, Array.from({ length: step }, (_, i) => `m${i}`), settings))
      }
      // Another conversation, its settings equal but built afresh (a new run request).
      const again: TurnSettings = JSON.parse(JSON.stringify(settings))
      yield* commit("conv-b", 0, stateWith("conv-b", 1, ["hello"], again))

      const parts = yield* settingsPartsStored
      assert.deepStrictEqual(parts.map((part) => part.hash), [partName(mcpTools), partName(rules)].sort())
      for (const part of parts) assert.strictEqual(partName(JSON.parse(part.body)), part.hash, "a part's text is its list's canonical JSON")
      const stateJson = yield* stateJsonOf("conv-a")
      assert.isAbove(canonicalJson(mcpTools).length, 50_000)
      assert.isBelow(stateJson.length, 1_000)
      assert.deepStrictEqual(JSON.parse(stateJson).settings, {
        model: "m",
        mode: "agent",
        requestId: "req-1",
        mcpToolsPart: partName(mcpTools),
        rulesPart: partName(rules)
      })
      assert.deepStrictEqual((yield* loadSome("conv-a")).state, stateWith("conv-a", 1, ["m0", "m1", "m2"], settings))
      assert.deepStrictEqual((yield* loadSome("conv-b")).state.settings, settings)
    }).pipe(Effect.provide(memory)))

  it.effect("empty lists stay inline, and settings without them name no part", () =>
    Effect.gen(function*() {
      const bare: TurnSettings = { model: "m", mcpTools: [], rules: [] }
      yield* commit("conv-e", 0, stateWith("conv-e", 1, ["hi"], bare))
      assert.deepStrictEqual(JSON.parse(yield* stateJsonOf("conv-e")).settings, bare)
      assert.deepStrictEqual((yield* loadSome("conv-e")).state.settings, bare)
      yield* commit("conv-e", 1, stateWith("conv-e", 2, ["hi"], { model: "n" }))
      assert.deepStrictEqual((yield* loadSome("conv-e")).state.settings, { model: "n" })
      assert.deepStrictEqual(yield* settingsPartsStored, [])
    }).pipe(Effect.provide(memory)))

  it.effect("a row that holds its lists inline, as rows written before, loads; its next commit names parts", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* commit("conv-i", 0, stateWith("conv-i", 1, ["hi"], { model: "m" }))
      const inline = { ...JSON.parse(yield* stateJsonOf("conv-i")), settings }
      yield* sql`UPDATE conversations SET state_json = ${canonicalJson(inline)} WHERE conversation_id = 'conv-i'`
      const loaded = yield* loadSome("conv-i")
      assert.deepStrictEqual(loaded.state.settings, settings)
      yield* commit("conv-i", loaded.version, { ...loaded.state, turnSeq: 2, turnId: turnIdOf("conv-i", 2) })
      assert.strictEqual(JSON.parse(yield* stateJsonOf("conv-i")).settings.mcpToolsPart, partName(mcpTools))
      assert.deepStrictEqual((yield* loadSome("conv-i")).state.settings, settings)
    }).pipe(Effect.provide(memory)))

  describe("a damaged or missing part is a CorruptRow naming the part, never settings without it", () => {
    const damaged = (damage: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* commit("conv-d", 0, stateWith("conv-d", 1, ["hi"], settings))
        yield* damage(sql).pipe(Effect.orDie)
        return yield* Effect.exit(Effect.flatMap(Store.Store, (store) => store.load("conv-d")))
      })

    it.effect("a part's text changed", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) =>
          sql`UPDATE request_parts SET body = ${canonicalJson(mcpTools.slice(1))} WHERE hash = ${partName(mcpTools)}`
        )
        const error = corruptionOf(exit)
        assert.strictEqual(error.key, partName(mcpTools))
        assert.include(error.reason, "hash")
      }).pipe(Effect.provide(withSql(":memory:"))))

    it.effect("a part missing", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) => sql`DELETE FROM request_parts WHERE hash = ${partName(rules)}`)
        assert.strictEqual(corruptionOf(exit).key, partName(rules))
      }).pipe(Effect.provide(withSql(":memory:"))))

    it.effect("a part that hashes to its name but is not a list of MCP tools", () =>
      Effect.gen(function*() {
        const notTools = [{ name: "x" }]
        const exit = yield* damaged((sql) =>
          Effect.gen(function*() {
            yield* sql`INSERT INTO request_parts (hash, body) VALUES (${partName(notTools)}, ${canonicalJson(notTools)})`
            yield* sql`UPDATE conversations SET state_json = json_set(state_json, '$.settings.mcpToolsPart', ${partName(notTools)})`
          })
        )
        assert.strictEqual(corruptionOf(exit).key, partName(notTools))
      }).pipe(Effect.provide(withSql(":memory:"))))
  })
})
