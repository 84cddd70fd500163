/**
 * The instances sharing one PostgreSQL database, on PostgreSQL itself. Each instance registers
 * (`instances`), heartbeats every second and, on a connection of its own, holds an advisory lock
 * on its key while it runs: PostgreSQL drops it the moment that connection ends, a SIGKILL
 * included, so an instance is alive while its lock is held and its heartbeat is under 5 s old.
 * A request's session is held by the instance that first claimed it (`request_holders`); an
 * instance that is gone loses its requests to the next that routes them. A conversation is
 * worked by one instance at a time: the same connection takes an advisory lock per
 * conversation. An instance whose heartbeat stopped while its connection stayed (a hung
 * process) has that connection ended by the others' heartbeat, which frees its locks.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Duration, Effect, Layer, Schedule, Scope } from "effect"
import { Cluster, ClusterError, HERE, layerSolo } from "../Cluster.js"
import { isPostgresUrl } from "../store/Postgres.js"
import type { ClusterService, Route } from "../Cluster.js"

/** Advisory lock classes (the two-int form): an instance's key, a conversation's hash. */
const INSTANCE_CLASS = 0x62796f69 // "byoi"
const CONVERSATION_CLASS = 0x62796f63 // "byoc"

export interface RegistryOptions {
  /** `http://host:port`, where the other instances reach this one. */
  readonly address: string
  readonly heartbeatMs?: number
  /** An instance whose heartbeat is older than this is gone, its lock held or not. */
  readonly goneAfterMs?: number
  /** How often a lease held elsewhere is asked for again. */
  readonly leasePollMs?: number
}

/** Advisory locks are the database's; `pg_locks` lists the whole server's, other databases' instances among them. */
const THIS_DATABASE = "(SELECT oid FROM pg_database WHERE datname = current_database())"

/** The live instances, as a subquery: heartbeat fresh (`$1` the oldest heartbeat allowed) and lock held. */
const LIVE = `
  SELECT i.instance_key, i.instance_id, i.address FROM instances i
  WHERE i.heartbeat_at_ms > $1 AND EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.database = ${THIS_DATABASE} AND l.classid = ${INSTANCE_CLASS} AND l.objid = i.instance_key AND l.objsubid = 2
  )`

/**
 * Claims `$2` for `$3` unless a live instance holds it; answers who holds it after, who held it
 * before and the holder's address. One statement: two instances claiming at once see one winner.
 */
const CLAIM = `
  WITH live AS (${LIVE}),
  previous AS (SELECT instance_key FROM request_holders WHERE request_id = $2),
  claimed AS (
    INSERT INTO request_holders (request_id, instance_key, claimed_at_ms) VALUES ($2, $3, $4)
    ON CONFLICT (request_id) DO UPDATE SET instance_key = EXCLUDED.instance_key, claimed_at_ms = EXCLUDED.claimed_at_ms
    WHERE request_holders.instance_key NOT IN (SELECT instance_key FROM live)
    RETURNING instance_key
  )
  SELECT (SELECT instance_key FROM claimed) AS claimed, (SELECT instance_key FROM previous) AS previous`

/**
 * The instance serving conversation `$2`: its home when that one is alive, else `$3` from now
 * (claimed as requests are). Every request that starts a turn of the conversation goes there, so
 * its turns meet on one instance as they would on a server alone (a new message supersedes the
 * running turn, the old turn's reader gets its end).
 */
const HOME = `
  WITH live AS (${LIVE}),
  home AS (
    INSERT INTO conversation_homes (conversation_id, instance_key, claimed_at_ms) VALUES ($2, $3, $4)
    ON CONFLICT (conversation_id) DO UPDATE SET instance_key = EXCLUDED.instance_key, claimed_at_ms = EXCLUDED.claimed_at_ms
    WHERE conversation_homes.instance_key NOT IN (SELECT instance_key FROM live)
    RETURNING instance_key
  )
  SELECT COALESCE((SELECT instance_key FROM home), (SELECT instance_key FROM conversation_homes WHERE conversation_id = $2)) AS home`

