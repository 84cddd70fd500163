/**
 * HTML for the console, server-rendered: the `html` template tag escapes every interpolated
 * value (text and attribute contexts alike) unless it is markup built by `html` itself, so a
 * conversation's title, an error message or a model id can never become markup. Plus the page
 * frame (a small inline style sheet) and the number formats the pages share.
 */

/** Markup that is already safe: only `html` and `raw` make it. */
export class Markup {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

/** Interpolation values: text (escaped), numbers, markup, lists of them; null, undefined and false render nothing. */
export type Part = string | number | Markup | ReadonlyArray<Part> | null | undefined | false

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }

export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!)

const render = (part: Part): string =>
  part === null || part === undefined || part === false
    ? ""
    : part instanceof Markup
    ? part.value
    : Array.isArray(part)
    ? (part as ReadonlyArray<Part>).map(render).join("")
    : escapeHtml(String(part))

/** A template whose interpolations are escaped (attributes must be quoted: `href="${url}"`). */
export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Part>): Markup => {
  let out = strings[0]!
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1]!
  return new Markup(out)
}

/** Trusted markup written in this module's callers (SVG built from numbers, the inline script). */
export const raw = (markup: string): Markup => new Markup(markup)

// =============================================================================
// Formats
// =============================================================================

export const formatInt = (n: number): string => Math.round(n).toLocaleString("en-US")

/** 1234 → 1.2k, 2500000 → 2.5M. */
export const formatCompact = (n: number): string =>
  n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e4 ? `${Math.round(n / 1e3)}k` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(Math.round(n))

export const formatUsd = (usd: number | null): string =>
  usd === null ? "–" : usd === 0 ? "$0" : usd < 0.01 ? `$${usd.toFixed(5)}` : `$${usd.toFixed(usd < 1 ? 4 : 2)}`

export const formatMs = (ms: number | null): string =>
  ms === null ? "–" : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`

export const formatShare = (share: number | null): string => share === null ? "–" : `${Math.round(share * 100)}%`

/** UTC, to the second: `2026-12-01 14:03:22`. */
export const formatTime = (ms: number): string => new Date(ms).toISOString().replace("T", " ").slice(0, 19)

export const formatAgo = (ms: number, nowMs: number): string => {
  const s = Math.max(0, Math.round((nowMs - ms) / 1000))
  return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)}m ago` : s < 86_400 ? `${Math.floor(s / 3600)}h ago` : `${Math.floor(s / 86_400)}d ago`
}

/** At most `max` characters, with an ellipsis when cut. */
export const shorten = (text: string, max: number): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`
}

// =============================================================================
// The page frame
// =============================================================================

const STYLE = `
:root{--fg:#1d232a;--muted:#5f6b7a;--line:#dde2e8;--bg:#f6f7f9;--ok:#17803d;--warn:#a15c00;--bad:#b42318;--accent:#2457c5}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;gap:16px;align-items:baseline;padding:10px 20px;background:#1d232a;color:#fff}header a{color:#fff}
header h1{font-size:16px;margin:0}main{padding:12px 20px 40px;max-width:1500px}
section{background:#fff;border:1px solid var(--line);border-radius:6px;padding:10px 14px;margin:12px 0}
h2{font-size:15px;margin:2px 0 8px}h3{font-size:14px;margin:12px 0 6px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px;white-space:nowrap}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.calls td:nth-child(3),.calls td:nth-child(4){white-space:nowrap}
tr.turn th{background:#f3f5f8;color:var(--fg);font-size:13px;padding-top:8px}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}code{font-size:12px}
.muted{color:var(--muted)}.ok{color:var(--ok)}.warn{color:var(--warn)}.bad{color:var(--bad)}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;background:#eef1f5}
.tag.ok{background:#e3f4e8}.tag.warn{background:#fdf0dc}.tag.bad{background:#fde7e5}
.charts{display:flex;flex-wrap:wrap;gap:16px}.charts figure{margin:0}.charts figcaption{font-size:12px;color:var(--muted)}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f5f8;padding:8px;border-radius:4px;max-height:420px;overflow:auto;margin:4px 0}
.legend svg{margin-left:8px;vertical-align:middle}
.scroll{overflow-x:auto}td.errors{min-width:22em}td.outcome,.nowrap{white-space:nowrap}header .page{margin-left:auto;color:#c9d1db}.small{font-size:12px}nav{display:flex;gap:12px}td.error{white-space:pre-wrap;word-break:break-word;min-width:16em}
.filters{display:flex;flex-wrap:wrap;gap:4px 14px;margin:0 0 8px}.filters a.on{font-weight:600;color:var(--fg)}
details>summary{cursor:pointer;color:var(--accent)}.pager{display:flex;gap:14px;margin-top:8px}
@media (max-width:720px){header{flex-wrap:wrap;gap:4px 12px;padding:8px 10px}main{padding:6px 6px 30px}section{padding:8px;margin:8px 0}
section>table{display:block;overflow-x:auto}th,td{padding:4px 6px}.charts figure{max-width:100%}.charts figure>svg{max-width:100%;height:auto}}
`

/** The tab's icon: a small inline SVG (a data URL, which the Content-Security-Policy's `img-src` allows). */
const FAVICON = "data:image/svg+xml," + encodeURIComponent(
  `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#1d232a"/>` +
    `<path d="M9 10l7 6-7 6" fill="none" stroke="#7fb2ff" stroke-width="3" stroke-linecap="round" stroke-linejoin="round"/>` +
    `<path d="M17 22h7" stroke="#fff" stroke-width="3" stroke-linecap="round"/></svg>`
)

/** The call log's link, from the overview's (`/console`, with the token's query when it has one). */
const callsLink = (home: string): string => home.replace(/^\/console/, "/console/calls")

/** The Tab page's link, the same way. */
const tabLink = (home: string): string => home.replace(/^\/console/, "/console/tab")

/** The users page's link, the same way. */
const usersLink = (home: string): string => home.replace(/^\/console/, "/console/users")

/** A whole page; `nonce` allows its one inline script under the Content-Security-Policy. */
export const page = (options: {
  readonly title: string
  readonly body: Markup
  readonly nonce: string
  readonly script?: Markup
  readonly home: string
  /** The operator's pages' links (Overview, Calls, Tab, Users); false on a user's own page, which opens none of them. */
  readonly nav?: boolean
}): string =>
  `<!doctype html>\n` +
  html`<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${options.title} &middot; cursor-byok console</title><link rel="icon" type="image/svg+xml" href="${FAVICON}"><style nonce="${options.nonce}">${raw(STYLE)}</style></head>
<body><header><h1><a href="${options.home}">cursor-byok console</a></h1>${options.nav === false ? null : html`<nav><a href="${options.home}">Overview</a><a href="${callsLink(options.home)}">Calls</a><a href="${tabLink(options.home)}">Tab</a><a href="${usersLink(options.home)}">Users</a></nav>`}<span class="page">${options.title}</span></header>
<main>${options.body}</main>${options.script === undefined ? null : html`<script nonce="${options.nonce}">${options.script}</script>`}</body></html>`.value
