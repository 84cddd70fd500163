/**
 * The console's Tab page (`/console/tab`): whether Tab is on and what answers it (the model, its
 * provider, the FIM wire and base URL; how to turn it on when it is off), and per Tab model what
 * it did since the server started (`tab/Stats.ts`, kept in memory): requests, upstream calls,
 * the ones answered without a call (typed through a suggestion, or shared with an identical
 * request), suggested, empty, canceled and failed ones, the time to the first suggestion (p50 and
 * p90 of the recent samples), tokens, cost, and the acceptance rate from Cursor's fate reports.
 */
import type { ModelStats } from "../tab/Stats.js"
import { acceptanceRate } from "../tab/Stats.js"
import type { TabSettings } from "../tab/Service.js"
import { formatInt, formatMs, formatShare, formatUsd, html, page } from "./Html.js"
import type { Markup } from "./Html.js"
import type { Links } from "./Pages.js"

export const TAB_PATH = "/console/tab"

/** What the configuration says Tab answers from (no key: ids, the wire and the base URL only). */
export interface TabSetup {
  /** The name Tab's figures are kept under: `provider/model`. */
  readonly model: string
  readonly provider: string
  readonly upstreamModel: string
  readonly api: string
  readonly baseUrl: string
  /** USD per million tokens, when priced. */
  readonly price: { readonly input: number; readonly output: number } | undefined
}

export interface TabModelRow {
  readonly model: string
  readonly requests: number
  readonly calls: number
  /** Typed through the file's last suggestion. */
  readonly reused: number
  /** Answered by an identical request's call. */
  readonly shared: number
  readonly suggested: number
  readonly empty: number
  readonly canceled: number
  readonly failed: number
  readonly firstSuggestionP50Ms: number | null
  readonly firstSuggestionP90Ms: number | null
  /** How many first-suggestion times the percentiles are over. */
  readonly samples: number
  readonly inputTokens: number
  readonly outputTokens: number
  readonly costUsd: number
  readonly accepted: number
  readonly partial: number
  readonly rejected: number
  readonly acceptanceRate: number | null
}

export interface TabView {
  /** Undefined while Tab is off. */
  readonly setup: TabSetup | undefined
  readonly models: ReadonlyArray<TabModelRow>
}

/** The nearest-rank percentile (`p` in 0..1) of `values`, or null without any. */
export const percentile = (values: ReadonlyArray<number>, p: number): number | null => {
  if (values.length === 0) return null
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(p * sorted.length)))
  return sorted[rank - 1]!
}

export const setupOf = (settings: TabSettings | undefined): TabSetup | undefined =>
  settings === undefined ? undefined : {
    model: settings.model,
    provider: settings.target.provider,
    upstreamModel: settings.target.model,
    api: settings.api,
    baseUrl: settings.target.baseUrl,
    price: settings.price === undefined ? undefined : { input: settings.price.input, output: settings.price.output }
  }

export const rowOf = (stats: ModelStats): TabModelRow => ({
  model: stats.model,
  requests: stats.requests,
  calls: stats.calls,
  reused: stats.reused,
  shared: stats.shared,
  suggested: stats.suggested,
  empty: stats.empty,
  canceled: stats.canceled,
  failed: stats.failed,
  firstSuggestionP50Ms: percentile(stats.firstSuggestionMs, 0.5),
  firstSuggestionP90Ms: percentile(stats.firstSuggestionMs, 0.9),
  samples: stats.firstSuggestionMs.length,
  inputTokens: stats.inputTokens,
  outputTokens: stats.outputTokens,
  costUsd: stats.costUsd,
  accepted: stats.accepted,
  partial: stats.partial,
  rejected: stats.rejected,
  acceptanceRate: acceptanceRate(stats) ?? null
})

/** The page's figures: the configured model first (listed even before its first request), then the others the stats hold. */
export const tabView = (settings: TabSettings | undefined, snapshot: ReadonlyArray<ModelStats>): TabView => {
  const setup = setupOf(settings)
  const rows = snapshot.map(rowOf)
  const current = setup === undefined ? undefined : rows.find((row) => row.model === setup.model) ?? rowOf(emptyStats(setup.model))
  return { setup, models: current === undefined ? rows : [current, ...rows.filter((row) => row.model !== current.model)] }
}

const emptyStats = (model: string): ModelStats => ({
  model, requests: 0, calls: 0, shared: 0, reused: 0, suggested: 0, empty: 0, canceled: 0, failed: 0,
  inputTokens: 0, outputTokens: 0, costUsd: 0, accepted: 0, rejected: 0, partial: 0, firstSuggestionMs: []
})

// =============================================================================
// Markup
// =============================================================================

