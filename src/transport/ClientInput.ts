/**
 * What the session machine's commands do on the driver's side for the client's messages: a run
 * request's turn started (its context read back first when it names any), exec and interaction
 * answers driving the tool machines (`ToolOps.ts`), KV answers settling the turn end's blobs and
 * the context reads, a subagent stopped. What they give (tool results, cancels) goes back to the
 * machine as `Delivered`, to be submitted and acknowledged once committed.
 */
import { Deferred, Duration, Effect, Exit, FiberSet } from "effect"
import type { Context } from "effect"
import * as Dialect from "../Dialect.js"
import type { ClientMessage, RunRequest } from "../Dialect.js"
import type { AgentServerMessage } from "../gen/agent/v1/agent_pb.js"
import { Input } from "../Loop.js"
import type { Runner } from "../Runner.js"
import { conversationOf, SessionInput } from "../Session.js"
import type { SessionCommand, Submission } from "../Session.js"
import * as Tools from "../Tools.js"
import { step } from "./Driver.js"
import type { EffectCommand, InputEnv, ServerWorker } from "./InputEnv.js"
import { noServerWork } from "./InputEnv.js"
import * as Recovery from "./Recovery.js"
import * as Resume from "./Resume.js"
import { isEnded, write } from "./Session.js"
import type { Session, SessionEnv } from "./Session.js"
import type { SessionsService } from "./Sessions.js"
import { attachChild, cancelSubagent } from "./Subagents.js"
import { isWork, onExecReply, onQueryReply, onWorkDone } from "./ToolOps.js"
import type { ToolDone, WorkToDo } from "./ToolOps.js"
import { endSession } from "./TurnEnd.js"

/** The driver's env: the commands of the client's messages are this module's. */
export const makeInputEnv = (base: SessionEnv, runner: Context.Tag.Service<Runner>, sessions: SessionsService, worker: ServerWorker = noServerWork): Effect.Effect<InputEnv> =>
  Effect.map(FiberSet.runtime(base.background)<never>(), (run) => {
    const env: InputEnv = {
      ...base,
      runner,
      sessions,
      worker,
      fork: (effect) => void run(effect),
      carryOut: (session, command) => carryOut(env, session, command),
      replayEnd: (session, ended) => Recovery.replayEnd(env, session, ended)
    }
    return env
  })

const carryOut = (env: InputEnv, session: Session, command: EffectCommand): Effect.Effect<void> => {
  switch (command._tag) {
    case "StartTurn":
      return startTurn(env, session, command)
    case "Deliver":
      return deliver(env, session, command)
    case "Resume":
      return Resume.resume(env, session)
    case "End":
      return endSession(session, command.end)
    case "WatchGaps":
      return Recovery.watchGaps(env, session)
  }
}

/** A tool result as the input to submit. */
const submissionOf = (done: ToolDone): Submission => ({
  conversationId: done.conversationId,
  input: Dialect.toolResultInputOf(done.message),
  inputId: done.inputId
})

/** Carries out a client message the machine delivers; what it gives goes back as `Delivered` when its append owes on it. */
const deliver = (env: InputEnv, request: Session, command: Extract<SessionCommand, { readonly _tag: "Deliver" }>): Effect.Effect<void> => {
  // A request that resumes another's turn acts on that turn (`Resume.ts`).
  const session = request.resumeOf ?? request
  const { message } = command
  const given = (submissions: ReadonlyArray<Submission>) =>
    command.owes ? step(env, request, SessionInput.Delivered({ seqno: command.seqno, submissions })) : Effect.void
  const next = (result: ToolDone | WorkToDo | undefined) => {
    if (isWork(result)) return Effect.zipRight(startWork(env, session, result), given([]))
    return given(result === undefined ? [] : [submissionOf(result)])
  }
  switch (message._tag) {
    case "ExecResult":
      return Effect.flatMap(onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), true), next)
    case "ExecStream":
      return Effect.flatMap(onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), message.terminal), next)
    case "ExecThrow":
      return Effect.flatMap(onExecReply(session, message.id, undefined, (run) => Tools.onExecThrow(run, message.error), true), next)
    case "InteractionResponse":
      return Effect.flatMap(onQueryReply(session, message.id, message.reply), next)
    case "KvResult":
      return Effect.zipRight(onKvResult(session, message), given([]))
    case "CancelSubagent":
      return Effect.flatMap(cancelSubagent(env.sessions, session, message.subagentId), ({ children, done }) =>
        given([
          ...children.map((child): Submission => ({
            conversationId: child,
            input: Input.Cancel({ reason: "the user stopped this subagent" }),
            inputId: `${command.inputId}/subagent`
          })),
          ...(done === undefined ? [] : [submissionOf(done)])
        ]))
    default:
      return given([])
  }
}

/**
 * The server's work for an approved tool call runs in the background, off the request's lock
 * (a fetch may take seconds; the client's other messages go on meanwhile). Its result goes back
 * through the tool machine under the lock and is submitted like any tool result; a turn that was
 * canceled meanwhile drops it (`onWorkDone`).
 */
