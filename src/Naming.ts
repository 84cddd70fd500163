/**
 * Short texts Cursor asks the server to write: a chat's title, a commit message and a branch
 * name, each from one short, bounded call to the user's own model, with a deterministic answer
 * made from the input when the model fails or does not answer within its budget; and the names
 * users give their chats, kept in the store.
 *
 * Nothing here fails: a model that is down, slow or misconfigured yields the fallback (and a
 * line in the log), so Cursor always gets an answer well inside its own timeout. The pieces:
 * `naming/Titles.ts` (titles), `naming/Diffs.ts` and `naming/Commits.ts` (commit messages and
 * branch names), `naming/Ask.ts` (the bounded model call).
 */
import type * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Effect, Either } from "effect"
import * as Router from "./llm/Router.js"
import type { RequestMessages } from "./Llm.js"
import { ask, outputAllowance, quickRouterConfig } from "./naming/Ask.js"
import * as Commits from "./naming/Commits.js"
import * as Titles from "./naming/Titles.js"
import { Store } from "./Store.js"

export interface NamingOptions {
  /** How long a title may take (Cursor waits longer, but a chat should get its name soon). */
  readonly titleBudgetMs: number
  /** How long a commit message or a branch name may take (Cursor gives up after about 10 s). */
  readonly commitBudgetMs: number
  readonly titleMaxTokens: number
  readonly commitMaxTokens: number
  readonly branchMaxTokens: number
  /** The diff a model reads is cut to this many characters (`naming/Diffs.ts`). */
  readonly diffBudgetChars: number
}

export const defaultNamingOptions: NamingOptions = {
  titleBudgetMs: 4_000,
  commitBudgetMs: 8_000,
  titleMaxTokens: 32,
  commitMaxTokens: 400,
  branchMaxTokens: 32,
  diffBudgetChars: 24_000
}

/** What a call knows of its caller: the model it names (else the default model) and its own deadline. */
export interface Caller {
  readonly model?: string | undefined
  /** The client's timeout (Connect's `connect-timeout-ms`): the budget stays well inside it. */
  readonly clientTimeoutMs?: number | undefined
}

export interface Naming {
  readonly chatTitle: (userMessage: string, caller?: Caller) => Effect.Effect<string>
  readonly commitMessage: (diffs: ReadonlyArray<string>, previousMessages: ReadonlyArray<string>, caller?: Caller) => Effect.Effect<string>
  readonly branchName: (diff: string, context: string | undefined, caller?: Caller) => Effect.Effect<string>
  /** Keeps the name a user gave a chat (an empty name clears it); a store failure is logged, not raised. */
  readonly nameConversation: (conversationId: string, name: string, onlyIfEmpty: boolean) => Effect.Effect<void>
}

/** A chat name is kept to this many characters. */
const NAME_MAX_CHARS = 500

/** The budget, and at most three quarters of the client's timeout when it states one. */
export const budgetFor = (budgetMs: number, clientTimeoutMs: number | undefined): number =>
  clientTimeoutMs === undefined || !(clientTimeoutMs > 0) ? budgetMs : Math.min(budgetMs, Math.floor(clientTimeoutMs * 0.75))

/**
 * The service over the running model table (`current`), calling models through its own router
 * on the quick table (`naming/Ask.ts`), and keeping names in the `Store`.
 */
export const make = (
  current: () => Router.RouterConfig,
  options: NamingOptions = defaultNamingOptions
): Effect.Effect<Naming, never, NodeHttpClient.Dispatcher | Store> =>
  Effect.gen(function*() {
    const llm = yield* Router.makeLive(() => quickRouterConfig(current()))
    const store = yield* Store

    /** The model's cleaned answer, or `fallback` (with the reason logged). */
    const generate = (
      purpose: string,
      request: RequestMessages,
      limits: { readonly maxTokens: number; readonly budgetMs: number },
      clean: (raw: string) => string | undefined,
      fallback: () => string,
      caller: Caller
    ) =>
      Effect.gen(function*() {
        const config = current()
        const model = Router.modelOf(config, caller.model ?? "") ?? Router.modelOf(config, "")
        const budgetMs = budgetFor(limits.budgetMs, caller.clientTimeoutMs)
        const answer = model === undefined
          ? Either.left("no model is configured")
          : yield* ask(llm, {
            request,
            model: model.id,
            callId: `side/${purpose.replaceAll(" ", "-")}`,
            maxOutputTokens: outputAllowance(config, model.id, limits.maxTokens),
            budgetMs
          })
        const cleaned = Either.flatMap(answer, (raw) => Either.fromNullable(clean(raw), () => `the answer had no usable ${purpose}`))
        if (Either.isRight(cleaned)) return cleaned.right
        yield* Effect.logInfo(`${purpose}: ${cleaned.left}; answering with the fallback`).pipe(
          Effect.annotateLogs({ model: model?.id ?? "none", budgetMs })
        )
        return fallback()
      })

    return {
      chatTitle: (userMessage, caller = {}) =>
        userMessage.trim() === ""
          ? Effect.succeed(Titles.EMPTY_TITLE)
          : generate(
            "chat title",
            Titles.titleRequest(userMessage),
            { maxTokens: options.titleMaxTokens, budgetMs: options.titleBudgetMs },
            Titles.cleanTitle,
            () => Titles.fallbackTitle(userMessage),
            caller
          ),
      commitMessage: (diffs, previousMessages, caller = {}) =>
        diffs.every((diff) => diff.trim() === "")
          ? Effect.succeed(Commits.fallbackCommitMessage(diffs))
          : generate(
            "commit message",
            Commits.commitRequest(diffs, previousMessages, options.diffBudgetChars),
            { maxTokens: options.commitMaxTokens, budgetMs: options.commitBudgetMs },
            Commits.cleanCommitMessage,
            () => Commits.fallbackCommitMessage(diffs),
            caller
          ),
      branchName: (diff, context, caller = {}) =>
        diff.trim() === "" && (context ?? "").trim() === ""
          ? Effect.succeed(Commits.fallbackBranchName(diff))
          : generate(
            "branch name",
            Commits.branchRequest(diff, context, options.diffBudgetChars),
            { maxTokens: options.branchMaxTokens, budgetMs: options.commitBudgetMs },
            Commits.cleanBranchName,
            () => Commits.fallbackBranchName(diff),
            caller
          ),
      nameConversation: (conversationId, name, onlyIfEmpty) =>
        store.nameConversation(conversationId, name.replace(/\s+/g, " ").trim().slice(0, NAME_MAX_CHARS), onlyIfEmpty).pipe(
          Effect.asVoid,
          Effect.catchAll((error) => Effect.logWarning(`could not keep the name of conversation ${conversationId}: ${error.message}`))
        )
    }
  })
