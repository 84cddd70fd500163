/**
 * Faults on purpose, for crash tests: a Store decorator that kills the process (SIGKILL, no
 * finalizers, like a power cut) right after its k-th successful write, or logs each write so a
 * test can count a clean run's commit points. Selected by `BYOK_FAULT_CRASH_AFTER_WRITES` /
 * `BYOK_FAULT_LOG_WRITES`; with neither set the layer is the identity and production pays
 * nothing.
 */
import { Effect, Layer } from "effect"
import { Store } from "./Store.js"
import type { StoreService } from "./Store.js"

export interface FaultOptions {
  /** Kill the process right after this many successful writes (1-based). */
  readonly crashAfterWrites?: number
  /** Print `fault: write <n> <operation>` to stderr after each successful write. */
  readonly logWrites?: boolean
}

export const fromEnvironment = (env: Readonly<Record<string, string | undefined>>): FaultOptions => {
  const crash = Number(env["BYOK_FAULT_CRASH_AFTER_WRITES"] ?? Number.NaN)
  return {
    ...(Number.isInteger(crash) && crash > 0 ? { crashAfterWrites: crash } : {}),
    ...(env["BYOK_FAULT_LOG_WRITES"] === "1" ? { logWrites: true } : {})
  }
}

export const isActive = (options: FaultOptions): boolean => options.crashAfterWrites !== undefined || options.logWrites === true

const decorate = (inner: StoreService, options: FaultOptions): StoreService => {
  let writes = 0
  const after = (operation: string) =>
    Effect.sync(() => {
      writes++
      if (options.logWrites === true) process.stderr.write(`fault: write ${writes} ${operation}\n`)
      if (writes === options.crashAfterWrites) process.kill(process.pid, "SIGKILL")
    })
  const counted = <Args extends ReadonlyArray<unknown>, A, E>(operation: string, f: (...args: Args) => Effect.Effect<A, E>) =>
    (...args: Args) => Effect.tap(f(...args), () => after(operation))
  return {
    ...inner,
    commitInput: counted("commitInput", inner.commitInput),
    saveLlmCall: counted("saveLlmCall", inner.saveLlmCall),
    markLlmCall: counted("markLlmCall", inner.markLlmCall),
    saveOperations: counted("saveOperations", inner.saveOperations),
    markOperationSent: counted("markOperationSent", inner.markOperationSent),
    completeOperation: counted("completeOperation", inner.completeOperation),
    cancelOperation: counted("cancelOperation", inner.cancelOperation)
  }
}

/** Wraps a Store layer with the faults `options` asks for (or returns it as it is). */
export const wrapStore = <E, R>(store: Layer.Layer<Store, E, R>, options: FaultOptions): Layer.Layer<Store, E, R> =>
  isActive(options)
    ? Layer.effect(Store, Effect.map(Store, (inner) => decorate(inner, options))).pipe(Layer.provide(store))
    : store
