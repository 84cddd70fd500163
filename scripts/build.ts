/**
 * The server bundle `npm start` runs (`npm run build`: `src/main.ts` -> `dist/main.bundle.cjs`,
 * started by `dist/main.js`, the entry `src/Boot.ts` makes), and the benchmarks' children
 * (`bench/support/child.ts`) the same way.
 *
 * Everything but the native SQLite binding goes into one file, tree-shaken and with its
 * whitespace and syntax minified (names are kept, for logs and stack traces). Loaded module by
 * module from `node_modules`, the process held every imported module's whole source text (the
 * Effect packages' JSDoc included) and, under `--enable-source-maps`, the source maps those
 * packages ship: ~46 MB of heap at rest, against ~29 MB for this bundle (`scratch`-measured in
 * the round that made it; `bench/memory.ts` has the figures). The packages that load lazily
 * through `createRequire` (the HTML-to-Markdown ones, `web/Html.ts`) stay where they are.
 *
 * The source map keeps only what maps into this repository's own files, one mapping per source
 * line: Node parses a map whole at start-up (about 100 bytes of heap a mapping), and the full
 * map of the bundle made the heap ~50 MB larger. A stack frame in our code still names its file
 * and line; a frame in a dependency keeps its position in the bundle (its run of code is marked
 * unmapped, so it is never attributed to the nearest line of ours).
 *
 * The bundle is CommonJS, so that `src/Boot.ts` can compile it with a V8 code cache (Node 20
 * offers one only to `vm.Script`): the entry `<outfile>` loads `<name>.bundle.cjs` beside it.
 * `import.meta.url` in the bundle is the bundle's own URL.
 *
 *   node_modules/.bin/tsx scripts/build.ts [entry outfile]
 */
import { decode, encode } from "@jridgewell/sourcemap-codec"
import type { SourceMapLine, SourceMapSegment } from "@jridgewell/sourcemap-codec"
import * as esbuild from "esbuild"
import { spawnSync } from "node:child_process"
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import { basename, dirname, resolve, sep } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
// @ts-expect-error: plain JavaScript, shared with `scripts/fresh.mjs` (no compiler before a build)
import { stampFile, stampOf } from "./stamp.mjs"

/** The repository's root. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..")

interface SourceMapJson {
  readonly version: number
  readonly sources: ReadonlyArray<string>
  readonly names?: ReadonlyArray<string>
  readonly mappings: string
  readonly [key: string]: unknown
}

/**
 * A source map reduced to the sources `keep` accepts: per generated line, one mapping where a
 * kept source line begins, and an unmapped one (a segment of one field) where the code of other
 * sources begins. Sources and names no mapping uses are dropped.
 */
export const keepOwnMappings = (map: SourceMapJson, keep: (source: string) => boolean): SourceMapJson => {
  const kept = map.sources.map(keep)
  const sources: Array<string> = []
  const indexOf = new Map<number, number>()
  const lines = decode(map.mappings).map((line): SourceMapLine => {
    const out: Array<SourceMapSegment> = []
    let last: SourceMapSegment | undefined
    for (const segment of line) {
      if (segment.length === 1 || !kept[segment[1]]) {
        if (last === undefined || last.length > 1) out.push(last = [segment[0]])
        continue
      }
      if (last !== undefined && last.length > 1 && last[1] === indexOf.get(segment[1]) && last[2] === segment[2]) continue
      let index = indexOf.get(segment[1])
      if (index === undefined) {
        index = sources.length
        indexOf.set(segment[1], index)
        sources.push(map.sources[segment[1]]!)
      }
      out.push(last = [segment[0], index, segment[2], segment[3]])
    }
    return out
  })
  return { ...map, sources, names: [], mappings: encode(lines) }
}

/**
 * Refuses a bundle with a character outside ASCII. V8 keeps a script's whole source on the heap
 * for as long as the process runs, in one byte a character when every character fits, in two
 * otherwise: one `·` in a console page made the 3.5 MB bundle a 7 MB string (heap snapshot of
 * the server at rest). esbuild escapes what it can; a character in a tagged template's text or
 * in a regular expression it leaves as it is (write an HTML entity or a `\u` escape there).
 */
export const asciiOnly = (source: string, name: string): void => {
  const at = source.search(/[^\x00-\x7f]/)
  if (at < 0) return
  const line = source.slice(0, at).split("\n").length
  throw new Error(
    `${name}: a character outside ASCII (${JSON.stringify(source[at])} on line ${line}: ${JSON.stringify(source.slice(Math.max(0, at - 60), at + 20))}) ` +
      "would double the bundle's source in memory; escape it in the source"
  )
}

