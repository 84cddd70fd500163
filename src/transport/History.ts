/**
 * A HISTORY ONLY THE CLIENT HOLDS. A run request's checkpoint names the conversation's history
 * by its prompt messages (`root_prompt_messages_json`). When this server holds none of it (no
 * turn of that conversation here, and no stored messages under those ids to fork from: a chat
 * moved onto this server, or a client that starts a new conversation id with its own
 * checkpoint), the messages are read back from the client with KV `get_blob` before the turn
 * starts, beside the request context (`ClientInput.startAfterContext`), translated
 * (`Dialect.importHistory`) and given to the loop with the start, which continues from them as an
 * `import` segment. A blob the client does not give back, or one this server cannot read, ends
 * the stream with a readable error and a log line: nothing is submitted, nothing committed.
 */
import { Effect, Either } from "effect"
import * as Dialect from "../Dialect.js"
import type { RunRequest } from "../Dialect.js"
import type { ImportedHistory } from "../Loop.js"
import { conversationOf, SessionInput } from "../Session.js"
import { apply, perform, step } from "./Driver.js"
import type { InputEnv } from "./InputEnv.js"
import { locked } from "./Session.js"
import type { Session } from "./Session.js"

/** The history to read back: the checkpoint's entries, and the get_blob requests written for them (by KV id). */
export interface HistoryRead {
  readonly entries: ReadonlyArray<Uint8Array>
  readonly reads: ReadonlyArray<{ readonly kvId: number; readonly blobId: string }>
}

/**
 * Under the request's lock, as its turn starts: when the run request names a history this
 * server does not hold, its get_blob requests are written (the machine's `ReadHistory`, which
 * closes the start gate) and returned, for the caller to wait on before the lock is released.
 * Undefined: nothing to read (no history named, or the server holds it).
 */
export const readHistoryBack = (env: InputEnv, session: Session, run: RunRequest, inputId: string): Effect.Effect<HistoryRead | undefined> =>
  Effect.gen(function*() {
    const action = run.action._tag
    const entries = run.conversationState?.rootPromptMessagesJson ?? []
    if ((action !== "StartTurn" && action !== "Summarize") || entries.length === 0) return undefined
    const conversationId = conversationOf(session.requestId, run)
    if (yield* env.runner.holdsHistory(conversationId, entries.map(Dialect.bytesToHex))) return undefined
    const blobIds = Dialect.promptBlobIdsOf(entries)
    yield* Effect.logInfo(`transport: ${session.requestId}: ${conversationId} names a history of ${entries.length} messages this server does not hold; reading it back from the client`)
    const commands = apply(session, SessionInput.ReadHistory({ inputId, blobIds }))
    const awaited = commands.find((command) => command._tag === "AwaitBlobs")
    yield* perform(env, session, commands)
    return { entries, reads: awaited?._tag === "AwaitBlobs" ? awaited.reads : [] }
  })

/**
 * The history read back (`fetched`, by hex blob id), translated; none to import gives `right(undefined)`.
 * Left: the turn was refused (the stream ends with the reason; logged).
 */
export const importedHistoryOf = (
  env: InputEnv,
  session: Session,
  inputId: string,
  history: HistoryRead | undefined,
  fetched: ReadonlyMap<string, Uint8Array>
): Effect.Effect<Either.Either<ImportedHistory | undefined, string>> =>
  Effect.gen(function*() {
    if (history === undefined) return Either.right(undefined)
    const imported = Dialect.importHistory(history.entries, fetched)
    if (Either.isLeft(imported)) {
      yield* Effect.logWarning(`transport: ${session.requestId}: the client's history could not be imported: ${imported.left}; the turn is refused`)
      yield* locked(session, step(env, session, SessionInput.TurnRefused({ inputId, end: Dialect.historyNotGiven(imported.left) })))
      return Either.left(imported.left)
    }
    for (const note of imported.right.notes) yield* Effect.logInfo(`transport: ${session.requestId}: importing the client's history: ${note}`)
    const { messages, systemPrompt } = imported.right.history
    yield* Effect.logInfo(
      `transport: ${session.requestId}: imported ${messages.length} messages of the client's history${systemPrompt === undefined ? "" : " and its system prompt"}`
    )
    return Either.right(imported.right.history)
  })
