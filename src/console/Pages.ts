/**
 * The console's pages as HTML strings (every interpolated value escaped by `html`): the
 * overview (running turns, conversations, models and providers, charts) and one conversation
 * (its turns and model calls with their prefix status; its messages only when revealed).
 */
import type { Message } from "../Llm.js"
import type { ConversationInsight } from "../Store.js"
import { cacheShare, chartsOf } from "./Charts.js"
import type { CallView, ConversationView, Overview, PrefixView, RunningTurn } from "./Data.js"
import { formatAgo, formatCompact, formatInt, formatMs, formatShare, formatTime, formatUsd, html, page, shorten } from "./Html.js"
import type { Markup } from "./Html.js"
import { errorLines, errorRateCell, providersSection } from "./Failures.js"
import { runningScript } from "./Script.js"
import { callStatusClass, callStatusWords, conversationStatusWords } from "./Words.js"

/** Builds console links, carrying the token when it came in the query. */
export interface Links {
  readonly to: (path: string, params?: Readonly<Record<string, string>>) => string
}

export const linksOf = (token: string | undefined): Links => ({
  to: (path, params = {}) => {
    const query = new URLSearchParams({ ...params, ...(token === undefined ? {} : { token }) }).toString()
    return query === "" ? path : `${path}?${query}`
  }
})

export const conversationPath = (id: string) => `/console/conversations/${encodeURIComponent(id)}`

/** A model call's page, and the call log. */
export const callPath = (callId: string) => `/console/calls/${encodeURIComponent(callId)}`
export const CALLS_PATH = "/console/calls"

const TITLE_CHARS = 80

/** A conversation's title, shortened; one without a user message says so. */
export const titleOf = (conversation: ConversationInsight) =>
  conversation.title.trim() === "" ? "(no user message)" : shorten(conversation.title, TITLE_CHARS)

const tokensCell = (usage: { readonly input: number; readonly cacheRead: number; readonly cacheWrite: number; readonly output: number }) =>
  formatCompact(usage.input + usage.cacheRead + usage.cacheWrite + usage.output)

export const runningRow = (turn: RunningTurn, nowMs: number, links: Links): Markup =>
  html`<tr data-request="${turn.requestId}"><td>${turn.conversationId === null ? html`<span class="muted">&ndash;</span>` : html`<a href="${links.to(conversationPath(turn.conversationId))}">${turn.conversationId}</a>`}</td>
<td><code>${turn.turnId ?? "–"}</code></td><td>${turn.model ?? "–"}</td><td class="num">${formatMs(nowMs - turn.startedAtMs)}</td><td class="num">${formatAgo(turn.lastActivityMs, nowMs)}</td><td><code>${turn.requestId}</code></td></tr>`

const runningSection = (overview: Overview, links: Links) =>
  html`<section id="running" data-count="${overview.running.length}"><h2>Running now <span class="muted" id="running-status"></span></h2>
<table><thead><tr><th>Conversation</th><th>Turn</th><th>Model</th><th class="num">Running for</th><th class="num">Last activity</th><th>Request</th></tr></thead>
<tbody id="running-rows">${overview.running.length === 0
    ? html`<tr class="empty"><td colspan="6" class="muted">No turn is running.</td></tr>`
    : overview.running.map((turn) => runningRow(turn, overview.nowMs, links))}</tbody></table></section>`

const conversationsSection = (overview: Overview, links: Links) =>
  html`<section id="conversations"><h2>Conversations <span class="muted">(${overview.conversations.length}, most recent first)</span></h2>
<div class="scroll"><table><thead><tr><th>Title</th><th>Model</th><th class="num">Turns</th><th class="num">Calls</th><th class="num">Tokens</th><th class="num">Cost</th><th class="num">Cache read</th><th>Last activity</th><th>Status</th></tr></thead>
<tbody>${overview.conversations.length === 0
    ? html`<tr><td colspan="9" class="muted">No conversation yet.</td></tr>`
    : overview.conversations.map((c) =>
      html`<tr data-conversation="${c.conversationId}"><td><a href="${links.to(conversationPath(c.conversationId))}">${titleOf(c)}</a><div class="muted small nowrap"><code>${shorten(c.conversationId, 40)}</code>${c.startedAtMs === null ? null : html` &middot; started ${formatTime(c.startedAtMs)}`}</div></td>
