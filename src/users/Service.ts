/**
 * `Users` over the Store's `SqlClient` (SQLite or PostgreSQL, tables of migration 0008 / 0002).
 * The users are read once when the service is built, so that the door is right from the first
 * request, and again every few seconds by a background fiber, so that a user added or removed
 * by `cursor-byok users` (another process) or by another instance takes effect without a
 * restart. The door's copy is a map from token hash to user: `authenticate` is one hash and one
 * lookup. A change made here updates the copy at once; reads and changes of the copy are
 * serialised, so that a slow refresh never puts back what a change just replaced.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Duration, Effect, Either, Layer, Option } from "effect"
import type { Scope } from "effect"
import { UserError, Users } from "../Users.js"
import type { Claim, NewUser, Spend, UserRecord, UsersService } from "../Users.js"
import * as Tokens from "./Tokens.js"

interface UserRow {
  readonly user_id: string
  readonly name: string
  readonly token_hash: string
  readonly models_json: string | null
  readonly daily_usd: number | null
  readonly monthly_usd: number | null
  readonly created_at_ms: number
}

interface Stored {
  readonly record: UserRecord
  readonly tokenHash: string
}

/** The door's copy: every user, and the same by token hash. */
interface Copy {
  readonly users: ReadonlyArray<Stored>
  readonly byHash: ReadonlyMap<string, UserRecord>
}

const copyOf = (users: ReadonlyArray<Stored>): Copy => ({
  users,
  byHash: new Map(users.map((user) => [user.tokenHash, user.record]))
})

const sqlFailed = (operation: string) => (cause: SqlError) =>
  new UserError({ message: `users: could not ${operation}: ${cause.message}`, cause })

const modelsOf = (row: UserRow): Either.Either<ReadonlyArray<string> | undefined, UserError> => {
  if (row.models_json === null) return Either.right(undefined)
  const bad = new UserError({ message: `users: the models of user ${row.name} are not a list of names: ${row.models_json}` })
  try {
    const models: unknown = JSON.parse(row.models_json)
    return Array.isArray(models) && models.every((model) => typeof model === "string") ? Either.right(models) : Either.left(bad)
  } catch {
    return Either.left(bad)
  }
}

const storedOf = (row: UserRow): Either.Either<Stored, UserError> =>
  Either.map(modelsOf(row), (models) => ({
    tokenHash: row.token_hash,
    record: {
      userId: row.user_id,
      name: row.name,
      models,
      dailyUsd: row.daily_usd ?? undefined,
      monthlyUsd: row.monthly_usd ?? undefined,
      createdAtMs: Number(row.created_at_ms)
    }
  }))

/** The start of the UTC day and month of `nowMs`, and of the next ones. */
export const utcPeriods = (nowMs: number) => {
  const now = new Date(nowMs)
  const [year, month, day] = [now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()]
  return {
    dayStart: Date.UTC(year, month, day),
    dayEnd: Date.UTC(year, month, day + 1),
    monthStart: Date.UTC(year, month, 1),
    monthEnd: Date.UTC(year, month + 1, 1)
  }
}

/** A new user's row, checked: a valid name, a non-empty models list when given, limits of 0 or more. */
const checked = (user: NewUser) =>
  Effect.gen(function*() {
    const name = yield* Tokens.checkName(user.name)
    const models = user.models === undefined ? undefined : yield* Tokens.checkModels(user.models)
    const dailyUsd = user.dailyUsd === undefined ? undefined : yield* Tokens.checkUsd(user.dailyUsd, "the daily limit")
    const monthlyUsd = user.monthlyUsd === undefined ? undefined : yield* Tokens.checkUsd(user.monthlyUsd, "the monthly limit")
    return { name, models, dailyUsd, monthlyUsd }
  })

const THEIRS: Claim = { _tag: "Theirs" }

export interface UsersOptions {
  /** How often the door's copy is read again from the database (ms); 2000 by default. */
  readonly refreshMs?: number
}

