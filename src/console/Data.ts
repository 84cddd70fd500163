/**
 * What the console shows, read from the store, the turn sessions and the running
 * configuration: the conversations and their totals, the turns running now, the models with
 * their recent errors and time to first delta, the usage of the last days, and one
 * conversation's turns and model calls with each call's prefix status (for a break, the first
 * differing byte of the two rebuilt requests), and the kinds of unknown fields clients sent
 * (`Drift.ts`). Read-only.
 *
 * Of the configuration only ids, wire APIs, upstream model names and base URLs are read: never
 * a key.
 */
import { Effect, Option } from "effect"
import type { ServerConfig } from "../Config.js"
import { kindsSeen } from "../Drift.js"
import type { DriftKind } from "../Drift.js"
import type { Message } from "../Llm.js"
import type { CallInsight, ConversationInsight, RecentAttempt, RecentCall, SegmentRecord, StoreService } from "../Store.js"
import { firstDifference, prefixStatuses } from "../store/Prefix.js"
import type { PrefixStatus } from "../store/Prefix.js"
import type { SessionsService } from "../transport/Sessions.js"
import { bucketsOf, windowStart } from "./Charts.js"
import type { Bucket, Range } from "./Charts.js"
import { failureFigures, providerFigures } from "./Failures.js"
import type { FailureFigures, ProviderFigures } from "./Failures.js"

/** How many conversations the overview lists. */
export const CONVERSATIONS_LISTED = 200
/** At most this many calls feed the charts and the per-model figures. */
const RECENT_CALLS = 50_000
/** At most this many failed attempts feed the per-model and per-provider figures. */
const RECENT_ATTEMPTS = 20_000

export interface RunningTurn {
  readonly requestId: string
  readonly conversationId: string | null
  readonly turnId: string | null
  readonly model: string | null
  readonly startedAtMs: number
  readonly lastActivityMs: number
}

export interface ModelFigures {
  readonly model: string
  /** From the configuration; null for a model id only the calls name (an alias, a removed model). */
  readonly provider: string | null
  readonly api: string | null
  readonly upstreamModel: string | null
  readonly baseUrl: string | null
  readonly calls: number
  /** Calls that failed (no target answered, or the answer broke off). */
  readonly failed: number
  readonly medianFirstDeltaMs: number | null
  /** The targets that answered, with how many calls each. */
  readonly targets: ReadonlyArray<{ readonly target: string; readonly calls: number }>
  /** Its attempts, failed ones counted even when a retry or a fallback answered, and the last errors. */
  readonly failures: FailureFigures
}

export interface Overview {
  readonly nowMs: number
  readonly range: Range
  readonly conversations: ReadonlyArray<ConversationInsight>
  readonly running: ReadonlyArray<RunningTurn>
  readonly models: ReadonlyArray<ModelFigures>
  /** Per configured provider: answered calls, failed attempts, error rate, last errors. */
  readonly providers?: ReadonlyArray<ProviderFigures>
  readonly buckets: ReadonlyArray<Bucket>
  /** The kinds of unknown fields clients sent since the process started (protocol drift). */
  readonly drift?: ReadonlyArray<DriftKind>
}

/** A prefix status, with the first differing byte and its part measured for a break. */
export type PrefixView = PrefixStatus & { readonly measureError?: string }

export interface CallView extends CallInsight {
  readonly prefix: PrefixView
  /** Its attempts that failed before answering (retried or fallen back from). */
  readonly failedAttempts: number
}

export interface TurnView {
  readonly turnId: string
  readonly calls: ReadonlyArray<CallView>
}

export interface ConversationView {
  readonly nowMs: number
  readonly conversation: ConversationInsight
  readonly turns: ReadonlyArray<TurnView>
  readonly segments: ReadonlyArray<SegmentRecord>
  /** The model's current history, only when revealed. */
  readonly messages: ReadonlyArray<Message> | undefined
}

/** The turns running now: sessions whose turn is running, oldest first. */
export const runningTurns = (sessions: SessionsService): ReadonlyArray<RunningTurn> => {
  const running: Array<RunningTurn> = []
  for (const [requestId, session] of sessions.entries()) {
    if (session.state.lifecycle._tag !== "Running") continue
    running.push({
      requestId,
      conversationId: session.state.conversationId ?? null,
      turnId: session.state.turnId ?? null,
      model: session.state.run?.model ?? null,
      startedAtMs: session.createdAtMs,
      lastActivityMs: session.lastActivityMs
    })
  }
  return running.sort((a, b) => a.startedAtMs - b.startedAtMs)
}

