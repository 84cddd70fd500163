/**
 * The call log (`/console/calls`): the model calls of every conversation, newest first, 50 a
 * page, filtered by conversation, model, provider (answered by it or with an attempt on it),
 * outcome and time range. The filters are links (the pages have no form: the
 * Content-Security-Policy allows none), each keeping the others and the token.
 */
import type { ServerConfig } from "../Config.js"
import type { CallLogPage, CallLogQuery, CallOutcome } from "../Store.js"
import { formatAgo, formatCompact, formatInt, formatMs, formatTime, formatUsd, html, page, shorten } from "./Html.js"
import type { Markup } from "./Html.js"
import type { Links } from "./Pages.js"
import { CALLS_PATH, callPath, conversationPath } from "./Pages.js"
import { callStatusClass, callStatusWords } from "./Words.js"

export const PAGE_SIZE = 50

const OUTCOMES: ReadonlyArray<readonly [CallOutcome, string]> = [
  ["answered", "answered"],
  ["failed", "failed"],
  ["retried", "with failed attempts"],
  ["canceled", "canceled"],
  ["running", "running"]
]

const RANGES: ReadonlyArray<readonly [string, string, number | undefined]> = [
  ["1h", "1 hour", 3_600_000],
  ["24h", "24 hours", 86_400_000],
  ["7d", "7 days", 7 * 86_400_000],
  ["30d", "30 days", 30 * 86_400_000],
  ["all", "all", undefined]
]

/** The filters as the query string names them; empty ones left out. */
export interface CallLogFilters {
  readonly conversation?: string
  readonly model?: string
  readonly provider?: string
  readonly outcome?: CallOutcome
  readonly range: string
  /** 1-based. */
  readonly page: number
}

const nonEmpty = (value: string | null): string | undefined => value === null || value === "" ? undefined : value

export const filtersOf = (params: URLSearchParams): CallLogFilters => {
  const outcome = OUTCOMES.find(([id]) => id === params.get("outcome"))?.[0]
  const range = RANGES.find(([id]) => id === params.get("range"))?.[0] ?? "all"
  const pageNumber = Number.parseInt(params.get("page") ?? "1", 10)
  const conversation = nonEmpty(params.get("conversation"))
  const model = nonEmpty(params.get("model"))
  const provider = nonEmpty(params.get("provider"))
  return {
    ...(conversation === undefined ? {} : { conversation }),
    ...(model === undefined ? {} : { model }),
    ...(provider === undefined ? {} : { provider }),
    ...(outcome === undefined ? {} : { outcome }),
    range,
    page: Number.isFinite(pageNumber) && pageNumber >= 1 ? pageNumber : 1
  }
}

export const queryOf = (filters: CallLogFilters, nowMs: number): CallLogQuery => {
  const span = RANGES.find(([id]) => id === filters.range)?.[2]
  return {
    ...(filters.conversation === undefined ? {} : { conversationId: filters.conversation }),
    ...(filters.model === undefined ? {} : { model: filters.model }),
    ...(filters.provider === undefined ? {} : { provider: filters.provider }),
    ...(filters.outcome === undefined ? {} : { outcome: filters.outcome }),
    ...(span === undefined ? {} : { sinceMs: nowMs - span }),
    limit: PAGE_SIZE,
    offset: (filters.page - 1) * PAGE_SIZE
  }
}

const paramsOf = (filters: CallLogFilters): Record<string, string> => {
  const out: Record<string, string> = {}
  if (filters.conversation !== undefined) out["conversation"] = filters.conversation
  if (filters.model !== undefined) out["model"] = filters.model
  if (filters.provider !== undefined) out["provider"] = filters.provider
  if (filters.outcome !== undefined) out["outcome"] = filters.outcome
  if (filters.range !== "all") out["range"] = filters.range
  if (filters.page > 1) out["page"] = String(filters.page)
  return out
}

/** A link to the log with one filter changed (back to the first page). */
const withFilter = (links: Links, filters: CallLogFilters, key: "conversation" | "model" | "provider" | "outcome" | "range", value: string | undefined) => {
  const params = paramsOf({ ...filters, page: 1 })
  delete params[key]
  if (value !== undefined && !(key === "range" && value === "all")) params[key] = value
  return links.to(CALLS_PATH, params)
}

const chip = (href: string, label: string, on: boolean, key: string, value: string): Markup =>
  html`<a href="${href}" class="${on ? "on" : ""}" data-filter="${key}" data-value="${value}">${label}</a>`

const filterRow = (label: string, chips: ReadonlyArray<Markup>): Markup => html`<div class="filters"><span class="muted">${label}:</span>${chips}</div>`

