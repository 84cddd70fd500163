/**
 * `Users` on both engines: users added, listed, removed and given new tokens, the door's copy in
 * memory kept right at once by this instance's changes and within a refresh by another's,
 * conversations claimed by whoever comes first (once, under concurrency), and spending summed
 * per UTC day and month over the conversations a user owns.
 */
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Either, Layer, Logger, LogLevel, Option } from "effect"
import * as Service from "../../src/users/Service.js"
import { Users } from "../../src/Users.js"
import { engines } from "../store/engines.js"

const messageOf = <A>(result: Either.Either<A, { readonly message: string }>): string =>
  Either.isLeft(result) ? result.left.message : assert.fail(`expected a failure, got ${JSON.stringify(result.right)}`)

/** Polls `check` every 10 ms, for 10 s at most; fails the test when it never holds. */
const eventually = (what: string, check: () => boolean) =>
  Effect.gen(function*() {
    for (let attempt = 0; attempt < 1000; attempt++) {
      if (check()) return
      yield* Effect.sleep("10 millis")
    }
    assert.fail(`never: ${what}`)
  })

/** A conversation row (and the request parts a call refers to), as a commit would leave them. */
const insertConversation = (conversationId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`
      INSERT INTO conversations (conversation_id, version, status, turn_id, message_count, messages_hash, state_json, updated_at_ms)
      VALUES (${conversationId}, 1, 'idle', 'turn-1', 0, 'h', '{}', 0)`
    yield* sql`INSERT INTO request_parts (hash, body) VALUES ('part', '[]') ON CONFLICT (hash) DO NOTHING`
  })

let calls = 0
const insertCall = (conversationId: string, createdAtMs: number, costUsd: number | null) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const callId = `call-${calls++}`
    yield* sql`
      INSERT INTO llm_calls (call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash, message_count,
        messages_hash, request_hash, status, created_at_ms, updated_at_ms, cost_usd)
      VALUES (${callId}, ${conversationId}, 'turn-1', 'model-x', 'part', 'part', 0, 'h', 'r', 'committed',
        ${createdAtMs}, ${createdAtMs}, ${costUsd})`
  })

