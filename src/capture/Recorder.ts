/**
 * Capture mode's files: one per agent request (by request id) under `<home>/captures/` (folder
 * 0700, files 0600: they hold prompts and, with `capture.contents`, files), JSON lines appended
 * in order, off the request's path (a batch per tick, one append at a time per file). A write
 * that fails is logged once and never reaches the request. The format is `Format.ts`'s.
 */
import { appendFile, mkdir } from "node:fs/promises"
import { join } from "node:path"
import type { ServerConfig } from "../Config.js"
import type { CaptureHeader, CaptureLine, ServerFacts } from "./Format.js"
import { CAPTURE_VERSION } from "./Format.js"

/** How many requests' files are remembered (a request coming back later starts a new file). */
const REMEMBERED = 512
/** Side calls go to the files of the same client version used this recently. */
const SIDE_WINDOW_MS = 10 * 60_000

/** A capture's file name: its start time and request id, safe on any file system. */
export const fileNameOf = (startedAt: Date, requestId: string) =>
  `${startedAt.toISOString().replace(/[:.]/g, "-")}-${requestId.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 80)}.jsonl`

/** What replay needs of the running configuration to behave the same. */
export const serverFactsOf = (config: ServerConfig): ServerFacts => ({
  models: config.models.map((model) => ({
    id: model.id,
    contextWindow: model.contextWindow,
    ...(model.maxOutputTokens === undefined ? {} : { maxOutputTokens: model.maxOutputTokens }),
    ...(model.thinking === undefined ? {} : { thinking: model.thinking }),
    ...(model.displayName === undefined ? {} : { displayName: model.displayName }),
    ...(model.supportsImages === undefined ? {} : { supportsImages: model.supportsImages })
  })),
  ...(config.defaultModel === undefined ? {} : { defaultModel: config.defaultModel }),
  ...(config.subagentModel === undefined ? {} : { subagentModel: config.subagentModel }),
  ...(config.router.aliases === undefined ? {} : { aliases: config.router.aliases }),
  heartbeatMs: config.heartbeatMs,
  orphanTimeoutMs: config.orphanTimeoutMs,
  blobAckTimeoutMs: config.blobAckTimeoutMs,
  queuedMessageGraceMs: config.queuedMessageGraceMs,
  maxLlmCallsPerTurn: config.maxLlmCallsPerTurn,
  compaction: config.compaction,
  appendWindow: config.limits.appendWindow
})

/** One request's capture file. */
export class CaptureFile {
  readonly startedAt = performance.now()
  lastUsedMs = Date.now()
  private pending: Array<string> = []
  private scheduled = false
  private readonly calls = { RunSSE: 0, Run: 0, BidiAppend: 0 }

  constructor(
    readonly path: string,
    readonly requestId: string,
    readonly clientVersion: string | undefined,
    readonly contents: boolean,
    private readonly recorder: Recorder
  ) {}

  /** The next call number of a wire on this request (a reconnect is call 2). */
  nextCall(wire: keyof CaptureFile["calls"]): number {
    return ++this.calls[wire]
  }

  /** Appends a line (its time stamped, relative to the file's start); written on the next tick. */
  write(line: CaptureLine | CaptureHeader): void {
    this.lastUsedMs = Date.now()
    const stamped = line.kind === "capture" ? line : { ...line, t: Math.round(performance.now() - this.startedAt) }
    this.pending.push(JSON.stringify(stamped))
    if (this.scheduled) return
    this.scheduled = true
    setImmediate(() => {
      this.scheduled = false
      const text = this.pending.join("\n") + "\n"
      this.pending = []
      this.recorder.append(this.path, text)
    })
  }
}

/** The capture files of a server, on the running configuration (`capture.enabled`, `capture.contents`, `home`). */
export class Recorder {
  private readonly byRequest = new Map<string, CaptureFile>()
  private readonly byConversation = new Map<string, CaptureFile>()
  private chain: Promise<void> = Promise.resolve()
  private folderMade: string | undefined
  private failed = false

  constructor(private readonly config: () => ServerConfig, private readonly warn: (message: string) => void) {}

  /** Capture mode is on (read at each request: a reload applies to the next one). */
  get on(): boolean {
    return this.config().capture.enabled
  }

  get folder(): string {
    return join(this.config().home, "captures")
  }

  /** The file of a request, opened (its header written) the first time. */
  fileFor(requestId: string, clientVersion: string | undefined): CaptureFile {
    const known = this.byRequest.get(requestId)
    if (known !== undefined) return known
    const config = this.config()
    const now = new Date()
    const file = new CaptureFile(join(this.folder, fileNameOf(now, requestId)), requestId, clientVersion, config.capture.contents, this)
    remember(this.byRequest, requestId, file)
    file.write({
      kind: "capture",
      version: CAPTURE_VERSION,
      requestId,
      startedAt: now.toISOString(),
      contents: config.capture.contents,
      ...(clientVersion === undefined ? {} : { clientVersion }),
      server: serverFactsOf(config)
    })
    return file
  }

  /** A conversation's model calls go to this request's file. */
  bindConversation(conversationId: string, file: CaptureFile): void {
    remember(this.byConversation, conversationId, file)
  }

  /** The file of the conversation a model call (`<conversation>/t<n>/c<m>`) belongs to. */
  fileOfCall(callId: string): CaptureFile | undefined {
    return this.byConversation.get(callId.replace(/\/t\d+\/c\d+$/, ""))
  }

  /** The files a side call of this client version goes to (used in the last minutes). */
  filesOfVersion(clientVersion: string | undefined): ReadonlyArray<CaptureFile> {
    const since = Date.now() - SIDE_WINDOW_MS
    return [...this.byRequest.values()].filter((file) => file.clientVersion === clientVersion && file.lastUsedMs >= since)
  }

  /** Appends text to a file, after every earlier append; a failure is logged once and dropped. */
  append(path: string, text: string): void {
    this.chain = this.chain.then(async () => {
      try {
        const folder = join(path, "..")
        if (this.folderMade !== folder) {
          await mkdir(folder, { recursive: true, mode: 0o700 })
          this.folderMade = folder
        }
        // Made 0600 (the umask can only take bits away).
        await appendFile(path, text, { mode: 0o600 })
      } catch (error) {
        if (this.failed) return
        this.failed = true
        this.warn(`capture: could not write ${path} (${(error as Error).message}); captures are dropped, requests go on`)
      }
    })
  }

  /** Resolves once everything written so far is on disk (or dropped). */
  async flush(): Promise<void> {
    await new Promise<void>((resolve) => setImmediate(resolve))
    await this.chain
  }
}

const remember = <A>(map: Map<string, A>, key: string, value: A) => {
  map.delete(key)
  map.set(key, value)
  if (map.size > REMEMBERED) map.delete(map.keys().next().value!)
}
