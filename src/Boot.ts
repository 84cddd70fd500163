/**
 * THE ENTRY `npm start` RUNS (`dist/main.js`): it loads the server's bundle (`dist/main.bundle.cjs`,
 * `scripts/build.ts`) with a V8 code cache, and maps the bundle's stack frames to our sources.
 *
 * Parsing the 3.5 MB bundle took V8 ~34 MB of zone memory at its peak, and the C heap kept that
 * size for the life of the process (a third of the server's RSS at rest). Compiled from a code
 * cache instead, the bundle is not parsed: a scratch measurement of the server at rest gave
 * ~93 MB of RSS against ~122 MB (`bench/memory.ts` has the figures). Node 20 offers a code cache
 * only to `vm.Script` (`module.enableCompileCache` came with Node 22), so the bundle is CommonJS
 * and compiled here. A start that finds no usable cache writes one once the bundle's top level
 * has run, beside the bundle when that folder is writable (`npm start` rebuilds the same bytes:
 * its cache stays good), and the next start uses it. Its name holds the SHA-256 of the bundle
 * and of what the code depends on (Node's version, the platform, the process's flags): V8 checks
 * only its own version, its flags and the source's length. A file starts with the SHA-256 of
 * the cache it carries: a damaged file is ignored (V8 verifies no checksum in release builds).
 *
 * Node maps stack frames through source maps only for what its own loaders load: a frame in the
 * bundle is mapped here (`Error.prepareStackTrace`), with the bundle's map read at the first
 * stack that needs it, into our files' lines as `--enable-source-maps` did (the map names only
 * our sources, `scripts/build.ts`).
 */