describe.each(engines)("Users, on $name", (engine) => {
  const fresh = Service.layer.pipe(Layer.provideMerge(engine.fresh))

  it.scoped("add, list, remove and a new token: the door's copy follows each change at once", () =>
    Effect.gen(function*() {
      const users = yield* Users
      assert.isFalse(users.teamMode())
      assert.deepStrictEqual(yield* users.list, [])

      const alice = yield* users.add({ name: "alice", models: [" gpt-5 ", "claude-x", "gpt-5"], dailyUsd: 5, monthlyUsd: 50.5 })
      const bob = yield* users.add({ name: "bob" })
      assert.isTrue(users.teamMode())
      assert.deepStrictEqual(alice.user.models, ["gpt-5", "claude-x"])
      assert.match(alice.token, /^byok_u_/)

      const listed = yield* users.list
      assert.deepStrictEqual(listed.map((user) => [user.name, user.models, user.dailyUsd, user.monthlyUsd]), [
        ["alice", ["gpt-5", "claude-x"], 5, 50.5],
        ["bob", undefined, undefined, undefined]
      ])
      assert.deepStrictEqual(listed[0], alice.user)
      assert.deepStrictEqual(Option.map(users.authenticate(alice.token), (user) => user.name), Option.some("alice"))
      assert.deepStrictEqual(Option.map(users.authenticate(bob.token), (user) => user.userId), Option.some(bob.user.userId))
      assert.isTrue(Option.isNone(users.authenticate("byok_u_nothing")))
      assert.isTrue(Option.isNone(users.authenticate("")))

      // A new token replaces the old one.
      const rotated = yield* users.rotateToken("alice")
      assert.notStrictEqual(rotated, alice.token)
      assert.isTrue(Option.isNone(users.authenticate(alice.token)))
      assert.deepStrictEqual(Option.map(users.authenticate(rotated), (user) => user.name), Option.some("alice"))
      yield* users.refresh
      assert.isTrue(Option.isNone(users.authenticate(alice.token)))
      assert.isTrue(Option.isSome(users.authenticate(rotated)))

      // A removed user's token no longer works; the last one removed leaves one person's server.
      assert.isTrue(yield* users.remove("alice"))
      assert.isFalse(yield* users.remove("alice"))
      assert.isTrue(Option.isNone(users.authenticate(rotated)))
      assert.isTrue(users.teamMode())
      assert.isTrue(yield* users.remove("bob"))
      assert.isFalse(users.teamMode())
      assert.deepStrictEqual(yield* users.list, [])
      assert.match(messageOf(yield* Effect.either(users.rotateToken("bob"))), /no user is named bob/)
    }).pipe(Effect.provide(fresh)))

  it.scoped("a taken name, a bad name, an empty models list and a bad limit are refused with a message, and add nothing", () =>
    Effect.gen(function*() {
      const users = yield* Users
      const first = yield* users.add({ name: "carol" })
      assert.strictEqual(messageOf(yield* Effect.either(users.add({ name: "carol", models: ["m"] }))), "a user named carol exists")
      assert.match(messageOf(yield* Effect.either(users.add({ name: "no spaces" }))), /cannot name a user/)
      assert.match(messageOf(yield* Effect.either(users.add({ name: "dave", models: [" "] }))), /models list is empty/)
      assert.match(messageOf(yield* Effect.either(users.add({ name: "dave", dailyUsd: -1 }))), /daily limit must be/)
      assert.match(messageOf(yield* Effect.either(users.add({ name: "dave", monthlyUsd: Number.NaN }))), /monthly limit must be/)
      assert.deepStrictEqual((yield* users.list).map((user) => user.name), ["carol"])
      // The refused second carol took nothing from the first.
      assert.deepStrictEqual(Option.map(users.authenticate(first.token), (user) => user.userId), Option.some(first.user.userId))
      // A name is free again once its user is removed; the new user is another.
      yield* users.remove("carol")
      const again = yield* users.add({ name: "carol" })
      assert.notStrictEqual(again.user.userId, first.user.userId)
      assert.isTrue(Option.isNone(users.authenticate(first.token)))
    }).pipe(Effect.provide(fresh)))

  it.scoped("a conversation is its first claimer's; another user is told the owner's name, or id once removed; concurrent claims make one owner", () =>
    Effect.gen(function*() {
      const users = yield* Users
      const erin = (yield* users.add({ name: "erin" })).user
      const frank = (yield* users.add({ name: "frank" })).user
      assert.deepStrictEqual(yield* users.ownerOf("conv-1"), Option.none())
      assert.deepStrictEqual(yield* users.claim("conv-1", erin.userId, 1000), { _tag: "Theirs" })
      assert.deepStrictEqual(yield* users.claim("conv-1", erin.userId, 2000), { _tag: "Theirs" })
      assert.deepStrictEqual(yield* users.claim("conv-1", frank.userId, 3000), { _tag: "Another", owner: "erin" })
      assert.deepStrictEqual(yield* users.ownerOf("conv-1"), Option.some(erin.userId))

      // Removing a user keeps what they own.
      yield* users.remove("erin")
      assert.deepStrictEqual(yield* users.claim("conv-1", frank.userId, 4000), { _tag: "Another", owner: erin.userId })
      assert.deepStrictEqual(yield* users.ownerOf("conv-1"), Option.some(erin.userId))

      const claimers = Array.from({ length: 8 }, (_, i) => `user-${i}`)
      const claims = yield* Effect.forEach(claimers, (userId) => users.claim("conv-race", userId, 5000), { concurrency: "unbounded" })
      assert.strictEqual(claims.filter((claim) => claim._tag === "Theirs").length, 1)
      const owner = Option.getOrThrow(yield* users.ownerOf("conv-race"))
      assert.strictEqual(claims[claimers.indexOf(owner)]?._tag, "Theirs")
      for (const claim of claims) if (claim._tag === "Another") assert.strictEqual(claim.owner, owner)
    }).pipe(Effect.provide(fresh)))

  it.scoped("spend sums the priced calls of the conversations a user owns, in the UTC day and month of nowMs", () =>
    Effect.gen(function*() {
      const users = yield* Users
      const gina = (yield* users.add({ name: "gina" })).user
      const hal = (yield* users.add({ name: "hal" })).user
      const nowMs = Date.UTC(2026, 4, 15, 12, 0, 0)
      const dayStart = Date.UTC(2026, 4, 15)
      for (const id of ["conv-g1", "conv-g2", "conv-h", "conv-nobody"]) yield* insertConversation(id)
      yield* users.claim("conv-g1", gina.userId, 0)
      yield* users.claim("conv-g2", gina.userId, 0)
      yield* users.claim("conv-h", hal.userId, 0)

      yield* insertCall("conv-g1", dayStart, 0.25) // the day's first millisecond
      yield* insertCall("conv-g1", Date.UTC(2026, 4, 15, 1), 1.25)
      yield* insertCall("conv-g2", Date.UTC(2026, 4, 15, 11), 0.5)
      yield* insertCall("conv-g2", Date.UTC(2026, 4, 15, 11, 30), null) // unpriced
      yield* insertCall("conv-g1", dayStart - 1, 0.125) // yesterday, this month
      yield* insertCall("conv-g2", Date.UTC(2026, 4, 1), 2) // the month's first millisecond
      yield* insertCall("conv-g1", Date.UTC(2026, 4, 1) - 1, 10) // last month
      yield* insertCall("conv-h", Date.UTC(2026, 4, 15, 2), 50) // another user's
      yield* insertCall("conv-nobody", Date.UTC(2026, 4, 15, 2), 70) // nobody's

      assert.deepStrictEqual(yield* users.spend(gina.userId, nowMs), { todayUsd: 2, monthUsd: 4.125 })
      assert.deepStrictEqual(yield* users.spend(hal.userId, nowMs), { todayUsd: 50, monthUsd: 50 })
      // The next day: nothing today yet, the month's total unchanged.
      assert.deepStrictEqual(yield* users.spend(gina.userId, Date.UTC(2026, 4, 16, 0, 0, 1)), { todayUsd: 0, monthUsd: 4.125 })
      // A user with no conversation, or only unpriced calls, spent 0.
      assert.deepStrictEqual(yield* users.spend("user-none", nowMs), { todayUsd: 0, monthUsd: 0 })
      yield* insertConversation("conv-free")
      yield* users.claim("conv-free", "user-free", 0)
      yield* insertCall("conv-free", nowMs, null)
      assert.deepStrictEqual(yield* users.spend("user-free", nowMs), { todayUsd: 0, monthUsd: 0 })
    }).pipe(Effect.provide(fresh)))

  /** `Users` (refreshing every `refreshMs`) with its SQL on `database`, built in the test's scope. */
  const instance = (database: string, refreshMs: number) =>
    Effect.map(
      Layer.build(Service.layerWith({ refreshMs }).pipe(Layer.provideMerge(engine.withSql(database)))),
      (context) => ({ users: Context.get(context, Users), sql: Context.get(context, SqlClient.SqlClient) })
    )

  it.scopedLive("two instances on one database see each other's changes on refresh, and by the periodic refresh", () =>
    Effect.gen(function*() {
      const database = yield* engine.database
      // One refreshes only when told (an hour), the other every 20 ms.
      const { users: manual } = yield* instance(database, 3_600_000)
      const { users: periodic } = yield* instance(database, 20)
      assert.isFalse(manual.teamMode())
      assert.isFalse(periodic.teamMode())

      const ivy = yield* manual.add({ name: "ivy" })
      yield* eventually("the periodic instance sees ivy", () => Option.isSome(periodic.authenticate(ivy.token)))
      assert.isTrue(periodic.teamMode())

      const jack = yield* periodic.add({ name: "jack" })
      assert.isTrue(Option.isNone(manual.authenticate(jack.token)))
      yield* manual.refresh
      assert.isTrue(Option.isSome(manual.authenticate(jack.token)))

      const ivyToken = yield* manual.rotateToken("ivy")
      yield* manual.remove("jack")
      yield* eventually("the periodic instance drops jack and ivy's old token", () =>
        Option.isNone(periodic.authenticate(jack.token)) && Option.isNone(periodic.authenticate(ivy.token)))
      assert.isTrue(Option.isSome(periodic.authenticate(ivyToken)))
      // Both see the same list.
      assert.deepStrictEqual(yield* manual.list, yield* periodic.list)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scopedLive("a refresh that fails is logged once and keeps the users known before; the next one that succeeds applies", () =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      const logger = Logger.make(({ logLevel, message }) => {
        if (logLevel === LogLevel.Warning) warnings.push(String(Array.isArray(message) ? message[0] : message))
      })
      const database = yield* engine.database
      const { users, sql } = yield* instance(database, 10).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
      const kim = yield* users.add({ name: "kim" })
      yield* sql`ALTER TABLE users RENAME TO users_away`
      // Several failed refreshes: still one warning, and kim still authenticates.
      yield* eventually("a warning", () => warnings.length > 0)
      yield* Effect.sleep("100 millis")
      assert.strictEqual(warnings.length, 1)
      assert.match(warnings[0]!, /users: could not read the users/)
      assert.isTrue(Option.isSome(users.authenticate(kim.token)))
      assert.match(messageOf(yield* Effect.either(users.refresh)), /could not read the users/)

      yield* sql`ALTER TABLE users_away RENAME TO users`
      yield* sql`DELETE FROM users WHERE name = 'kim'`
      yield* eventually("kim's removal by hand is seen", () => !users.teamMode())
      assert.strictEqual(warnings.length, 1)
    }).pipe(Effect.provide(NodeContext.layer)))
})
