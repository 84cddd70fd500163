/**
 * Tab on the user's own model: the neutral contract of a completion request (what Cursor's
 * `StreamCpp` asks, translated by `dialect/Tab.ts`), of the FIM call made for it
 * (`tab/Fim.ts` speaks the provider's wire) and of the suggestion that answers it. Pure
 * data; the service that serves it (supersede, reuse, one call for identical requests, the
 * synced files) is `tab/Service.ts`.
 */
import { Data } from "effect"
import type { Redacted } from "effect"

/** A file the request carries as context, or one the client synced (`FileSyncService`). */
export interface TabFile {
  readonly path: string
  readonly contents: string
}

/** A problem the editor reports in the file (a linter or compiler), 0-based line. */
export interface TabDiagnostic {
  readonly line: number
  readonly message: string
  readonly severity: string
}

/** A completion request: one file, the cursor in it, and what the editor knows around it. */
export interface TabRequest {
  /** The workspace the file belongs to (its root path, or Cursor's workspace id): synced files are kept per workspace. */
  readonly workspace: string
  /** The file's path, relative to the workspace. */
  readonly path: string
  /** The editor's language id (`typescript`, `python`, ...); "" when not said. */
  readonly languageId: string
  /** The file's text (the whole file as the editor has it, unsaved edits included). */
  readonly contents: string
  /** The cursor: 0-based line and 0-based column in UTF-16 code units, as the editor counts. */
  readonly line: number
  readonly column: number
  /** The user's recent edits, oldest first, as unified-diff-like text. */
  readonly recentEdits: ReadonlyArray<string>
  /** Other files the request names as context (open tabs, recently viewed). */
  readonly otherFiles: ReadonlyArray<TabFile>
  readonly diagnostics: ReadonlyArray<TabDiagnostic>
}

/** How the FIM prompt is bounded. */
export interface TabLimits {
  /** Characters of the file before the cursor sent at most (the nearest first). */
  readonly prefixChars: number
  /** Characters of the file after the cursor sent at most. */
  readonly suffixChars: number
  /** Characters of context (other files, recent edits, diagnostics) sent at most. */
  readonly contextChars: number
  /** Lines a suggestion has at most. */
  readonly maxLines: number
  /** Tokens the model may write at most. */
  readonly maxTokens: number
}

export const defaultLimits: TabLimits = {
  prefixChars: 6_000,
  suffixChars: 2_000,
  contextChars: 4_000,
  maxLines: 12,
  maxTokens: 256
}

/** A fill-in-the-middle prompt: the text before and after the cursor, and the context above it. */
export interface FimPrompt {
  /** The context the model reads before the file (other files, recent edits, problems), as comments or file markers; "" for none. */
  readonly context: string
  readonly prefix: string
  readonly suffix: string
  readonly path: string
  readonly languageId: string
  /** Stop sequences that end a suggestion early. */
  readonly stop: ReadonlyArray<string>
  readonly maxTokens: number
}

/** The FIM wire a provider speaks (`tab/fim/`). */
export type FimApi = "openai-completions" | "mistral-fim" | "llamacpp-infill"

export interface FimTarget {
  /** The provider's id, for error messages and metrics. */
  readonly provider: string
  readonly api: FimApi
  /**
   * `http://127.0.0.1:11434/v1` (OpenAI-compatible, with its version segment),
   * `https://codestral.mistral.ai/v1`, `http://127.0.0.1:8080` (llama.cpp server's root).
   */
  readonly baseUrl: string
  /** "" for none: no `Authorization` header. */
  readonly apiKey: Redacted.Redacted<string>
  readonly headers: Readonly<Record<string, string>>
  /** The upstream model name. */
  readonly model: string
  /** Defaults to 0: a completion should not vary between identical requests. */
  readonly temperature?: number
  /** No response head within this fails with `timeout`; also the longest silence between body reads. */
  readonly timeoutMs: number
}

/** What a FIM call streams: text as it comes, then its end with the usage the provider reported. */
export type FimEvent = Data.TaggedEnum<{
  Text: { readonly text: string }
  Done: { readonly inputTokens: number; readonly outputTokens: number; readonly reason: "stop" | "length" }
}>
export const FimEvent = Data.taggedEnum<FimEvent>()

/** A FIM call that failed: why, in words a user can act on; `status` when the provider answered one. */
export class FimError extends Data.TaggedError("FimError")<{
  readonly kind: "network" | "http" | "timeout" | "decode" | "config"
  readonly message: string
  readonly status?: number
}> {}

/**
 * A suggestion: `text` replaces lines `startLine`..`endLineInclusive` (0-based) of the file
 * as the request had it; the cursor goes after the inserted text, or to `nextCursor` when
 * the model suggested one.
 */
export interface Suggestion {
  readonly text: string
  readonly startLine: number
  readonly endLineInclusive: number
  /** The completion as the model wrote it (trimmed): what is inserted at the cursor. */
  readonly insert: string
}
