/**
 * The running configuration, which a change of the configuration file replaces without a
 * restart. Everything that depends on a changeable key reads it here at the moment it needs it:
 * a model call reads the model table once when it starts (so a turn in flight keeps the target
 * it is streaming from, and a new call sees the new table), the side RPCs read the model list
 * per request, the context windows and prices are looked up per use.
 *
 * A reload re-reads the file with the environment taken at start-up, decodes it with the
 * readable per-field errors, resolves and validates it (the model table's routing included),
 * and only then swaps it in. A refused change is logged once with its readable lines and the
 * running configuration stays. Changes to the listeners, the database, the CA's home and the
 * proxy are logged as needing a restart and keep their running values (`Changes.ts`). The
 * layers register the running configuration's secrets with the redactor for their lifetime.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Context, Data, Effect, Layer, Metric, Stream, SubscriptionRef } from "effect"
import type { ConfigSource, ServerConfig } from "./File.js"
import { ConfigError, loadFrom } from "./File.js"
import * as Secrets from "../internal/Secrets.js"
import * as Metrics from "../Metrics.js"
import { applicable, appliesNothing, type Changes, changesBetween, describe } from "./Changes.js"
import { defaultWatchOptions, watchFile, type WatchOptions } from "./Watch.js"

export type ReloadOutcome = Data.TaggedEnum<{
  /** The new configuration runs (its restart-only keys excepted). */
  Applied: { readonly changes: Changes }
  /** Nothing that applies changed (restart-only keys may have: see `changes.needsRestart`). */
  Unchanged: { readonly changes: Changes | undefined }
  /** The change was refused; the running configuration stays. */
  Refused: { readonly message: string }
}>
export const ReloadOutcome = Data.taggedEnum<ReloadOutcome>()

export interface Live {
  /** The running configuration, read synchronously (lookups on the model-call and checkpoint paths). */
  readonly current: () => ServerConfig
  readonly get: Effect.Effect<ServerConfig>
  /** The running configuration, then each one a reload applies. */
  readonly changes: Stream.Stream<ServerConfig>
  /** Reads the file again now and applies it if valid (what the watcher does after a change). */
  readonly reload: Effect.Effect<ReloadOutcome>
}

export class LiveConfig extends Context.Tag("cursor-byok/LiveConfig")<LiveConfig, Live>() {}

/** Where reloads read from, and how to read it. */
export interface Reloader {
  readonly path: string
  readonly load: Effect.Effect<ServerConfig, ConfigError>
}

/** The applied reload's fields: what was added, removed or changed (the empty ones left out). */
const annotationsOf = (path: string, changes: Changes): Record<string, unknown> => {
  const fields: Record<string, unknown> = { configPath: path }
  const lists = {
    modelsAdded: changes.models.added,
    modelsRemoved: changes.models.removed,
    modelsChanged: changes.models.changed,
    providersAdded: changes.providers.added,
    providersRemoved: changes.providers.removed,
    providersChanged: changes.providers.changed,
    settingsChanged: changes.settings
  }
  for (const [key, list] of Object.entries(lists)) if (list.length > 0) fields[key] = list
  return fields
}

const count = (outcome: "applied" | "refused") => Metric.increment(Metric.tagged(Metrics.configReloads, "outcome", outcome))

/** The live configuration starting at `initial`; without a reloader it never changes. */
export const make = Effect.fn("LiveConfig.make")(function*(initial: ServerConfig, reloader?: Reloader) {
  const ref = yield* SubscriptionRef.make(initial)
  // Mirrors the ref for synchronous readers; written only under the lock, right after the ref.
  let running = initial
  const lock = yield* Effect.makeSemaphore(1)
  // The last refusal logged: the same broken file seen again (another save, a touch) is not logged again.
  let refused: string | undefined

  const reloadFrom = (source: Reloader): Effect.Effect<ReloadOutcome> =>
    Effect.gen(function*() {
      const loaded = yield* Effect.either(source.load)
      if (loaded._tag === "Left") {
        yield* count("refused")
        const message = loaded.left.message
        if (message !== refused) {
          refused = message
          // One entry per problem: a logfmt or JSON logger would write a multi-line message as one line with `\n`s.
          for (const line of message.split("\n")) {
            yield* Effect.logError(`configuration change refused, the running configuration stays: ${line}`).pipe(
              Effect.annotateLogs({ configPath: source.path })
            )
          }
        }
        return ReloadOutcome.Refused({ message })
      }
      refused = undefined
      const changes = changesBetween(running, loaded.right)
      if (changes.needsRestart.length > 0) {
        yield* Effect.logWarning(
          `${source.path}: ${changes.needsRestart.join(", ")} changed; this needs a restart (the running values stay until then)`
        )
      }
      if (appliesNothing(changes)) {
        yield* Effect.logDebug(`${source.path} changed; nothing to apply`)
        return ReloadOutcome.Unchanged({ changes })
      }
      const next = applicable(running, loaded.right)
      for (const notice of next.notices) {
        if (!running.notices.includes(notice)) yield* Effect.logWarning(notice)
      }
      yield* SubscriptionRef.set(ref, next)
      running = next
      yield* count("applied")
      yield* Effect.logInfo(`configuration reloaded from ${source.path}: ${describe(changes)}`).pipe(
        Effect.annotateLogs(annotationsOf(source.path, changes))
      )
      return ReloadOutcome.Applied({ changes })
    }).pipe(lock.withPermits(1))

  return LiveConfig.of({
    current: () => running,
    get: SubscriptionRef.get(ref),
    changes: ref.changes,
    reload: reloader === undefined ? Effect.succeed(ReloadOutcome.Unchanged({ changes: undefined })) : reloadFrom(reloader)
  })
})

/** The running configuration's secrets registered with the redactor (`internal/Secrets.ts`) while the layer lives. */
const withSecretsRegistered = (live: Live) => Effect.as(Secrets.registered(live.current), live)

/** A configuration that never changes (tests, programs without a file to watch). */
export const layerFixed = (config: ServerConfig): Layer.Layer<LiveConfig> =>
  Layer.scoped(LiveConfig, Effect.flatMap(make(config), withSecretsRegistered))

/**
 * The configuration read from `source`, reloaded after each change of its file (the file may
 * not exist yet at the default path: creating it applies it). The watcher stops with the layer.
 */
export const layerWatched = (
  config: ServerConfig,
  source: ConfigSource,
  options: WatchOptions = defaultWatchOptions
): Layer.Layer<LiveConfig, never, FileSystem.FileSystem> =>
  Layer.scoped(
    LiveConfig,
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      // A removed file is not a return to the defaults: an editor replacing it is caught by the
      // debounce; a file that stays removed is refused and the running configuration stays.
      const load = Effect.flatMap(fs.exists(source.path).pipe(Effect.orElseSucceed(() => false)), (exists) =>
        exists ? loadFrom(source) : new ConfigError({ message: `${source.path} was removed` })).pipe(
          Effect.provideService(FileSystem.FileSystem, fs)
        )
      const live = yield* make(config, { path: source.path, load })
      yield* Effect.forkScoped(watchFile(source.path, live.reload, options))
      return yield* withSecretsRegistered(live)
    })
  )
