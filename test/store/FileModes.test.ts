/**
 * The database's file modes through the real layer on real files: a new folder 0700, a new
 * database and its WAL and SHM 0600 whatever the umask lets through, and an existing open
 * database left as is with one warning that names the `chmod` fixing it.
 */
import { NodeContext } from "@effect/platform-node"
import { FileSystem, Path } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Logger } from "effect"
import { execFileSync } from "node:child_process"
import * as NodeFs from "node:fs"
import { afterAll, beforeAll } from "vitest"
import * as Sqlite from "../../src/store/Sqlite.js"

const unix = process.platform !== "win32"

let umask = 0
beforeAll(() => {
  umask = process.umask(0o022)
})
afterAll(() => {
  process.umask(umask)
})

const modeOf = (file: string) => (NodeFs.statSync(file).mode & 0o777).toString(8)

/** A fresh temporary folder (removed with the scope), under a name that needs shell quoting. */
const tempFolder = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const root = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-modes-" })
  return path.join(root, "it's mine")
})

interface Line {
  readonly level: string
  readonly message: string
}

/** Builds the real layer on `filename`, writes a row, and runs `inside` while it is open; the log lines. */
const openAndWrite = (filename: string, inside: Effect.Effect<void> = Effect.void) =>
  Effect.gen(function*() {
    const lines: Array<Line> = []
    const capture = Logger.make(({ logLevel, message }) =>
      void lines.push({ level: logLevel.label, message: Array.isArray(message) ? message.join(" ") : String(message) })
    )
    yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE IF NOT EXISTS probe (x INTEGER)`
      yield* sql`INSERT INTO probe (x) VALUES (1)`
      yield* inside
    }).pipe(
      Effect.provide(Sqlite.layerClient({ filename })),
      Effect.provide(Logger.replace(Logger.defaultLogger, capture))
    )
    return lines
  })

/** An existing database made outside the layer with `mode`, with a table in it. */
const existing = (file: string, mode: number) => {
  const db = new Database(file)
  db.pragma("journal_mode = WAL")
  db.exec("CREATE TABLE old (x INTEGER)")
  db.close()
  NodeFs.chmodSync(file, mode)
}

describe.runIf(unix)("database file modes", () => {
  it.scoped("a new database in a new folder: folder 0700, database, WAL and SHM 0600 under umask 022", () =>
    Effect.gen(function*() {
      const folder = yield* tempFolder
      const file = `${folder}/data/byok.sqlite`
      const lines = yield* openAndWrite(
        file,
        Effect.sync(() => {
          assert.strictEqual(modeOf(folder), "700")
          assert.strictEqual(modeOf(`${folder}/data`), "700")
          assert.strictEqual(modeOf(file), "600")
          assert.isTrue(NodeFs.existsSync(`${file}-wal`), "a WAL after a write")
          assert.strictEqual(modeOf(`${file}-wal`), "600")
          assert.strictEqual(modeOf(`${file}-shm`), "600")
        })
      )
      assert.deepStrictEqual(lines.filter((line) => line.level === "WARN"), [])
      // Reopened: still 0600, still no warning.
      const again = yield* openAndWrite(file, Effect.sync(() => assert.strictEqual(modeOf(`${file}-wal`), "600")))
      assert.strictEqual(modeOf(file), "600")
      assert.deepStrictEqual(again.filter((line) => line.level === "WARN"), [])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("an existing folder keeps its mode; the new database in it is 0600", () =>
    Effect.gen(function*() {
      const folder = yield* tempFolder
      NodeFs.mkdirSync(folder, { mode: 0o755 })
      NodeFs.chmodSync(folder, 0o755)
      const file = `${folder}/byok.sqlite`
      yield* openAndWrite(file, Effect.sync(() => assert.strictEqual(modeOf(`${file}-shm`), "600")))
      assert.strictEqual(modeOf(folder), "755")
      assert.strictEqual(modeOf(file), "600")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("an existing 0644 database: one warning with the chmod that fixes it, and its mode left as is", () =>
    Effect.gen(function*() {
      const folder = yield* tempFolder
      NodeFs.mkdirSync(folder)
      const file = `${folder}/byok.sqlite`
      existing(file, 0o644)
      const lines = yield* openAndWrite(file)
      const warnings = lines.filter((line) => line.level === "WARN")
      assert.strictEqual(warnings.length, 1)
      const command = `chmod 600 '${folder.replace("'", `'\\''`)}/byok.sqlite'`
      assert.include(warnings[0]!.message, file)
      assert.isTrue(warnings[0]!.message.endsWith(command), warnings[0]!.message)
      assert.strictEqual(modeOf(file), "644")
      // The command, run by a shell, fixes it.
      execFileSync("sh", ["-c", command])
      assert.strictEqual(modeOf(file), "600")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("an open database with a 0644 WAL and SHM: the command names the three files, none changed", () =>
    Effect.gen(function*() {
      const folder = yield* tempFolder
      NodeFs.mkdirSync(folder)
      const file = `${folder}/byok.sqlite`
      existing(file, 0o644)
      // Another connection keeps the WAL and SHM (made 0644 after the database) in place.
      const other = new Database(file)
      yield* Effect.addFinalizer(() => Effect.sync(() => other.close()))
      other.exec("INSERT INTO old (x) VALUES (1)")
      assert.strictEqual(modeOf(`${file}-wal`), "644")
      const lines = yield* openAndWrite(file)
      const warnings = lines.filter((line) => line.level === "WARN")
      assert.strictEqual(warnings.length, 1)
      const quoted = (name: string) => `'${folder.replace("'", `'\\''`)}/${name}'`
      const command = `chmod 600 ${quoted("byok.sqlite")} ${quoted("byok.sqlite-wal")} ${quoted("byok.sqlite-shm")}`
      assert.isTrue(warnings[0]!.message.endsWith(command), warnings[0]!.message)
      assert.deepStrictEqual([modeOf(file), modeOf(`${file}-wal`), modeOf(`${file}-shm`)], ["644", "644", "644"])
    }).pipe(Effect.provide(NodeContext.layer)))
})
