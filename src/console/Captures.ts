/**
 * The console's Captures page: the capture files under `<home>/captures/` (capture mode,
 * `capture/`), newest first, with their size and time and a download link, so a user can attach
 * one to a bug report. A capture holds the conversation's messages (file contents redacted
 * unless `capture.contents`): like the messages on a conversation's page, it is downloaded by a
 * client on a loopback address only.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { formatInt, formatTime, html, page } from "./Html.js"
import type { Links } from "./Pages.js"

export interface CaptureEntry {
  readonly name: string
  readonly bytes: number
  readonly modifiedMs: number
}

/** A capture's file name as the recorder writes them (nothing that could leave the folder). */
const NAME = /^[A-Za-z0-9_-]+\.jsonl$/

export const capturesFolder = (home: string) => join(home, "captures")

/** The capture files of `folder`, newest first (none when it does not exist). */
export const listCaptures = (folder: string): ReadonlyArray<CaptureEntry> => {
  let names: ReadonlyArray<string>
  try {
    names = readdirSync(folder)
  } catch {
    return []
  }
  return names.filter((name) => NAME.test(name)).flatMap((name) => {
    try {
      const stat = statSync(join(folder, name))
      return stat.isFile() ? [{ name, bytes: stat.size, modifiedMs: stat.mtimeMs }] : []
    } catch {
      return []
    }
  }).sort((a, b) => b.modifiedMs - a.modifiedMs)
}

/** One capture's text, when `name` is a capture of `folder`. */
export const readCapture = (folder: string, name: string): string | undefined => {
  if (!NAME.test(name)) return undefined
  try {
    return readFileSync(join(folder, name), "utf8")
  } catch {
    return undefined
  }
}

export const capturePath = (name: string) => `/console/captures/${encodeURIComponent(name)}`

export const capturesPage = (entries: ReadonlyArray<CaptureEntry>, options: { readonly enabled: boolean; readonly folder: string; readonly loopbackClient: boolean }, links: Links, nonce: string): string =>
  page({
    title: "Captures",
    home: links.to("/console"),
    nonce,
    body: html`<section><h2>Captures</h2>
<p>Capture mode is ${options.enabled ? "on" : "off"} (<code>cursor-byok capture ${options.enabled ? "off" : "on"}</code> turns it ${options.enabled ? "off" : "on"}). Files in <code>${options.folder}</code>; attach one to a bug report, or run it again with <code>cursor-byok replay FILE</code>.</p>
${options.loopbackClient ? null : html`<p>A capture holds the conversation's messages: it is downloaded from a loopback address only.</p>`}
${entries.length === 0 ? html`<p>No captures.</p>` : html`<table><thead><tr><th>capture</th><th>size</th><th>time</th></tr></thead><tbody>${
      entries.map((entry) =>
        html`<tr><td>${options.loopbackClient ? html`<a href="${links.to(capturePath(entry.name))}" download="${entry.name}">${entry.name}</a>` : entry.name}</td><td>${formatInt(entry.bytes)} B</td><td>${formatTime(entry.modifiedMs)}</td></tr>`)
    }</tbody></table>`}</section>`
  })