/** The service on the `SqlClient` in context; its refresh fiber lives as long as the scope. */
export const makeWith = (options: UsersOptions = {}): Effect.Effect<UsersService, UserError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const lock = yield* Effect.makeSemaphore(1)
    const serialised = lock.withPermits(1)
    // The one mutable field: the door reads it synchronously, `install` replaces it whole.
    let copy: Copy = copyOf([])
    const install = (users: ReadonlyArray<Stored>) => Effect.sync(() => void (copy = copyOf(users)))

    const load = Effect.gen(function*() {
      const rows = yield* sql<UserRow>`
        SELECT user_id, name, token_hash, models_json, daily_usd, monthly_usd, created_at_ms FROM users ORDER BY name`.pipe(
        Effect.mapError(sqlFailed("read the users"))
      )
      return yield* Effect.forEach(rows, storedOf)
    })

    const refresh: Effect.Effect<void, UserError> = serialised(Effect.flatMap(load, install))

    const add = (user: NewUser) =>
      serialised(Effect.gen(function*() {
        const { name, models, dailyUsd, monthlyUsd } = yield* checked(user)
        const token = Tokens.issueToken()
        const record: UserRecord = { userId: Tokens.newUserId(), name, models, dailyUsd, monthlyUsd, createdAtMs: yield* Clock.currentTimeMillis }
        const inserted = yield* sql<{ user_id: string }>`
          INSERT INTO users (user_id, name, token_hash, models_json, daily_usd, monthly_usd, created_at_ms)
          VALUES (${record.userId}, ${name}, ${Tokens.tokenHash(token)}, ${models === undefined ? null : JSON.stringify(models)},
            ${dailyUsd ?? null}, ${monthlyUsd ?? null}, ${record.createdAtMs})
          ON CONFLICT DO NOTHING RETURNING user_id`.pipe(Effect.mapError(sqlFailed(`add the user ${name}`)))
        // The token is new and random: only the name can conflict.
        if (inserted.length === 0) return yield* new UserError({ message: `a user named ${name} exists` })
        yield* install([...copy.users.filter((stored) => stored.record.name !== name), { record, tokenHash: Tokens.tokenHash(token) }])
        return { user: record, token }
      }))

    const list = Effect.map(load, (users) => users.map((user) => user.record))

    const remove = (name: string) =>
      serialised(Effect.gen(function*() {
        const removed = yield* sql<{ user_id: string }>`DELETE FROM users WHERE name = ${name} RETURNING user_id`.pipe(
          Effect.mapError(sqlFailed(`remove the user ${name}`))
        )
        yield* install(copy.users.filter((stored) => stored.record.name !== name))
        return removed.length > 0
      }))

    const rotateToken = (name: string) =>
      serialised(Effect.gen(function*() {
        const token = Tokens.issueToken()
        const hash = Tokens.tokenHash(token)
        const rows = yield* sql<UserRow>`
          UPDATE users SET token_hash = ${hash} WHERE name = ${name}
          RETURNING user_id, name, token_hash, models_json, daily_usd, monthly_usd, created_at_ms`.pipe(
          Effect.mapError(sqlFailed(`give the user ${name} a new token`))
        )
        const row = rows[0]
        if (row === undefined) return yield* new UserError({ message: `no user is named ${name}` })
        const stored = yield* storedOf(row)
        yield* install([...copy.users.filter((user) => user.record.userId !== row.user_id), stored])
        return token
      }))

    const ownerOf = (conversationId: string) =>
      Effect.map(
        sql<{ user_id: string }>`SELECT user_id FROM conversation_owners WHERE conversation_id = ${conversationId}`.pipe(
          Effect.mapError(sqlFailed(`read the owner of conversation ${conversationId}`))
        ),
        (rows) => Option.fromNullable(rows[0]?.user_id)
      )

    const claim = (conversationId: string, userId: string, nowMs: number): Effect.Effect<Claim, UserError> =>
      Effect.gen(function*() {
        const failed = sqlFailed(`claim conversation ${conversationId}`)
        const inserted = yield* sql<{ user_id: string }>`
          INSERT INTO conversation_owners (conversation_id, user_id, claimed_at_ms) VALUES (${conversationId}, ${userId}, ${nowMs})
          ON CONFLICT (conversation_id) DO NOTHING RETURNING user_id`.pipe(Effect.mapError(failed))
        if (inserted.length > 0) return THEIRS
        const owners = yield* sql<{ user_id: string; name: string | null }>`
          SELECT o.user_id, u.name FROM conversation_owners o LEFT JOIN users u ON u.user_id = o.user_id
          WHERE o.conversation_id = ${conversationId}`.pipe(Effect.mapError(failed))
        const owner = owners[0]
        // A row that vanished in between can only be a damaged database: nobody deletes owners.
        if (owner === undefined) return yield* new UserError({ message: `users: conversation ${conversationId} has no owner after it was claimed` })
        return owner.user_id === userId ? THEIRS : { _tag: "Another", owner: owner.name ?? owner.user_id }
      })

    const spend = (userId: string, nowMs: number) =>
      Effect.gen(function*() {
        const { dayStart, dayEnd, monthStart, monthEnd } = utcPeriods(nowMs)
        const rows = yield* sql<{ today_usd: number | null; month_usd: number | null }>`
          SELECT
            SUM(CASE WHEN c.created_at_ms >= ${dayStart} AND c.created_at_ms < ${dayEnd} THEN c.cost_usd END) AS today_usd,
            SUM(c.cost_usd) AS month_usd
          FROM conversation_owners o JOIN llm_calls c ON c.conversation_id = o.conversation_id
          WHERE o.user_id = ${userId} AND c.created_at_ms >= ${monthStart} AND c.created_at_ms < ${monthEnd}`.pipe(
          Effect.mapError(sqlFailed(`sum what user ${userId} spent`))
        )
        return { todayUsd: Number(rows[0]?.today_usd ?? 0), monthUsd: Number(rows[0]?.month_usd ?? 0) } satisfies Spend
      })

    yield* refresh
    yield* Effect.forkScoped(refreshEvery(refresh, options.refreshMs ?? 2000))

    return {
      teamMode: () => copy.users.length > 0,
      authenticate: (token: string) => Option.fromNullable(copy.byHash.get(Tokens.tokenHash(token))),
      refresh,
      add,
      list,
      remove,
      rotateToken,
      claim,
      ownerOf,
      spend
    } satisfies UsersService
  })

