/**
 * The console's users page (`/console/users`, the operator's on a team's server): each user's
 * models, limits and what they spent today and this month (UTC, priced calls of the chats they
 * own), a limit reached or 80% spent marked. With no user, how to make the server a team's.
 */
import type { Spend, User, UserRecord } from "../Users.js"
import { formatTime, formatUsd, html, page } from "./Html.js"
import type { Markup } from "./Html.js"
import type { Links } from "./Pages.js"

export const USERS_PATH = "/console/users"

export interface UserRow {
  readonly user: UserRecord
  readonly spend: Spend
}

/** How much of a limit is spent: "reached", "near" (80%), or nothing to say. */
export const budgetState = (spent: number, limit: number | undefined): "reached" | "near" | undefined =>
  limit === undefined ? undefined : spent >= limit ? "reached" : spent >= 0.8 * limit ? "near" : undefined

/** A spend against its limit (a table cell), a limit reached or 80% spent marked; the user's own page shows the same cells. */
export const spendCell = (column: string, spent: number, limit: number | undefined): Markup => {
  const state = budgetState(spent, limit)
  return html`<td class="num ${state === "reached" ? "bad" : state === "near" ? "warn" : ""}" data-col="${column}" data-state="${state ?? "ok"}">${formatUsd(spent)}${
    limit === undefined ? null : html` <span class="muted">of ${formatUsd(limit)}</span>`
  }${state === "reached" ? html`<div class="small">limit reached: turns refused</div>` : state === "near" ? html`<div class="small">over 80%</div>` : null}</td>`
}

/** The models a user may use (a table cell). */
export const modelsCell = (user: Pick<User, "models">): Markup =>
  html`<td data-col="models">${user.models === undefined ? html`<span class="muted">every model</span>` : user.models.join(", ")}</td>`

const userRow = ({ spend, user }: UserRow): Markup =>
  html`<tr data-user="${user.name}"><td>${user.name}</td>
${modelsCell(user)}
${spendCell("today", spend.todayUsd, user.dailyUsd)}${spendCell("month", spend.monthUsd, user.monthlyUsd)}
<td data-col="created">${formatTime(user.createdAtMs)}</td></tr>`

export const usersPage = (rows: ReadonlyArray<UserRow> | undefined, links: Links, nonce: string): string =>
  page({
    title: "Users",
    home: links.to("/console"),
    nonce,
    body: rows === undefined || rows.length === 0
      ? html`<section id="users" data-count="0"><h2>No users</h2>
<p>This server is one person's: no request needs a user's token. <code>cursor-byok users add NAME</code> makes it a team's server
(every request then carries a user's token, or the operator's for this console); the README's "A team's server" says how.</p></section>`
      : html`<section id="users" data-count="${rows.length}"><h2>Users <span class="muted">(spend of priced calls, UTC day and month)</span></h2>
<div class="scroll"><table><thead><tr><th>User</th><th>Models</th><th class="num">Today</th><th class="num">This month</th><th>Added</th></tr></thead>
<tbody>${rows.map(userRow)}</tbody></table></div>
<p class="muted">Add, remove or give a new token with <code>cursor-byok users</code>; changes apply within 2 s.</p></section>`
  })
