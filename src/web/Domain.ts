/**
 * What the web service hands back: a fetched page as Markdown, search references, and the one
 * error whose message is a sentence the model can act on (never a key, never a stack).
 */
import { Data } from "effect"

export interface FetchedPage {
  /** The final URL, after redirects. */
  readonly url: string
  readonly status: number
  readonly contentType: string
  readonly markdown: string
  /** The body was larger than the byte cap, or the Markdown longer than the character cap; `markdown` ends with a note saying which. */
  readonly truncated: boolean
  /** Body bytes read (at most the cap). */
  readonly bytesRead: number
}

export interface SearchReference {
  readonly title: string
  readonly url: string
  /** The backend's snippet, as plain text, capped. */
  readonly chunk: string
}

export type WebErrorKind = "InvalidUrl" | "Refused" | "TooLarge" | "Timeout" | "Http" | "Unsupported" | "Network" | "NotConfigured"

export class WebError extends Data.TaggedError("WebError")<{
  readonly kind: WebErrorKind
  readonly message: string
  /** The HTTP status, for `Http` errors. */
  readonly status?: number
}> {}

/** `2 MiB`, `512 KiB`, `100 bytes`: caps in messages. */
export const formatBytes = (bytes: number): string => {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`
  if (bytes >= 1024 && bytes % 1024 === 0) return `${bytes / 1024} KiB`
  return `${bytes} bytes`
}

/** `15 s`, `300 ms`: time limits in messages. */
export const formatDuration = (millis: number): string => millis >= 1000 && millis % 1000 === 0 ? `${millis / 1000} s` : `${millis} ms`

/** The message of an error and of its causes, for a network failure's sentence. */
export const describeCause = (cause: unknown): string => {
  if (typeof cause === "object" && cause !== null) {
    const error = cause as { message?: unknown; cause?: unknown; code?: unknown }
    const own = typeof error.message === "string" && error.message !== "" ? error.message : typeof error.code === "string" ? error.code : String(cause)
    const inner = error.cause !== undefined && error.cause !== cause ? describeCause(error.cause) : ""
    return inner !== "" && !own.includes(inner) ? `${own} (${inner})` : own
  }
  return String(cause)
}