<td>${c.model ?? "–"}</td><td class="num">${c.turns}</td><td class="num">${c.calls}</td><td class="num" title="${formatInt(c.usage.input + c.usage.cacheRead + c.usage.cacheWrite)} in, ${formatInt(c.usage.output)} out">${tokensCell(c.usage)}</td>
<td class="num">${formatUsd(c.costUsd)}</td><td class="num">${formatShare(cacheShare(c.usage))}</td><td title="${formatTime(c.lastActivityMs)} UTC">${formatAgo(c.lastActivityMs, overview.nowMs)}</td><td data-status="${c.status}">${conversationStatusWords(c.status)}</td></tr>`)}</tbody></table></div></section>`

const modelsSection = (overview: Overview, links: Links) =>
  html`<section id="models"><h2>Models <span class="muted">(calls in the charts' window; a failed attempt counts even when a retry or a fallback answered)</span></h2>
<div class="scroll"><table><thead><tr><th>Model</th><th class="num">Calls</th><th class="num">Failed calls</th><th class="num">Failed attempts</th><th class="num">Error rate</th><th class="num">Median first delta</th><th>Provider</th><th>Upstream model</th><th>Answered by</th><th>Recent errors</th></tr></thead>
<tbody>${overview.models.map((m) =>
    html`<tr data-model="${m.model}"><td><a href="${links.to(CALLS_PATH, { model: m.model })}">${m.model}</a></td>
<td class="num">${m.calls}</td><td class="num ${m.failed > 0 ? "bad" : ""}" data-col="failed-calls">${m.failed}</td><td class="num ${m.failures.failedAttempts > 0 ? "bad" : ""}" data-col="failed-attempts">${m.failures.failedAttempts}</td>${errorRateCell(m.failures)}<td class="num">${formatMs(m.medianFirstDeltaMs)}</td>
<td>${m.provider ?? html`<span class="muted">not configured</span>`}</td><td>${m.upstreamModel ?? "–"}</td><td>${m.targets.map((t) => html`<div><code>${t.target}</code> <span class="muted">&times;${t.calls}</span></div>`)}</td>
<td data-col="errors" class="errors">${errorLines(m.failures.errors, overview.nowMs, (callId) => links.to(callPath(callId)))}</td></tr>`)}</tbody></table></div></section>`

const providersOf = (overview: Overview, links: Links) =>
  providersSection(overview.providers ?? [], overview.nowMs, (callId) => links.to(callPath(callId)), (provider) => links.to(CALLS_PATH, { provider }))

const WIRE_TYPES = ["varint", "64-bit", "length-delimited", "group start", "group end", "32-bit"]

/** The kinds of unknown fields clients sent (`Drift.ts`): what a newer Cursor added that this server does not read. */
export const driftSection = (overview: Overview): Markup => {
  const kinds = overview.drift ?? []
  return html`<section id="drift" data-count="${kinds.length}"><h2>Protocol drift <span class="muted">(fields of client messages this server's schema does not know, since it started)</span></h2>
<table><thead><tr><th>Type</th><th class="num">Field</th><th>Wire type</th><th class="num">Count</th><th>First seen</th><th>Client version</th><th>Note</th></tr></thead>
<tbody>${kinds.length === 0
    ? html`<tr><td colspan="7" class="muted">None: every client message decoded fully.</td></tr>`
    : kinds.map((k) =>
      html`<tr data-drift="${k.type}#${k.field}#${k.clientVersion}"><td><code>${k.type}</code></td><td class="num">${k.field}</td><td>${k.wireType} (${WIRE_TYPES[k.wireType] ?? "?"})</td>
<td class="num">${formatInt(k.count)}</td><td title="${formatTime(k.firstSeenMs)} UTC">${formatAgo(k.firstSeenMs, overview.nowMs)}</td><td><code>${k.clientVersion}</code></td>
<td>${k.unsetOneof === undefined ? null : html`oneof <code>${k.unsetOneof}</code> unset: a new case?`}</td></tr>`)}</tbody></table></section>`
}

const chartsSection = (overview: Overview, links: Links) =>
  html`<section id="usage"><h2>Usage <span class="muted">(UTC; ${overview.range === "48h" ? "per hour, last 48 hours" : "per day, last 14 days"})</span>
<a href="${links.to("/console", { range: "48h" })}">48 h</a> &middot; <a href="${links.to("/console", { range: "14d" })}">14 days</a></h2>${chartsOf(overview.buckets, overview.range)}</section>`

