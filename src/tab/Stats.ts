/**
 * What Tab did, per model, since the server started: requests, upstream calls, the ones
 * answered without a call (typed through, shared), canceled and failed ones, the time to the
 * first suggestion, tokens, cost, and the acceptance rate from Cursor's fate reports. Kept in
 * memory for the console, and counted in `/metrics` (`Metrics.ts`) as it happens.
 */
import * as Metrics from "../Metrics.js"

export type TabOutcome = "suggested" | "empty" | "reused" | "canceled" | "failed"
export type Fate = "accept" | "reject" | "partial"

export interface ModelStats {
  readonly model: string
  requests: number
  calls: number
  shared: number
  reused: number
  suggested: number
  empty: number
  canceled: number
  failed: number
  inputTokens: number
  outputTokens: number
  costUsd: number
  accepted: number
  rejected: number
  partial: number
  /** Milliseconds from a request to its first suggestion text, the last `samples` of them. */
  readonly firstSuggestionMs: Array<number>
}

const samples = 1_000
/** Requests remembered for their fate reports (the oldest go first). */
const rememberedRequests = 5_000

export class TabStats {
  private readonly byModel = new Map<string, ModelStats>()
  private readonly modelOfRequest = new Map<string, string>()

  of(model: string): ModelStats {
    let stats = this.byModel.get(model)
    if (stats === undefined) {
      stats = { model, requests: 0, calls: 0, shared: 0, reused: 0, suggested: 0, empty: 0, canceled: 0, failed: 0, inputTokens: 0, outputTokens: 0, costUsd: 0, accepted: 0, rejected: 0, partial: 0, firstSuggestionMs: [] }
      this.byModel.set(model, stats)
    }
    return stats
  }

  request(model: string, requestId: string | undefined) {
    this.of(model).requests++
    if (requestId === undefined || requestId === "") return
    this.modelOfRequest.set(requestId, model)
    if (this.modelOfRequest.size > rememberedRequests) this.modelOfRequest.delete(this.modelOfRequest.keys().next().value!)
  }

  outcome(model: string, outcome: TabOutcome) {
    this.of(model)[outcome]++
    Metrics.countTab(model, outcome)
  }

  /** A request answered by a call another request started. */
  shared(model: string) {
    this.of(model).shared++
  }

  firstSuggestion(model: string, ms: number) {
    const list = this.of(model).firstSuggestionMs
    list.push(ms)
    if (list.length > samples) list.shift()
    Metrics.tabFirstSuggestion(model, ms)
  }

  usage(model: string, inputTokens: number, outputTokens: number, costUsd: number) {
    const stats = this.of(model)
    stats.calls++
    stats.inputTokens += inputTokens
    stats.outputTokens += outputTokens
    stats.costUsd += costUsd
    Metrics.countTabTokens(model, inputTokens, outputTokens, costUsd)
  }

  /** A fate report of a request this server answered; false when the request is not one it remembers. */
  fate(requestId: string, fate: Fate): boolean {
    const model = this.modelOfRequest.get(requestId)
    if (model === undefined) return false
    const stats = this.of(model)
    if (fate === "accept") stats.accepted++
    else if (fate === "reject") stats.rejected++
    else stats.partial++
    Metrics.countTabFate(model, fate)
    return true
  }

  snapshot(): ReadonlyArray<ModelStats> {
    return [...this.byModel.values()].map((stats) => ({ ...stats, firstSuggestionMs: [...stats.firstSuggestionMs] }))
  }
}

/** Accepted (wholly or partly) of the fates reported, or undefined before any. */
export const acceptanceRate = (stats: Pick<ModelStats, "accepted" | "rejected" | "partial">): number | undefined => {
  const all = stats.accepted + stats.rejected + stats.partial
  return all === 0 ? undefined : (stats.accepted + stats.partial) / all
}
