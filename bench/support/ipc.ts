/**
 * The debug hook of a benchmark child (server or relay), over the IPC channel its parent
 * opened:
 * - `{ op: "gc" }` runs a full GC (when started with `--expose-gc`) and answers with
 *   `process.memoryUsage()`;
 * - `{ op: "profile-start" }` / `{ op: "profile-stop", path }` run the V8 CPU profiler through
 *   `node:inspector` (so a profile covers only the measured load, not startup) and write the
 *   `.cpuprofile` to `path`;
 * - `{ op: "heap-start" }` / `{ op: "heap-stop", path }` run V8's sampling heap profiler (every
 *   ~`intervalBytes` allocated, objects collected since included) and write the `.heapprofile`;
 * - `{ op: "exit" }` exits normally.
 * The child exits when its parent goes away.
 */
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector"
import { findSourceMap } from "node:module"

interface CallFrame {
  url: string
  lineNumber: number
  columnNumber: number
  functionName: string
}

/** Rewrites the profile's positions in transpiled files (tsx) to the TypeScript source, when a source map is known. */
const mapPositions = (profile: { nodes: Array<{ callFrame: CallFrame }> }) => {
  for (const { callFrame } of profile.nodes) {
    if (!callFrame.url.startsWith("file://") || callFrame.url.includes("/node_modules/")) continue
    try {
      const map = findSourceMap(callFrame.url)
      const entry = map?.findEntry(callFrame.lineNumber, callFrame.columnNumber) as
        | { originalLine?: number; originalColumn?: number; name?: string }
        | undefined
      if (entry?.originalLine === undefined) continue
      callFrame.lineNumber = entry.originalLine
      callFrame.columnNumber = entry.originalColumn ?? 0
    } catch {
      // keep the transpiled position
    }
  }
}

interface Request {
  readonly op?: string
  readonly id?: number
  readonly path?: string
  readonly intervalUs?: number
  readonly intervalBytes?: number
}

export const installDebugHook = (): void => {
  if (process.send === undefined) return
  let session: Session | undefined
  const reply = (id: number | undefined, body: Record<string, unknown>) => process.send?.({ id, ...body })
  process.on("message", (message: Request) => {
    switch (message.op) {
      case "gc": {
        const gc = (globalThis as { gc?: () => void }).gc
        if (gc !== undefined) {
          gc()
          gc()
        }
        reply(message.id, { gc: gc !== undefined, memory: process.memoryUsage() })
        return
      }
      case "profile-start": {
        session = new Session()
        session.connect()
        session.post("Profiler.enable", () =>
          session!.post("Profiler.setSamplingInterval", { interval: message.intervalUs ?? 200 }, () =>
            session!.post("Profiler.start", () => reply(message.id, { started: true }))))
        return
      }
      case "profile-stop": {
        if (session === undefined) return reply(message.id, { error: "no profile running" })
        session.post("Profiler.stop", (error, result) => {
          if (error === null) mapPositions(result.profile as unknown as { nodes: Array<{ callFrame: CallFrame }> })
          if (error === null && message.path !== undefined) writeFileSync(message.path, JSON.stringify(result.profile))
          session?.disconnect()
          session = undefined
          reply(message.id, { written: error === null })
        })
        return
      }
      case "heap-start": {
        session = new Session()
        session.connect()
        // Objects a GC collected stay in the profile: it counts what was allocated, not what is kept.
        session.post("HeapProfiler.startSampling", { samplingInterval: message.intervalBytes ?? 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true }, () =>
          reply(message.id, { started: true }))
        return
      }
      case "heap-stop": {
        if (session === undefined) return reply(message.id, { error: "no profile running" })
        session.post("HeapProfiler.stopSampling", (error, result) => {
          if (error === null && message.path !== undefined) writeFileSync(message.path, JSON.stringify(result.profile))
          session?.disconnect()
          session = undefined
          reply(message.id, { written: error === null })
        })
        return
      }
      case "exit":
        process.exit(0)
    }
  })
  process.on("disconnect", () => process.exit(0))
}
