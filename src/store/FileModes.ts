/**
 * The database's file modes: it holds every prompt and every file the agent read, so a folder this
 * layer makes is 0700 and a new database 0600 (SQLite gives its `-wal` and `-shm` the main file's
 * mode). An existing file readable or writable by others is left as is, with one warning naming
 * the `chmod` that fixes it. Nothing here for `:memory:`, nor for modes on Windows.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import type { PlatformError } from "@effect/platform/Error"
import { Effect } from "effect"

/** The bits that let the group or others read, write or run a file. */
const OTHERS = 0o077

/** `text` as one shell word. */
export const shellQuote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`

const isReason = (reason: string) => (error: PlatformError) => error._tag === "SystemError" && error.reason === reason

/**
 * Makes the database's folder (0700 when it is made here) and, on unix, its file (0600 when new);
 * warns once when the database, its WAL or its SHM already lets others in.
 */
export const prepare = (filename: string): Effect.Effect<void, PlatformError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    if (filename === ":memory:" || filename === "") return
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const database = path.resolve(filename)
    // `mode` applies to the folders made only; an existing one (the user's home, /tmp) keeps its own.
    yield* fs.makeDirectory(path.dirname(database), { recursive: true, mode: 0o700 })
    if (process.platform === "win32") return
    // Made 0600 before SQLite opens it; `wx` leaves a database that appeared meanwhile alone.
    yield* fs.writeFile(database, new Uint8Array(0), { flag: "wx", mode: 0o600 }).pipe(
      Effect.zipRight(fs.chmod(database, 0o600)),
      Effect.catchIf(isReason("AlreadyExists"), () => Effect.void)
    )
    const files = [database, `${database}-wal`, `${database}-shm`]
    const modes = yield* Effect.forEach(files, (file) =>
      fs.stat(file).pipe(
        Effect.map((info) => ({ file, mode: info.mode & 0o777 })),
        Effect.catchIf(isReason("NotFound"), () => Effect.succeed(undefined))
      ))
    const present = modes.filter((entry) => entry !== undefined)
    const open = present.filter((entry) => (entry.mode & OTHERS) !== 0)
    if (open.length === 0) return
    yield* Effect.logWarning(
      `the database ${open.map((entry) => `${entry.file} (mode ${entry.mode.toString(8)})`).join(", ")} can be read or ` +
        `written by other users, and it holds every prompt and every file the agent read; fix it with: ` +
        `chmod 600 ${present.map((entry) => shellQuote(entry.file)).join(" ")}`
    )
  })
