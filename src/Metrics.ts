/**
 * The server's metrics, kept with Effect's `Metric` module and served at `GET /metrics` in the
 * Prometheus text format: turns by outcome, model calls, errors, retries, time to the first
 * streamed delta, tokens by kind and the share of input tokens read from the provider's cache.
 *
 * The text rendering is hand-written (a few lines over `Metric.snapshot`): the OpenTelemetry
 * exporter would bring a whole SDK for one endpoint. The text is redacted of the configuration's
 * secrets (`internal/Secrets.ts`) like every other text the server hands out.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Layer, Metric, MetricBoundaries, MetricLabel, MetricState } from "effect"
import type { MetricPair } from "effect"
import { redact } from "./internal/Secrets.js"
import type { Usage } from "./Llm.js"

export const turnsStarted = Metric.counter("byok_turns_started_total", { description: "Turns started", incremental: true })
export const turnsFinished = Metric.counter("byok_turns_finished_total", { description: "Turns finished, by outcome", incremental: true })
export const llmCalls = Metric.counter("byok_llm_calls_total", { description: "Model calls started (re-issues after a restart included)", incremental: true })
export const llmErrors = Metric.counter("byok_llm_errors_total", { description: "Model calls that ended in an error or an abort", incremental: true })
export const llmRetries = Metric.counter("byok_llm_retries_total", { description: "Provider requests retried before the first event", incremental: true })
export const llmFallbacks = Metric.counter("byok_llm_fallbacks_total", { description: "Model calls sent on to a fallback target after a failure before any event, by model", incremental: true })
export const costUsd = Metric.counter("byok_cost_usd_total", { description: "What the committed model calls cost, in USD (from the configured prices), by model" })
export const compactions = Metric.counter("byok_compactions_total", { description: "Compactions of a conversation's history, by outcome (started, completed, failed, skipped)", incremental: true })
export const rewinds = Metric.counter("byok_rewinds_total", { description: "Turns that rewound the history to what the client kept", incremental: true })
export const configReloads = Metric.counter("byok_config_reloads_total", { description: "Changes of the configuration file, by outcome (applied, refused)", incremental: true })
export const toolCalls = Metric.counter("byok_tool_calls_total", { description: "Tool calls dispatched to the client", incremental: true })
export const tokens = Metric.counter("byok_tokens_total", { description: "Tokens reported by providers, by kind", incremental: true })
export const streamEvents = Metric.counter("byok_stream_events_total", {
  description: "Model stream events the runner applied, by path: fast (in the network read's own call) or actor (through the conversation's actor: what commits, or while it is busy)",
  incremental: true
})
const fastPath = [MetricLabel.make("path", "fast")]
const actorPath = [MetricLabel.make("path", "actor")]
/**
 * Counts `n` events of a model stream by the path that applied them, from a network read's
 * callback (no fiber): on the counter itself with the same label array each time, which its hook
 * cache keys by identity (no `Metric.tagged` wrapper to go through per read).
 */
export const countStreamEvents = (path: "fast" | "actor", n: number): void =>
  streamEvents.unsafeUpdate(n, path === "fast" ? fastPath : actorPath)
export const appends = Metric.counter("byok_appends_total", {
  description: "Client messages taken (BidiAppend or Run), by path: at_once (taken while the request was not busy, nothing asked of the store, acknowledged at once) or general (waited for the request's lock, the store, or its inputs' commits)",
  incremental: true
})
const atOnce = [MetricLabel.make("path", "at_once")]
const general = [MetricLabel.make("path", "general")]
/** Counts a client message by how `Driver.accept` took it. */
export const countAppend = (path: "at_once" | "general"): void => appends.unsafeUpdate(1, path === "at_once" ? atOnce : general)
export const timeToFirstDelta = Metric.histogram(
  "byok_time_to_first_delta_seconds",
  MetricBoundaries.exponential({ start: 0.05, factor: 2, count: 10 }),
  "From opening a model call to its first streamed delta"
)

export const countTokens = (usage: Usage) =>
  Effect.all([
    Metric.incrementBy(Metric.tagged(tokens, "kind", "input"), usage.input),
    Metric.incrementBy(Metric.tagged(tokens, "kind", "output"), usage.output),
    Metric.incrementBy(Metric.tagged(tokens, "kind", "cache_read"), usage.cacheRead),
    Metric.incrementBy(Metric.tagged(tokens, "kind", "cache_write"), usage.cacheWrite),
    Metric.incrementBy(Metric.tagged(tokens, "kind", "reasoning"), usage.reasoning)
  ], { discard: true })

const labels = (pair: MetricPair.MetricPair.Untyped, extra: ReadonlyArray<readonly [string, string]> = []) => {
  const all = [...pair.metricKey.tags.map((t) => [t.key, t.value] as const), ...extra]
  return all.length === 0 ? "" : `{${all.map(([k, v]) => `${k}="${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`).join(",")}}`
}

/** Renders a metrics snapshot in the Prometheus text exposition format. */
export const renderPrometheus = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const lines: Array<string> = []
  const seen = new Set<string>()
  const header = (name: string, type: string, help: string | undefined) => {
    if (seen.has(name)) return
    seen.add(name)
    if (help !== undefined) lines.push(`# HELP ${name} ${help}`)
    lines.push(`# TYPE ${name} ${type}`)
  }
  let cacheRead = 0
  let input = 0
  for (const pair of [...pairs].sort((a, b) => a.metricKey.name.localeCompare(b.metricKey.name))) {
    const name = pair.metricKey.name
    if (!name.startsWith("byok_")) continue
    const state = pair.metricState
    const help = pair.metricKey.description._tag === "Some" ? pair.metricKey.description.value : undefined
    if (MetricState.isCounterState(state)) {
      header(name, "counter", help)
      lines.push(`${name}${labels(pair)} ${Number(state.count)}`)
      if (name === "byok_tokens_total") {
        const kind = pair.metricKey.tags.find((t) => t.key === "kind")?.value
        if (kind === "cache_read") cacheRead += Number(state.count)
        if (kind === "input" || kind === "cache_read" || kind === "cache_write") input += Number(state.count)
      }
    } else if (MetricState.isGaugeState(state)) {
      header(name, "gauge", help)
      lines.push(`${name}${labels(pair)} ${Number(state.value)}`)
    } else if (MetricState.isHistogramState(state)) {
      header(name, "histogram", help)
      for (const [bound, count] of state.buckets) {
        lines.push(`${name}_bucket${labels(pair, [["le", Number.isFinite(bound) ? String(bound) : "+Inf"]])} ${count}`)
      }
      if (!state.buckets.some(([bound]) => !Number.isFinite(bound))) lines.push(`${name}_bucket${labels(pair, [["le", "+Inf"]])} ${state.count}`)
      lines.push(`${name}_sum${labels(pair)} ${state.sum}`)
      lines.push(`${name}_count${labels(pair)} ${state.count}`)
    }
  }
  header("byok_cache_read_ratio", "gauge", "Share of input tokens read from the provider's prompt cache")
  lines.push(`byok_cache_read_ratio ${input === 0 ? 0 : cacheRead / input}`)
  return lines.join("\n") + "\n"
}

export const layerRoutes: Layer.Layer<never, never, HttpLayerRouter.HttpRouter> = HttpLayerRouter.use((router) =>
  router.add(
    "GET",
    "/metrics",
    Effect.map(Metric.snapshot, (pairs) =>
      HttpServerResponse.text(redact(renderPrometheus(pairs)), { contentType: "text/plain; version=0.0.4" }))
  )
)
