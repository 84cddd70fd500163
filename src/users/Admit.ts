/**
 * Whether a user's turn may start: the model is one they may use, the conversation is theirs (a
 * new one becomes theirs), and their daily and monthly budgets are not spent. The refusal says
 * why in words Cursor shows; a budget 80% spent is said in Cursor at each turn (a server notice)
 * and logged once per user and day. What cannot be
 * checked (the database not answering) is refused.
 */
import { Clock, Effect, Option } from "effect"
import type { Caller, User, UserError, UsersService } from "../Users.js"

export interface Refusal {
  readonly kind: "model" | "owner" | "budget"
  readonly title: string
  readonly message: string
}

/** Dollars with cents, and a tenth of a cent under a dollar (a $0.005 limit reads as one). */
const usd = (amount: number) => `$${amount < 1 ? amount.toFixed(3).replace(/0$/, "") : amount.toFixed(2)}`

/** A turn let through with a word for its user: a budget 80% spent (Cursor shows it as a server notice). */
export interface Notice {
  readonly kind: "notice"
  readonly message: string
}

/** The refusal of a spent budget, the notice of one 80% spent, or undefined. */
const budgetCheck = (spent: number, limit: number | undefined, period: "day" | "month"): Refusal | Notice | undefined => {
  if (limit === undefined) return undefined
  const budget = `${usd(limit)} ${period === "day" ? "daily" : "monthly"} budget`
  if (spent >= limit) {
    return {
      kind: "budget",
      title: `${period === "day" ? "Daily" : "Monthly"} budget reached`,
      message: `You have spent ${usd(spent)} of your ${budget} on this server, so this message was not sent to the model. ` +
        `It renews at the start of the next ${period} (UTC), or ask the operator to raise it (\`cursor-byok users\`).`
    }
  }
  return spent >= 0.8 * limit
    ? { kind: "notice", message: `You have spent ${usd(spent)} of your ${budget} on this server (${Math.floor((100 * spent) / limit)}%).` }
    : undefined
}

/** Cannot check: refused (whose chat it is above all), with the reason logged. */
const unchecked = (error: { readonly message: string }) =>
  Effect.as(Effect.logWarning(`users: a turn was refused, its access could not be checked: ${error.message}`), {
    kind: "owner",
    title: "Access could not be checked",
    message: "The server could not check this chat's owner or your budget (its database did not answer), so the message was not sent to the model. Try again in a moment."
  } satisfies Refusal)

/** The most (user, conversation) ownerships kept in memory; past it the set starts again. */
const OWNED_LIMIT = 10_000

export interface Admission {
  /** A turn of `model` in `conversationId`: undefined (or a notice for its user) lets it start. */
  readonly turn: (caller: Caller | undefined, conversationId: string, model: string) => Effect.Effect<Refusal | Notice | undefined>
  /** A resume of `conversationId`'s turn: undefined when it is the caller's. */
  readonly resume: (caller: Caller | undefined, conversationId: string) => Effect.Effect<Refusal | undefined>
  /** Whether the caller may read `conversationId` (an attached past chat): a user, only their own. */
  readonly mayRead: (caller: Caller | undefined, conversationId: string) => Effect.Effect<boolean>
}

/** The admission of turns on `users`. */
export const make = (users: UsersService): Admission => {
  const warned = new Set<string>()
  /** Logs `line` once per key (a user's day or month). */
  const warnOnce = (key: string, line: string) => {
    if (warned.has(key)) return Effect.void
    warned.add(key)
    return Effect.logWarning(line)
  }
  // A conversation's owner never changes once claimed: a user's own ones are claimed once, not at every turn.
  const owned = new Set<string>()
  /** The refusal of another user's chat, once `conversationId` is claimed for the caller. */
  const ownerRefusal = (user: User, conversationId: string, at: number): Effect.Effect<Refusal | undefined, UserError> => {
    const key = `${user.userId}\u0000${conversationId}`
    if (owned.has(key)) return Effect.succeed(undefined)
    return Effect.map(users.claim(conversationId, user.userId, at), (claim): Refusal | undefined => {
      if (claim._tag === "Theirs") {
        if (owned.size >= OWNED_LIMIT) owned.clear()
        owned.add(key)
        return undefined
      }
      return {
        kind: "owner",
        title: "Another user's chat",
        message: `This chat belongs to ${claim.owner} on this server: it cannot be read, resumed or continued by ${user.name}. Start a new chat.`
      }
    })
  }
  const turn = (caller: Caller | undefined, conversationId: string, model: string): Effect.Effect<Refusal | Notice | undefined> =>
    Effect.gen(function*() {
      if (caller?._tag !== "User") return undefined
      const { user } = caller
      if (user.models !== undefined && !user.models.includes(model)) {
        return {
          kind: "model",
          title: "Model not allowed",
          message: `${model} is not among the models ${user.name} may use on this server (${user.models.length === 0 ? "none" : user.models.join(", ")}): pick one of those, or ask the operator.`
        } satisfies Refusal
      }
      // The clock the Store stamps calls with (`llm_calls.created_at_ms`).
      const at = yield* Clock.currentTimeMillis
      const owner = yield* ownerRefusal(user, conversationId, at)
      if (owner !== undefined || (user.dailyUsd === undefined && user.monthlyUsd === undefined)) return owner
      const spend = yield* users.spend(user.userId, at)
      const day = new Date(at).toISOString().slice(0, 10)
      const checks = [
        [budgetCheck(spend.todayUsd, user.dailyUsd, "day"), `${user.userId} ${day}`],
        [budgetCheck(spend.monthUsd, user.monthlyUsd, "month"), `${user.userId} ${day.slice(0, 7)}`]
      ] as const
      const refused = checks.find(([checked]) => checked !== undefined && checked.kind !== "notice")
      if (refused !== undefined) return refused[0]
      // Each turn over 80% says so in Cursor; the log says it once a day (or month).
      const notices = checks.flatMap(([checked, key]) => checked?.kind === "notice" ? [{ checked, key }] : [])
      for (const { checked, key } of notices) yield* warnOnce(key, `users: ${user.name}: ${checked.message}`)
      return notices.length === 0 ? undefined : { kind: "notice", message: notices.map(({ checked }) => checked.message).join(" ") } satisfies Notice
    }).pipe(Effect.catchAll(unchecked))
  const resume = (caller: Caller | undefined, conversationId: string): Effect.Effect<Refusal | undefined> =>
    caller?._tag !== "User"
      ? Effect.succeed(undefined)
      : Effect.flatMap(Clock.currentTimeMillis, (at) => ownerRefusal(caller.user, conversationId, at)).pipe(Effect.catchAll(unchecked))
  const mayRead = (caller: Caller | undefined, conversationId: string): Effect.Effect<boolean> =>
    caller?._tag !== "User"
      ? Effect.succeed(true)
      : users.ownerOf(conversationId).pipe(
        Effect.map((owner) => Option.contains(owner, caller.user.userId)),
        Effect.catchAll((error) => Effect.as(Effect.logWarning(`users: a past chat was left out, its owner could not be checked: ${error.message}`), false))
      )
  return { turn, resume, mayRead }
}

/** One person's server admits everything. */
export const admitAll: Admission = { turn: () => Effect.succeed(undefined), resume: () => Effect.succeed(undefined), mayRead: () => Effect.succeed(true) }
