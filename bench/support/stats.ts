/** Small statistics and formatting helpers shared by the benchmarks. */
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"

export const median = (values: ReadonlyArray<number>): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

/** Nearest-rank percentile (p in 0..100) of unsorted values. */
export const percentile = (values: ArrayLike<number>, p: number): number => {
  if (values.length === 0) return Number.NaN
  const sorted = Float64Array.from(values as ArrayLike<number>).sort()
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[rank]!
}

/** `median (min–max)` of per-run figures. */
export const spread = (values: ReadonlyArray<number>, digits = 2): string =>
  values.length === 0
    ? "n/a"
    : `${median(values).toFixed(digits)} (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})`

export const verdict = (met: boolean): string => (met ? "met" : "**missed**")

/** The 1/5/15-minute load averages, to say what else was running. */
export const loadAverage = (): string => {
  try {
    return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")
  } catch {
    try {
      return execFileSync("uptime", { encoding: "utf8" }).trim()
    } catch {
      return "unknown"
    }
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Rejects after `ms`: every wait in a benchmark is bounded. */
export const withTimeout = <A>(promise: Promise<A>, ms: number, what: string): Promise<A> =>
  new Promise<A>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms)
    promise.then((value) => {
      clearTimeout(timer)
      resolve(value)
    }, (error) => {
      clearTimeout(timer)
      reject(error)
    })
  })