const startWork = (env: InputEnv, session: Session, todo: WorkToDo): Effect.Effect<void> =>
  FiberSet.run(env.background, Effect.gen(function*() {
    const work = todo.work
    const result = work._tag === "Sleep" ? yield* Effect.as(Effect.sleep(work.ms), Tools.WorkResult.Slept()) : yield* env.worker.perform(work)
    const next = yield* session.lock.withPermits(1)(onWorkDone(session, todo, result))
    if (next === undefined) return
    if (isWork(next)) return yield* startWork(env, session, next)
    const applied = yield* Deferred.make<void>()
    const done = submissionOf(next)
    yield* env.runner.submitNotifying(done.conversationId, done.input, done.inputId, () => Deferred.unsafeDone(applied, Exit.void))
    yield* Deferred.await(applied)
  }).pipe(Effect.catchAllCause((cause) => Effect.logError(`transport: ${session.requestId}: ${todo.run.call.name} failed on the server`, cause)))).pipe(Effect.asVoid)

/**
 * A KV answer: a blob read back, or a blob's acknowledgement (the last of a turn's writes its
 * checkpoint); a failed read back or an answer that matches nothing is logged.
 */
const onKvResult = (session: Session, message: Extract<ClientMessage, { _tag: "KvResult" }>): Effect.Effect<void> => {
  const failed = message.error !== undefined && message.error !== ""
  session.correlation = Dialect.resolveKv(session.correlation, message.id).correlation
  const read = session.blobReads.get(message.id)
  if (read !== undefined) {
    session.blobReads.delete(message.id)
    if (!failed) {
      Deferred.unsafeDone(read, Exit.succeed(message.data ?? new Uint8Array()))
      return Effect.void
    }
    Deferred.unsafeDone(read, Exit.succeed(undefined))
    return Effect.logWarning(`transport: the client could not read back blob ${message.id}: ${message.error}`)
  }
  const ack = session.blobAcks.get(message.id)
  if (ack === undefined) return Effect.logDebug(`transport: KV answer ${message.id} matches no request; dropped`)
  session.blobAcks.delete(message.id)
  ack(!failed)
  return Effect.void
}

/** The run request's turn starts: at once, or once its context is read back (`startAfterContext`). */
const startTurn = (env: InputEnv, session: Session, command: Extract<SessionCommand, { readonly _tag: "StartTurn" }>): Effect.Effect<void> => {
  const { run, inputId } = command
  session.todos = Dialect.todosOf(run.conversationState)
  if (command.readContext) return startAfterContext(env, session, run, inputId)
  return Effect.flatMap(startOf(env, session, run, inputId), (start) => step(env, session, SessionInput.TurnReady({ inputId, run, start })))
}

/** The start of a run request's turn, to submit (the parent's Task learns its child first); none when it starts nothing. */
const startOf = (env: InputEnv, session: Session, run: RunRequest, inputId: string): Effect.Effect<Submission | undefined> => {
  const input = Dialect.turnInputOf(run, session.requestId, env.worker.capabilities(), session.parent, env.options.childModel)
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
 * `contextFetchTimeoutMs`, or does not match its id, is left out with a warning. Follow-ups and
 * cancels that arrive meanwhile wait behind the machine's start gate.
 */
const startAfterContext = (env: InputEnv, session: Session, run: RunRequest, inputId: string) =>
  Effect.gen(function*() {
    const reads: Array<readonly [string, Deferred.Deferred<Uint8Array | undefined>]> = []
    const messages: Array<AgentServerMessage> = []
    for (const ref of run.contextToFetch) {
      const sent = Dialect.encodeGetBlob(session.correlation, ref.blobId)
      session.correlation = sent.correlation
      const read = yield* Deferred.make<Uint8Array | undefined>()
      session.blobReads.set(sent.kvId, read)
      reads.push([Dialect.bytesToHex(ref.blobId), read])
      messages.push(sent.message)
    }
    yield* write(session, messages)
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
      const merged = Dialect.withContextParts(run, fetched, yield* pastChatsOf(env, run))
      for (const problem of merged.problems) yield* Effect.logWarning(`transport: ${session.requestId}: ${problem}; the turn starts without it`)
      yield* session.lock.withPermits(1)(Effect.flatMap(
        startOf(env, session, merged.run, inputId),
        (start) => step(env, session, SessionInput.TurnReady({ inputId, run: merged.run, start }))
      ))
    }))
  })

/** How much of a past chat the model gets (the end of it, when longer). */
const PAST_CHAT_CHARS = 20_000

/** The digests of the past chats a run request attaches that this server holds, by agent id. */
const pastChatsOf = (env: InputEnv, run: RunRequest) =>
  Effect.map(
    Effect.forEach(run.pastChatsToRead, (agentId) => Effect.map(env.runner.historyOf(agentId), (messages) => [agentId, messages] as const)),
    (histories) => new Map(histories.filter(([, messages]) => messages.length > 0).map(([agentId, messages]) => [agentId, Dialect.pastChatDigest(messages, PAST_CHAT_CHARS)]))
  )
