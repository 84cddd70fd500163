/**
 * The Tab service: a completion request answered from the user's FIM model. The request's
 * prompt (`Prompt.ts`) goes to one upstream call (`Fim.ts`), shared by identical requests
 * (`Calls.ts`); a request for the same file with another prompt supersedes the call in flight
 * (aborted at once); a request the user typed through a suggestion is answered from it
 * without a call. The suggestion streams as the model writes it: whole lines once a later
 * line shows they stay (`Trim.ts` decides what stays), the rest at the end.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Context, Effect, FiberSet, Layer, Stream } from "effect"
import { createHash } from "node:crypto"
import { URGENT } from "../internal/Scheduler.js"
import * as Router from "../llm/Router.js"
import type { PriceConfig, RouterConfig } from "../llm/Router.js"
import * as Chat from "./Chat.js"
import type { FimError, TabLimits, TabRequest } from "../Tab.js"
import type { CallEnd } from "./Calls.js"
import { Call } from "./Calls.js"
import * as Fim from "./Fim.js"
import type { FimTarget } from "./Fim.js"
import * as Files from "./Files.js"
import type { FileLimits, SyncedFiles } from "./Files.js"
import { cursorLineOf, promptOf } from "./Prompt.js"
import { TabStats } from "./Stats.js"
import { continues, trimCompletion } from "./Trim.js"

/** What the `tab` configuration resolves to. */
export interface TabSettings {
  /** The name Tab's figures are kept under: `provider/model`. */
  readonly model: string
  /** How the model is asked: a FIM wire, or `chat` (an edit prompt on its chat API, `Chat.ts`). */
  readonly api: FimTarget["api"] | "chat"
  readonly target: FimTarget
  /** With `api` chat: the one-model router (`tab`) the call goes through. */
  readonly chat: RouterConfig | undefined
  readonly limits: TabLimits
  readonly price: PriceConfig | undefined
  /** How long a finished call answers an identical request. */
  readonly shareMs: number
  readonly files: FileLimits
}

/** How a request ended: a suggestion, none, or a call that did not finish (superseded, or the client left). */
export type Answered = "Suggested" | "Empty" | "Canceled"

export interface TabService {
  /** The settings in force, undefined while Tab is off. */
  readonly settings: () => TabSettings | undefined
  /**
   * Answers `request`: `emit` gets the suggestion's text in pieces (the first piece begins with
   * the cursor line's text before the cursor; the pieces join into the line's new text).
   */
  readonly complete: (request: TabRequest, requestId: string | undefined, emit: (piece: string) => void) => Effect.Effect<Answered, FimError>
  readonly files: SyncedFiles
  readonly stats: TabStats
}

export class Tab extends Context.Tag("cursor-byok/Tab")<Tab, TabService>() {}

/** The last suggestion of a file, for typing through it. */
interface Last {
  readonly before: string
  readonly after: string
  readonly insert: string
}

const fileKey = (request: TabRequest) => `${request.workspace}\u0000${request.path}`
const maxRemembered = 256

const keyOf = (settings: TabSettings, prompt: unknown) =>
  createHash("sha256").update(settings.model).update("\u0000").update(JSON.stringify(prompt)).digest("base64")

/** The lines of `completion` that stay whatever follows: all but the last two of its complete lines, as trimmed. */
export const settledPart = (completion: string, prompt: { prefix: string; suffix: string }, limits: { maxLines: number }): string => {
  const complete = completion.slice(0, completion.lastIndexOf("\n") + 1)
  if (complete === "") return ""
  const lines = trimCompletion(complete, prompt, limits).split("\n")
  return lines.length <= 2 ? "" : lines.slice(0, -2).join("\n") + "\n"
}

/**
 * What to send next of a suggestion, given what was `sent` and the completion so far (`done`:
 * all of it): the settled lines past `sent` while it streams, the rest of the trimmed whole at
 * its end; "" when nothing new can be said (what was sent is never taken back).
 */
export const nextPiece = (sent: string, completion: string, done: boolean, prompt: { prefix: string; suffix: string }, limits: { maxLines: number }): string => {
  const upTo = done ? trimCompletion(completion, prompt, limits) : settledPart(completion, prompt, limits)
  return upTo.length > sent.length && upTo.startsWith(sent) ? upTo.slice(sent.length) : ""
}

