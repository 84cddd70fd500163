/**
 * `cursor-byok users`: the operator's commands for a team's server (`Users.ts`). `add` issues a
 * user's token and prints it once, `list` shows each user's models, limits and spending,
 * `remove` takes a user away (their conversations stay theirs), `token` gives a user a new
 * token. Each runs on the configuration's `database` (SQLite or PostgreSQL) beside the server:
 * a running server sees the change at its next refresh, within seconds.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Clock, Console, Effect, Layer, Option } from "effect"
import { hostname } from "node:os"
import * as Config from "../Config.js"
import * as Store from "../Store.js"
import * as Service from "../users/Service.js"
import * as Tokens from "../users/Tokens.js"
import { UserError, Users } from "../Users.js"
import type { UserRecord } from "../Users.js"

/** `Users` on `database`. */
export const layerOn = (database: string): Layer.Layer<Users, UserError | Store.StoreError> =>
  Service.layer.pipe(Layer.provide(Store.layerClient(database)))

/** Where developers reach this server: its `host` (this machine's name when it listens on every address) and `port`. */
export const serverUrl = (config: Pick<Config.ServerConfig, "host" | "port">): string => {
  const wildcard = config.host === "0.0.0.0" || config.host === "::" || config.host === "[::]"
  const host = wildcard ? hostname() : config.host.includes(":") && !config.host.startsWith("[") ? `[${config.host}]` : config.host
  return `http://${host}:${config.port}`
}

/** `program` with `Users` on the configuration's database; it is given the server's URL. */
const withUsers = <A, E>(program: (server: string) => Effect.Effect<A, E, Users>) =>
  Effect.gen(function*() {
    const config = yield* Config.load
    return yield* program(serverUrl(config)).pipe(Effect.provide(layerOn(config.database)))
  })

const usd = (amount: number): string => (amount > 0 && amount < 0.01 ? `$${amount.toFixed(4)}` : `$${amount.toFixed(2)}`)

const howToUse = (server: string, token: string): string =>
  [
    `token: ${token}`,
    "It is shown this once (only its hash is kept). Every request to",
    `${server} carries it: \`Authorization: Bearer ${token}\` or \`x-byok-token: ${token}\`.`
  ].join("\n")

const limitsOf = (user: UserRecord): string => {
  const limits = [
    user.dailyUsd === undefined ? undefined : `${usd(user.dailyUsd)}/day`,
    user.monthlyUsd === undefined ? undefined : `${usd(user.monthlyUsd)}/month`
  ].filter((limit): limit is string => limit !== undefined)
  return limits.length === 0 ? "no limit" : limits.join(", ")
}

/** `users add`: the user, and their token once. */
export const addUser = (input: {
  readonly name: string
  readonly models: Option.Option<string>
  readonly daily: Option.Option<string>
  readonly monthly: Option.Option<string>
}) =>
  withUsers((server) =>
    Effect.gen(function*() {
      const users = yield* Users
      const models = Option.isSome(input.models) ? yield* Tokens.parseModels(input.models.value) : undefined
      const dailyUsd = Option.isSome(input.daily) ? yield* Tokens.parseUsd(input.daily.value, "--daily") : undefined
      const monthlyUsd = Option.isSome(input.monthly) ? yield* Tokens.parseUsd(input.monthly.value, "--monthly") : undefined
      const { user, token } = yield* users.add({ name: input.name, models, dailyUsd, monthlyUsd })
      yield* Console.log(`added ${user.name}: ${user.models === undefined ? "all models" : user.models.join(", ")}; ${limitsOf(user)}`)
      yield* Console.log(howToUse(server, token))
    })
  )

/** `users list`: a line per user. */
export const listUsers = withUsers(() =>
  Effect.gen(function*() {
    const users = yield* Users
    const all = yield* users.list
    if (all.length === 0) return yield* Console.log("no users: this server is one person's")
    const now = yield* Clock.currentTimeMillis
    for (const user of all) {
      const spent = yield* users.spend(user.userId, now)
      yield* Console.log([
        user.name,
        `models: ${user.models === undefined ? "all models" : user.models.join(", ")}`,
        `limits: ${limitsOf(user)}`,
        `spent: ${usd(spent.todayUsd)} today, ${usd(spent.monthUsd)} this month`,
        `created ${new Date(user.createdAtMs).toISOString().slice(0, 10)}`
      ].join("  "))
    }
  })
)

/** `users remove`: a name no user has is an error. */
export const removeUser = (name: string) =>
  withUsers(() =>
    Effect.gen(function*() {
      const removed = yield* (yield* Users).remove(name)
      if (!removed) return yield* new UserError({ message: `no user is named ${name} (\`cursor-byok users list\` shows them)` })
      yield* Console.log(`removed ${name}: their token no longer works; their conversations are kept`)
    })
  )

/** `users token`: a new token, the old one stops working. */
export const rotateToken = (name: string) =>
  withUsers((server) =>
    Effect.gen(function*() {
      const token = yield* (yield* Users).rotateToken(name)
      yield* Console.log(`${name} has a new token; the old one no longer works (a running server stops taking it within seconds)`)
      yield* Console.log(howToUse(server, token))
    })
  )

const nameArg = Args.text({ name: "NAME" }).pipe(Args.withDescription("the user's name: 1 to 64 letters, digits and . _ @ -"))

const usersAdd = Command.make("add", {
  name: nameArg,
  models: Options.text("models").pipe(Options.withDescription("the models they may use, comma-separated (default: every model)"), Options.optional),
  daily: Options.text("daily").pipe(Options.withDescription("what they may spend per UTC day, in USD (default: no limit)"), Options.optional),
  monthly: Options.text("monthly").pipe(Options.withDescription("what they may spend per UTC month, in USD (default: no limit)"), Options.optional)
}, addUser).pipe(Command.withDescription("Add a user and print their token (once)"))

const usersList = Command.make("list", {}, () => listUsers).pipe(
  Command.withDescription("List the users: models, limits, spent today and this month")
)

const usersRemove = Command.make("remove", { name: nameArg }, ({ name }) => removeUser(name)).pipe(
  Command.withDescription("Remove a user: their token stops working, their conversations are kept")
)

const usersToken = Command.make("token", { name: nameArg }, ({ name }) => rotateToken(name)).pipe(
  Command.withDescription("Give a user a new token (printed once); the old one stops working")
)

/** The subcommands, for the `--help` pages. */
export const subcommands = { add: usersAdd, list: usersList, remove: usersRemove, token: usersToken }

export const users = Command.make("users", {}, () => listUsers).pipe(
  Command.withDescription("The users of a team's server: list (default), add, remove, token"),
  Command.withSubcommands([usersAdd, usersList, usersRemove, usersToken])
)