const median = (values: ReadonlyArray<number>): number | null => {
  if (values.length === 0) return null
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** Per model: configured models first (in configuration order), then the other ids the calls name. */
export const modelFigures = (config: ServerConfig, calls: ReadonlyArray<RecentCall>, attempts: ReadonlyArray<RecentAttempt> = []): ReadonlyArray<ModelFigures> => {
  const ids = [...config.models.map((model) => model.id), ...new Set(calls.map((call) => call.model))]
  return [...new Set(ids)].map((id): ModelFigures => {
    const model = config.models.find((m) => m.id === id)
    const provider = model === undefined ? undefined : config.router.providers.find((p) => p.id === model.provider)
    const own = calls.filter((call) => call.model === id)
    const targets = new Map<string, number>()
    for (const call of own) if (call.target !== null) targets.set(call.target, (targets.get(call.target) ?? 0) + 1)
    const failed = own.filter((call) => call.status === "failed")
    return {
      model: id,
      provider: model?.provider ?? null,
      api: provider?.api ?? null,
      upstreamModel: model?.upstreamModel ?? null,
      baseUrl: provider?.baseUrl ?? null,
      calls: own.length,
      failed: failed.length,
      medianFirstDeltaMs: median(own.flatMap((call) => call.firstDeltaMs === null ? [] : [call.firstDeltaMs])),
      targets: [...targets.entries()].map(([target, count]) => ({ target, calls: count })),
      failures: failureFigures(own, attempts.filter((attempt) => attempt.model === id))
    }
  })
}

export const overview = Effect.fn("Console.overview")(function*(
  store: StoreService,
  sessions: SessionsService,
  config: ServerConfig,
  range: Range,
  nowMs: number
) {
  const conversations = yield* store.conversations(CONVERSATIONS_LISTED)
  const calls = yield* store.callsSince(windowStart(range, nowMs), RECENT_CALLS)
  const attempts = yield* store.attemptsSince(windowStart(range, nowMs), RECENT_ATTEMPTS)
  return {
    nowMs,
    range,
    conversations,
    running: runningTurns(sessions),
    models: modelFigures(config, calls, attempts),
    providers: providerFigures(config, calls, attempts),
    buckets: bucketsOf(calls, range, nowMs),
    drift: kindsSeen()
  } satisfies Overview
})

/**
 * Each call's prefix status; a break is measured: the reference call (the previous answer call,
 * as `prefixStatuses` compares) and this one are rebuilt from the store and compared byte by byte.
 */
export const prefixViews = (store: StoreService, calls: ReadonlyArray<CallInsight>, segments: ReadonlyArray<SegmentRecord>) =>
  Effect.gen(function*() {
    const statuses = prefixStatuses(calls, segments)
    const views: Array<PrefixView> = []
    let reference: CallInsight | undefined
    for (const [index, call] of calls.entries()) {
      const status = statuses[index]!
      if (status._tag === "Break" && reference !== undefined) {
        const before = reference
        const measured = yield* Effect.all([store.loadLlmCall(before.callId), store.loadLlmCall(call.callId)]).pipe(
          Effect.map(([a, b]): PrefixView => {
            if (Option.isNone(a) || Option.isNone(b)) return { ...status, measureError: "a request is missing from the store" }
            const difference = firstDifference(a.value.request, b.value.request)
            return difference === undefined ? status : { ...status, firstDifferingByte: difference.byte, where: difference.where }
          }),
          Effect.catchAll((error) => Effect.succeed<PrefixView>({ ...status, measureError: error.message }))
        )
        views.push(measured)
      } else {
        views.push(status)
      }
      if (!call.detached) reference = call
    }
    return views
  })

export const conversation = Effect.fn("Console.conversation")(function*(
  store: StoreService,
  conversationId: string,
  revealMessages: boolean,
  nowMs: number
) {
  const listed = yield* store.conversations(1, conversationId)
  const found = listed[0]
  if (found === undefined) return Option.none<ConversationView>()
  const calls = yield* store.callsOf(conversationId)
  const segments = yield* store.segments(conversationId)
  const prefixes = yield* prefixViews(store, calls, segments)
  const failedPerCall = new Map<string, number>()
  for (const attempt of yield* store.attemptsOf({ conversationId })) failedPerCall.set(attempt.callId, (failedPerCall.get(attempt.callId) ?? 0) + 1)
  const turns: Array<{ turnId: string; calls: Array<CallView> }> = []
  for (const [index, call] of calls.entries()) {
    const view: CallView = { ...call, prefix: prefixes[index]!, failedAttempts: failedPerCall.get(call.callId) ?? 0 }
    const last = turns[turns.length - 1]
    if (last !== undefined && last.turnId === call.turnId) last.calls.push(view)
    else turns.push({ turnId: call.turnId, calls: [view] })
  }
  const messages = revealMessages
    ? yield* store.load(conversationId).pipe(
      Effect.map(Option.match({ onNone: () => [], onSome: ({ state }) => state.messages })),
      Effect.catchTag("CorruptRow", () => Effect.succeed([]))
    )
    : undefined
  return Option.some<ConversationView>({ nowMs, conversation: found, turns, segments, messages })
})