export const overviewPage = (overview: Overview, links: Links, nonce: string): string =>
  page({
    title: "Overview",
    home: links.to("/console"),
    nonce,
    body: html`${runningSection(overview, links)}${conversationsSection(overview, links)}${modelsSection(overview, links)}${providersOf(overview, links)}${driftSection(overview)}${chartsSection(overview, links)}<section><h2><a href="${links.to("/console/captures")}">Captures</a></h2></section>`,
    script: runningScript(links.to("/console/api/running"), links.to("/console/conversations/"))
  })

// =============================================================================
// One conversation
// =============================================================================

const PART_NAMES: Record<string, string> = { systemPrompt: "the system prompt", tools: "the tools", history: "the history" }

export const prefixCell = (prefix: PrefixView): Markup => {
  switch (prefix._tag) {
    case "First":
      return html`<span class="tag" data-prefix="First">first call</span>`
    case "Extends":
      return html`<span class="tag ok" data-prefix="Extends">extends the previous request (+${prefix.addedMessages} messages)</span>`
    case "Summary":
      return html`<span class="tag ok" data-prefix="Summary">summary call: the previous request plus an instruction</span>`
    case "Boundary":
      return html`<span class="tag warn" data-prefix="Boundary">new segment (${prefix.kind}, at message ${prefix.segmentStart}): an intended break</span>`
    case "Break":
    {
      const part = PART_NAMES[prefix.part] ?? prefix.part
      return html`<span class="tag bad" data-prefix="Break" data-part="${prefix.part}" data-byte="${prefix.firstDifferingByte ?? ""}">break in ${part}${
        prefix.firstDifferingByte === undefined ? null : html`: first differing byte ${formatInt(prefix.firstDifferingByte)}${prefix.where === undefined || prefix.where === part ? null : html` (in ${prefix.where})`}`
      }${prefix.measureError === undefined ? null : html` (not measured: ${prefix.measureError})`}</span>`
    }
  }
}

const callRow = (links: Links) => (call: CallView, index: number): Markup => {
  const usage = call.usage
  const settled = call.status !== "planned" && call.status !== "streaming"
  return html`<tr data-call="${call.callId}" data-status="${call.status}"><td class="num">${index + 1}</td><td><a href="${links.to(callPath(call.callId))}"><code>${call.callId.split("/").slice(-1)[0] ?? call.callId}</code></a>${call.detached ? html` <span class="tag">summary</span>` : null}</td>
<td>${call.model}</td><td><code>${call.target ?? "–"}</code></td><td class="${callStatusClass(call.status)}">${callStatusWords(call.status)}${call.error === null ? null : html`<div class="bad">${shorten(call.error, 240)}</div>`}</td>
<td class="num" title="characters of the stored request JSON">${formatCompact(call.requestChars)}</td><td class="num">${call.messageCount}</td>
<td class="num" data-col="input">${usage === null ? "–" : formatInt(usage.input)}</td><td class="num" data-col="cache-read">${usage === null ? "–" : formatInt(usage.cacheRead)}</td>
<td class="num" data-col="cache-write">${usage === null ? "–" : formatInt(usage.cacheWrite)}</td><td class="num" data-col="output">${usage === null ? "–" : formatInt(usage.output)}</td>
<td class="num" data-col="cost">${formatUsd(call.costUsd)}</td><td class="num">${formatMs(call.firstDeltaMs)}</td><td class="num">${settled ? formatMs(call.updatedAtMs - call.createdAtMs) : "–"}</td>
<td class="num" data-col="attempts" title="attempts of the target that answered; failed attempts in all (retries and fallbacks)">${call.attempts ?? "–"}${
    call.failedAttempts === 0 ? null : html`<div class="bad">${call.failedAttempts} failed</div>`
  }</td><td>${prefixCell(call.prefix)}</td></tr>`
}

export const partText = (part: Message["content"][number]): Markup => {
  switch (part.type) {
    case "text":
      return html`<pre>${part.text}</pre>`
    case "thinking":
      return html`<pre class="muted">${part.redacted === true ? "(redacted thinking)" : part.thinking}</pre>`
    case "toolCall":
      return html`<pre>&rarr; ${part.name}(${part.arguments})</pre>`
    case "image":
      return html`<div class="muted">[image ${part.mimeType}]</div>`
  }
}

