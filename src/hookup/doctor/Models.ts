/**
 * `doctor`'s model checks: the provider keys each model needs, then each model by a one-token
 * request through the router as a turn would make it (its fallbacks included). A model that
 * answers only through a fallback is a warning naming the target that failed and why; a
 * failure's fix follows its cause (the host name, nothing listening, a timeout, the key, the
 * upstream model name). The router's log lines (retries, fallbacks) are collected, never
 * printed: they are how the failed targets are known.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Duration, Effect, Either, FiberRef, HashMap, HashSet, Logger, LogLevel, Option, Redacted, Stream } from "effect"
import type { ServerConfig } from "../../Config.js"
import { Llm, LlmError } from "../../Llm.js"
import { defaultRetrySettings } from "../../llm/Http.js"
import * as Router from "../../llm/Router.js"
import type { Check } from "./Check.js"

/** What a target's failure says: its reason, its text, and the HTTP status when there was one. */
export interface Failure {
  readonly target: string
  readonly reason: string
  readonly message: string
  readonly status: number | undefined
}

/** A failed target's configuration, for its fix. */
interface TargetInfo {
  readonly provider: string
  readonly baseUrl: string
  readonly upstreamModel: string
  readonly keyVariable: string | undefined
}

/** The fix for one target's failure, by its cause. */
export const fixFor = (failure: Pick<Failure, "reason" | "message" | "status">, target: TargetInfo | undefined): string => {
  const p = target === undefined ? "the provider" : `provider ${target.provider}`
  const at = target === undefined ? "its baseUrl" : target.baseUrl
  const text = failure.message
  if (/ENOTFOUND|EAI_AGAIN|EAI_NONAME|EAI_FAIL|getaddrinfo/i.test(text)) {
    return `the host name in ${p}'s baseUrl (${at}) does not resolve: check its spelling, and this machine's network (DNS, VPN)`
  }
  if (/ECONNREFUSED/.test(text)) return `nothing listens at ${at}: is ${p} running? Check the port in its baseUrl`
  if (failure.reason === "idleTimeout" || /timed? ?out|ETIMEDOUT|UND_ERR_CONNECT_TIMEOUT|UND_ERR_HEADERS_TIMEOUT|no answer within/i.test(text)) {
    return `${at} did not answer in time: check the network path to it (VPN, firewall) and that ${p} is up`
  }
  if (failure.status === 401 || failure.status === 403 || failure.reason === "auth") {
    return `the key: ${target?.keyVariable === undefined ? `${p}'s key` : `${target.keyVariable} (${p}'s apiKeyEnv)`} is refused: set a valid key, allowed to use this model`
  }
  if (failure.status === 404 || /model.{0,60}(not found|does not exist|not exist|unknown|invalid|not supported)|unknown model|no such model/i.test(text)) {
    return `the upstream model name: ${target === undefined ? "the model" : `"${target.upstreamModel}"`} is not a model ${p} serves at ${at} (check models[].upstreamModel, and the baseUrl's path, e.g. /v1)`
  }
  if (failure.reason === "rateLimited") return `${p} refuses for rate or quota: wait, or check the account's plan and balance`
  if (failure.reason === "notConfigured") return `${p} is not configured: add it to providers`
  return `check ${p}'s baseUrl (${at}), key and model name`
}

const check = (name: string, status: Check["status"], detail: string, fix = ""): Check => ({ name, status, detail, fix })

/** The providers the models use (their own and their fallbacks'), in order. */
const providersUsed = (config: ServerConfig) => [...new Set(config.models.flatMap((model) => [model.provider, ...(model.fallback ?? []).map((t) => t.provider)]))]

/** One line on the key variables the models' providers read: a missing one fails, named. */
export const keysCheck = (config: ServerConfig, keyVariables: Readonly<Record<string, string>>): ReadonlyArray<Check> => {
  const needed = providersUsed(config).flatMap((id) => {
    const variable = keyVariables[id]
    const provider = config.router.providers.find((candidate) => candidate.id === id)
    return variable === undefined || provider === undefined ? [] : [{ id, variable, set: Redacted.value(provider.apiKey) !== "" }]
  })
  if (needed.length === 0) return []
  const missing = needed.filter((entry) => !entry.set)
  const list = (entries: typeof needed) => entries.map((entry) => `${entry.variable} (${entry.id})`).join(", ")
  return missing.length === 0
    ? [check("provider keys", "ok", `${list(needed)} set`)]
    : [check(
      "provider keys",
      "FAIL",
      `${list(missing)} ${missing.length === 1 ? "is" : "are"} not set in this environment: those calls fail`,
      `set ${[...new Set(missing.map((entry) => entry.variable))].join(" and ")} where the server and doctor run (e.g. \`export ${missing[0]!.variable}=...\`)`
    )]
}

interface Probed {
  readonly answered: Either.Either<string, Failure>
  /** The fallback target that answered (`provider/upstream`), when not the model's own. */
  readonly routed: string | undefined
  /** Each target that failed before another was tried, in order. */
  readonly failed: ReadonlyArray<Failure>
}

const PROBE_TIMEOUT = Duration.seconds(30)

