/**
 * The Cursor turn session as a pure machine, the Loop's twin: `sessionTransition(state, input)`
 * gives the next state and the commands to carry out, in order. The state is one request's
 * (`session/State.ts`): lifecycle, ordered inbox, acknowledgements owed, start gate, queued next
 * turn, recovery marks. The inputs are the client's appends, the runner's speaking and the
 * turn's end, store answers and commits; the commands are plain data (submit an input,
 * acknowledge, deliver to a tool machine, start a turn, replay an end, wait, log). The driver
 * (`transport/`) owns the channels and carries the commands out; the rules are here, in
 * `session/`, and nowhere else.
 */
import { committed, delivered, dropHeld, openGate } from "./session/Owed.js"
import { append, cancel, followUp } from "./session/Appends.js"
import { adoptHeld, passGap } from "./session/Gaps.js"
import type { SessionState } from "./session/State.js"
import { ended, ending, mirrors, replays, spoke, turnReady } from "./session/Turns.js"
import type { SessionCommand, SessionInput, Step } from "./session/Types.js"

export * from "./session/State.js"
export * from "./session/Types.js"
export { questionsOf, refusesUnknown, unknownFarAhead } from "./session/Appends.js"

export const sessionTransition = (state: SessionState, input: SessionInput): Step => {
  switch (input._tag) {
    case "Append":
      return append(state, input)
    case "Delivered":
      return delivered(state, input.seqno, input.submissions)
    case "TurnReady":
      return turnReady(state, input.inputId, input.run, input.start)
    case "Forwarded": {
      const commands: Array<SessionCommand> = []
      const message = input.message
      const next = message._tag === "UserMessage"
        ? followUp(state, undefined, message, input.inputId, input.owner, commands)
        : message._tag === "Cancel"
        ? cancel(state, undefined, message, input.inputId, input.owner, commands)
        : state
      return { state: next, commands }
    }
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
    case "Ending":
      return ending(state, input.turnId)
    case "Ended":
      return ended(state, input.atMs)
    case "Replays":
      return replays(state, input.conversationId, input.turnKey)
    case "Mirrors":
      return mirrors(state)
    case "DropHeld": {
      const commands: Array<SessionCommand> = []
      return { state: dropHeld(state, commands), commands }
    }
  }
}