const messagesSection = (view: ConversationView, links: Links, loopbackClient: boolean): Markup => {
  const id = view.conversation.conversationId
  if (view.messages === undefined) {
    return html`<section id="messages"><h2>Messages</h2><p class="muted">Hidden by default.${loopbackClient
      ? html` <a id="show-messages" href="${links.to(conversationPath(id), { messages: "1" })}">Show this conversation's messages</a> (shown to clients on this machine only).`
      : html` They can be shown only to a client on this machine (a loopback address).`}</p></section>`
  }
  return html`<section id="messages"><h2>Messages <span class="muted">(the model's current history: ${view.messages.length})</span> <a href="${links.to(conversationPath(id))}">hide</a></h2>
${view.messages.map((message, index) => html`<h3>${index}. ${message.role === "toolResult" ? `tool result (${message.toolName})${message.isError ? ", error" : ""}` : message.role}</h3>${message.content.map(partText)}`)}</section>`
}

export const conversationPage = (view: ConversationView, links: Links, nonce: string, loopbackClient: boolean, messagesRefused: boolean): string => {
  const c = view.conversation
  const summary = html`<section id="summary"><h2>${titleOf(c)}</h2>
<p>Conversation <code>${c.conversationId}</code> &middot; started ${c.startedAtMs === null ? "–" : html`${formatTime(c.startedAtMs)} UTC`} &middot; <a href="${links.to(CALLS_PATH, { conversation: c.conversationId })}">its calls in the log</a></p>
<p>model ${c.model ?? "–"} &middot; ${c.turns} turns &middot; ${c.calls} model calls &middot; ${formatInt(c.usage.input + c.usage.cacheRead + c.usage.cacheWrite)} tokens in, ${formatInt(c.usage.output)} out &middot;
cost ${formatUsd(c.costUsd)} &middot; cache read ${formatShare(cacheShare(c.usage))} &middot; ${conversationStatusWords(c.status)} &middot; last activity ${formatTime(c.lastActivityMs)} UTC (${formatAgo(c.lastActivityMs, view.nowMs)})</p>
${messagesRefused ? html`<p class="bad">Messages are shown only to a client on this machine (a loopback address).</p>` : null}
${view.segments.length === 0 ? null : html`<p>Segments: ${view.segments.map((s) => html`<span class="tag">${s.kind} at message ${s.start} (turn <code>${s.turnId}</code>: ${s.replaced} replaced, ${s.kept} kept)</span> `)}</p>`}</section>`
  const turns = html`<section id="turns"><h2>Turns and model calls</h2>${view.turns.length === 0 ? html`<p class="muted">No model call yet.</p>` : html`
<div class="scroll"><table class="calls"><thead><tr><th class="num">#</th><th>Call</th><th>Model</th><th>Answered by</th><th>Status</th><th class="num" title="characters of the stored request JSON">Request</th><th class="num">Msgs</th><th class="num">Input</th><th class="num">Cache read</th><th class="num">Cache write</th><th class="num">Output</th><th class="num">Cost</th><th class="num">First delta</th><th class="num">Duration</th><th class="num">Attempts</th><th>Prefix</th></tr></thead>
${view.turns.map((turn) =>
    html`<tbody><tr class="turn" data-turn="${turn.turnId}"><th colspan="16">Turn <code>${turn.turnId}</code> <span class="muted">started ${formatTime(turn.calls[0]!.createdAtMs)} UTC &middot; ${turn.calls.length} ${turn.calls.length === 1 ? "call" : "calls"} &middot; ${formatUsd(turn.calls.reduce((sum, call) => sum + (call.costUsd ?? 0), 0))}</span></th></tr>
${turn.calls.map(callRow(links))}</tbody>`)}</table></div>`}</section>`
  return page({
    title: titleOf(c),
    home: links.to("/console"),
    nonce,
    body: html`${summary}${turns}${messagesSection(view, links, loopbackClient)}`
  })
}

export const messagePage = (title: string, message: string, links: Links, nonce: string): string =>
  page({ title, home: links.to("/console"), nonce, body: html`<section><h2>${title}</h2><p>${message}</p></section>` })
