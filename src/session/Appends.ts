/**
 * The client's messages of one request, in order, whichever wire carried them: BidiAppend
 * numbers them with `append_seqno`, `Run` by their place on the stream. An append goes into the
 * ordered inbox (`Inbox.ts`); what is ready is handed on: run requests, follow-ups and cancels
 * become inputs for the runner (their input id `<request id>/<turn key>:<seqno>`); exec,
 * interaction and KV answers are delivered to the driver's tool machines and blob waits.
 *
 * Restart recovery: an append to a request this process has no turn for consults what the store
 * says (`StoreFacts`, looked up first by the driver as `questionsOf` asks): a re-sent run request
 * of a turn that ended has its end replayed; one of a turn still running adopts the previous
 * process's numbering; an append far ahead is held only when the store knows the request.
 */
import * as Dialect from "../Dialect.js"
import * as Tools from "../Tools.js"
import * as ToolCalls from "./ToolCalls.js"
import type { ClientMessage, RunRequest } from "../Dialect.js"
import { adopt, holdUnstarted, offer } from "./Inbox.js"
import type { Offered } from "./Inbox.js"
import { dropHeld, owe, settle, submitInOrder } from "./Owed.js"
import {
  conversationOf,
  Gate,
  inputIdOf,
  isEnded,
  isReplay,
  isUnresolved,
  Lifecycle,
  runRequestInputId,
  type SessionState,
  type Submission,
  type Taken
} from "./State.js"
import { SessionCommand, type SessionInput, type Step, type StoreFacts } from "./Types.js"

type Append = Extract<SessionInput, { readonly _tag: "Append" }>

/** What the driver must look up in the store before `Append` (undefined state: no session of the request yet). */
export interface Questions {
  readonly startedTurnBefore: boolean
  /** The input id of a run request that may be a re-send. */
  readonly runRequestInputId: string | undefined
}

export const questionsOf = (state: SessionState | undefined, requestId: string, seqno: number, message: ClientMessage, window: number): Questions => {
  const unresolved = state === undefined || isUnresolved(state)
  const fresh = state === undefined || (state.inbox.next === 0 && state.inbox.held.size === 0 && state.inbox.recovered === undefined)
  const startedTurnBefore = seqno >= window && unresolved && fresh && state?.recovery.knownToStore !== true && state?.recovery.adoptFirstAppend !== true
  const mayResend = message._tag === "RunRequest" &&
    (state === undefined || unresolved || ((isEnded(state) || isReplay(state)) && seqno === 0))
  return { startedTurnBefore, runRequestInputId: mayResend ? runRequestInputId(requestId, seqno, message) : undefined }
}

/** The first far-ahead append to a request no store knows of is refused before a session is made. */
export const refusesUnknown = (state: SessionState | undefined, seqno: number, window: number, facts: StoreFacts): boolean =>
  state === undefined && seqno >= window && facts.startedTurnBefore === false

export const unknownFarAhead = (requestId: string, seqno: number, window: number) =>
  SessionCommand.Refuse({
    code: "out_of_range",
    message: `append_seqno ${seqno} is more than ${window} ahead of the next expected 0 for request ${requestId}, which started no turn known to this server`
  })

