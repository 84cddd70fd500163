/**
 * The users of a team's server: who may call it (a token each), which models each may use, what
 * each may spend, and whose each conversation is. With no user added the server is one
 * person's, as before (every caller is `Local`); once one is, every agent and side request must
 * carry a user's token or the operator's (`console.token`).
 *
 * Tokens are kept as their SHA-256 only and shown once, when issued. The door authenticates
 * from a copy in memory (`authenticate`, synchronous), refreshed from the database every few
 * seconds, so that users added or removed by `cursor-byok users` on this or another instance
 * take effect without a restart. The implementation is in `users/`.
 */
import { Context, Schema } from "effect"
import type { Effect, Option } from "effect"

export interface User {
  readonly userId: string
  /** What the operator calls them: unique, `[A-Za-z0-9._@-]{1,64}`. */
  readonly name: string
  /** The model names (as Cursor shows them) they may use; undefined: every model. */
  readonly models: ReadonlyArray<string> | undefined
  /** Spending limits in USD (priced calls only); undefined: none. */
  readonly dailyUsd: number | undefined
  readonly monthlyUsd: number | undefined
}

export interface UserRecord extends User {
  readonly createdAtMs: number
}

/** Who sent a request, as the door found it. */
export type Caller =
  /** One person's server (no user added): everything is theirs. */
  | { readonly _tag: "Local" }
  /** The operator's token: every conversation and figure, no turn of their own. */
  | { readonly _tag: "Operator" }
  | { readonly _tag: "User"; readonly user: User }

export const LOCAL: Caller = { _tag: "Local" }
export const OPERATOR: Caller = { _tag: "Operator" }

/** Whose a conversation is after `claim`. */
export type Claim =
  /** It was theirs already, or is now (a new conversation). */
  | { readonly _tag: "Theirs" }
  | { readonly _tag: "Another"; readonly owner: string }

/** What a user spent (USD of priced calls), in the current UTC day and month. */
export interface Spend {
  readonly todayUsd: number
  readonly monthUsd: number
}

export interface NewUser {
  readonly name: string
  readonly models?: ReadonlyArray<string> | undefined
  readonly dailyUsd?: number | undefined
  readonly monthlyUsd?: number | undefined
}

export class UserError extends Schema.TaggedError<UserError>("cursor-byok/Users/UserError")("UserError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

export interface UsersService {
  /** Whether any user exists (a team's server): then every request needs a token. From memory. */
  readonly teamMode: () => boolean
  /** The user a token belongs to, from memory. */
  readonly authenticate: (token: string) => Option.Option<User>
  /** Reads the users again (the door's copy). */
  readonly refresh: Effect.Effect<void, UserError>
  /** Adds a user; the token is returned once. A taken name fails. */
  readonly add: (user: NewUser) => Effect.Effect<{ readonly user: UserRecord; readonly token: string }, UserError>
  readonly list: Effect.Effect<ReadonlyArray<UserRecord>, UserError>
  /** Removes a user (their token stops working; their conversations stay theirs). False: no such user. */
  readonly remove: (name: string) => Effect.Effect<boolean, UserError>
  /** A new token for a user (the old one stops working). */
  readonly rotateToken: (name: string) => Effect.Effect<string, UserError>
  /** Makes an unowned conversation `userId`'s; tells whose it is. */
  readonly claim: (conversationId: string, userId: string, nowMs: number) => Effect.Effect<Claim, UserError>
  /** The owner's user id, if any. */
  readonly ownerOf: (conversationId: string) => Effect.Effect<Option.Option<string>, UserError>
  /** What `userId` spent in the UTC day and month of `nowMs`, over the conversations they own. */
  readonly spend: (userId: string, nowMs: number) => Effect.Effect<Spend, UserError>
}

export class Users extends Context.Tag("cursor-byok/Users")<Users, UsersService>() {}
