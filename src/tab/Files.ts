/**
 * The files Cursor's editor syncs to the Tab backend (`FileSyncService`): whole uploads, then
 * incremental updates per model version, so that a `StreamCpp` request with
 * `rely_on_filesync` can be answered without the file in it. A bounded in-memory store, kept
 * per workspace and never persisted: least recently used files go first, and a file that
 * drifts from the client's (a gap, a bad offset, a wrong length or hash) is dropped so that
 * the client uploads it whole again. Plain values in, no protobuf; synchronous.
 */
import { createHash } from "node:crypto"
import type { TabFile } from "../Tab.js"

/** Totals over all workspaces. */
export interface FileLimits {
  readonly maxFiles: number
  readonly maxBytes: number
  /** A single file's size at most (UTF-8 bytes). */
  readonly maxFileBytes: number
}

export const defaultFileLimits: FileLimits = { maxFiles: 500, maxBytes: 32 * 1024 * 1024, maxFileBytes: 1024 * 1024 }

/**
 * Replace `[startPosition, endPosition)` with `replacedString`; offsets in UTF-16 code units,
 * as the editor counts. Within one `VersionUpdates` the updates apply in order, each one's
 * offsets referring to the text left by the previous ones of the same version.
 */
export interface Update {
  readonly startPosition: number
  readonly endPosition: number
  readonly replacedString: string
}

/** The edits that took the file from `modelVersion - 1` to `modelVersion`; a positive `expectedFileLength` is the UTF-16 length after them. */
export interface VersionUpdates {
  readonly modelVersion: number
  readonly updates: ReadonlyArray<Update>
  readonly expectedFileLength: number
}

export type UploadResult = "ok" | "mismatch" | "too_large"
export type SyncResult = "ok" | "missing" | "mismatch"

export interface SyncedFiles {
  /** Store the whole file; "mismatch" when `sha256` is given and is not the hex SHA-256 of `contents` (UTF-8). */
  upload(workspace: string, path: string, contents: string, modelVersion: number, sha256?: string): UploadResult
  /** Bring the stored file to `modelVersion` with the pending updates; on "mismatch" the file is dropped. */
  sync(workspace: string, path: string, modelVersion: number, updates: ReadonlyArray<VersionUpdates>, sha256: string): SyncResult
  /**
   * The stored file, marked as recently used; with none under `workspace`, the most recently
   * used file of that path in any workspace (Cursor's file sync and its completion requests may
   * name one workspace by different ids), which the caller checks (`sha256Hex`) when it can.
   */
  get(workspace: string, path: string): { contents: string; modelVersion: number; workspace: string } | undefined
  /** The workspace's most recently used files but `except`, newest first, whole, their contents within `maxChars` together. */
  recent(workspace: string, except: string, maxChars: number): ReadonlyArray<TabFile>
  clear(): void
  readonly stats: () => { files: number; bytes: number }
}

interface Entry {
  readonly workspace: string
  readonly path: string
  readonly contents: string
  readonly modelVersion: number
  readonly bytes: number
}

export const sha256Hex = (contents: string): string => createHash("sha256").update(contents, "utf8").digest("hex")

const keyOf = (workspace: string, path: string): string => `${workspace}\u0000${path}`

const isOffset = (value: number): boolean => Number.isInteger(value) && value >= 0

/** One update applied to `contents`, or undefined when its offsets fall outside it. */
const applyUpdate = (contents: string, update: Update): string | undefined => {
  const { startPosition: start, endPosition: end } = update
  if (!isOffset(start) || !isOffset(end) || start > end || end > contents.length) return undefined
  return contents.slice(0, start) + update.replacedString + contents.slice(end)
}

/**
 * The pending versions (above `storedVersion`) applied in ascending order, or undefined when
 * they do not follow on from the stored version one by one or an update does not fit.
 */