const HOLDER = `
  WITH live AS (${LIVE})
  SELECT h.instance_key, live.instance_id, live.address FROM request_holders h
  LEFT JOIN live ON live.instance_key = h.instance_key WHERE h.request_id = $2`

interface ClaimRow {
  readonly claimed: number | null
  readonly previous: number | null
}

interface HolderRow {
  readonly instance_key: number
  readonly instance_id: string | null
  readonly address: string | null
}

const failed = (what: string) => (cause: SqlError) =>
  new ClusterError({ message: `the instances' registry could not ${what}: ${cause.message}`, cause })

type Run = <A extends object>(text: string, params: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<A>, SqlError>

const asClusterError = (what: string) => (error: SqlError | ClusterError) => error._tag === "ClusterError" ? error : failed(what)(error)

/** Where requests are served, for the instance `key`: claims, homes and the routes it found to others (kept until forgotten). */
const routesOf = (run: Run, key: number, goneAfterMs: number) => {
  const remote = new Map<string, Route>()
  const remember = (requestId: string, there: Route) => {
    if (remote.size >= 10_000) remote.delete(remote.keys().next().value!)
    remote.set(requestId, there)
    return there
  }

  /** Where `requestId` is served, once claimed for `forKey` unless a live instance holds it. */
  const claimFor = (requestId: string, forKey: number): Effect.Effect<Route, SqlError> =>
    Effect.gen(function*() {
      const at = yield* Clock.currentTimeMillis
      const [claim] = yield* run<ClaimRow>(CLAIM, [at - goneAfterMs, requestId, forKey, at])
      if (claim?.claimed === key) return claim.previous !== null && claim.previous !== key ? { _tag: "Here", tookOver: true } as const : HERE
      if (claim?.claimed == null && claim?.previous === key) return HERE
      const [holder] = yield* run<HolderRow>(HOLDER, [at - goneAfterMs, requestId])
      if (holder === undefined || holder.instance_key === key) return HERE
      // Held by an instance that went between the two statements: claimed here.
      if (holder.instance_id === null || holder.address === null) return yield* claimFor(requestId, key)
      return remember(requestId, { _tag: "There", instanceId: holder.instance_id, address: holder.address })
    })

  const route = (requestId: string): Effect.Effect<Route, ClusterError> =>
    Effect.suspend(() => remote.get(requestId) !== undefined ? Effect.succeed(remote.get(requestId)!) : claimFor(requestId, key)).pipe(
      Effect.mapError(asClusterError("find the request's instance"))
    )

  /** The conversation's live home, or this instance from now. */
  const homeOf = (conversationId: string): Effect.Effect<number, SqlError> =>
    Effect.gen(function*() {
      const at = yield* Clock.currentTimeMillis
      const [row] = yield* run<{ home: number | null }>(HOME, [at - goneAfterMs, conversationId, key, at])
      return row?.home ?? key
    })

  const routeTurn = (requestId: string, conversationId: string): Effect.Effect<Route, ClusterError> =>
    Effect.suspend(() => {
      const known = remote.get(requestId)
      if (known !== undefined) return Effect.succeed(known)
      return Effect.flatMap(homeOf(conversationId), (home) => claimFor(requestId, home))
    }).pipe(Effect.mapError(asClusterError("find the conversation's instance")))

  const holderOf = (requestId: string): Effect.Effect<Route | undefined, ClusterError> =>
    Effect.gen(function*() {
      const known = remote.get(requestId)
      if (known !== undefined) return known
      const at = yield* Clock.currentTimeMillis
      const [holder] = yield* run<HolderRow>(HOLDER, [at - goneAfterMs, requestId])
      if (holder === undefined) return undefined
      if (holder.instance_key === key) return HERE
      // Held by an instance that is gone: taken over here.
      if (holder.instance_id === null || holder.address === null) return yield* claimFor(requestId, key)
      return remember(requestId, { _tag: "There", instanceId: holder.instance_id, address: holder.address })
    }).pipe(Effect.mapError(asClusterError("find the request's instance")))

  const adopt = (conversationId: string) => homeOf(conversationId).pipe(Effect.asVoid, Effect.mapError(failed("adopt the conversation")))

  return { route, routeTurn, holderOf, adopt, forget: (requestId: string) => void remote.delete(requestId) }
}

/** A conversation's lease on the locks' connection: taken when free (asked every `pollMs`), given back with the scope. */
const leaseOf = (onLocks: <A>(text: string, params: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<A>, SqlError>, pollMs: number) => {
  const tryLease = (conversationId: string) =>
    onLocks<{ locked: boolean }>("SELECT pg_try_advisory_lock($1, hashtext($2)) AS locked", [CONVERSATION_CLASS, conversationId]).pipe(
      Effect.map((rows) => rows[0]?.locked === true)
    )
  const lease = (conversationId: string): Effect.Effect<void, never, Scope.Scope> =>
    Effect.acquireRelease(
      tryLease(conversationId).pipe(
        Effect.repeat({ until: (held) => held, schedule: Schedule.spaced(Duration.millis(pollMs)) }),
        Effect.catchAll((error) =>
          Effect.logWarning(`cluster: conversation ${conversationId} worked without its lease (the database did not answer: ${error.message})`)
        )
      ),
      () =>
        onLocks("SELECT pg_advisory_unlock($1, hashtext($2))", [CONVERSATION_CLASS, conversationId]).pipe(Effect.ignore)
    )

  return lease
}

export const make = (options: RegistryOptions): Effect.Effect<ClusterService, ClusterError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const heartbeatMs = options.heartbeatMs ?? 1000
    const goneAfterMs = options.goneAfterMs ?? 5000
    const leasePollMs = options.leasePollMs ?? 25
    const instanceId = crypto.randomUUID()
    const run: Run = <A extends object>(text: string, params: ReadonlyArray<unknown>) => sql.unsafe<A>(text, params as Array<never>)

    // The locks' connection: held for the instance's life (taken again if it ends), its locks freed before it goes back to the pool.
    const scope = yield* Effect.scope
    const reserveLocks = Effect.acquireRelease(
      sql.reserve.pipe(Effect.mapError(failed("reserve a connection"))),
      (connection) => connection.execute("SELECT pg_advisory_unlock_all()", [], undefined).pipe(Effect.ignore)
    ).pipe(Scope.extend(scope))
    let locks = yield* reserveLocks
    const onLocks = <A>(text: string, params: ReadonlyArray<unknown>) =>
      Effect.suspend(() => locks.execute(text, params, undefined) as Effect.Effect<ReadonlyArray<A>, SqlError>)

    const now = yield* Clock.currentTimeMillis
    const [registered] = yield* run<{ instance_key: number }>(
      "INSERT INTO instances (instance_id, address, started_at_ms, heartbeat_at_ms) VALUES ($1, $2, $3, $3) RETURNING instance_key",
      [instanceId, options.address, now]
    ).pipe(Effect.mapError(failed("register this instance")))
    const key = registered!.instance_key
    yield* onLocks("SELECT pg_advisory_lock($1, $2)", [INSTANCE_CLASS, key]).pipe(Effect.mapError(failed("lock this instance's key")))
    // A stop says so at once: the others need not wait for the lock's connection to close.
    yield* Effect.addFinalizer(() => run("DELETE FROM instances WHERE instance_key = $1", [key]).pipe(Effect.ignore))

    /** How many other instances are alive now. */
    const countOthers = Effect.flatMap(Clock.currentTimeMillis, (at) =>
      run<{ n: number }>(`SELECT count(*)::int AS n FROM (${LIVE}) live WHERE live.instance_key <> $2`, [at - goneAfterMs, key])
    ).pipe(Effect.map((rows) => rows[0]?.n ?? 0))
    let failing = false
    // The other live instances at the last heartbeat (none: a reader claims its request at once).
    let others = 0
    /**
     * The instance's lock, checked on its connection; taken again on a new one when that
     * connection ended (PostgreSQL restarted, or the others found this instance hung): the
     * conversations' leases went with it, so for that moment another instance may take one.
     */
    const keepLock = Effect.gen(function*() {
      const held = yield* onLocks<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND database = ${THIS_DATABASE} AND classid = ${INSTANCE_CLASS} AND objid = $1 AND objsubid = 2`,
        [key]
      ).pipe(Effect.map((rows) => (rows[0]?.n ?? 0) > 0), Effect.orElseSucceed(() => false))
      if (held) return
      locks = yield* reserveLocks
      yield* onLocks("SELECT pg_advisory_lock($1, $2)", [INSTANCE_CLASS, key])
      yield* Effect.logWarning("cluster: this instance's lock connection had ended (the database restarted, or this instance was taken for hung); it holds its lock again")
    })

    const beat = Effect.gen(function*() {
      const at = yield* Clock.currentTimeMillis
      yield* keepLock
      yield* run("UPDATE instances SET heartbeat_at_ms = $1 WHERE instance_key = $2", [at, key])
      // A hung instance (heartbeat stopped, connection open): its locks' connection is ended.
      yield* run(
        `SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN instances i ON l.objid = i.instance_key
         WHERE l.locktype = 'advisory' AND l.granted AND l.database = ${THIS_DATABASE} AND l.classid = ${INSTANCE_CLASS} AND l.objsubid = 2 AND i.heartbeat_at_ms <= $1`,
        [at - goneAfterMs]
      )
      others = yield* countOthers
      yield* run("DELETE FROM request_holders WHERE claimed_at_ms < $1", [at - 86_400_000])
      yield* run("DELETE FROM conversation_homes WHERE instance_key NOT IN (SELECT instance_key FROM instances)", [])
      yield* run("DELETE FROM instances WHERE heartbeat_at_ms < $1", [at - 3_600_000])
    }).pipe(
      // Said once when the beats stop reaching the database and once when they reach it again.
      Effect.tap(() => failing ? Effect.sync(() => void (failing = false)).pipe(Effect.zipRight(Effect.logInfo("cluster: heartbeat reaches the database again"))) : Effect.void),
      Effect.catchAll((error) =>
        failing ? Effect.void : Effect.sync(() => void (failing = true)).pipe(Effect.zipRight(Effect.logWarning(`cluster: heartbeat failed: ${error.message}`)))
      )
    )
    yield* Effect.forkScoped(Effect.repeat(beat, Schedule.spaced(Duration.millis(heartbeatMs))))

    const { adopt, forget, holderOf, route, routeTurn } = routesOf(run, key, goneAfterMs)
    const lease = leaseOf(onLocks, leasePollMs)

    const othersAlive = countOthers.pipe(Effect.map((n) => n > 0), Effect.mapError(failed("list the live instances")))

    yield* Effect.logInfo(`cluster: instance ${instanceId} (key ${key}) at ${options.address}`)
    return {
      instanceId,
      shared: true,
      // Not before two beats have looked: instances started together would each think themselves alone.
      alone: () => others === 0 && Date.now() - now > 2 * heartbeatMs,
      route,
      routeTurn,
      holderOf,
      adopt,
      forget,
      lease,
      othersAlive
    } satisfies ClusterService
  })

/** The registry on the Store's PostgreSQL database. */
export const layer = (options: RegistryOptions): Layer.Layer<Cluster, ClusterError, SqlClient.SqlClient> =>
  Layer.scoped(Cluster, make(options))

/** The registry when `database` is PostgreSQL (instances may share it); alone on a SQLite file. */
export const layerFor = (database: string, options: RegistryOptions): Layer.Layer<Cluster, ClusterError, SqlClient.SqlClient> =>
  isPostgresUrl(database) ? layer(options) : layerSolo
