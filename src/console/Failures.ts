/**
 * What failed, for the console: per model and per provider, the attempts made (those that failed
 * before answering, from `llm_call_attempts`, and those that answered), the error rate and the
 * last errors, so that a provider that is down shows even while its fallback answers every call;
 * and one call's attempts, in order, each with its target, outcome (HTTP status or network
 * error), error text and time. Pure over the store's rows, plus the markup that shows them.
 */
import type { ServerConfig } from "../Config.js"
import type { AttemptRecord, CallInsight, RecentAttempt, RecentCall } from "../Store.js"
import { formatAgo, formatInt, formatMs, formatShare, formatTime, html, shorten } from "./Html.js"
import type { Markup } from "./Html.js"
import { attemptOutcomeWords } from "./Words.js"

/** Errors listed per model or provider. */
export const ERRORS_LISTED = 3

/** One error an operator reads: a failed attempt, or a call that failed without one recorded (it broke off after answering, or predates the record). */
export interface ErrorLine {
  readonly atMs: number
  readonly conversationId: string
  readonly callId: string
  readonly target: string | null
  /** `HTTP 503 (server error)`, `network error`, or `call failed`. */
  readonly outcome: string
  readonly message: string
  /** How many times the same error (outcome, target, text) came in the window; the line is its latest. */
  readonly count: number
}

/** The latest of each distinct error, most recent first, at most `ERRORS_LISTED`. */
const distinctErrors = (lines: ReadonlyArray<Omit<ErrorLine, "count">>): ReadonlyArray<ErrorLine> => {
  const groups = new Map<string, ErrorLine>()
  for (const line of [...lines].sort((a, b) => b.atMs - a.atMs)) {
    const key = `${line.outcome}\u0000${line.target ?? ""}\u0000${line.message}`
    const seen = groups.get(key)
    groups.set(key, seen === undefined ? { ...line, count: 1 } : { ...seen, count: seen.count + 1 })
  }
  return [...groups.values()].slice(0, ERRORS_LISTED)
}

export interface FailureFigures {
  /** Attempts made: those that failed before answering and those that answered. */
  readonly tries: number
  /** Attempts that failed before answering (retried, fallen back from, or ending the call). */
  readonly failedAttempts: number
  /** Failed attempts and calls that failed without one (broken off after answering): over `tries`, the error rate. */
  readonly failures: number
  readonly errorRate: number | null
  /** The distinct errors, the most recent first. */
  readonly errors: ReadonlyArray<ErrorLine>
}

const answered = (call: CallInsight) => call.firstDeltaMs !== null || call.status === "committed"

/** The figures over these calls and these failed attempts (the same window, the same model or provider). */
export const failureFigures = (calls: ReadonlyArray<RecentCall>, attempts: ReadonlyArray<RecentAttempt>): FailureFigures => {
  const withAttempts = new Set(attempts.map((attempt) => attempt.callId))
  const lines: Array<Omit<ErrorLine, "count">> = attempts.map((a) => ({
    atMs: a.failedAtMs,
    conversationId: a.conversationId,
    callId: a.callId,
    target: `${a.provider}/${a.upstreamModel}`,
    outcome: attemptOutcomeWords(a),
    message: a.error
  }))
  let tries = attempts.length
  let failures = attempts.length
  for (const call of calls) {
    const failed = call.status === "failed"
    if (answered(call) || (failed && !withAttempts.has(call.callId))) {
      tries++
      if (failed) {
        failures++
        lines.push({ atMs: call.updatedAtMs, conversationId: call.conversationId, callId: call.callId, target: call.target, outcome: "call failed", message: call.error ?? "(no message)" })
      }
    }
  }
  return {
    tries,
    failedAttempts: attempts.length,
    failures,
    errorRate: tries === 0 ? null : failures / tries,
    errors: distinctErrors(lines)
  }
}

export interface ProviderFigures extends FailureFigures {
  readonly provider: string
  readonly api: string
  readonly baseUrl: string
  /** The configured models that send to it, first or as a fallback. */
  readonly models: ReadonlyArray<string>
  /** Calls it answered. */
  readonly answered: number
}

const providerOf = (target: string | null) => target === null ? undefined : target.slice(0, target.indexOf("/"))

/** Per configured provider: the calls it answered and the attempts on it that failed. */
export const providerFigures = (
  config: ServerConfig,
  calls: ReadonlyArray<RecentCall>,
  attempts: ReadonlyArray<RecentAttempt>
): ReadonlyArray<ProviderFigures> =>
  config.router.providers.map((provider): ProviderFigures => {
    const own = calls.filter((call) => call.status === "committed" && providerOf(call.target) === provider.id)
    const figures = failureFigures(own, attempts.filter((attempt) => attempt.provider === provider.id))
    const models = config.models.filter((m) => m.provider === provider.id || (m.fallback ?? []).some((f) => f.provider === provider.id))
    return { ...figures, provider: provider.id, api: provider.api, baseUrl: provider.baseUrl, models: models.map((m) => m.id), answered: own.length }
  })

