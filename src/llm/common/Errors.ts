/**
 * Typed `LlmError` constructors and the classification of provider errors, from a non-2xx
 * response or from an error object inside a 200 stream (llm-providers.md §2.5). Every message
 * is redacted of the configuration's secrets here, at the source (a provider quoting the key it
 * refused), before the runner stores, logs or sends it (`internal/Secrets.ts`).
 */
import { redact } from "../../internal/Secrets.js"
import { LlmError, type LlmErrorReason } from "../../Llm.js"

export const llmError = (
  reason: LlmErrorReason,
  message: string,
  options?: { readonly retryable?: boolean; readonly provider?: string; readonly status?: number; readonly retryAfterMs?: number | undefined }
): LlmError =>
  new LlmError({
    reason,
    message: redact(message),
    retryable: options?.retryable ?? false,
    ...(options?.provider !== undefined ? { provider: options.provider } : {}),
    ...(options?.status !== undefined ? { status: options.status } : {}),
    ...(options?.retryAfterMs !== undefined ? { retryAfterMs: options.retryAfterMs } : {})
  })

export const malformed = (message: string): LlmError => llmError("malformedStream", message)

/** At most `max` characters of a provider's text, redacted before the cut (a cut key would escape the redaction). */
export const excerpt = (text: string, max: number): string => redact(text).slice(0, max)

// =============================================================================
// HTTP error classification
// =============================================================================

const overflowPattern =
  /prompt is too long|context[_ ]length[_ ]exceeded|exceeds? the (maximum )?context|maximum context length|context window|too many tokens|input token count.*exceeds|request too large for model/i

/** `retry-after-ms`, `retry-after` (seconds or an HTTP date), in milliseconds. */
export const retryAfterFromHeaders = (headers: Readonly<Record<string, string | undefined>>, now: number): number | undefined => {
  const ms = headers["retry-after-ms"]
  if (ms !== undefined) {
    const value = Number(ms)
    if (Number.isFinite(value) && value >= 0) return value
  }
  const after = headers["retry-after"]
  if (after !== undefined) {
    const seconds = Number(after)
    if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
    const date = Date.parse(after)
    if (Number.isFinite(date)) return Math.max(0, date - now)
  }
  return undefined
}

/** Gemini's `RetryInfo.retryDelay` ("34.4s") inside `error.details[]`. */
export const retryDelayFromGeminiBody = (body: unknown): number | undefined => {
  const details = (body as { error?: { details?: unknown } } | null)?.error?.details
  if (!Array.isArray(details)) return undefined
  for (const detail of details) {
    const delay = (detail as { retryDelay?: unknown } | null)?.retryDelay
    if (typeof delay === "string") {
      const match = /^([\d.]+)s$/.exec(delay)
      if (match !== null) return Math.round(Number(match[1]) * 1000)
    }
  }
  return undefined
}

/** Pulls `error.message` / `error.type` / `error.code` / `error.status` out of any provider error body. */
export const errorFields = (body: unknown): { message?: string; type?: string; code?: string } => {
  const error = (body as { error?: unknown } | null)?.error
  const source = (typeof error === "object" && error !== null ? error : body) as Record<string, unknown> | null
  if (source === null || typeof source !== "object") return {}
  const str = (value: unknown) => (typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined)
  const message = str(source["message"])
  const type = str(source["type"]) ?? str(source["status"])
  const code = str(source["code"])
  return {
    ...(message !== undefined ? { message } : {}),
    ...(type !== undefined ? { type } : {}),
    ...(code !== undefined ? { code } : {})
  }
}

/**
 * A response body as a line a user can read: an HTML error page (a proxy's 502) becomes its
 * title, markup is dropped and whitespace collapsed, and it is cut at 300 characters.
 */
export const readableBody = (bodyText: string): string => {
  const title = /<title[^>]*>([\s\S]*?)<\/title>/i.exec(bodyText)?.[1]
  const text = title ?? (/<(html|body|!doctype)/i.test(bodyText) ? bodyText.replace(/<[^>]*>/g, " ") : bodyText)
  const line = redact(text).replace(/\s+/g, " ").trim()
  return line.length > 300 ? `${line.slice(0, 300)}…` : line
}

