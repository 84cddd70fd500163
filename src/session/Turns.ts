/**
 * The turn's side of the session: the runner speaking for a turn (the first time, a turn
 * recovered after a restart, the next turn a queued message started on the same stream), the
 * turn's start once its context is read, a replay of an earlier process's end, and a request
 * that mirrors another's turn. (Its end is `TurnEnd.ts`.)
 */
import * as Dialect from "../Dialect.js"
import type { ConversationStateStructure } from "../gen/agent/v1/agent_pb.js"
import type { CompactionProgress, TurnRef } from "../Runner.js"
import { committed, dropHeld, openGate } from "./Owed.js"
import { Gate, isEnded, Lifecycle, type SessionState, type Submission } from "./State.js"
import { NO_COMMANDS, SessionCommand, type Step } from "./Types.js"

/**
 * The runner speaks for `turn`. An open session starts running it (a turn recovered after a
 * restart takes its conversation and turn key from the turn's settings); an ending one whose
 * user queued a message runs the next turn on the same stream. A recovered turn whose client's
 * appends were held before it spoke adopts them; one whose client has sent none yet adopts the
 * first that comes. Unchanged (the same state, no commands) in the common case: a running turn
 * speaking again.
 */
export const spoke = (state: SessionState, turn: TurnRef): Step => {
  const lifecycle = state.lifecycle
  let next = state
  let commands: Array<SessionCommand> | undefined
  if (lifecycle._tag === "Open") {
    if (state.run === undefined) {
      // A turn recovered after a restart: its todos start from what the run request's checkpoint held;
      // the client's follow-ups and cancels go to its conversation, under the input ids the previous
      // process gave them, so one it applied already is skipped.
      const userMessageId = Dialect.userMessageIdOf(turn.settings)
      next = {
        ...next,
        conversationId: turn.conversationId,
        turnKey: userMessageId !== "" ? userMessageId : next.turnKey,
        todos: Dialect.todosOf(Dialect.carriedCheckpointOf(turn.settings))
      }
    }
    next = { ...next, lifecycle: Lifecycle.Running(), turnId: turn.turnId }
  } else if (lifecycle._tag === "Ending" && !lifecycle.replayed && lifecycle.turnId !== turn.turnId) {
    // A queued message started the next turn on this stream: it has its own tool calls and checkpoint.
    next = {
      ...next,
      lifecycle: Lifecycle.Running(),
      turnId: turn.turnId,
      queuedTurnExpected: false,
      cursorToolCalls: {},
      summaries: [],
      plans: [],
      subagentRuns: [],
      operations: new Map()
    }
    commands = [SessionCommand.NextTurn()]
  } else if (lifecycle._tag === "Running" && state.turnId !== turn.turnId) {
    next = { ...next, turnId: turn.turnId }
  }
  const inbox = next.inbox
  if (next.run === undefined && inbox.next === 0 && inbox.recovered === undefined) {
    if (inbox.held.size > 0) (commands ??= []).push(SessionCommand.AdoptHeld())
    else if (!next.recovery.adoptFirstAppend) next = { ...next, recovery: { ...next.recovery, adoptFirstAppend: true } }
  }
  return { state: next, commands: commands ?? NO_COMMANDS }
}

/** The end-stream frame is written. */
export const ended = (state: SessionState, atMs: number): Step => {
  const lifecycle = state.lifecycle
  const replayed = lifecycle._tag === "Replaying" || (lifecycle._tag === "Ending" && lifecycle.replayed) ||
    (lifecycle._tag === "Ended" && lifecycle.replayed)
  return { state: { ...state, lifecycle: Lifecycle.Ended({ atMs, replayed }) }, commands: NO_COMMANDS }
}

/**
 * The end of a turn an earlier process ended is replayed on this session: the appends held so
 * far were that turn's (re-sent), acknowledged now and never applied; the inbox starts afresh.
 */
export const replays = (state: SessionState, conversationId: string, turnKey: string | undefined, carried: ConversationStateStructure | undefined): Step => {
  const commands: Array<SessionCommand> = []
  const next = dropHeld(state, commands)
  return {
    state: {
      ...next,
      lifecycle: Lifecycle.Replaying(),
      conversationId,
      turnKey: turnKey ?? next.turnKey,
      inbox: { next: 0, held: new Map() },
      todos: Dialect.todosOf(carried)
    },
    commands
  }
}

/** This request mirrors the turn of another (`resume_action` on a turn in flight): its follow-ups and cancels go there. */
export const mirrors = (state: SessionState): Step => ({ state: { ...state, lifecycle: Lifecycle.Running(), resumes: true }, commands: NO_COMMANDS })

