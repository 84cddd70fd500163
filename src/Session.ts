/**
 * The Cursor turn session as a pure machine, the Loop's twin: `sessionTransition(state, input)`
 * gives the next state and the commands to carry out, in order. The state is one request's
 * (`session/State.ts`): lifecycle, ordered inbox, acknowledgements owed, start gate, queued next
 * turn, recovery marks. The inputs are the client's appends, the runner's speaking and the
 * turn's end, store answers and commits; the commands are plain data (submit an input,
 * acknowledge, deliver to a tool machine, start a turn, replay an end, wait, log). The driver
 * (`transport/`) owns the channels and carries the commands out; the rules are here, in
 * `session/`, and nowhere else.
 *
 * Rules this machine keeps, each guarded by a property test (`test/session/`):
 * - the client's messages are handed on once each, in seqno order, whatever order and however
 *   many times they arrive; one too far ahead is refused and changes nothing;
 * - an append is acknowledged once, only after what it carried was applied and every append
 *   before it was acknowledged (so a restart leaves no gap a re-send cannot fill);
 * - follow-ups and cancels sent while a run request's context is read go in after its start;
 * - a turn's end goes out once; a message queued while it ends starts the next turn on the stream;
 * - after a restart, each input is applied once across both processes, none lost.
 */
import { committed, delivered, dropHeld, openGate } from "./session/Owed.js"
import { append, answer, cancel, followUp } from "./session/Appends.js"
import { adoptHeld, passGap } from "./session/Gaps.js"
import type { SessionState } from "./session/State.js"
import { compaction, ended, mirrors, notice, readHistory, replays, spoke, turnReady, turnRefused } from "./session/Turns.js"
import { ending } from "./session/TurnEnd.js"
import { abortAll, childAttached, dispatch, onWorkDone, submissionOf } from "./session/ToolCalls.js"
import { SessionCommand } from "./session/Types.js"
import type { SessionInput, Step } from "./session/Types.js"

export * from "./session/State.js"
export * from "./session/Types.js"
export { questionsOf, refusesUnknown, unknownFarAhead } from "./session/Appends.js"
export { findTask, submissionOf, toolContext } from "./session/ToolCalls.js"
export type { ToolDone } from "./session/ToolCalls.js"

export const sessionTransition = (state: SessionState, input: SessionInput): Step => {
  switch (input._tag) {
    case "Append":
      return append(state, input)
    case "Delivered":
      return delivered(state, input.seqno, input.submissions)
    case "TurnReady":
      return turnReady(state, input.inputId, input.run, input.start)
    case "ReadHistory":
      return readHistory(state, input.inputId, input.blobIds)
    case "TurnRefused":
      return turnRefused(state, input.inputId, input.end)
    case "Notice":
      return notice(state, input.text)
    case "Forwarded":
      return forwarded(state, input)
    case "Committed":
      return committed(state, input.inputId)
    case "FlushGate": {
      const commands: Array<SessionCommand> = []
      return { state: state.gate._tag === "Flushing" ? openGate(state, commands) : state, commands }
    }
    case "PassGap":
      return passGap(state, input.committed, input.atMs, input.graceMs)
    case "AdoptHeld":
      return adoptHeld(state, input.window)
    case "Spoke":
      return spoke(state, input.turn)
    case "Dispatch": {
      const commands: Array<SessionCommand> = []
      return { state: dispatch(state, input.turn, input.dispatched, input.atMs, input.subagentModel, commands), commands }
    }
    case "WorkDone": {
      const commands: Array<SessionCommand> = []
      const advanced = onWorkDone(state, input.operationId, input.run, input.result, input.atMs, commands)
      if (advanced?.done !== undefined) commands.push(SessionCommand.Submit({ submission: submissionOf(advanced.done), owner: state.requestId }))
      return { state: advanced?.state ?? state, commands }
    }
    case "Abort": {
      const commands: Array<SessionCommand> = []
      return { state: abortAll(state, commands), commands }
    }
    case "Compaction":
      return compaction(state, input.progress)
    case "ChildAttached": {
      const commands: Array<SessionCommand> = []
      return { state: childAttached(state, input.toolCallId, input.child, commands), commands }
    }
    case "Ending":
      return ending(state, input)
    case "Ended":
      return ended(state, input.atMs)
    case "Replays":
      return replays(state, input.conversationId, input.turnKey, input.carried)
    case "Mirrors":
      return mirrors(state)
    case "DropHeld": {
      const commands: Array<SessionCommand> = []
      return { state: dropHeld(state, commands), commands }
    }
  }
}

/** A message of a request that resumes this session's turn, acted on here; what it owes, the resumer's. */
const forwarded = (state: SessionState, input: Extract<SessionInput, { readonly _tag: "Forwarded" }>): Step => {
  const commands: Array<SessionCommand> = []
  const { message, inputId, owner, seqno } = input
  switch (message._tag) {
    case "UserMessage":
      return { state: followUp(state, undefined, message, inputId, owner, commands), commands }
    case "Cancel":
      return { state: cancel(state, undefined, message, inputId, owner, commands), commands }
    default: {
      const answered = answer(state, seqno, message, inputId, owner, input.atMs, commands)
      if (answered.gave !== "delivering") commands.push(SessionCommand.Gave({ owner, seqno, submissions: answered.gave }))
      return { state: answered.state, commands }
    }
  }
}