export const make = (current: () => TabSettings | undefined) =>
  Effect.gen(function*() {
    const dispatcher = yield* NodeHttpClient.Dispatcher
    // A suggestion is what a client waits on: its call's fiber is urgent, as a request's (`internal/Scheduler.ts`).
    const runFork = yield* Effect.withSchedulingPriority(FiberSet.makeRuntime<never>(), URGENT)
    // The chat-served Tab's router, on the running settings' one-model table.
    const chatLlm = yield* Router.makeLive(() => current()?.chat ?? { providers: [], models: [] })
    const files = Files.make(current()?.files)
    const stats = new TabStats()
    const inFlight = new Map<string, Call>()
    const finished = new Map<string, Call>()
    const last = new Map<string, Last>()
    const now = () => performance.now()

    const remember = (key: string, value: Last) => {
      last.delete(key)
      last.set(key, value)
      if (last.size > maxRemembered) last.delete(last.keys().next().value!)
    }

    /** The call answering `key` for `file`: one in flight or just finished with the same prompt, or a new one (superseding the file's). */
    const callFor = (settings: TabSettings, key: string, file: string, prompt: ReturnType<typeof promptOf>): { call: Call; shared: boolean } => {
      const running = inFlight.get(file)
      if (running !== undefined && running.key === key && running.end === undefined) return { call: running, shared: true }
      const recent = finished.get(key)
      if (recent !== undefined && recent.end?._tag === "Done" && now() - recent.endedAt <= settings.shareMs) return { call: recent, shared: true }
      if (running !== undefined) running.interrupt(now())
      const call = new Call(key, file)
      inFlight.set(file, call)
      call.start(
        settings.chat === undefined
          ? (onEvents, onAbort) => Fim.run(dispatcher, settings.target, prompt, onEvents, onAbort)
          : (onEvents) => Stream.runForEach(Chat.stream(chatLlm, prompt), (event) => Effect.sync(() => onEvents([event]))),
        runFork,
        now
      )
      return { call, shared: false }
    }

    const settle = (settings: TabSettings, call: Call, end: CallEnd) => {
      if (inFlight.get(call.file) === call) inFlight.delete(call.file)
      if (end._tag !== "Done" || call.counted) return
      call.counted = true
      finished.set(call.key, call)
      for (const [key, old] of finished) {
        if (now() - old.endedAt <= settings.shareMs) break
        finished.delete(key)
      }
      const price = settings.price
      const usd = price === undefined ? 0 : (end.inputTokens * price.input + end.outputTokens * price.output) / 1_000_000
      stats.usage(settings.model, end.inputTokens, end.outputTokens, usd)
    }

    const complete: TabService["complete"] = (request, requestId, emit) =>
      Effect.gen(function*() {
        const settings = current()
        if (settings === undefined) return "Empty"
        const receivedAt = now()
        stats.request(settings.model, requestId)
        const cursor = cursorLineOf(request.contents, request.line, request.column)
        const before = request.contents.slice(0, cursor.offset)
        const after = request.contents.slice(cursor.offset)
        const linePrefix = request.contents.slice(cursor.start, cursor.offset)
        const lineRest = request.contents.slice(cursor.offset, cursor.end)
        const file = fileKey(request)
        let sent = ""
        const send = (piece: string) => {
          if (piece === "") return
          if (sent === "") stats.firstSuggestion(settings.model, now() - receivedAt)
          emit(sent === "" ? linePrefix + piece : piece)
          sent += piece
        }

        // Typed through the file's last suggestion: the rest of it, with no call.
        const previous = last.get(file)
        const rest = previous !== undefined && previous.after === after ? continues({ prefix: previous.before, insert: previous.insert }, before) : undefined
        if (rest !== undefined) {
          send(rest)
          emit(lineRest)
          remember(file, { before, after, insert: rest })
          stats.outcome(settings.model, "reused")
          return "Suggested"
        }

        const prompt = promptOf(request, settings.limits)
        const { call, shared } = callFor(settings, keyOf(settings, prompt), file, prompt)
        if (shared) stats.shared(settings.model)
        const end = yield* call.follow((c) => send(nextPiece(sent, c.text, false, prompt, settings.limits)), now)
        settle(settings, call, end)
        if (end._tag === "Failed") {
          stats.outcome(settings.model, "failed")
          return yield* Effect.fail(end.error)
        }
        if (end._tag === "Interrupted") {
          stats.outcome(settings.model, "canceled")
          return "Canceled"
        }
        // What was sent stays: the rest is what the whole completion adds to it.
        send(nextPiece(sent, call.text, true, prompt, settings.limits))
        if (sent === "") {
          stats.outcome(settings.model, "empty")
          return "Empty"
        }
        emit(lineRest)
        remember(file, { before, after, insert: sent })
        stats.outcome(settings.model, "suggested")
        return "Suggested"
      }).pipe(Effect.onInterrupt(() => Effect.sync(() => {
        const settings = current()
        if (settings !== undefined) stats.outcome(settings.model, "canceled")
      })))

    yield* Effect.addFinalizer(() => Effect.sync(() => {
      for (const call of inFlight.values()) call.interrupt(now())
      files.clear()
    }))
    return Tab.of({ settings: current, complete, files, stats })
  })

/** The Tab service over a changing configuration (read at each request); needs an undici `Dispatcher`. */
export const layer = (current: () => TabSettings | undefined): Layer.Layer<Tab, never, NodeHttpClient.Dispatcher> => Layer.scoped(Tab, make(current))
