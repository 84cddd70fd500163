/**
 * The console's charts, rendered on the server as inline SVG from the model calls of the last
 * days: tokens (uncached input, cache read, cache write, output), cost, and the cache-read
 * share, per hour (48 hours) or per day (14 days), in UTC. Pure.
 */
import type { RecentCall } from "../Store.js"
import { formatCompact, formatUsd, html } from "./Html.js"
import type { Markup } from "./Html.js"

export type Range = "48h" | "14d"

export const rangeOf = (text: string | undefined): Range => text === "14d" ? "14d" : "48h"

export interface Bucket {
  readonly startMs: number
  readonly input: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly output: number
  readonly costUsd: number
  readonly calls: number
}

const HOUR = 3_600_000
const DAY = 24 * HOUR

export const spanOf = (range: Range) => range === "48h" ? { step: HOUR, count: 48 } : { step: DAY, count: 14 }

/** The window a range covers, ending with the bucket that holds `nowMs`. */
export const windowStart = (range: Range, nowMs: number): number => {
  const { count, step } = spanOf(range)
  return (Math.floor(nowMs / step) - count + 1) * step
}

export const bucketsOf = (calls: ReadonlyArray<RecentCall>, range: Range, nowMs: number): ReadonlyArray<Bucket> => {
  const { count, step } = spanOf(range)
  const first = windowStart(range, nowMs)
  const buckets = Array.from({ length: count }, (_, i) => ({ startMs: first + i * step, input: 0, cacheRead: 0, cacheWrite: 0, output: 0, costUsd: 0, calls: 0 }))
  for (const call of calls) {
    const bucket = buckets[Math.floor((call.createdAtMs - first) / step)]
    if (bucket === undefined) continue
    bucket.calls++
    bucket.costUsd += call.costUsd ?? 0
    if (call.usage !== null) {
      bucket.input += call.usage.input
      bucket.cacheRead += call.usage.cacheRead
      bucket.cacheWrite += call.usage.cacheWrite
      bucket.output += call.usage.output
    }
  }
  return buckets
}

/** Cache reads over all input tokens (uncached, cache read, cache write), as `/metrics` counts it; null without input. */
export const cacheShare = (usage: { readonly input: number; readonly cacheRead: number; readonly cacheWrite: number }): number | null => {
  const all = usage.input + usage.cacheRead + usage.cacheWrite
  return all === 0 ? null : usage.cacheRead / all
}

const W = 460
const H = 150
const PAD = { left: 46, right: 6, top: 8, bottom: 22 }

const label = (startMs: number, range: Range) => {
  const iso = new Date(startMs).toISOString()
  return range === "48h" ? `${iso.slice(11, 13)}h` : iso.slice(5, 10)
}

const tip = (bucket: Bucket, range: Range, text: string) =>
  `${range === "48h" ? new Date(bucket.startMs).toISOString().slice(0, 13).replace("T", " ") + ":00" : new Date(bucket.startMs).toISOString().slice(0, 10)} UTC: ${text}`

/** One bar chart: `series` stacked per bucket (numbers only reach the SVG; the tooltip text is escaped). */
const barChart = (
  buckets: ReadonlyArray<Bucket>,
  range: Range,
  series: ReadonlyArray<{ readonly color: string; readonly value: (b: Bucket) => number }>,
  options: { readonly max?: number; readonly axis: (v: number) => string; readonly tooltip: (b: Bucket) => string; readonly id: string }
): Markup => {
  const totals = buckets.map((b) => series.reduce((sum, s) => sum + s.value(b), 0))
  const max = options.max ?? Math.max(1e-9, ...totals)
  const innerW = W - PAD.left - PAD.right
  const innerH = H - PAD.top - PAD.bottom
  const slot = innerW / buckets.length
  const bars: Array<Markup> = []
  buckets.forEach((bucket, i) => {
    let y = PAD.top + innerH
    const x = PAD.left + i * slot + slot * 0.12
    for (const s of series) {
      const h = (s.value(bucket) / max) * innerH
      if (h <= 0) continue
      y -= h
      bars.push(html`<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${(slot * 0.76).toFixed(1)}" height="${h.toFixed(1)}" fill="${s.color}"><title>${tip(bucket, range, options.tooltip(bucket))}</title></rect>`)
    }
  })
  const every = Math.ceil(buckets.length / 8)
  const ticks = buckets.flatMap((bucket, i) =>
    i % every === 0 ? [html`<text x="${(PAD.left + i * slot).toFixed(1)}" y="${H - 6}" font-size="10" fill="#5f6b7a">${label(bucket.startMs, range)}</text>`] : []
  )
  return html`<svg id="${options.id}" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img">
<line x1="${PAD.left}" y1="${PAD.top + innerH}" x2="${W - PAD.right}" y2="${PAD.top + innerH}" stroke="#dde2e8"/>
<line x1="${PAD.left}" y1="${PAD.top}" x2="${W - PAD.right}" y2="${PAD.top}" stroke="#eef1f5"/>
<text x="${PAD.left - 4}" y="${PAD.top + 9}" font-size="10" text-anchor="end" fill="#5f6b7a">${options.axis(max)}</text>
<text x="${PAD.left - 4}" y="${PAD.top + innerH}" font-size="10" text-anchor="end" fill="#5f6b7a">0</text>
${bars}${ticks}</svg>`
}

const COLORS = { input: "#7c93c9", cacheRead: "#3aa36b", cacheWrite: "#e0a030", output: "#2457c5", cost: "#8a56c2", share: "#3aa36b" }

export const chartsOf = (buckets: ReadonlyArray<Bucket>, range: Range): Markup => {
  const tokens = barChart(buckets, range, [
    { color: COLORS.input, value: (b) => b.input },
    { color: COLORS.cacheRead, value: (b) => b.cacheRead },
    { color: COLORS.cacheWrite, value: (b) => b.cacheWrite },
    { color: COLORS.output, value: (b) => b.output }
  ], {
    id: "chart-tokens",
    axis: formatCompact,
    tooltip: (b) => `${b.calls} calls; input ${b.input}, cache read ${b.cacheRead}, cache write ${b.cacheWrite}, output ${b.output}`
  })
  const cost = barChart(buckets, range, [{ color: COLORS.cost, value: (b) => b.costUsd }], {
    id: "chart-cost",
    axis: (v) => formatUsd(v),
    tooltip: (b) => `${formatUsd(b.costUsd)} over ${b.calls} calls`
  })
  const share = barChart(buckets, range, [{ color: COLORS.share, value: (b) => cacheShare(b) ?? 0 }], {
    id: "chart-cache",
    max: 1,
    axis: () => "100%",
    tooltip: (b) => {
      const s = cacheShare(b)
      return s === null ? "no input tokens" : `${Math.round(s * 100)}% of input tokens read from the cache`
    }
  })
  const swatch = (color: string, name: string) => html` <svg width="10" height="10"><rect width="10" height="10" fill="${color}"/></svg> ${name}`
  return html`<div class="charts">
<figure>${tokens}<figcaption class="legend">Tokens ${swatch(COLORS.input, "input")}${swatch(COLORS.cacheRead, "cache read")}${swatch(COLORS.cacheWrite, "cache write")}${swatch(COLORS.output, "output")}</figcaption></figure>
<figure>${cost}<figcaption>Cost (USD, priced calls)</figcaption></figure>
<figure>${share}<figcaption>Cache-read share of input tokens</figcaption></figure>
</div>`
}