/** Collects the router's fallback lines (each names the target that failed and why); prints nothing. */
const collector = (failed: Array<Failure>) =>
  Logger.make(({ annotations }) => {
    const get = (key: string) => Option.getOrUndefined(HashMap.get(annotations, key))
    const from = get("from")
    if (typeof from !== "string") return
    const status = get("status")
    failed.push({ target: from, reason: String(get("reason")), message: String(get("error")), status: typeof status === "number" ? status : undefined })
  })

/** A one-token request to a model: time to first event and output tokens per second, or why it failed. */
const probeModel = (model: string, lastTarget: (index: number) => string) =>
  Effect.gen(function*() {
    const llm = yield* Llm
    const failed: Array<Failure> = []
    const started = Date.now()
    let firstAt: number | undefined
    let output = 0
    let routed: string | undefined
    const ran = yield* llm.stream(
      { systemPrompt: "Answer with one word.", messages: [{ role: "user", content: [{ type: "text", text: "Say OK." }] }], tools: [] },
      { model, callId: `doctor-${model}-${started}`, maxOutputTokens: 1 }
    ).pipe(
      Stream.runForEach((event) => {
        if (event._tag === "Start" && event.routedModel !== undefined) routed = event.routedModel
        if (firstAt === undefined && (event._tag === "TextDelta" || event._tag === "ThinkingDelta")) firstAt = Date.now()
        if (event._tag === "Done") output = event.message.usage.output
        return event._tag === "Error" ? Effect.fail(new LlmError({ reason: "providerError", message: event.message, retryable: false })) : Effect.void
      }),
      Effect.timeoutFail({ duration: PROBE_TIMEOUT, onTimeout: () => new LlmError({ reason: "idleTimeout", message: "no answer within 30 s", retryable: false }) }),
      Effect.either,
      Effect.locally(FiberRef.currentLoggers, HashSet.make<ReadonlyArray<Logger.Logger<unknown, any>>>(collector(failed))),
      Effect.locally(FiberRef.currentMinimumLogLevel, LogLevel.All)
    )
    if (ran._tag === "Left") {
      const error = ran.left
      const target = lastTarget(failed.length)
      return { answered: Either.left({ target, reason: error.reason, message: error.message, status: error.status }), routed, failed } satisfies Probed
    }
    const ended = Date.now()
    const ttft = (firstAt ?? ended) - started
    const rate = output > 0 && ended > (firstAt ?? started) ? ` ${(output / ((ended - (firstAt ?? started)) / 1000)).toFixed(1)} tokens/s` : ""
    return { answered: Either.right(`first token ${ttft} ms,${rate || " 1 token"}`), routed, failed } satisfies Probed
  })

/** `provider/model: why` (the provider's name, which the router's texts start with, once). */
const describeFailure = (failure: Failure) => {
  const provider = `${failure.target.split("/")[0]}: `
  return `${failure.target}: ${failure.message.startsWith(provider) ? failure.message.slice(provider.length) : failure.message}`
}

/** The check line of one model's probe. */
const modelCheck = (config: ServerConfig, keyVariables: Readonly<Record<string, string>>, model: ServerConfig["models"][number], probed: Probed): Check => {
  const name = `model ${model.id}`
  const targets = Router.resolveTargets(config.router, model.id)
  const info = (target: string): TargetInfo | undefined => {
    const found = targets.find((t) => `${t.settings.provider}/${t.settings.model}` === target)
    return found === undefined
      ? undefined
      : { provider: found.settings.provider, baseUrl: found.settings.baseUrl, upstreamModel: found.settings.model, keyVariable: keyVariables[found.settings.provider] }
  }
  const fixes = (failures: ReadonlyArray<Failure>) => {
    const each = failures.map((failure) => `${failures.length > 1 ? `${failure.target}: ` : ""}${fixFor(failure, info(failure.target))}`)
    return [...new Set(each)].join("; ")
  }
  if (Either.isRight(probed.answered)) {
    if (probed.routed === undefined) return check(name, "ok", probed.answered.right)
    return check(
      name,
      "WARN",
      `answers only through its fallback ${probed.routed}: ${probed.failed.map(describeFailure).join("; ") || "its own target failed"} (${probed.answered.right})`,
      fixes(probed.failed)
    )
  }
  const all = [...probed.failed, probed.answered.left]
  return check(name, "FAIL", all.map(describeFailure).join("; "), fixes(all))
}

/**
 * Every model's probe, through one router (and HTTP client), retrying at most once: a doctor
 * reports what is wrong rather than waiting it out.
 */
export const modelChecks = (config: ServerConfig, keyVariables: Readonly<Record<string, string>>) => {
  const retry = config.router.retry ?? defaultRetrySettings
  const router = { ...config.router, retry: { ...retry, maxRetries: Math.min(retry.maxRetries, 1) } }
  return Effect.forEach(config.models, (model) => {
    const targets = Router.resolveTargets(config.router, model.id).map((t) => `${t.settings.provider}/${t.settings.model}`)
    const lastTarget = (index: number) => targets[Math.min(index, targets.length - 1)] ?? `${model.provider}/${model.upstreamModel}`
    return Effect.map(probeModel(model.id, lastTarget), (probed) => modelCheck(config, keyVariables, model, probed))
  }).pipe(Effect.provide(Router.layer(router)), Effect.provide(NodeHttpClient.dispatcherLayer))
}