export const append = (state: SessionState, input: Append): Step => {
  const commands: Array<SessionCommand> = []
  const { seqno, message, facts } = input
  let next = state
  if (facts.startedTurnBefore === true && !next.recovery.knownToStore) next = { ...next, recovery: { ...next.recovery, knownToStore: true } }
  if ((isEnded(next) || isReplay(next)) && seqno === 0 && message._tag === "RunRequest") {
    // The run request of the turn that ended here, sent again: acknowledged, not applied again.
    if (facts.runRequestCommitted === true) return { state: next, commands }
    // A request id reused for a new turn (the IDE does this): its held appends are dropped, a fresh session takes it.
    next = dropHeld(next, commands)
    commands.push(SessionCommand.Replace())
    return { state: next, commands }
  }
  if (isReplay(next)) {
    // Appends of a turn whose end is replayed change nothing; the replayed blobs' acknowledgements are taken.
    if (message._tag === "KvResult") commands.push(SessionCommand.Deliver({ seqno, message, inputId: inputIdOf(next, seqno), owes: false }))
    return { state: next, commands }
  }
  if (!input.newTurn && isUnresolved(next) && message._tag === "RunRequest" && facts.runRequestCommitted === true) {
    switch (facts.resentTurn) {
      case "Ended":
        // Its end is replayed (the driver reads it from the store, then `Replays`).
        commands.push(SessionCommand.ReplayEnd())
        return { state: next, commands }
      case "Running":
        // A turn in progress, started by an earlier process: the inbox adopts its numbering from here.
        if (next.inbox.next === 0 && next.inbox.recovered === undefined) next = handOnAll(next, adopt(next.inbox, seqno, input.window), commands)
        break
      default:
        commands.push(SessionCommand.Log({ level: "debug", message: `transport: append ${seqno} of ${next.requestId} re-sends a run request whose turn is no longer current; not applied` }))
        return { state: next, commands }
    }
  }
  if (next.recovery.adoptFirstAppend) {
    // A recovered turn: the client's numbering continues from the previous process.
    const inbox = next.inbox
    if (inbox.next === 0 && inbox.held.size === 0 && inbox.recovered === undefined) next = { ...next, inbox: adopt(inbox, seqno, input.window).inbox }
    next = { ...next, recovery: { ...next.recovery, adoptFirstAppend: false } }
  }
  return take(next, input, commands)
}

/** The inbox takes the append: refused, held, handed on now (with what it unblocked), or a duplicate. */
const take = (state: SessionState, input: Append, commands: Array<SessionCommand>): Step => {
  const { seqno, message, window } = input
  const item: Taken = { seqno, message, arrivedAtMs: input.atMs }
  let offered = offer(state.inbox, seqno, item, window)
  if (offered.verdict === "outOfRange" && isUnresolved(state) && state.inbox.next === 0) {
    // Nothing handed on, no turn of the request in this process: a client re-sending after a restart?
    if (!state.recovery.knownToStore) return refuse(state, commands, unknownFarAhead(state.requestId, seqno, window))
    offered = holdUnstarted(state.inbox, seqno, item, window)
    if (offered.verdict === "outOfRange") {
      return refuse(state, commands, SessionCommand.Refuse({
        code: "out_of_range",
        message: `append_seqno ${seqno} is ${window} or more away from the appends held for request ${state.requestId} (a turn started before a restart)`
      }))
    }
  }
  if (offered.verdict === "outOfRange") {
    return refuse(state, commands, SessionCommand.Refuse({
      code: "out_of_range",
      message: `append_seqno ${seqno} is more than ${window} ahead of the next expected ${state.inbox.next} for request ${state.requestId}`
    }))
  }
  let next = state
  switch (offered.verdict) {
    case "held":
      next = owe({ ...next, inbox: offered.inbox }, seqno, "held", commands)
      break
    case "late":
      // A run request below where a recovered turn's inbox started is that turn's, re-sent (its
      // input is committed: the turn is running) or a stale one: never applied out of order.
      if (message._tag === "RunRequest") {
        next = settle({ ...next, inbox: offered.inbox }, seqno, commands)
        commands.push(SessionCommand.Log({ level: "debug", message: `transport: late run request ${seqno} of ${state.requestId} not applied` }))
      } else next = handOnAll(next, offered, commands)
      break
    case "delivered":
      next = handOnAll(next, offered, commands)
      break
    case "duplicate":
      break
  }
  return { state: watchGaps(next, commands), commands }
}

/** A recovered inbox that holds appends behind a gap starts passing over its gaps (`Gaps.ts`), unless that runs already. */
export const watchGaps = (state: SessionState, commands: Array<SessionCommand>): SessionState => {
  if (state.inbox.recovered === undefined || state.inbox.held.size === 0 || state.recovery.passingGaps) return state
  commands.push(SessionCommand.WatchGaps())
  return { ...state, recovery: { ...state.recovery, passingGaps: true } }
}