const filtersBlock = (config: ServerConfig, filters: CallLogFilters, links: Links): Markup => {
  const models = [...new Set([...config.models.map((m) => m.id), ...(filters.model === undefined ? [] : [filters.model])])]
  const providers = [...new Set([...config.router.providers.map((p) => p.id), ...(filters.provider === undefined ? [] : [filters.provider])])]
  const row = (label: string, key: "model" | "provider" | "outcome" | "range", current: string | undefined, options: ReadonlyArray<readonly [string, string]>, any = true) =>
    filterRow(label, [
      ...(any ? [chip(withFilter(links, filters, key, undefined), "any", current === undefined, key, "")] : []),
      ...options.map(([value, text]) => chip(withFilter(links, filters, key, value), text, current === value, key, value))
    ])
  return html`${
    filters.conversation === undefined ? null : filterRow("Conversation", [
      html`<code>${filters.conversation}</code>`,
      html`<a href="${withFilter(links, filters, "conversation", undefined)}">all conversations</a>`
    ])
  }
${row("Model", "model", filters.model, models.map((m) => [m, m] as const))}
${row("Provider", "provider", filters.provider, providers.map((p) => [p, p] as const))}
${row("Outcome", "outcome", filters.outcome, OUTCOMES)}
${row("Time", "range", filters.range, RANGES.map(([id, text]) => [id, text] as const), false)}`
}

const logRow = (call: CallLogPage["calls"][number], nowMs: number, links: Links): Markup => {
  const usage = call.usage
  const settled = call.status !== "planned" && call.status !== "streaming"
  return html`<tr data-call="${call.callId}" data-status="${call.status}"><td title="${formatAgo(call.createdAtMs, nowMs)}">${formatTime(call.createdAtMs)}</td>
<td><a href="${links.to(conversationPath(call.conversationId))}"><code>${shorten(call.conversationId, 28)}</code></a></td>
<td><a href="${links.to(callPath(call.callId))}"><code>${call.callId.split("/").slice(-2).join("/")}</code></a></td><td>${call.model}</td><td><code>${call.target ?? "–"}</code></td>
<td class="${callStatusClass(call.status)}">${callStatusWords(call.status)}${call.error === null ? null : html`<div class="bad small">${shorten(call.error, 160)}</div>`}</td>
<td class="num ${call.failedAttempts > 0 ? "bad" : ""}" data-col="failed-attempts">${call.failedAttempts}</td>
<td class="num">${usage === null ? "–" : formatCompact(usage.input + usage.cacheRead + usage.cacheWrite + usage.output)}</td><td class="num">${formatUsd(call.costUsd)}</td>
<td class="num">${formatMs(call.firstDeltaMs)}</td><td class="num">${settled ? formatMs(call.updatedAtMs - call.createdAtMs) : "–"}</td></tr>`
}

export const callLogPage = (config: ServerConfig, filters: CallLogFilters, log: CallLogPage, nowMs: number, links: Links, nonce: string): string => {
  const first = (filters.page - 1) * PAGE_SIZE
  const pager = html`<div class="pager" id="pager">${
    filters.page > 1 ? html`<a href="${links.to(CALLS_PATH, paramsOf({ ...filters, page: filters.page - 1 }))}" id="newer">&larr; newer</a>` : null
  }<span class="muted">${log.calls.length === 0 ? "none" : `${formatInt(first + 1)}–${formatInt(first + log.calls.length)}`} of ${formatInt(log.total)}</span>${
    first + log.calls.length < log.total ? html`<a href="${links.to(CALLS_PATH, paramsOf({ ...filters, page: filters.page + 1 }))}" id="older">older &rarr;</a>` : null
  }</div>`
  return page({
    title: "Calls",
    home: links.to("/console"),
    nonce,
    body: html`<section id="calls" data-total="${log.total}"><h2>Model calls <span class="muted">(every conversation, newest first; UTC)</span></h2>
${filtersBlock(config, filters, links)}
<div class="scroll"><table><thead><tr><th>Started</th><th>Conversation</th><th>Call</th><th>Model</th><th>Answered by</th><th>Status</th><th class="num">Failed attempts</th><th class="num">Tokens</th><th class="num">Cost</th><th class="num">First delta</th><th class="num">Duration</th></tr></thead>
<tbody>${
      log.calls.length === 0
        ? html`<tr><td colspan="11" class="muted">No call matches.</td></tr>`
        : log.calls.map((call) => logRow(call, nowMs, links))
    }</tbody></table></div>${pager}</section>`
  })
}
