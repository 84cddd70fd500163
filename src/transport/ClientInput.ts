/**
 * What the session machine's commands do on the driver's side for the client's messages: a run
 * request's turn started (its context read back first when it names any), the server's work for
 * a tool call, KV answers settling the turn end's blob waits and the context reads, a subagent's
 * children canceled. What they give goes back to the machine (`TurnReady`, `WorkDone`,
 * `Delivered`), to be submitted and acknowledged once committed.
 */
import { Clock, Deferred, Duration, Effect, Either, FiberSet } from "effect"
import type { Context } from "effect"
import { solo } from "../Cluster.js"
import type { ClusterService } from "../Cluster.js"
import * as Dialect from "../Dialect.js"
import type { RunRequest } from "../Dialect.js"
import { Input } from "../Loop.js"
import type { ImportedHistory } from "../Loop.js"
import type { Runner } from "../Runner.js"
import { conversationOf, SessionInput } from "../Session.js"
import type { SessionCommand, Submission } from "../Session.js"
import * as Tools from "../Tools.js"
import { delivered, kvAnswered, step } from "./Driver.js"
import { importedHistoryOf, readHistoryBack } from "./History.js"
import type { HistoryRead } from "./History.js"
import { admitAll } from "../users/Admit.js"
import type { Admission } from "../users/Admit.js"
import type { EffectCommand, InputEnv, ServerWorker } from "./InputEnv.js"
import { noServerWork } from "./InputEnv.js"
import * as Recovery from "./Recovery.js"
import * as Resume from "./Resume.js"
import { isEnded, locked } from "./Session.js"
import type { Session, SessionEnv } from "./Session.js"
import type { SessionsService } from "./Sessions.js"
import { attachChild, childSessionsOf } from "./Subagents.js"
import { endSession } from "./TurnEnd.js"

/** The driver's env: the commands of the client's messages are this module's. */
export const makeInputEnv = (
  base: SessionEnv,
  runner: Context.Tag.Service<Runner>,
  sessions: SessionsService,
  worker: ServerWorker = noServerWork,
  admit: Admission = admitAll,
  cluster: ClusterService = solo
): InputEnv => {
  const env: InputEnv = {
    ...base,
    runner,
    sessions,
    worker,
    admit,
    cluster,
    carryOut: (session, command) => carryOut(env, session, command),
    replayEnd: (session, ended) => Recovery.replayEnd(env, session, ended)
  }
  return env
}

const carryOut = (env: InputEnv, session: Session, command: EffectCommand): Effect.Effect<void> => {
  switch (command._tag) {
    case "StartTurn":
      return startTurn(env, session, command)
    case "Deliver":
      return (command.message._tag === "KvResult" ? kvAnswered(session, command.message) : undefined) ?? Effect.void
    case "Resume":
      return Resume.resume(env, session)
    case "End":
      return endSession(session, command.end)
    case "WatchGaps":
      return Recovery.watchGaps(env, session)
    case "StartWork":
      return startWork(env, session, command)
    case "StopSubagent":
      return stopSubagent(env, command)
  }
}

/**
 * The user stopped a subagent: its child conversations (the one its Task knows, and any child
 * run of this process that names it) are canceled, and the Task's result submitted; the append
 * owes on them.
 */
const stopSubagent = (env: InputEnv, command: Extract<SessionCommand, { readonly _tag: "StopSubagent" }>): Effect.Effect<void> => {
  const children = new Set(childSessionsOf(env.sessions, command.subagentId))
  if (command.child !== undefined) children.add(command.child)
  const cancels = [...children].map((child): Submission => ({
    conversationId: child,
    input: Input.Cancel({ reason: "the user stopped this subagent" }),
    inputId: `${command.inputId}/subagent`
  }))
  const log = children.size === 0 && command.done === undefined
    ? Effect.logInfo(`transport: ${command.owner}: cancel_subagent_action for ${command.subagentId}, which does not run here; nothing changed`)
    : Effect.void
  return Effect.zipRight(log, delivered(env, command.owner, command.seqno, [...cancels, ...(command.done === undefined ? [] : [command.done])]))
}

/**
 * The server's work for an approved tool call runs in the background, off the request's lock
 * (a fetch may take seconds; the client's other messages go on meanwhile). What it gave goes
 * back to the tool machine under the lock (`WorkDone`), whose result is submitted like any tool
 * result; a turn that was canceled meanwhile drops it.
 */
const startWork = (env: InputEnv, session: Session, command: Extract<SessionCommand, { readonly _tag: "StartWork" }>): Effect.Effect<void> =>
  FiberSet.run(env.background, Effect.gen(function*() {
    const work = command.work
    const result = work._tag === "Sleep" ? yield* Effect.as(Effect.sleep(work.ms), Tools.WorkResult.Slept()) : yield* env.worker.perform(work)
    const atMs = yield* Clock.currentTimeMillis
    yield* locked(session, step(env, session, SessionInput.WorkDone({ operationId: command.operationId, run: command.run, result, atMs })))
  }).pipe(Effect.catchAllCause((cause) => Effect.logError(`transport: ${session.requestId}: ${command.run.call.name} failed on the server`, cause)))).pipe(Effect.asVoid)

/**
 * The run request's turn starts: at once, or once its context, and a history only the client
 * holds (`History.ts`), are read back (`startAfterContext`).
 */