const refuse = (state: SessionState, commands: Array<SessionCommand>, refusal: SessionCommand): Step => ({ state, commands: [...commands, refusal] })

/** Takes the inbox `offered` gave and hands on what it made ready, in order. */
export const handOnAll = (state: SessionState, offered: Offered<Taken>, commands: Array<SessionCommand>): SessionState => {
  let next: SessionState = { ...state, inbox: offered.inbox }
  for (const item of offered.ready) next = handOn(next, item, commands)
  return next
}

/** One append, handed on in order: what it carries becomes an input, a tool machine's step, a delivery to the driver, or nothing. */
const handOn = (state: SessionState, item: Taken, commands: Array<SessionCommand>): SessionState => {
  const { seqno, message } = item
  const inputId = inputIdOf(state, seqno)
  switch (message._tag) {
    case "RunRequest":
      return onRunRequest(state, seqno, message, commands)
    case "Prewarm": {
      // A prewarm opens the request without a turn: the user message that follows starts it, with the prewarm's settings.
      const settled = settle(state, seqno, commands)
      if (state.run !== undefined || !isUnresolved(state)) return settled
      return { ...settled, prewarm: message.prewarm, conversationId: nonEmpty(message.prewarm.conversationId) ?? state.requestId }
    }
    case "UserMessage":
      if (state.resumes) return forward(state, seqno, message, inputId, item.arrivedAtMs, commands)
      if (state.prewarm !== undefined && state.run === undefined) {
        return onRunRequest(state, seqno, Dialect.runRequestOfPrewarm(state.prewarm, message.userMessage), commands)
      }
      return followUp(state, seqno, message, inputId, state.requestId, commands)
    case "Cancel":
      if (state.resumes) return forward(state, seqno, message, inputId, item.arrivedAtMs, commands)
      return cancel(state, seqno, message, inputId, state.requestId, commands)
    case "CancelSubagent":
    case "ExecResult":
    case "ExecStream":
    case "ExecThrow":
    case "InteractionResponse":
    case "KvResult": {
      if (state.resumes) return forward(state, seqno, message, inputId, item.arrivedAtMs, commands)
      const answered = answer(state, seqno, message, inputId, state.requestId, item.arrivedAtMs, commands)
      if (answered.gave === "delivering") return owe(answered.state, seqno, "delivering", commands)
      return answered.gave.length === 0 ? settle(answered.state, seqno, commands) : submitDirectly(answered.state, seqno, answered.gave, commands)
    }
    case "Unknown":
      commands.push(SessionCommand.Log({
        level: "info",
        message: `transport: ${state.requestId}: ${message.where} (fields ${message.fields.join(",") || "none"}) is not supported by this server; acknowledged, nothing changed`
      }))
      return settle(state, seqno, commands)
    case "ExecStreamClose":
    case "ExecHeartbeat":
    case "Heartbeat":
      // Liveness only: a stream close is never a result (it may arrive before the result).
      return settle(state, seqno, commands)
  }
}

/** Tool results: submitted at once (they follow no run request's start); the append owes on their commits. */
const submitDirectly = (state: SessionState, seqno: number, submissions: ReadonlyArray<Submission>, commands: Array<SessionCommand>): SessionState => {
  const owed = new Map(state.owed)
  owed.set(seqno, new Set(submissions.map((submission) => submission.inputId)))
  for (const submission of submissions) commands.push(SessionCommand.Submit({ submission, owner: state.requestId }))
  return { ...state, owed }
}

/**
 * An answer of the client's to this session's turn (its own, or forwarded by a request that
 * resumes it): an exec or interaction answer drives its tool machine; a KV answer settles a
 * blob's wait (the driver's) and its KV request; a stopped subagent ends its Task. What it gave:
 * the inputs to submit, or `delivering` when the driver reports them (`StopSubagent`).
 */
