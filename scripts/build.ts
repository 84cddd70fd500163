/**
 * The server bundle `npm start` runs (`npm run build`: `src/main.ts` -> `dist/main.js`), and the
 * benchmarks' children (`bench/support/child.ts`) the same way.
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
 *   node_modules/.bin/tsx scripts/build.ts [entry outfile]
 */
import { decode, encode } from "@jridgewell/sourcemap-codec"
import type { SourceMapLine, SourceMapSegment } from "@jridgewell/sourcemap-codec"
import * as esbuild from "esbuild"
import { readFileSync, writeFileSync } from "node:fs"
import { dirname, resolve, sep } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

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

/** Bundles `entry` into `outfile` (an ES module for Node) with the reduced source map beside it. */
export const buildBundle = async (entry: string, outfile: string): Promise<void> => {
  await esbuild.build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    // ES module builds first: a UMD build (jsonc-parser's) requires its own files at run time.
    mainFields: ["module", "main"],
    // The native binding is loaded from node_modules at run time.
    external: ["better-sqlite3"],
    minifyWhitespace: true,
    minifySyntax: true,
    sourcemap: true,
    sourcesContent: false,
    // The packages' license comments go to `<outfile>.LEGAL.txt` (one of them is not ASCII, below).
    legalComments: "external",
    logLevel: "warning",
    // The CommonJS packages in the bundle `require` Node's modules.
    banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" }
  })
  asciiOnly(readFileSync(outfile, "utf8"), outfile)
  const mapFile = `${outfile}.map`
  const own = [resolve(repoRoot, "src") + sep, resolve(repoRoot, "bench") + sep, resolve(repoRoot, "test") + sep]
  const map = JSON.parse(readFileSync(mapFile, "utf8")) as SourceMapJson
  const reduced = keepOwnMappings(map, (source) => {
    const path = resolve(dirname(outfile), source)
    return own.some((root) => path.startsWith(root))
  })
  writeFileSync(mapFile, JSON.stringify(reduced))
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [entry = resolve(repoRoot, "src/main.ts"), outfile = resolve(repoRoot, "dist/main.js")] = process.argv.slice(2)
  buildBundle(entry, outfile).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
