/**
 * The Store's operations as programs: each one written once, as a generator that yields its
 * statements (`yield* q<Row>\`SELECT ...\`` gives the rows) and its typed failures
 * (`yield* fail(error)` ends it), run by whichever driver the connection allows:
 *
 * - `runSync`: every statement straight on a synchronous connection, the whole program in one
 *   synchronous call. This is the server's way (`Connection.ts`'s `Direct.run`, over
 *   better-sqlite3's prepared statements): one Effect operation per Store call instead of
 *   several per statement, a transaction included.
 * - `drive`: each statement as an Effect through a `Query` (any `SqlClient`, or the client's
 *   transaction on the server's connection), the program resumed with its rows.
 *
 * A statement's text is its template's literal parts joined by `?` (`Tx.textOf`), its values
 * bound as the client's template binds them (`Tx.bindValues`): both drivers give SQLite the
 * same statement. A program only computes between its statements (no I/O, no clock: the time
 * is an argument), so running it twice is running it again from the start.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Either } from "effect"
import { bindValues, textOf } from "./Tx.js"
import type { Query, Value } from "./Tx.js"

/** A statement for the driver to run; `yield*` it for its rows. */
export class Statement<A extends object> {
  readonly _tag = "Statement"
  constructor(readonly strings: TemplateStringsArray, readonly values: ReadonlyArray<Value>) {}
  *[Symbol.iterator](): Generator<Statement<A>, ReadonlyArray<A>, any> {
    return yield this
  }
}

/** The program's typed failure; `yield*` it to end the program with it. */
export class Failure<E> {
  readonly _tag = "Failure"
  constructor(readonly error: E) {}
  *[Symbol.iterator](): Generator<Failure<E>, never, any> {
    yield this
    throw new Error("Store: a program was resumed after its failure")
  }
}

/** What a program yields: its statements and, last, its failure. */
export type Step = Statement<any> | Failure<any>

/** A Store program: its statements and failures (`E`) yielded, its result `A` returned. */
export type Program<A, E = never> = Generator<Statement<any> | Failure<E>, A, any>

/** The failures a program with steps `Y` may end with. */
export type ErrorOf<Y> = Y extends Failure<infer E> ? E : never

/** A statement written as a tagged template, as `Tx.Query`: `yield* q<Row>\`...\`` gives its rows. */
export const q = <A extends object = Record<string, unknown>>(
  strings: TemplateStringsArray,
  ...values: ReadonlyArray<Value>
): Statement<A> => new Statement<A>(strings, values)

/** Ends the program with `error`. */
export const fail = <E>(error: E): Failure<E> => new Failure(error)

/** A statement's rows, run at once; throws what the connection throws. */
export type Execute = (text: string, values: ReadonlyArray<Exclude<Value, undefined>>) => ReadonlyArray<any>

/**
 * Runs `program` to its end in this synchronous call, each statement by `execute`: its result,
 * or the failure it yielded. What `execute` (or the program) throws is thrown.
 */
export const runSync = <Y extends Step, A>(program: Generator<Y, A, any>, execute: Execute): Either.Either<A, ErrorOf<Y>> => {
  let next = program.next()
  while (next.done !== true) {
    const step: Step = next.value
    if (step._tag === "Failure") return Either.left(step.error as ErrorOf<Y>)
    next = program.next(execute(textOf(step.strings), bindValues(step.values)))
  }
  return Either.right(next.value)
}

/** Runs a fresh `program()` as an Effect, each statement through `query`. */
export const drive = <Y extends Step, A>(program: () => Generator<Y, A, any>, query: Query): Effect.Effect<A, ErrorOf<Y> | SqlError> =>
  Effect.suspend(() => {
    const running = program()
    const resume = (rows?: ReadonlyArray<object>): Effect.Effect<A, ErrorOf<Y> | SqlError> => {
      const next = running.next(rows)
      if (next.done === true) return Effect.succeed(next.value)
      const step: Step = next.value
      return step._tag === "Failure"
        ? Effect.fail(step.error as ErrorOf<Y>)
        : Effect.flatMap(query(step.strings, ...step.values), resume)
    }
    return resume()
  })