const startTurn = (env: InputEnv, session: Session, command: Extract<SessionCommand, { readonly _tag: "StartTurn" }>): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { run, inputId } = command
    // A team's server: the caller's model, ownership of the chat and budget first.
    const admitted = yield* env.admit.turn(session.caller, conversationOf(session.requestId, run), run.model)
    if (admitted !== undefined && admitted.kind !== "notice") {
      yield* Effect.logWarning(`transport: ${session.requestId}: turn refused: ${admitted.message}`)
      return yield* step(env, session, SessionInput.TurnRefused({ inputId, end: Dialect.turnRefused(admitted) }))
    }
    if (admitted !== undefined) yield* step(env, session, SessionInput.Notice({ text: `${admitted.message}\n\n` }))
    const history = yield* readHistoryBack(env, session, run, inputId)
    if (command.readContext || history !== undefined) return yield* startAfterContext(env, session, run, inputId, [...command.reads, ...(history?.reads ?? [])], history)
    yield* Effect.flatMap(startOf(env, session, run, inputId), (start) => step(env, session, SessionInput.TurnReady({ inputId, run, start })))
  })

/** The start of a run request's turn, to submit (the parent's Task learns its child first); none when it starts nothing. */
const startOf = (env: InputEnv, session: Session, run: RunRequest, inputId: string, imported?: ImportedHistory): Effect.Effect<Submission | undefined> => {
  const turnInput = Dialect.turnInputOf(run, session.requestId, env.worker.capabilities(), session.parent, env.options.childModel)
  const input = turnInput === undefined || imported === undefined ? turnInput : Dialect.withImportedHistory(turnInput, imported)
  if (input === undefined || isEnded(session)) return Effect.succeed(undefined)
  const conversationId = conversationOf(session.requestId, run)
  return Effect.as(attachChild(env.sessions, session, conversationId), { conversationId, input, inputId })
}

/**
 * READING BACK THE REQUEST CONTEXT. In Cursor's ref_only context transport the run request
 * names its rules and MCP tool definitions by blob id instead of carrying them (from the
 * second turn of a conversation on), and an attached image may come as a blob id alone. They
 * are read back first (`RunRequest.contextToFetch`): one get_blob per blob, answered by the
 * client's KV results in later messages (taken meanwhile: this waits in the background). A past
 * chat the user attached is read from the store (`RunRequest.pastChatsToRead`). Then the turn
 * starts with them merged in (`Dialect.withContextParts`); a part that does not come within
 * `contextFetchTimeoutMs`, or does not match its id, is left out with a warning. A history
 * only the client holds is read back in the same wait (`History.ts`), but one of its messages
 * that does not come refuses the turn instead. Follow-ups and cancels that arrive meanwhile wait
 * behind the machine's start gate.
 */
const startAfterContext = (
  env: InputEnv,
  session: Session,
  run: RunRequest,
  inputId: string,
  requested: ReadonlyArray<{ readonly kvId: number; readonly blobId: string }>,
  history: HistoryRead | undefined
) =>
  Effect.gen(function*() {
    // The get_blob requests are written (the machine's `Write` before this command): their answers settle these.
    const reads: Array<readonly [string, Deferred.Deferred<Uint8Array | undefined>]> = []
    for (const { kvId, blobId } of requested) {
      const read = yield* Deferred.make<Uint8Array | undefined>()
      session.blobReads.set(kvId, read)
      reads.push([blobId, read])
    }
    const timeout = Duration.millis(env.options.contextFetchTimeoutMs)
    yield* FiberSet.run(env.background, Effect.gen(function*() {
      const fetched = new Map<string, Uint8Array>()
      yield* Effect.forEach(reads, ([id, read]) =>
        Deferred.await(read).pipe(
          Effect.timeoutTo({ duration: timeout, onSuccess: (data) => data, onTimeout: () => undefined }),
          Effect.map((data) => {
            if (data !== undefined) fetched.set(id, data)
          })
        ), { concurrency: "unbounded", discard: true })
      // A history the client did not give back refuses the turn (never a fresh start without it).
      const imported = yield* importedHistoryOf(env, session, inputId, history, fetched)
      if (Either.isLeft(imported)) return
      const merged = Dialect.withContextParts(run, fetched, yield* pastChatsOf(env, session, run))
      for (const problem of merged.problems) yield* Effect.logWarning(`transport: ${session.requestId}: ${problem}; the turn starts without it`)
      yield* locked(session, Effect.flatMap(
        startOf(env, session, merged.run, inputId, imported.right),
        (start) => step(env, session, SessionInput.TurnReady({ inputId, run: merged.run, start }))
      ))
    }))
  })

/** How much of a past chat the model gets (the end of it, when longer). */
const PAST_CHAT_CHARS = 20_000

/** The digests of the past chats a run request attaches that this server holds, by agent id. */
const pastChatsOf = (env: InputEnv, session: Session, run: RunRequest) =>
  Effect.map(
    // On a team's server, only the caller's own chats are read (another's is left out, as one this server does not hold).
    Effect.flatMap(
      Effect.filter(run.pastChatsToRead, (agentId) => env.admit.mayRead(session.caller, agentId)),
      (readable) => Effect.forEach(readable, (agentId) => Effect.map(env.runner.historyOf(agentId), (messages) => [agentId, messages] as const))
    ),
    (histories) => new Map(histories.filter(([, messages]) => messages.length > 0).map(([agentId, messages]) => [agentId, Dialect.pastChatDigest(messages, PAST_CHAT_CHARS)]))
  )
