/**
 * The PostgreSQL harness itself (`test/support/Postgres.ts`): the run's cluster from
 * `test/globalSetup.ts` takes fresh databases, each its own, and a cluster of a test's own
 * restarts on the same port with its data. Skipped when the run has no PostgreSQL.
 */
import { existsSync } from "node:fs"
import { afterAll, describe, expect, it } from "vitest"
import { connect, dropDatabase, freshDatabase, postgresUrl, restart, startCluster } from "../support/Postgres.js"

const url = postgresUrl()

describe.skipIf(url === undefined)("PostgreSQL test harness", () => {
  const admin = url!
  const made: Array<string> = []
  afterAll(async () => {
    await Promise.all(made.map(dropDatabase))
  })

  const fresh = async (prefix?: string) => {
    const db = await freshDatabase(admin, prefix)
    made.push(db)
    return db
  }

  it("creates a fresh database that takes a table, rows and a query, and drops it", async () => {
    const db = await fresh("harness")
    expect(new URL(db).pathname).toMatch(/^\/harness_[0-9a-f]+$/)
    expect(new URL(db).port).toBe(new URL(admin).port)
    const client = await connect(db)
    try {
      await client.query("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER NOT NULL, note TEXT)")
      await client.query("INSERT INTO t (id, n, note) VALUES ($1, $2, $3), ($4, $5, $6)", ["a", 1, null, "b", 2, "two"])
      const { rows } = await client.query<{ id: string; n: number; note: string | null }>("SELECT id, n, note FROM t ORDER BY id")
      expect(rows).toEqual([{ id: "a", n: 1, note: null }, { id: "b", n: 2, note: "two" }])
    } finally {
      await client.end()
    }

    // Dropped even with a session still open on it (WITH (FORCE)).
    const lingering = await connect(db)
    await dropDatabase(db)
    await lingering.end().catch(() => {})
    const check = await connect(admin)
    try {
      const name = new URL(db).pathname.slice(1)
      const { rows } = await check.query("SELECT 1 FROM pg_database WHERE datname = $1", [name])
      expect(rows).toHaveLength(0)
    } finally {
      await check.end()
    }
  })

  it("gives two fresh databases that are distinct", async () => {
    const [one, two] = await Promise.all([fresh(), fresh()])
    expect(one).not.toBe(two)
    const a = await connect(one)
    const b = await connect(two)
    try {
      const [nameA, nameB] = await Promise.all([
        a.query<{ db: string }>("SELECT current_database() AS db"),
        b.query<{ db: string }>("SELECT current_database() AS db")
      ])
      expect(nameA.rows[0]?.db).toBe(new URL(one).pathname.slice(1))
      expect(nameB.rows[0]?.db).toBe(new URL(two).pathname.slice(1))
      expect(nameA.rows[0]?.db).not.toBe(nameB.rows[0]?.db)
      await a.query("CREATE TABLE only_in_one (x INTEGER)")
      const { rows } = await b.query("SELECT 1 FROM information_schema.tables WHERE table_name = 'only_in_one'")
      expect(rows).toHaveLength(0)
    } finally {
      await a.end()
      await b.end()
    }
  })

  it("restarts a cluster of its own on the same port with its data (fast and immediate), and stops it for good", async () => {
    // synchronous_commit on: an immediate stop then loses no acknowledged commit.
    const cluster = await startCluster({ settings: { synchronous_commit: "on" } })
    try {
      const before = await connect(cluster.url)
      const { rows: setting } = await before.query<{ synchronous_commit: string }>("SHOW synchronous_commit")
      expect(setting).toEqual([{ synchronous_commit: "on" }])
      const { rows: fsync } = await before.query<{ fsync: string }>("SHOW fsync")
      expect(fsync).toEqual([{ fsync: "off" }])
      await before.query("CREATE TABLE kept (x INTEGER)")
      await before.query("INSERT INTO kept VALUES (1)")
      await restart(cluster)
      // The old session ended with the server.
      await expect(before.query("SELECT 1")).rejects.toThrow()
      await before.end().catch(() => {})
      expect(new URL(cluster.url).port).toBe(String(cluster.port))

      const middle = await connect(cluster.url)
      await middle.query("INSERT INTO kept VALUES (2)")
      await restart(cluster, "immediate")
      await expect(middle.query("SELECT 1")).rejects.toThrow()
      await middle.end().catch(() => {})

      const after = await connect(cluster.url)
      try {
        const { rows } = await after.query<{ x: number }>("SELECT x FROM kept ORDER BY x")
        expect(rows).toEqual([{ x: 1 }, { x: 2 }])
      } finally {
        await after.end()
      }
    } finally {
      await cluster.stop()
    }
    await expect(connect(cluster.url)).rejects.toThrow()
    expect(existsSync(cluster.dir)).toBe(false)
  })
})
