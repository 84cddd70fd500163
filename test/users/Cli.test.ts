/**
 * `cursor-byok users` through @effect/cli in process, on a configuration whose database is a
 * temporary SQLite file: `add` prints a token that authenticates and says how to use it,
 * `list` shows models, limits and spending, `token` replaces the token, `remove` of a missing
 * name and a bad limit fail with a readable message, and an empty server says it is one person's.
 */
import * as Command from "@effect/cli/Command"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { isolateByokEnv } from "../support/ByokEnv.js"
import { Console, Effect, Logger, LogLevel, Option } from "effect"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import * as UsersCli from "../../src/cli/Users.js"
import { Users } from "../../src/Users.js"
import { tempDirectory } from "../support/Transcripts.js"

isolateByokEnv()

const root = Command.make("cursor-byok").pipe(Command.withSubcommands([UsersCli.users]))
const run = Command.run(root, { name: "cursor-byok", version: "0.0.0" })

/** Runs `cursor-byok users ...args`; what it printed, and the failure's message if it failed. */
const users = (...args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    const current = yield* Effect.console
    const console: Console.Console = { ...current, log: (...parts) => Effect.sync(() => void lines.push(parts.join(" "))) }
    const result = yield* run(["node", "cursor-byok", "users", ...args]).pipe(
      Effect.withConsole(console),
      Effect.provide(Logger.minimumLogLevel(LogLevel.None)),
      Effect.either
    )
    const failure = result._tag === "Left" ? String((result.left as { readonly message?: unknown }).message) : undefined
    return { output: lines.join("\n"), failure }
  })

const tokenIn = (output: string): string => {
  const token = /^token: (byok_u_\S+)$/m.exec(output)?.[1]
  return token ?? assert.fail(`no token in:\n${output}`)
}

describe("cursor-byok users", () => {
  it.scoped("add, list, token and remove on the configuration's database; mistakes fail with a message", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-users-")
      const database = join(dir, "byok.sqlite")
      writeFileSync(join(dir, "byok.config.json"), JSON.stringify({ models: [], host: "127.0.0.1", port: 9123, database }))
      process.env["BYOK_CONFIG"] = join(dir, "byok.config.json")
      process.env["BYOK_HOME"] = join(dir, "home")

      assert.strictEqual((yield* users("list")).output, "no users: this server is one person's")

      const added = yield* users("add", "--models", "gpt-5, claude-x", "--daily", "5", "--monthly", "$40.5", "alice")
      assert.isUndefined(added.failure)
      const token = tokenIn(added.output)
      assert.include(added.output, "added alice: gpt-5, claude-x; $5.00/day, $40.50/month")
      assert.include(added.output, `http://127.0.0.1:9123 carries it: \`Authorization: Bearer ${token}\``)
      assert.include(added.output, `Authorization: Bearer ${token}`)
      // Options after the name too, as the usage line reads.
      assert.isUndefined((yield* users("add", "bob", "--daily", "1")).failure)

      const listed = (yield* users("list")).output.split("\n")
      assert.strictEqual(listed.length, 2)
      assert.match(listed[0]!, /^alice {2}models: gpt-5, claude-x {2}limits: \$5\.00\/day, \$40\.50\/month {2}spent: \$0\.00 today, \$0\.00 this month {2}created \d{4}-\d{2}-\d{2}$/)
      assert.match(listed[1]!, /^bob {2}models: all models {2}limits: \$1\.00\/day {2}/)
      assert.strictEqual((yield* users()).output, listed.join("\n"))

      assert.strictEqual((yield* users("add", "alice")).failure, "a user named alice exists")
      assert.match((yield* users("add", "--daily", "-1", "carol")).failure ?? "", /^--daily must be an amount in USD, 0 or more/)
      assert.match((yield* users("add", "--models", ",", "carol")).failure ?? "", /models list is empty/)
      assert.match((yield* users("remove", "carol")).failure ?? "", /^no user is named carol/)
      assert.match((yield* users("token", "carol")).failure ?? "", /^no user is named carol/)

      const rotated = tokenIn((yield* users("token", "alice")).output)
      assert.notStrictEqual(rotated, token)
      const who = (candidate: string) =>
        Effect.map(Users, (service) => Option.map(service.authenticate(candidate), (user) => user.name)).pipe(
          Effect.provide(UsersCli.layerOn(database))
        )
      assert.deepStrictEqual(yield* who(rotated), Option.some("alice"))
      assert.deepStrictEqual(yield* who(token), Option.none())

      const removed = yield* users("remove", "alice")
      assert.isUndefined(removed.failure)
      assert.match(removed.output, /^removed alice/)
      assert.deepStrictEqual(yield* who(rotated), Option.none())
      yield* users("remove", "bob")
      assert.strictEqual((yield* users("list")).output, "no users: this server is one person's")
    }).pipe(Effect.provide(NodeContext.layer)))

  it("the server's URL names this machine when it listens on every address", () => {
    assert.strictEqual(UsersCli.serverUrl({ host: "10.0.0.5", port: 8787 }), "http://10.0.0.5:8787")
    assert.strictEqual(UsersCli.serverUrl({ host: "::1", port: 8787 }), "http://[::1]:8787")
    assert.notInclude(UsersCli.serverUrl({ host: "0.0.0.0", port: 8787 }), "0.0.0.0")
  })
})
