/**
 * The console's statuses in words: a conversation's (`Loop.ConversationStatus`), a model call's
 * (`Store.LlmCallStatus`) and a failed attempt's outcome (an HTTP status or what failed
 * without one). An unknown value reads as itself.
 */

const CONVERSATION: Record<string, string> = {
  ready: "ready",
  waitingLlm: "waiting for the model",
  waitingClient: "waiting for Cursor (a tool)",
  final: "finished",
  failed: "failed",
  canceled: "canceled"
}

const CALL: Record<string, string> = {
  planned: "planned",
  streaming: "streaming",
  committed: "answered",
  failed: "failed",
  canceled: "canceled"
}

export const conversationStatusWords = (status: string): string => CONVERSATION[status] ?? status

export const callStatusWords = (status: string): string => CALL[status] ?? status

/** The CSS class a call status reads in. */
export const callStatusClass = (status: string): string => status === "failed" ? "bad" : status === "committed" ? "ok" : "warn"

const REASONS: Record<string, string> = {
  network: "network error",
  idleTimeout: "timed out",
  rateLimited: "rate limited",
  overloaded: "overloaded",
  auth: "refused the key",
  badRequest: "bad request",
  contextOverflow: "context too long",
  providerError: "provider error",
  malformedStream: "malformed stream",
  notConfigured: "not configured",
  aborted: "aborted"
}

/** A failed attempt's outcome: `HTTP 503 (server error)`, or `network error` without an answer. */
export const attemptOutcomeWords = (attempt: { readonly status: number | null; readonly reason: string }): string => {
  const reason = REASONS[attempt.reason] ?? attempt.reason
  return attempt.status === null ? reason : `HTTP ${attempt.status} (${reason})`
}