/**
 * A run request's turn is ready (its context read back): its start is submitted, and follow-ups
 * wait behind the gate until it commits. Nothing to start (the session ended meanwhile, or the
 * request starts no turn): the run request owes nothing more, and what queued goes in.
 */
export const turnReady = (state: SessionState, inputId: string, run: Dialect.RunRequest, start: Submission | undefined): Step => {
  if (start === undefined || isEnded(state)) return startsNothing(state, inputId)
  const gate = state.gate
  const next: SessionState = {
    ...state,
    run,
    gate: gate._tag === "Reading" && gate.inputId === inputId ? Gate.Starting({ inputId, queued: gate.queued }) : gate
  }
  return { state: next, commands: [SessionCommand.Submit({ submission: start, owner: state.requestId })] }
}

/** A word for the user ahead of the turn's frames, as a server notice; nothing once the stream has ended. */
export const notice = (state: SessionState, text: string): Step =>
  ({ state, commands: isEnded(state) ? [] : [SessionCommand.Write({ messages: [Dialect.encodeServerNotice(text)] })] })

/** What a summarize of a short conversation shows: nothing was changed. */
const NOTHING_TO_SUMMARIZE = "Nothing to summarize yet: the conversation is short enough to keep whole."

/** A compaction's progress as Cursor shows it; a completed one's summary is kept for the turn's checkpoint. */
export const compaction = (state: SessionState, progress: CompactionProgress): Step => {
  switch (progress._tag) {
    case "Started":
      return { state, commands: [SessionCommand.Write({ messages: [Dialect.encodeSummaryStarted()] })] }
    case "Completed":
      return {
        state: {
          ...state,
          summaries: [...state.summaries, { summary: progress.summary, summarized: progress.summarized, windowTail: progress.kept, summaryMessage: progress.summaryMessage }]
        },
        commands: [SessionCommand.Write({ messages: [Dialect.encodeSummary(progress.summary), Dialect.encodeSummaryCompleted()] })]
      }
    case "Failed":
      return {
        state,
        commands: [
          SessionCommand.Log({ level: "warning", message: `transport: ${state.requestId}: the ${progress.trigger} summary failed: ${progress.error}` }),
          // A summary the user asked for fails the turn, which says why; an automatic one goes on without it.
          SessionCommand.Write({
            messages: [
              Dialect.encodeSummaryCompleted(),
              ...(progress.trigger === "auto"
                ? [Dialect.encodeServerNotice(`(The conversation could not be summarized to free context: ${progress.error}. Continuing with the whole conversation.)\n\n`)]
                : [])
            ]
          })
        ]
      }
    case "Skipped":
      return {
        state,
        commands: [SessionCommand.Write({ messages: [Dialect.encodeSummaryStarted(), Dialect.encodeSummary(NOTHING_TO_SUMMARIZE), Dialect.encodeSummaryCompleted()] })]
      }
  }
}

/** The run request starts nothing: it owes nothing more, and what queued behind its gate goes in. */
const startsNothing = (state: SessionState, inputId: string): Step => {
  const done = committed(state, inputId)
  const commands = [...done.commands]
  const gate = done.state.gate
  const next = gate._tag === "Reading" && gate.inputId === inputId ? openGate(done.state, commands) : done.state
  return { state: next, commands }
}

/**
 * The history the run request's checkpoint names is only the client's: one get_blob per blob,
 * written now (`AwaitBlobs` first, so the driver waits for their answers before they can
 * come); follow-ups and cancels wait behind the start gate meanwhile.
 */
export const readHistory = (state: SessionState, inputId: string, blobIds: ReadonlyArray<Uint8Array>): Step => {
  let correlation = state.correlation
  const reads: Array<{ kvId: number; blobId: string }> = []
  const messages = []
  for (const blobId of blobIds) {
    const sent = Dialect.encodeGetBlob(correlation, blobId)
    correlation = sent.correlation
    reads.push({ kvId: sent.kvId, blobId: Dialect.bytesToHex(blobId) })
    messages.push(sent.message)
  }
  const gate = state.gate._tag === "Open" ? Gate.Reading({ inputId, queued: [] }) : state.gate
  return { state: { ...state, correlation, gate }, commands: [SessionCommand.AwaitBlobs({ reads }), SessionCommand.Write({ messages })] }
}

/**
 * The run request's turn cannot start (the client did not give its history back): nothing is
 * submitted, the run request owes nothing more, and the stream ends with `end`.
 */
export const turnRefused = (state: SessionState, inputId: string, end: Dialect.EndStream): Step => {
  const done = startsNothing(state, inputId)
  return { state: done.state, commands: isEnded(state) ? done.commands : [...done.commands, SessionCommand.End({ end })] }
}