export const answer = (
  state: SessionState,
  seqno: number,
  message: ClientMessage,
  inputId: string,
  owner: string,
  atMs: number,
  commands: Array<SessionCommand>
): { readonly state: SessionState; readonly gave: ReadonlyArray<Submission> | "delivering" } => {
  const advanced = (step: ToolCalls.Advanced | undefined) =>
    step === undefined ? { state, gave: [] } : { state: step.state, gave: step.done === undefined ? [] : [ToolCalls.submissionOf(step.done)] }
  switch (message._tag) {
    case "ExecResult":
      return advanced(ToolCalls.onExecReply(state, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), true, atMs, commands))
    case "ExecStream":
      return advanced(ToolCalls.onExecReply(state, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), message.terminal, atMs, commands))
    case "ExecThrow":
      return advanced(ToolCalls.onExecReply(state, message.id, undefined, (run) => Tools.onExecThrow(run, message.error), true, atMs, commands))
    case "InteractionResponse":
      return advanced(ToolCalls.onQueryReply(state, message.id, message.reply, atMs, commands))
    case "KvResult":
      // The driver settles what waits on it (a blob read back, a blob's acknowledgement).
      commands.push(SessionCommand.Deliver({ seqno, message, inputId, owes: false }))
      return { state: { ...state, correlation: Dialect.resolveKv(state.correlation, message.id).correlation }, gave: [] }
    case "CancelSubagent": {
      const stopped = ToolCalls.stopSubagent(state, message.subagentId, atMs, commands)
      commands.push(SessionCommand.StopSubagent({
        seqno,
        owner,
        subagentId: message.subagentId,
        inputId,
        child: stopped.child,
        done: stopped.done === undefined ? undefined : ToolCalls.submissionOf(stopped.done)
      }))
      return { state: stopped.state, gave: "delivering" }
    }
    default:
      return { state, gave: [] }
  }
}

const nonEmpty = (text: string | undefined): string | undefined => (text === undefined || text === "" ? undefined : text)

/**
 * A request that resumes another's turn hands its client's messages to that turn (`Forwarded`
 * there); its input ids stay its own. A follow-up or a cancel owes on its input's commit; an
 * answer on what that turn reports it gave (`Gave`).
 */
const forward = (state: SessionState, seqno: number, message: ClientMessage, inputId: string, atMs: number, commands: Array<SessionCommand>): SessionState => {
  commands.push(SessionCommand.Forward({ seqno, message, inputId, atMs }))
  const followsUp = message._tag === "UserMessage" || message._tag === "Cancel"
  return owe(state, seqno, followsUp ? new Set([inputId]) : "delivering", commands)
}

/** A follow-up message on this request's turn (or, forwarded, on a resumer's); `owner` owes on its commit. */
export const followUp = (
  state: SessionState,
  seqno: number | undefined,
  message: Extract<ClientMessage, { readonly _tag: "UserMessage" }>,
  inputId: string,
  owner: string,
  commands: Array<SessionCommand>
): SessionState => {
  const conversationId = state.conversationId
  if (conversationId === undefined) {
    commands.push(SessionCommand.Log({ level: "warning", message: `transport: a follow-up message on ${state.requestId} arrived before any run request; dropped` }))
    return released(state, seqno, inputId, owner, commands)
  }
  let next = state
  if (next.lifecycle._tag === "Ending") {
    // Queued while the agent worked, sent right after turn_ended: the next turn, on this stream.
    next = {
      ...next,
      queuedUserMessage: { text: message.userMessage.text, messageId: message.messageId, mode: Dialect.cursorModeOf(message.userMessage.mode) },
      queuedTurnExpected: true
    }
  }
  return submitFor(next, seqno, { conversationId, input: Dialect.followUpInputOf(message), inputId }, owner, commands)
}