import { createHash } from "node:crypto"
import { readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { createRequire, SourceMap } from "node:module"
import type { SourceMapPayload } from "node:module"
import { basename, dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Script } from "node:vm"

/**
 * When the code cache is written: once the bundle's top level has run (the timer fires after it).
 * Written later, with the functions the server's first seconds compiled, it served no better
 * (a scratch comparison: 92.4-92.9 MB at rest for a cache made at once, 93.1-93.4 MB after 3 s).
 */
export const CACHE_AFTER_MS = 0

const sha256 = (data: string | Uint8Array) => createHash("sha256").update(data).digest()

/**
 * The code cache's file for `bundle` (whose source is `source`) under this Node and these flags:
 * `<bundle>.<source's SHA-256>.<Node's and the flags'>.v8cache` (24 hex digits each).
 */
export const cacheFileOf = (bundle: string, source: string): string => {
  const runtime = sha256([process.version, process.platform, process.arch, process.execArgv.join(" ")].join("\n")).toString("hex").slice(0, 24)
  return join(dirname(bundle), `${basename(bundle)}.${sha256(source).toString("hex").slice(0, 24)}.${runtime}.v8cache`)
}

/** A cache file's name: `<bundle>.<build>.<runtime>.v8cache` (`cacheFileOf`). */
const CACHE_NAME = /^(.*)\.([0-9a-f]+)\.[0-9a-f]+\.v8cache$/

/** The cache in `file` when it is there and whole (its first 32 bytes are the SHA-256 of the rest). */
export const readCache = (file: string): Buffer | undefined => {
  let bytes: Buffer
  try {
    bytes = readFileSync(file)
  } catch {
    return undefined
  }
  if (bytes.length <= 32) return undefined
  const data = bytes.subarray(32)
  return sha256(data).equals(bytes.subarray(0, 32)) ? data : undefined
}

/**
 * Writes `data` to `file` (whole or not at all) and removes the caches of the bundle's earlier
 * builds (those of the same build under other flags stay); false when the folder is not writable.
 */
export const writeCache = (file: string, data: Uint8Array): boolean => {
  const temporary = `${file}.${process.pid}.tmp`
  try {
    writeFileSync(temporary, Buffer.concat([sha256(data), data]))
    renameSync(temporary, file)
  } catch {
    try {
      rmSync(temporary, { force: true })
    } catch {
      // Nothing was written there.
    }
    return false
  }
  const [, bundle, build] = CACHE_NAME.exec(basename(file)) ?? []
  if (bundle === undefined) return true
  for (const name of readdirSync(dirname(file))) {
    const other = CACHE_NAME.exec(name)
    if (other !== null && other[1] === bundle && other[2] !== build) rmSync(join(dirname(file), name), { force: true })
  }
  return true
}

/** The CommonJS wrapper around the bundle, on a line of its own so that the bundle's lines keep their numbers. */
const WRAPPER = "(function (exports, require, module, __filename, __dirname) {\n"

/** Whether a code cache compiled the bundle: a good one did (`used`), none was there or whole (`absent`), V8 refused it (`rejected`). */
export type CacheOutcome = "used" | "absent" | "rejected"

export interface BundleRun {
  readonly outcome: CacheOutcome
  readonly cacheFile: string
  /** Settles once the cache is written (true), could not be (false), or needs no writing (false). */
  readonly written: Promise<boolean>
}

interface Compiled {
  readonly script: Script
  readonly outcome: CacheOutcome
  readonly cacheFile: string
}

/** Compiles `bundle` in its CommonJS wrapper, from its code cache when there is a good one. */
const compileBundle = (bundle: string): Compiled => {
  const source = readFileSync(bundle, "utf8")
  const cacheFile = cacheFileOf(bundle, source)
  const cachedData = readCache(cacheFile)
  const script = new Script(`${WRAPPER}${source}\n})`, { filename: bundle, lineOffset: -1, ...(cachedData === undefined ? {} : { cachedData }) })
  const outcome: CacheOutcome = cachedData === undefined ? "absent" : script.cachedDataRejected === true ? "rejected" : "used"
  return { script, outcome, cacheFile }
}

/**
 * Compiles `bundle` (from its code cache when there is a good one), runs it as a CommonJS
 * module, and, when no cache served, writes one `cacheAfterMs` later (unless the process has
 * ended: the timer does not hold it).
 */
export const runBundle = (bundle: string, cacheAfterMs: number): BundleRun => {
  const { cacheFile, outcome, script } = compileBundle(bundle)
  const written = outcome === "used"
    ? Promise.resolve(false)
    : new Promise<boolean>((resolve) => setTimeout(() => resolve(writeCache(cacheFile, script.createCachedData())), cacheAfterMs).unref())
  const module = { exports: {} }
  const run = script.runInThisContext() as (exports: unknown, require: NodeRequire, module: unknown, filename: string, dirname: string) => void
  run(module.exports, createRequire(bundle), module, bundle, dirname(bundle))
  return { outcome, cacheFile, written }
}

/**
 * Writes `bundle`'s code cache without running it (`BYOK_PRIME_CODE_CACHE=1`: `npm run build`
 * primes the cache for `npm start`'s flags, so that its first start is lean too); true when a
 * good cache is there after.
 */
export const primeBundle = (bundle: string): boolean => {
  const { cacheFile, outcome, script } = compileBundle(bundle)
  return outcome === "used" || writeCache(cacheFile, script.createCachedData())
}

/**
 * The entry's work: the bundle at `relative` to the entry's URL `from`, its stack frames mapped,
 * run from its code cache (or, with `BYOK_PRIME_CODE_CACHE=1`, its cache written and nothing run).
 */
export const boot = (relative: string, from: string): void => {
  const bundle = fileURLToPath(new URL(relative, from))
  if (process.env["BYOK_PRIME_CODE_CACHE"] === "1") {
    if (!primeBundle(bundle)) process.exitCode = 1
    return
  }
  mapStacks(bundle)
  runBundle(bundle, CACHE_AFTER_MS)
}

// =============================================================================
// Stack frames
// =============================================================================

/**
 * Maps the frames in `bundle` of every stack trace to our sources, as `--enable-source-maps`
 * writes them (`at name (file:line:column)`); a frame its map does not cover (a dependency's
 * code, left unmapped by `scripts/build.ts`) keeps its place in the bundle.
 */
export const mapStacks = (bundle: string): void => {
  let map: SourceMap | null | undefined = undefined
  const mapOf = (): SourceMap | null => {
    if (map !== undefined) return map
    try {
      map = new SourceMap(JSON.parse(readFileSync(`${bundle}.map`, "utf8")) as SourceMapPayload)
    } catch {
      map = null
    }
    return map
  }
  const mapDir = dirname(bundle)
  const frameOf = (site: NodeJS.CallSite): string => {
    const text = site.toString()
    if (site.getFileName() !== bundle) return text
    const line = site.getLineNumber()
    const column = site.getColumnNumber()
    if (line === null || column === null) return text
    const entry = mapOf()?.findEntry(line - 1, column - 1)
    if (entry === undefined || !("originalSource" in entry) || entry.originalSource === undefined) return text
    const at = `${bundle}:${line}:${column}`
    const original = `${entry.originalSource.startsWith("file://") ? new URL(entry.originalSource).pathname : join(mapDir, entry.originalSource)}:${entry.originalLine + 1}:${entry.originalColumn + 1}`
    return text.includes(at) ? text.replace(at, original) : text
  }
  Error.prepareStackTrace = (error, sites) => {
    const head = errorHeadOf(error)
    return sites.length === 0 ? head : `${head}\n    at ${sites.map(frameOf).join("\n    at ")}`
  }
}

/** An error's first line as V8 writes it (`Error.prototype.toString`), never throwing. */
const errorHeadOf = (error: unknown): string => {
  try {
    return Error.prototype.toString.call(error)
  } catch {
    return "Error"
  }
}