/** The bundle the entry `outfile` loads (`dist/main.js` -> `dist/main.bundle.cjs`). */
export const bundleFileOf = (outfile: string): string => `${outfile.replace(/\.m?js$/, "")}.bundle.cjs`

/**
 * Bundles `entry` into `<outfile>.bundle.cjs` (CommonJS) with the reduced source map beside it,
 * and writes `outfile`, the ES module that boots it (`src/Boot.ts`).
 */
export const buildBundle = async (entry: string, outfile: string): Promise<void> => {
  const bundleFile = bundleFileOf(outfile)
  await esbuild.build({
    entryPoints: [entry],
    outfile: bundleFile,
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node20",
    // ES module builds first: a UMD build (jsonc-parser's) requires its own files at run time.
    mainFields: ["module", "main"],
    // The native binding is loaded from node_modules at run time.
    external: ["better-sqlite3"],
    minifyWhitespace: true,
    minifySyntax: true,
    sourcemap: true,
    sourcesContent: false,
    // The packages' license comments go to `<bundle>.LEGAL.txt` (one of them is not ASCII, below).
    legalComments: "external",
    logLevel: "warning",
    // ES modules are strict: so is the bundle made of them (the first statement of its wrapper's body).
    banner: { js: "\"use strict\";const __bundleUrl=require(\"node:url\").pathToFileURL(__filename).href;" },
    define: { "import.meta.url": "__bundleUrl" }
  })
  asciiOnly(readFileSync(bundleFile, "utf8"), bundleFile)
  await esbuild.build({
    stdin: {
      contents: `import { boot } from ${JSON.stringify(resolve(repoRoot, "src/Boot.ts"))}\nboot(${JSON.stringify(`./${basename(bundleFile)}`)}, import.meta.url)\n`,
      resolveDir: repoRoot,
      loader: "ts"
    },
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    minifyWhitespace: true,
    minifySyntax: true,
    logLevel: "warning"
  })
  // What an ES module bundle left beside its entry (before the bundle was CommonJS).
  for (const stale of [`${outfile}.map`, `${outfile}.LEGAL.txt`]) rmSync(stale, { force: true })
  const mapFile = `${bundleFile}.map`
  const own = [resolve(repoRoot, "src") + sep, resolve(repoRoot, "bench") + sep, resolve(repoRoot, "test") + sep]
  const map = JSON.parse(readFileSync(mapFile, "utf8")) as SourceMapJson
  const reduced = keepOwnMappings(map, (source) => {
    const path = resolve(dirname(bundleFile), source)
    return own.some((root) => path.startsWith(root))
  })
  writeFileSync(mapFile, JSON.stringify(reduced))
}

/** The Node flags `npm start` runs the bundle with (package.json `config.nodeFlags`). */
export const startFlags = (root: string = repoRoot): Array<string> => {
  const flags = (JSON.parse(readFileSync(resolve(root, "package.json"), "utf8")) as { config?: { nodeFlags?: string } }).config?.nodeFlags ?? ""
  return flags.split(/\s+/).filter((flag) => flag !== "")
}

/**
 * Writes the code cache of the bundle the entry `outfile` loads for a process started with
 * `flags` (`src/Boot.ts`: V8 takes a cache only under the flags it was made with), without
 * running the program. Best effort: a start without a cache writes its own.
 */
export const primeCodeCache = (outfile: string, flags: ReadonlyArray<string>): boolean =>
  spawnSync(process.execPath, [...flags, outfile], { env: { ...process.env, BYOK_PRIME_CODE_CACHE: "1" }, stdio: "ignore" }).status === 0

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [entry = resolve(repoRoot, "src/main.ts"), outfile = resolve(repoRoot, "dist/main.js")] = process.argv.slice(2)
  // The stamp of the sources as they were when the build began (`scripts/stamp.mjs`): `npm start` rebuilds only when they change.
  const stamp = process.argv.length <= 2 ? stampOf(repoRoot) : undefined
  buildBundle(entry, outfile).then(() => {
    // `npm start`'s first start then runs from the cache too.
    primeCodeCache(outfile, startFlags())
    if (stamp !== undefined) writeFileSync(stampFile(repoRoot), `${stamp}\n`)
  }).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