/** A cancel of this request's turn (or, forwarded, a resumer's). */
export const cancel = (
  state: SessionState,
  seqno: number | undefined,
  message: Extract<ClientMessage, { readonly _tag: "Cancel" }>,
  inputId: string,
  owner: string,
  commands: Array<SessionCommand>
): SessionState => {
  const conversationId = state.conversationId
  if (conversationId === undefined) return released(state, seqno, inputId, owner, commands)
  return submitFor(state, seqno, { conversationId, input: Dialect.cancelInputOf(message), inputId }, owner, commands)
}

/** Submits in order (behind the start gate); the append `seqno` of this request owes on it, or, forwarded, the owner's. */
const submitFor = (state: SessionState, seqno: number | undefined, submission: Submission, owner: string, commands: Array<SessionCommand>) => {
  if (seqno !== undefined) return submitInOrder(state, seqno, submission, owner, commands)
  if (state.gate._tag === "Open") {
    commands.push(SessionCommand.Submit({ submission, owner }))
    return state
  }
  return { ...state, gate: { ...state.gate, queued: [...state.gate.queued, submission] } }
}

/** A message that gives no input: its append owes nothing (or, forwarded, its owner owes nothing on it). */
const released = (state: SessionState, seqno: number | undefined, inputId: string, owner: string, commands: Array<SessionCommand>): SessionState => {
  if (seqno !== undefined) return settle(state, seqno, commands)
  commands.push(SessionCommand.Release({ owner, inputId }))
  return state
}

const onRunRequest = (state: SessionState, seqno: number, run: RunRequest, commands: Array<SessionCommand>): SessionState => {
  const action = run.action
  switch (action._tag) {
    case "StartTurn":
    case "Summarize": {
      let next: SessionState = {
        ...state,
        run,
        conversationId: conversationOf(state.requestId, run),
        // A recovered turn may be running or ending already (this is its run request, re-sent).
        lifecycle: state.lifecycle._tag === "Open" ? Lifecycle.Running() : state.lifecycle,
        turnKey: action.userMessageId !== "" ? action.userMessageId : state.turnKey
      }
      const inputId = inputIdOf(next, seqno)
      // A summarize reads the context back too: its call must send the same system prompt (the rules) to hit the cache.
      const readContext = run.contextToFetch.length > 0 || run.pastChatsToRead.length > 0
      next = { ...owe(next, seqno, new Set([inputId]), commands), todos: Dialect.todosOf(run.conversationState) }
      if (!readContext) {
        commands.push(SessionCommand.StartTurn({ seqno, run, inputId, readContext, reads: [] }))
        return next
      }
      // One get_blob per part, answered by the client's KV results in later messages.
      let correlation = next.correlation
      const reads: Array<{ kvId: number; blobId: string }> = []
      const messages = []
      for (const ref of run.contextToFetch) {
        const sent = Dialect.encodeGetBlob(correlation, ref.blobId)
        correlation = sent.correlation
        reads.push({ kvId: sent.kvId, blobId: Dialect.bytesToHex(ref.blobId) })
        messages.push(sent.message)
      }
      commands.push(SessionCommand.Write({ messages }), SessionCommand.StartTurn({ seqno, run, inputId, readContext, reads }))
      return { ...next, correlation, gate: Gate.Reading({ inputId, queued: [] }) }
    }
    case "Resume":
      commands.push(SessionCommand.Resume())
      return { ...settle(state, seqno, commands), run, conversationId: conversationOf(state.requestId, run) }
    case "Unsupported":
      if (state.lifecycle._tag === "Running" || state.lifecycle._tag === "Ending") {
        // On a live request it must not end the running turn.
        commands.push(SessionCommand.Log({
          level: "info",
          message: `transport: ${state.requestId}: conversation action ${action.field} is not supported by this server yet; acknowledged, nothing changed`
        }))
        return settle(state, seqno, commands)
      }
      commands.push(SessionCommand.End({
        end: Dialect.EndStream.Error({ code: "unimplemented", message: `This server does not support conversation action ${action.field} yet.`, detail: undefined })
      }))
      return { ...settle(state, seqno, commands), run }
  }
}
