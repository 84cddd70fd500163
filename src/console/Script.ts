/**
 * The overview's one script: it polls the running turns (`/console/api/running`, once a
 * second, while the page is visible) and redraws that panel with DOM text nodes (never
 * innerHTML), so nothing the server sends can become markup. Polling rather than Server-Sent
 * Events: one short GET a second costs the server next to nothing, holds no connection open
 * (no stream for the server to track or for a proxy to buffer), and picks up again by itself
 * after a restart.
 */
import { raw } from "./Html.js"
import type { Markup } from "./Html.js"

/** A JSON value inside a `<script>`: `<` escaped so no string can close the element. */
const scriptLiteral = (value: unknown): string => JSON.stringify(value).replace(/</g, "\\u003c")

const BODY = `
const fmtMs = (ms) => ms < 1000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
const ago = (ms, now) => { const s = Math.max(0, Math.round((now - ms) / 1000)); return s < 60 ? s + "s ago" : s < 3600 ? Math.floor(s / 60) + "m ago" : Math.floor(s / 3600) + "h ago"; };
const cell = (text, cls) => { const td = document.createElement("td"); if (cls) td.className = cls; td.textContent = text; return td; };
const code = (text) => { const td = document.createElement("td"); const c = document.createElement("code"); c.textContent = text; td.append(c); return td; };
const panel = document.getElementById("running");
const rows = document.getElementById("running-rows");
const status = document.getElementById("running-status");
const render = (data) => {
  const out = [];
  for (const t of data.turns) {
    const tr = document.createElement("tr");
    tr.dataset.request = t.requestId;
    const conv = document.createElement("td");
    if (t.conversationId === null) conv.textContent = "–";
    else { const a = document.createElement("a"); a.href = withToken(CONVERSATIONS + encodeURIComponent(t.conversationId)); a.textContent = t.conversationId; conv.append(a); }
    tr.append(conv, code(t.turnId ?? "–"), cell(t.model ?? "–"), cell(fmtMs(data.nowMs - t.startedAtMs), "num"), cell(ago(t.lastActivityMs, data.nowMs), "num"), code(t.requestId));
    out.push(tr);
  }
  if (out.length === 0) { const tr = document.createElement("tr"); tr.className = "empty"; const td = cell("No turn is running.", "muted"); td.colSpan = 6; tr.append(td); out.push(tr); }
  rows.replaceChildren(...out);
  panel.dataset.count = String(data.turns.length);
};
const withToken = (path) => { const token = new URL(API, location.href).searchParams.get("token"); return token === null ? path : path + "?token=" + encodeURIComponent(token); };
const poll = async () => {
  if (document.visibilityState !== "hidden") {
    try {
      const response = await fetch(API, { cache: "no-store", credentials: "same-origin" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      render(await response.json());
      status.textContent = "(live)";
    } catch (error) {
      status.textContent = "(not updating: " + error.message + ")";
    }
  }
  setTimeout(poll, 1000);
};
poll();
`

/** The script for the overview: `api` is the running-turns endpoint, `conversations` the prefix of a conversation's page. */
export const runningScript = (api: string, conversations: string): Markup =>
  raw(`"use strict";\nconst API = ${scriptLiteral(api)};\nconst CONVERSATIONS = ${scriptLiteral(conversations.split("?")[0])};\n${BODY}`)
