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
export const clientUnknownFields = Metric.counter("byok_client_unknown_fields_total", {
  description: "Fields of client messages this server's schema does not know (a newer Cursor's drift), by protobuf type, field number and client version (x-cursor-client-version)",
  incremental: true
})
export const timeToFirstDelta = Metric.histogram(
  "byok_time_to_first_delta_seconds",
  MetricBoundaries.exponential({ start: 0.05, factor: 2, count: 10 }),
  "From opening a model call to its first streamed delta"
)

const tokenKinds = {
  input: [MetricLabel.make("kind", "input")],
  output: [MetricLabel.make("kind", "output")],
  cacheRead: [MetricLabel.make("kind", "cache_read")],
  cacheWrite: [MetricLabel.make("kind", "cache_write")],
  reasoning: [MetricLabel.make("kind", "reasoning")]
}

/**
 * Counts a model call's tokens by kind, on the counter itself with one label array per kind
 * (as `countStreamEvents`): `Metric.tagged` per kind made a new metric and label array on each
 * call, which missed the counter's hook cache and looked the key up in the registry (~0.1 ms a
 * turn for the five). Nothing in the server sets fiber metric labels (`Effect.labelMetrics`),
 * so the series are the same as `Metric.incrementBy`'s.
 */
export const unsafeCountTokens = (usage: Usage): void => {
  tokens.unsafeUpdate(usage.input, tokenKinds.input)
  tokens.unsafeUpdate(usage.output, tokenKinds.output)
  tokens.unsafeUpdate(usage.cacheRead, tokenKinds.cacheRead)
  tokens.unsafeUpdate(usage.cacheWrite, tokenKinds.cacheWrite)
  tokens.unsafeUpdate(usage.reasoning, tokenKinds.reasoning)
}

/** `unsafeCountTokens` as an effect. */
export const countTokens = (usage: Usage): Effect.Effect<void> => Effect.sync(() => unsafeCountTokens(usage))

/**
 * The label array for the values of labels `names`, made once per set of values: the counter's
 * hook cache keys by the array's identity. Values come from the configuration and the code
 * (outcomes, tool kinds, model names), so the cache stays small; past a bound it stops caching
 * (still correct).
 */
const labelCache = (...names: ReadonlyArray<string>) => {
  const cache = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()
  return (...values: ReadonlyArray<string>): ReadonlyArray<MetricLabel.MetricLabel> => {
    const id = values.length === 1 ? values[0]! : values.join("\u0000")
    let labels = cache.get(id)
    if (labels === undefined) {
      labels = names.map((name, index) => MetricLabel.make(name, values[index] ?? ""))
      if (cache.size < 1_000) cache.set(id, labels)
    }
    return labels
  }
}
const outcomeLabel = labelCache("outcome")
const kindLabel = labelCache("kind")
const modelLabel = labelCache("model")

/** `Metric.increment(Metric.tagged(turnsFinished, "outcome", outcome))` without the per-call metric. */
export const countTurnFinished = (outcome: string): void => turnsFinished.unsafeUpdate(1, outcomeLabel(outcome))
/** `Metric.increment(Metric.tagged(toolCalls, "kind", kind))` without the per-call metric. */
export const countToolCall = (kind: string): void => toolCalls.unsafeUpdate(1, kindLabel(kind))
/** `Metric.incrementBy(Metric.tagged(costUsd, "model", model), usd)` without the per-call metric. */
export const addCost = (model: string, usd: number): void => costUsd.unsafeUpdate(usd, modelLabel(model))
/** `Metric.increment(Metric.tagged(compactions, "outcome", outcome))` without the per-call metric. */
export const countCompaction = (outcome: string): void => compactions.unsafeUpdate(1, outcomeLabel(outcome))

export const tabRequests = Metric.counter("byok_tab_requests_total", { description: "Tab requests answered here, by model and outcome (suggested, empty, reused, canceled, failed)", incremental: true })
export const tabTokens = Metric.counter("byok_tab_tokens_total", { description: "Tokens of Tab's FIM calls, by model and kind", incremental: true })
export const tabCost = Metric.counter("byok_tab_cost_usd_total", { description: "What Tab's FIM calls cost, in USD (from the configured prices), by model" })
export const tabFates = Metric.counter("byok_tab_fates_total", { description: "Cursor's fate reports of Tab suggestions, by model and fate (accept, reject, partial)", incremental: true })
export const tabFirstSuggestionSeconds = Metric.histogram(
  "byok_tab_first_suggestion_seconds",
  MetricBoundaries.exponential({ start: 0.01, factor: 2, count: 10 }),
  "From a Tab request to its first suggestion text"
)

const modelOutcome = labelCache("model", "outcome")
const modelKind = labelCache("model", "kind")
const modelFate = labelCache("model", "fate")

export const countTab = (model: string, outcome: string): void => tabRequests.unsafeUpdate(1, modelOutcome(model, outcome))
export const countTabFate = (model: string, fate: string): void => tabFates.unsafeUpdate(1, modelFate(model, fate))
export const countTabTokens = (model: string, input: number, output: number, usd: number): void => {
  tabTokens.unsafeUpdate(input, modelKind(model, "input"))
  tabTokens.unsafeUpdate(output, modelKind(model, "output"))
  if (usd > 0) tabCost.unsafeUpdate(usd, modelLabel(model))
}
export const tabFirstSuggestion = (model: string, ms: number): void => tabFirstSuggestionSeconds.unsafeUpdate(ms / 1000, modelLabel(model))

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
