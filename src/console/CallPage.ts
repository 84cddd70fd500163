/**
 * One model call's page (`/console/calls/:id`): what it was (model, target that answered,
 * status, usage, cost, times, prefix status against the previous request), each attempt it
 * made (`Failures.attemptsTable`), and, to a client on a loopback address that asks
 * (`?messages=1`), the exact request it handed the adapter and the answer it got.
 *
 * What the store keeps of a request is not the provider's HTTP body: it is the system prompt
 * and the tool list (content-addressed parts) and the history as a prefix of the journal (or a
 * summary call's messages whole), from which `Store.loadLlmCall` rebuilds the request and
 * verifies it against the call's stored request hash. The page says so.
 */
import { Effect, Option } from "effect"
import type { Message } from "../Llm.js"
import type { AttemptRecord, CallInsight, LoadedLlmCall, RecentCall, StoreService } from "../Store.js"
import type { PrefixView } from "./Data.js"
import { prefixViews } from "./Data.js"
import { attemptsTable } from "./Failures.js"
import { formatInt, formatMs, formatTime, formatUsd, html, page, shorten } from "./Html.js"
import type { Markup } from "./Html.js"
import type { Links } from "./Pages.js"
import { callPath, conversationPath, partText, prefixCell } from "./Pages.js"
import { callStatusClass, callStatusWords } from "./Words.js"

export interface CallPageView {
  readonly nowMs: number
  readonly call: RecentCall
  readonly attempts: ReadonlyArray<AttemptRecord>
  readonly prefix: PrefixView | undefined
  /** The call this one's prefix is compared with (the previous answer call of the conversation). */
  readonly previous: CallInsight | undefined
  /** The request and the answer, when revealed; `request` is the reason when it could not be rebuilt. */
  readonly revealed: { readonly request: LoadedLlmCall | string; readonly answer: Message | undefined } | undefined
}

export const callPageView = Effect.fn("Console.callPage")(function*(store: StoreService, callId: string, reveal: boolean, nowMs: number) {
  const found = yield* store.callInsight(callId)
  if (Option.isNone(found)) return Option.none<CallPageView>()
  const call = found.value
  const calls = yield* store.callsOf(call.conversationId)
  const segments = yield* store.segments(call.conversationId)
  const index = calls.findIndex((c) => c.callId === callId)
  const prefixes = index < 0 ? [] : yield* prefixViews(store, calls.slice(0, index + 1), segments)
  const previous = calls.slice(0, Math.max(0, index)).filter((c) => !c.detached).pop()
  const attempts = yield* store.attemptsOf({ callId })
  const revealed = reveal
    ? {
      request: yield* store.loadLlmCall(callId).pipe(
        Effect.map(Option.match({ onNone: (): LoadedLlmCall | string => "the call is missing from the store", onSome: (loaded) => loaded })),
        Effect.catchAll((error) => Effect.succeed(`it could not be rebuilt: ${error.message}`))
      ),
      answer: Option.getOrUndefined(yield* store.answerOf(callId))
    }
    : undefined
  return Option.some<CallPageView>({ nowMs, call, attempts, prefix: prefixes[index], previous, revealed })
})

const ROLE_NAMES = (message: Message): string =>
  message.role === "toolResult" ? `tool result (${message.toolName})${message.isError ? ", error" : ""}` : message.role

const messageBlock = (message: Message, index: number): Markup =>
  html`<div class="message" data-message="${index}"><h3>${index}. ${ROLE_NAMES(message)}</h3>${message.content.map(partText)}</div>`

/** How many of the request's first messages to fold away: those the previous request sent too, else all but the last. */
const foldedCount = (view: CallPageView): number => {
  const { call, prefix } = view
  if (prefix?._tag === "Extends") return Math.max(0, call.messageCount - prefix.addedMessages)
  return Math.max(0, call.messageCount - 1)
}