// =============================================================================
// Markup
// =============================================================================

/** `3 of 4 (75%)`, in the bad colour when any failed. */
export const errorRateCell = (figures: FailureFigures): Markup =>
  html`<td class="num ${figures.failures > 0 ? "bad" : ""}" data-col="error-rate" title="failed attempts and broken-off calls, of all attempts">${
    figures.tries === 0 ? "–" : html`${formatInt(figures.failures)} of ${formatInt(figures.tries)} (${formatShare(figures.errorRate)})`
  }</td>`

export const errorLines = (errors: ReadonlyArray<ErrorLine>, nowMs: number, callLink: (callId: string) => string): Markup =>
  errors.length === 0
    ? html`<span class="muted">none</span>`
    : html`${
      errors.map((e) =>
        html`<div class="bad error-line">${e.count > 1 ? html`<b>${e.count}&times;</b> ` : null}<a href="${callLink(e.callId)}">${e.outcome}</a>${
          e.target === null ? null : html` <code>${e.target}</code>`
        } <span class="muted" title="${formatTime(e.atMs)} UTC">(${e.count > 1 ? "last " : ""}${formatAgo(e.atMs, nowMs)})</span>: ${shorten(e.message, 200)}</div>`
      )
    }`

export const providersSection = (providers: ReadonlyArray<ProviderFigures>, nowMs: number, callLink: (callId: string) => string, logLink: (provider: string) => string): Markup =>
  html`<section id="providers"><h2>Providers <span class="muted">(attempts in the charts' window: a failed attempt counts even when a retry or a fallback answered)</span></h2>
<div class="scroll"><table><thead><tr><th>Provider</th><th class="num">Answered</th><th class="num">Failed attempts</th><th class="num">Error rate</th><th>Recent errors</th><th>API</th><th>Base URL</th><th>Models</th></tr></thead>
<tbody>${
    providers.map((p) =>
      html`<tr data-provider="${p.provider}"><td><a href="${logLink(p.provider)}">${p.provider}</a></td>
<td class="num">${formatInt(p.answered)}</td><td class="num ${p.failedAttempts > 0 ? "bad" : ""}" data-col="failed-attempts">${formatInt(p.failedAttempts)}</td>${errorRateCell(p)}
<td data-col="errors" class="errors">${errorLines(p.errors, nowMs, callLink)}</td><td>${p.api}</td><td><code>${p.baseUrl}</code></td><td>${p.models.join(", ")}</td></tr>`
    )
  }</tbody></table></div></section>`

/**
 * A call's attempts in order: each failed one (target, outcome, error, when, how long), then the
 * one that answered when one did (the call's target, at its first delta).
 */
export const attemptsTable = (call: CallInsight, attempts: ReadonlyArray<AttemptRecord>): Markup => {
  const answer = answered(call)
  const rows = attempts.map((a, index) =>
    html`<tr data-attempt="${index + 1}" data-outcome="failed"><td class="num">${index + 1}</td><td><code>${a.provider}/${a.upstreamModel}</code>${
      a.attempt > 1 ? html` <span class="muted">(retry ${a.attempt - 1})</span>` : null
    }</td>
<td class="bad outcome">${attemptOutcomeWords(a)}</td><td class="error">${a.error}</td><td>${formatTime(a.startedAtMs)}</td><td class="num">${formatMs(a.failedAtMs - a.startedAtMs)}</td></tr>`
  )
  const last = answer
    ? html`<tr data-attempt="${attempts.length + 1}" data-outcome="answered"><td class="num">${attempts.length + 1}</td><td><code>${call.target ?? "–"}</code></td>
<td class="ok">answered</td><td></td><td>${call.firstDeltaMs === null ? "–" : html`<span class="muted">first delta</span> ${formatTime(call.createdAtMs + call.firstDeltaMs)}`}</td>
<td class="num" title="from the call's start to its first delta">${formatMs(call.firstDeltaMs)}</td></tr>`
    : null
  return html`<div class="scroll"><table class="attempts"><thead><tr><th class="num">#</th><th>Target</th><th>Outcome</th><th>Error</th><th>Started (UTC)</th><th class="num">Took</th></tr></thead>
<tbody>${
    attempts.length === 0 && !answer
      ? html`<tr><td colspan="6" class="muted">No attempt recorded${call.status === "failed" ? html`: the call failed with <span class="bad">${call.error ?? "no message"}</span>` : null}.</td></tr>`
      : html`${rows}${last}`
  }</tbody></table></div>`
}