/** `refresh` every `ms` for ever: a failure is logged once (until one succeeds again) and changes nothing. */
const refreshEvery = (refresh: Effect.Effect<void, UserError>, ms: number) =>
  Effect.gen(function*() {
    let failing = false
    for (;;) {
      yield* Effect.sleep(Duration.millis(ms))
      const result = yield* Effect.either(refresh)
      if (Either.isLeft(result) && !failing) {
        yield* Effect.logWarning(`${result.left.message}; the users known before are kept, and reading them is retried every ${ms} ms`)
      }
      if (Either.isRight(result) && failing) yield* Effect.logInfo("users: read again")
      failing = Either.isLeft(result)
    }
  })

/** The service with the default refresh (every 2 s). */
export const make: Effect.Effect<UsersService, UserError, SqlClient.SqlClient | Scope.Scope> = makeWith()

/** `Users` on the Store's `SqlClient`; fails (UserError) when the users cannot be read at all. */
export const layer: Layer.Layer<Users, UserError, SqlClient.SqlClient> = Layer.scoped(Users, make)

/** `layer` with other options (tests: a short `refreshMs`). */
export const layerWith = (options: UsersOptions): Layer.Layer<Users, UserError, SqlClient.SqlClient> => Layer.scoped(Users, makeWith(options))