const summarySection = (view: CallPageView, links: Links): Markup => {
  const c = view.call
  const usage = c.usage
  const settled = c.status !== "planned" && c.status !== "streaming"
  return html`<section id="call" data-status="${c.status}"><h2>Model call <code>${c.callId}</code></h2>
<div class="scroll"><table class="facts"><tbody>
<tr><th>Conversation</th><td><a href="${links.to(conversationPath(c.conversationId))}"><code>${c.conversationId}</code></a> &middot; turn <code>${c.turnId}</code></td></tr>
<tr><th>Model</th><td>${c.model}</td></tr>
<tr><th>Answered by</th><td><code>${c.target ?? "–"}</code></td></tr>
<tr><th>Status</th><td class="${callStatusClass(c.status)}" id="call-status">${callStatusWords(c.status)}${c.error === null ? null : html`<div class="bad">${c.error}</div>`}</td></tr>
<tr><th>Started</th><td>${formatTime(c.createdAtMs)} UTC &middot; first delta after ${formatMs(c.firstDeltaMs)} &middot; ${settled ? html`took ${formatMs(c.updatedAtMs - c.createdAtMs)}` : "still running"}</td></tr>
<tr><th>Attempts</th><td id="attempt-count">${view.attempts.length === 0 ? "no failed attempt" : html`<span class="bad">${view.attempts.length} failed</span>`}${c.attempts === null ? null : html` &middot; the answering target took ${c.attempts}`}</td></tr>
<tr><th>Tokens</th><td>${usage === null ? "–" : html`${formatInt(usage.input)} input, ${formatInt(usage.cacheRead)} cache read, ${formatInt(usage.cacheWrite)} cache write, ${formatInt(usage.output)} output`} &middot; cost ${formatUsd(c.costUsd)}</td></tr>
<tr><th>Request</th><td>${c.messageCount} messages${c.detached ? " (a summary call: its messages stored whole)" : html` (from message ${c.segmentStart} of the journal)`} &middot; ${formatInt(c.requestChars)} characters stored</td></tr>
<tr><th>Prefix</th><td>${view.prefix === undefined ? "–" : prefixCell(view.prefix)}${
    view.previous === undefined ? null : html` &middot; compared with <a href="${links.to(callPath(view.previous.callId))}"><code>${view.previous.callId.split("/").slice(-2).join("/")}</code></a>`
  }</td></tr>
</tbody></table></div></section>`
}

const KEPT = html`<p class="muted" id="what-is-kept">What the store keeps of a request: the system prompt and the tool list (each stored once, by its hash) and the
history as the first messages of the conversation's journal (a summary call's messages whole). This page rebuilds the request from them and checks
it against the call's stored request hash: it is exactly what the call handed the provider's adapter. The HTTP body the adapter built from it (the
provider's own JSON) is not kept.</p>`

const requestSection = (view: CallPageView, links: Links, loopbackClient: boolean): Markup => {
  const self = callPath(view.call.callId)
  if (view.revealed === undefined) {
    return html`<section id="request"><h2>Request and answer</h2>${KEPT}<p class="muted">Hidden by default.${
      loopbackClient
        ? html` <a id="show-request" href="${links.to(self, { messages: "1" })}">Show the request and the answer</a> (shown to clients on this machine only).`
        : html` They can be shown only to a client on this machine (a loopback address).`
    }</p></section>`
  }
  const { answer, request } = view.revealed
  if (typeof request === "string") return html`<section id="request"><h2>Request</h2>${KEPT}<p class="bad">The request is not shown: ${request}.</p></section>`
  const messages = request.request.messages
  const folded = Math.min(foldedCount(view), messages.length)
  const extendsPrevious = view.prefix?._tag === "Extends"
  return html`<section id="request"><h2>Request <span class="muted">(${messages.length} messages; <a href="${links.to(self)}">hide</a>)</span></h2>${KEPT}
<details id="system-prompt"><summary>System prompt (${formatInt(request.request.systemPrompt.length)} characters)</summary><pre>${request.request.systemPrompt}</pre></details>
<details id="tools"><summary>${request.request.tools.length} tools</summary><p>${request.request.tools.map((t) => html`<code>${t.name}</code> `)}</p></details>
${
    folded === 0 ? null : html`<details id="history"><summary>${folded} ${folded === 1 ? "message" : "messages"} ${
      extendsPrevious ? "the previous request sent too" : "before the last"
    } (folded)</summary>${messages.slice(0, folded).map((m, i) => messageBlock(m, i))}</details>`
  }
<h3 id="added-heading">${extendsPrevious ? `Added by this call (${messages.length - folded})` : folded === 0 ? "Messages" : "The last message"}</h3>
<div id="added">${messages.slice(folded).map((m, i) => messageBlock(m, folded + i))}</div></section>
<section id="answer"><h2>Answer</h2>${
    answer === undefined
      ? html`<p class="muted">No answer in the journal${view.call.status === "committed" ? " (a summary call's answer becomes the summary, not a message)" : `: the call ${callStatusWords(view.call.status)}`}.</p>`
      : html`${answer.content.map(partText)}`
  }</section>`
}

export const callPage = (view: CallPageView, links: Links, nonce: string, loopbackClient: boolean, refused: boolean): string =>
  page({
    title: `Call ${shorten(view.call.callId.split("/").slice(-2).join("/"), 40)}`,
    home: links.to("/console"),
    nonce,
    body: html`${summarySection(view, links)}
<section id="attempts"><h2>Attempts <span class="muted">(each target tried, in order: retries, then fallbacks)</span></h2>${attemptsTable(view.call, view.attempts)}</section>
${refused ? html`<p class="bad">The request is shown only to a client on this machine (a loopback address).</p>` : null}
${requestSection(view, links, loopbackClient)}`
  })
