/**
 * `doctor`'s Tab check: with a `tab` section, one fill-in-the-middle request through
 * `tab/Fim.ts` to the configured target, as Tab makes it: ok with its time to first token and
 * the model, or FAIL with the error and the fix its cause calls for (the key; the path, the
 * model or `tab.api`; the server not running or not reachable; a slow or foreign answer).
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Duration, Effect, Redacted, Stream } from "effect"
import type { ServerConfig } from "../../Config.js"
import * as Router from "../../llm/Router.js"
import * as Chat from "../../tab/Chat.js"
import * as Fim from "../../tab/Fim.js"
import type { FimTarget } from "../../tab/Fim.js"
import { FimError } from "../../Tab.js"
import type { FimPrompt } from "../../Tab.js"
import type { Check } from "./Check.js"

/** A tiny prompt any code model completes. */
export const probePrompt: FimPrompt = {
  context: "",
  prefix: "def add(a, b):\n    return ",
  suffix: "\n",
  path: "doctor.py",
  languageId: "python",
  stop: ["\n\n"],
  maxTokens: 8
}

/** Past the target's own timeout (it bounds the head and each silence), the whole probe ends here. */
const PROBE_TIMEOUT = Duration.seconds(30)

/** The fix for a failed FIM call, by its cause. */
export const tabFixFor = (error: FimError, target: FimTarget, keyVariable: string | undefined): string => {
  const url = Fim.requestOf(target, probePrompt).url
  const text = error.message
  if (error.kind === "network" || /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ECONNRESET/.test(text)) {
    if (/ENOTFOUND|EAI_AGAIN|EAI_NONAME|getaddrinfo/i.test(text)) {
      return `the host name in ${url} does not resolve: check tab.baseUrl (or provider ${target.provider}'s baseUrl) and this machine's network`
    }
    return /ECONNREFUSED/.test(text)
      ? `nothing listens at ${url}: is the model server (provider ${target.provider}) running? Check the port in its base URL`
      : `cannot reach ${url}: is the model server (provider ${target.provider}) running, and the network path to it open?`
  }
  if (error.status === 401 || error.status === 403) {
    const key = keyVariable === undefined ? `provider ${target.provider}'s key` : `${keyVariable} (provider ${target.provider}'s apiKeyEnv)`
    const empty = Redacted.value(target.apiKey) === "" ? ", and none is set in this environment" : ""
    return `the key: ${key} is refused${empty}: set a valid key, allowed to use ${target.model}`
  }
  if (error.status === 404) {
    return `${url} answered 404: check tab.model "${target.model}" (a model this server serves), the base URL's path (/v1 for openai-completions, the server's root for llamacpp-infill) and tab.api (now ${target.api}; openai-completions for vLLM, Ollama and DeepSeek beta, mistral-fim for Codestral, llamacpp-infill for llama.cpp)`
  }
  if (error.kind === "timeout") return `${url} did not answer within ${target.timeoutMs} ms: is the model loaded (a first load is slow)? Raise tab.timeoutMs, or check the server`
  if (error.kind === "decode") return `the answer is not the ${target.api} wire: set tab.api to the wire the server at ${url} speaks`
  if (error.status === 429) return `provider ${target.provider} refuses for rate or quota: wait, or check the account`
  if (error.status !== undefined && error.status >= 500) return `the model server failed: read its log (is "${target.model}" loaded?)`
  if (error.kind === "config") return "fix the tab section of the configuration file"
  return `check tab.api (${target.api}), the base URL (${url}), the key and tab.model "${target.model}"`
}

/**
 * The Tab line (none without a `tab` section): one FIM call, its time to first token. An
 * answer with no text is still an answer (ok), said as such.
 */
export const tabChecks = (config: ServerConfig, keyVariables: Readonly<Record<string, string>> = {}): Effect.Effect<ReadonlyArray<Check>> => {
  const settings = config.tab
  if (settings === undefined) return Effect.succeed([])
  const target = settings.target
  const name = `Tab model ${settings.model}`
  return Effect.gen(function*() {
    const dispatcher = yield* NodeHttpClient.Dispatcher
    // A chat-served Tab asks through its one-model router, as the server does.
    const events = settings.chat === undefined ? Fim.stream(dispatcher, target, probePrompt) : Chat.stream(yield* Router.make(settings.chat), probePrompt)
    const started = performance.now()
    let firstAt: number | undefined
    let text = ""
    const ran = yield* events.pipe(
      Stream.runForEach((event) =>
        Effect.sync(() => {
          if (event._tag !== "Text") return
          firstAt ??= performance.now()
          text += event.text
        })
      ),
      Effect.timeoutFail({ duration: PROBE_TIMEOUT, onTimeout: () => new FimError({ kind: "timeout", message: `${target.provider}: no answer within ${Duration.toSeconds(PROBE_TIMEOUT)} s` }) }),
      Effect.either
    )
    const where = settings.chat === undefined ? `${target.model} (${target.api}, ${Fim.requestOf(target, probePrompt).url})` : `${target.model} (chat, ${target.baseUrl})`
    if (ran._tag === "Left") {
      return [{ name, status: "FAIL", detail: ran.left.message, fix: tabFixFor(ran.left, target, keyVariables[target.provider]) }] satisfies Array<Check>
    }
    const detail = firstAt === undefined
      ? `answered with no text in ${Math.round(performance.now() - started)} ms, ${where}`
      : `first token ${Math.round(firstAt - started)} ms, ${where}: ${JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text)}`
    return [{ name, status: "ok", detail, fix: "" }] satisfies Array<Check>
  }).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))
}