const STATUS_MEANING: ReadonlyArray<readonly [LlmError["reason"], string]> = [
  ["auth", "authentication failed (check the provider's API key)"],
  ["rateLimited", "rate limited"],
  ["overloaded", "overloaded"],
  ["contextOverflow", "the conversation is too long for the model's context window"],
  ["providerError", "server error"],
  ["badRequest", "request rejected"]
]

/** Maps a non-2xx response to a typed error (llm-providers.md §2.5). */
export const classifyHttpError = (
  provider: string,
  status: number,
  headers: Readonly<Record<string, string | undefined>>,
  bodyText: string,
  now: number
): LlmError => {
  let body: unknown = undefined
  try {
    body = JSON.parse(bodyText)
  } catch {
    body = undefined
  }
  const fields = errorFields(body)
  const detail = fields.message ?? readableBody(bodyText)
  const kind = `${fields.type ?? ""} ${fields.code ?? ""}`
  const retryAfterMs = retryAfterFromHeaders(headers, now) ?? retryDelayFromGeminiBody(body)
  const base = { provider, status, retryAfterMs }
  // The user reads this in Cursor: what happened in words, the status, then the provider's own text.
  const message = (reason: LlmError["reason"]) => {
    const meaning = STATUS_MEANING.find(([r]) => r === reason)?.[1] ?? "error"
    return `${provider}: ${meaning} (HTTP ${status})${detail === "" ? "" : `: ${detail}`}`
  }
  if (status === 401 || status === 403) return llmError("auth", message("auth"), base)
  if (status === 429) {
    // A spent quota or balance does not come back by waiting; a quota with a stated retry delay (Gemini's per-minute quota) does.
    const spent = /insufficient_quota/i.test(kind) ||
      (/billing|quota exceeded.*plan/i.test(kind + " " + detail) && !/rate/i.test(fields.code ?? "") && retryAfterMs === undefined)
    return llmError("rateLimited", message("rateLimited"), { ...base, retryable: !spent })
  }
  if (status === 529 || /overloaded/i.test(kind) || (status === 503 && /overloaded/i.test(detail))) {
    return llmError("overloaded", message("overloaded"), { ...base, retryable: true })
  }
  if (overflowPattern.test(detail) || /context_length_exceeded/.test(kind)) return llmError("contextOverflow", message("contextOverflow"), base)
  if (status === 408 || status === 409 || status >= 500) return llmError("providerError", message("providerError"), { ...base, retryable: true })
  if (status === 402) return llmError("rateLimited", message("rateLimited"), base)
  return llmError("badRequest", message("badRequest"), base)
}

/** Classifies an error object that arrived inside a 200 stream. */
export const classifyStreamError = (provider: string, body: unknown, label: string): LlmError => {
  const fields = errorFields(body)
  const detail = fields.message ?? excerpt(JSON.stringify(body), 500)
  const kind = `${fields.type ?? ""} ${fields.code ?? ""}`
  const message = `${provider}: ${label}: ${detail}`
  const statusCode = (body as { error?: { status_code?: unknown; code?: unknown } } | null)?.error
  const status = typeof statusCode?.status_code === "number" ? statusCode.status_code : typeof statusCode?.code === "number" ? statusCode.code : undefined
  const options = { provider, ...(status !== undefined ? { status } : {}) }
  if (/overloaded/i.test(kind)) return llmError("overloaded", message, { ...options, retryable: true })
  if (/rate_limit|RESOURCE_EXHAUSTED/i.test(kind)) return llmError("rateLimited", message, { ...options, retryable: true })
  if (/insufficient_quota/i.test(kind)) return llmError("rateLimited", message, options)
  if (overflowPattern.test(detail) || /context_length_exceeded/.test(kind)) return llmError("contextOverflow", message, options)
  if (/api_error|server_error|internal|unavailable/i.test(kind) || (status !== undefined && status >= 500)) {
    return llmError("providerError", message, { ...options, retryable: true })
  }
  if (/invalid_request|bad_request|tool_use_failed|INVALID_ARGUMENT/i.test(kind) || (status !== undefined && status >= 400 && status < 500)) {
    return llmError("badRequest", message, options)
  }
  return llmError("providerError", message, options)
}
