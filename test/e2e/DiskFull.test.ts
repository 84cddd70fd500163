/**
 * A full disk (SQLite's `max_page_count` at the file's size: every write that needs a new page
 * fails with SQLITE_FULL, as on a full file system): the turn that cannot commit fails with a
 * readable error, the conversation stays as it was committed, the next turn while the disk is
 * still full fails the same way instead of hanging, and once there is room again the
 * conversation goes on.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { Context, Effect, Layer, Option } from "effect"
import { join } from "node:path"
import * as Store from "../../src/Store.js"
import { text } from "../support/FakeRuntime.js"
import * as ServerHarness from "../support/ServerHarness.js"
import { clientFor, tempDirectory } from "../support/Transcripts.js"

describe("a full disk", () => {
  it.scopedLive("fails the turn that cannot commit with a readable error, never hangs the next one, and the conversation goes on once there is room", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-full-")
      // The store on a file, with its SQL client kept to fill the "disk".
      const client = yield* Layer.build(Store.layerSqliteClient({ filename: join(dir, "byok.sqlite") })).pipe(Effect.orDie)
      const sql = Context.get(client, SqlClient.SqlClient)
      const store = Layer.provide(Store.layerSql, Layer.succeedContext(client))
      const answers = Array.from({ length: 8 }, (_, i) => text(`answer ${i + 1} ${"x".repeat(20_000)}`))
      const server = yield* ServerHarness.make({ scripts: answers, store })
      const cursor = yield* clientFor(server, { turnTimeoutMs: 30_000 })
      const turn = (n: number) => Effect.promise(() => cursor.run({ conversationId: "c-full", text: `question ${n} ${"y".repeat(20_000)}`, requestId: `req-full-${n}` }))

      const first = yield* turn(1)
      assert.strictEqual(first.end?._tag, "Ok", JSON.stringify(first.end))
      const committed = Option.getOrThrow(yield* server.store.load("c-full").pipe(Effect.orDie))

      // The disk is full: no page more.
      const pages = ((yield* sql.unsafe<{ page_count: number }>("PRAGMA page_count").pipe(Effect.orDie))[0])!.page_count
      yield* sql.unsafe(`PRAGMA max_page_count = ${pages}`).pipe(Effect.orDie)
      for (const n of [2, 3]) {
        const failed = yield* turn(n)
        assert.strictEqual(failed.end?._tag, "Error", `turn ${n}: ${JSON.stringify(failed.end)}`)
        assert.match(failed.end?._tag === "Error" ? failed.end.message : "", /disk|full|space|stor/i, `turn ${n}`)
        // Nothing half-committed: the conversation is as the last good turn left it.
        const after = Option.getOrThrow(yield* server.store.load("c-full").pipe(Effect.orDie))
        assert.strictEqual(after.state.messages.length, committed.state.messages.length, `turn ${n}`)
      }

      // Room again: the conversation goes on from what was committed.
      yield* sql.unsafe("PRAGMA max_page_count = 1073741823").pipe(Effect.orDie)
      const fourth = yield* turn(4)
      assert.strictEqual(fourth.end?._tag, "Ok", JSON.stringify(fourth.end))
      assert.include(fourth.text, "answer")
      const last = Option.getOrThrow(yield* server.store.load("c-full").pipe(Effect.orDie))
      assert.isAbove(last.state.messages.length, committed.state.messages.length)
    }), 120_000)
})