export const applyVersions = (
  contents: string,
  storedVersion: number,
  versions: ReadonlyArray<VersionUpdates>
): string | undefined => {
  const pending = versions.filter((version) => version.modelVersion > storedVersion)
    .sort((a, b) => a.modelVersion - b.modelVersion)
  let text = contents
  let previousVersion = storedVersion
  for (const version of pending) {
    // A missing version (or the same one twice) means edits we never saw: the text would drift.
    if (version.modelVersion !== previousVersion + 1) return undefined
    for (const update of version.updates) {
      const next = applyUpdate(text, update)
      if (next === undefined) return undefined
      text = next
    }
    if (version.expectedFileLength > 0 && text.length !== version.expectedFileLength) return undefined
    previousVersion = version.modelVersion
  }
  return text
}

export const make = (limits: Partial<FileLimits> = {}): SyncedFiles => {
  const { maxBytes, maxFileBytes, maxFiles } = { ...defaultFileLimits, ...limits }
  // A file larger than the whole store would only evict everything, itself included.
  const fileCap = Math.min(maxFileBytes, maxBytes)
  // Insertion order is recency order: a use deletes and re-inserts, so the first key is the least recent.
  const entries = new Map<string, Entry>()
  let totalBytes = 0

  const drop = (key: string): void => {
    const entry = entries.get(key)
    if (entry === undefined) return
    entries.delete(key)
    totalBytes -= entry.bytes
  }

  const put = (entry: Entry): void => {
    const key = keyOf(entry.workspace, entry.path)
    drop(key)
    entries.set(key, entry)
    totalBytes += entry.bytes
    for (const oldest of entries.keys()) {
      if (entries.size <= maxFiles && totalBytes <= maxBytes) break
      drop(oldest)
    }
  }

  const touch = (key: string, entry: Entry): void => {
    entries.delete(key)
    entries.set(key, entry)
  }

  const store = (workspace: string, path: string, contents: string, modelVersion: number): boolean => {
    const bytes = Buffer.byteLength(contents, "utf8")
    if (bytes > fileCap) return false
    put({ workspace, path, contents, modelVersion, bytes })
    return true
  }

  const hashMatches = (contents: string, sha256: string): boolean => sha256Hex(contents) === sha256.toLowerCase()

  return {
    upload: (workspace, path, contents, modelVersion, sha256) => {
      const key = keyOf(workspace, path)
      // Whatever we held is older than this upload: keep nothing rather than a stale copy.
      if (sha256 !== undefined && sha256 !== "" && !hashMatches(contents, sha256)) {
        drop(key)
        return "mismatch"
      }
      if (!store(workspace, path, contents, modelVersion)) {
        drop(key)
        return "too_large"
      }
      return "ok"
    },

    sync: (workspace, path, modelVersion, updates, sha256) => {
      const key = keyOf(workspace, path)
      const entry = entries.get(key)
      if (entry === undefined) return "missing"
      const contents = applyVersions(entry.contents, entry.modelVersion, updates)
      const fits = contents !== undefined && (sha256 === "" || hashMatches(contents, sha256)) &&
        store(workspace, path, contents, modelVersion)
      if (!fits) {
        // Dropped so that Cursor, told HASH_MISMATCH, uploads the whole file again.
        drop(key)
        return "mismatch"
      }
      return "ok"
    },

    get: (workspace, path) => {
      let key = keyOf(workspace, path)
      let entry = entries.get(key)
      if (entry === undefined) {
        for (const [otherKey, other] of entries) {
          if (other.path !== path) continue
          key = otherKey
          entry = other
        }
      }
      if (entry === undefined) return undefined
      touch(key, entry)
      return { contents: entry.contents, modelVersion: entry.modelVersion, workspace: entry.workspace }
    },

    recent: (workspace, except, maxChars) => {
      const files: Array<TabFile> = []
      let remaining = maxChars
      for (const entry of [...entries.values()].reverse()) {
        if (entry.workspace !== workspace || entry.path === except) continue
        if (entry.contents.length > remaining) continue
        files.push({ path: entry.path, contents: entry.contents })
        remaining -= entry.contents.length
      }
      return files
    },

    clear: () => {
      entries.clear()
      totalBytes = 0
    },

    stats: () => ({ files: entries.size, bytes: totalBytes })
  }
}
