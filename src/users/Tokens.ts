/**
 * The plain parts of users (`Users.ts`): issuing a token and the hash it is kept as, and
 * reading what an operator types (a name, a list of models, a limit in USD). A token is shown
 * once and stored as its SHA-256 only; 32 random bytes need no slow hash to resist guessing.
 */
import { Either } from "effect"
import { createHash, randomBytes, randomUUID } from "node:crypto"
import { UserError } from "../Users.js"

/** What every issued token starts with, so that one found in a file or a log is recognised. */
export const TOKEN_PREFIX = "byok_u_"

/** A new token: the prefix and 32 random bytes, base64url. */
export const issueToken = (): string => `${TOKEN_PREFIX}${randomBytes(32).toString("base64url")}`

/** How a token is kept and looked up: its SHA-256, lowercase hex. */
export const tokenHash = (token: string): string => createHash("sha256").update(token, "utf8").digest("hex")

/** A new user's id (never shown to them; names may be reused after a removal, ids are not). */
export const newUserId = (): string => `user_${randomUUID()}`

const NAME = /^[A-Za-z0-9._@-]{1,64}$/

/** Whether `name` may name a user: 1 to 64 of letters, digits and `._@-`. */
export const validName = (name: string): boolean => NAME.test(name)

/** `name` as a user's name, or why it cannot be one. */
export const checkName = (name: string): Either.Either<string, UserError> =>
  validName(name)
    ? Either.right(name)
    : Either.left(new UserError({ message: `"${name}" cannot name a user: use 1 to 64 letters, digits and . _ @ -` }))

/** The models a user may use, trimmed and without repeats; an empty list (or only blanks) is refused. */
export const checkModels = (models: ReadonlyArray<string>): Either.Either<ReadonlyArray<string>, UserError> => {
  const unique = [...new Set(models.map((model) => model.trim()).filter((model) => model !== ""))]
  return unique.length > 0
    ? Either.right(unique)
    : Either.left(new UserError({ message: "the models list is empty: name at least one model, or leave it out for every model" }))
}

/** `"a, b,a"` as `["a", "b"]` (see `checkModels`). */
export const parseModels = (text: string): Either.Either<ReadonlyArray<string>, UserError> => checkModels(text.split(","))

/** A limit in USD: a finite number, zero or more (`what` names it in the message: "the daily limit"). */
export const checkUsd = (value: number, what: string): Either.Either<number, UserError> =>
  Number.isFinite(value) && value >= 0
    ? Either.right(value)
    : Either.left(new UserError({ message: `${what} must be an amount in USD, 0 or more (like 5 or 12.50), got ${value}` }))

/** A limit in USD as typed (`"12.5"`, `"$12.50"`); see `checkUsd`. */
export const parseUsd = (text: string, what: string): Either.Either<number, UserError> => {
  const trimmed = text.trim().replace(/^\$/, "")
  // Number("") is 0 and Number("0x10") is 16: only plain decimals are amounts.
  return /^\d+(\.\d*)?$|^\.\d+$/.test(trimmed)
    ? checkUsd(Number(trimmed), what)
    : Either.left(new UserError({ message: `${what} must be an amount in USD, 0 or more (like 5 or 12.50), got "${text}"` }))
}