const setupSection = (setup: TabSetup | undefined): Markup =>
  setup === undefined
    ? html`<section id="tab-setup" data-tab="off"><h2>Tab is off</h2>
<p>Cursor's Tab completions are not answered: the configuration has no <code>tab</code> section. To turn Tab on, add one naming a configured provider and its fill-in-the-middle model,
e.g. <code>"tab": { "provider": "ollama", "model": "qwen2.5-coder:7b" }</code> (optional: <code>api</code>, <code>baseUrl</code>, <code>price</code>, limits); the README's configuration reference lists its fields.
A change to the file applies without a restart.</p></section>`
    : html`<section id="tab-setup" data-tab="on"><h2>Tab is on</h2>
<p>Cursor's Tab is answered by <b data-col="model">${setup.model}</b>: model <code>${setup.upstreamModel}</code> at provider <code>${setup.provider}</code>,
FIM API <code data-col="api">${setup.api}</code>${setup.baseUrl === "" ? null : html`, base URL <code>${setup.baseUrl}</code>`}.
${setup.price === undefined
      ? html`<span class="muted">No <code>price</code> in the <code>tab</code> section: its cost reads $0.</span>`
      : html`Priced ${formatUsd(setup.price.input)} in, ${formatUsd(setup.price.output)} out per million tokens.`}</p></section>`

const acceptanceCell = (row: TabModelRow): Markup => {
  const fates = row.accepted + row.partial + row.rejected
  return html`<td class="num" data-col="acceptance" title="accepted (wholly or partly) of the fates Cursor reported">${
    fates === 0
      ? html`<span class="muted">no fate reported</span>`
      : html`${formatShare(row.acceptanceRate)} <span class="muted">(${formatInt(row.accepted + row.partial)} of ${formatInt(fates)})</span><div class="muted small">${formatInt(row.accepted)} accepted &middot; ${
        formatInt(row.partial)
      } partly &middot; ${formatInt(row.rejected)} rejected</div>`
  }</td>`
}

const modelRow = (setup: TabSetup | undefined) => (row: TabModelRow): Markup =>
  html`<tr data-model="${row.model}"><td>${row.model}${setup?.model === row.model ? html` <span class="tag ok">in use</span>` : null}</td>
<td class="num" data-col="requests">${formatInt(row.requests)}</td><td class="num" data-col="calls">${formatInt(row.calls)}</td>
<td class="num" data-col="without-call" title="${formatInt(row.reused)} typed through a suggestion, ${formatInt(row.shared)} shared with an identical request">${formatInt(row.reused + row.shared)}<div class="muted small nowrap">${
    formatInt(row.reused)
  } typed &middot; ${formatInt(row.shared)} shared</div></td>
<td class="num" data-col="suggested">${formatInt(row.suggested)}</td><td class="num" data-col="empty">${formatInt(row.empty)}</td>
<td class="num ${row.canceled > 0 ? "warn" : ""}" data-col="canceled">${formatInt(row.canceled)}</td><td class="num ${row.failed > 0 ? "bad" : ""}" data-col="failed">${formatInt(row.failed)}</td>
<td class="num" data-col="first-p50" title="over the last ${formatInt(row.samples)} suggestions">${formatMs(row.firstSuggestionP50Ms)}</td><td class="num" data-col="first-p90" title="over the last ${
    formatInt(row.samples)
  } suggestions">${formatMs(row.firstSuggestionP90Ms)}</td>
<td class="num" data-col="input">${formatInt(row.inputTokens)}</td><td class="num" data-col="output">${formatInt(row.outputTokens)}</td><td class="num" data-col="cost">${formatUsd(row.costUsd)}</td>
${acceptanceCell(row)}</tr>`

const modelsSection = (view: TabView): Markup =>
  html`<section id="tab-models" data-count="${view.models.length}"><h2>Tab models <span class="muted">(since the server started; kept in memory)</span></h2>
<div class="scroll"><table><thead><tr><th>Model</th><th class="num">Requests</th><th class="num" title="calls to the model">Upstream calls</th><th class="num" title="typed through a suggestion, or shared with an identical request">Without a call</th>
<th class="num">Suggested</th><th class="num" title="the model had nothing to add">Empty</th><th class="num" title="superseded by a newer request, or dropped by Cursor">Canceled</th><th class="num">Failed</th>
<th class="num" title="time from the request to its first suggestion text">First suggestion p50</th><th class="num">p90</th><th class="num">Input tokens</th><th class="num">Output tokens</th><th class="num">Cost</th><th class="num">Acceptance</th></tr></thead>
<tbody>${view.models.length === 0
    ? html`<tr><td colspan="14" class="muted">No Tab request yet.</td></tr>`
    : view.models.map(modelRow(view.setup))}</tbody></table></div></section>`

export const tabPage = (view: TabView, links: Links, nonce: string): string =>
  page({
    title: "Tab",
    home: links.to("/console"),
    nonce,
    body: html`${setupSection(view.setup)}${modelsSection(view)}`
  })
