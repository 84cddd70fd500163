/**
 * A user's own console page (`/console/me`, on a team's server, opened with their token): the
 * models they may use, their limits with what they spent today and this month (the users page's
 * cells, marked the same way), and their own conversations, newest first. Nothing of another
 * user's: the route reads only the caller the door found. Conversation pages stay the
 * operator's, so the list links nowhere. The operator, and anyone on one person's server, get
 * a pointer instead.
 */
import type { ConversationInsight } from "../Store.js"
import { USER_PAGE_PATH } from "../transport/Policy.js"
import type { Spend, User } from "../Users.js"
import { formatTime, formatUsd, html, page } from "./Html.js"
import type { Markup } from "./Html.js"
import { titleOf } from "./Pages.js"
import type { Links } from "./Pages.js"
import { modelsCell, spendCell, USERS_PATH } from "./UsersPage.js"

/** How many of their conversations a user's page lists. */
export const ME_CONVERSATIONS = 50

export interface MeView {
  readonly user: User
  readonly spend: Spend
  /** Theirs, newest first, at most `ME_CONVERSATIONS`. */
  readonly conversations: ReadonlyArray<ConversationInsight>
}

const limitWords = (usd: number | undefined, per: string) => usd === undefined ? `no ${per} limit` : `${formatUsd(usd)} a ${per}`

const conversationRow = (c: ConversationInsight): Markup =>
  html`<tr data-conversation="${c.conversationId}"><td>${titleOf(c)}<div class="muted small"><code>${c.conversationId}</code></div></td>
<td>${c.model ?? "–"}</td><td class="num">${c.turns}</td><td class="num">${formatUsd(c.costUsd)}</td><td class="nowrap">${formatTime(c.lastActivityMs)}</td></tr>`

const conversationsSection = (conversations: ReadonlyArray<ConversationInsight>): Markup =>
  html`<section id="conversations" data-count="${conversations.length}"><h2>Your conversations <span class="muted">(${conversations.length}, most recent first${
    conversations.length >= ME_CONVERSATIONS ? `, the last ${ME_CONVERSATIONS}` : ""
  })</span></h2>
<div class="scroll"><table><thead><tr><th>Title</th><th>Model</th><th class="num">Turns</th><th class="num">Cost</th><th>Last activity (UTC)</th></tr></thead>
<tbody>${conversations.length === 0 ? html`<tr><td colspan="5" class="muted">No conversation yet.</td></tr>` : conversations.map(conversationRow)}</tbody></table></div></section>`

/** The user's page; `links` carry their token when the query brought it. */
export const mePage = ({ conversations, spend, user }: MeView, links: Links, nonce: string): string =>
  page({
    title: user.name,
    home: links.to(USER_PAGE_PATH),
    nav: false,
    nonce,
    body: html`<section id="me" data-user="${user.name}"><h2>${user.name} <span class="muted">(spend of priced calls, UTC day and month)</span></h2>
<div class="scroll"><table><thead><tr><th>Models</th><th class="num">Today</th><th class="num">This month</th></tr></thead>
<tbody><tr>${modelsCell(user)}${spendCell("today", spend.todayUsd, user.dailyUsd)}${spendCell("month", spend.monthUsd, user.monthlyUsd)}</tr></tbody></table></div>
<p class="muted">Limits: ${limitWords(user.dailyUsd, "day")}, ${limitWords(user.monthlyUsd, "month")}. A limit reached refuses your turns until the next UTC day or month; the operator sets them.</p></section>
${conversationsSection(conversations)}`
  })

/** `/console/me` for a caller who is no user: the operator on a team's server, or anyone on one person's. */
export const notAUserPage = (teamServer: boolean, links: Links, nonce: string): string =>
  page({
    title: teamServer ? "A user's page" : "No users",
    home: links.to("/console"),
    nonce,
    body: teamServer
      ? html`<section id="me" data-user=""><h2>A user's page</h2>
<p>${USER_PAGE_PATH} shows a user their own spend and conversations, opened with their token. Every user's are on <a href="${links.to(USERS_PATH)}">Users</a>.</p></section>`
      : html`<section id="me" data-user=""><h2>No users</h2>
<p>There are no users on this server: it is one person's, and everything is on <a href="${links.to("/console")}">the console</a>.</p></section>`
  })
