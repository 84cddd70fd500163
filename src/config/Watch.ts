/**
 * Watching one file for changes. Editors save by writing in place or by writing a temporary
 * file and renaming it over the original; a watch on the file itself follows the old inode and
 * goes deaf after a rename (Linux inotify), so the file's directory is watched and its events
 * are filtered by the file's name. A burst of events (one save is often a truncate, a write and
 * a rename) is collapsed by waiting for a quiet period. A failed watch is started again.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Duration, Effect, Schedule, Stream } from "effect"
import { basename, dirname, resolve } from "node:path"

export interface WatchOptions {
  /** Quiet period after the last event before `onChange` runs. */
  readonly debounce: Duration.DurationInput
  /** Wait before watching again after the watch failed or ended. */
  readonly rewatchAfter: Duration.DurationInput
}

export const defaultWatchOptions: WatchOptions = { debounce: "200 millis", rewatchAfter: "1 second" }

/**
 * Runs `onChange` after each burst of changes to the file at `path` (written, replaced,
 * created or removed), one at a time; never ends (interrupt it, or fork it in a scope).
 */
export const watchFile = <E, R>(
  path: string,
  onChange: Effect.Effect<void, E, R>,
  options: WatchOptions = defaultWatchOptions
): Effect.Effect<never, never, FileSystem.FileSystem | R> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const absolute = resolve(path)
    const name = basename(absolute)
    const once = fs.watch(dirname(absolute)).pipe(
      // The platform reports the name relative to the watched directory.
      Stream.filter((event) => basename(event.path) === name),
      Stream.debounce(options.debounce),
      Stream.runForEach(() => onChange.pipe(Effect.catchAllCause((cause) => Effect.logError(`reloading ${path} failed`, cause)))),
      Effect.catchAllCause((cause) => Effect.logWarning(`watching ${path} for changes failed; watching again in ${Duration.format(options.rewatchAfter)}`, cause))
    )
    return yield* Effect.repeat(once, Schedule.spaced(options.rewatchAfter)).pipe(Effect.zipRight(Effect.never))
  })
