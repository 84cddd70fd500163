/**
 * The end of a turn on the wire, in the order Cursor's own server uses: the `set_blob` messages
 * for the blobs the client does not hold yet and `turn_ended` at once (Cursor shows the turn
 * done), then the checkpoint once every blob is acknowledged, then the end-stream frame (the
 * driver waits for the acknowledgements and a queued message: `transport/TurnEnd.ts`). A failed
 * or canceled turn ends at once. Once per turn.
 */
import * as Dialect from "../Dialect.js"
import { contextTokensOf, modeOfSettings } from "../Loop.js"
import type { ConversationState } from "../Loop.js"
import type { TurnRef } from "../Runner.js"
import { Lifecycle, type SessionState } from "./State.js"
import { toolContext } from "./ToolCalls.js"
import { NO_COMMANDS, SessionCommand, type SessionInput, type Step } from "./Types.js"

type Ending = Extract<SessionInput, { readonly _tag: "Ending" }>

export const ending = (state: SessionState, input: Ending): Step => {
  const lifecycle = state.lifecycle
  const turnId = input.turn.turnId
  if (lifecycle._tag === "Ended" || (lifecycle._tag === "Ending" && lifecycle.turnId === turnId)) return { state, commands: NO_COMMANDS }
  const replayed = lifecycle._tag === "Replaying"
  const end = Dialect.encodeTurnEnd({ ...state.correlation, usage: input.usage }, input.outcome)
  const next: SessionState = { ...state, lifecycle: Lifecycle.Ending({ turnId, replayed }), queuedTurnExpected: false, correlation: end.correlation }
  if (input.outcome._tag !== "Final") {
    return { state: next, commands: [SessionCommand.SendTurnEnd({ replayed, messages: end.messages, blobs: [], checkpoint: undefined, end: end.end })] }
  }
  const projected = projectTurn(next, input.turn, input.conversation, input.maxTokens)
  let correlation = next.correlation
  const blobs: Array<number> = []
  const messages = []
  for (const blob of projected.blobs) {
    const sent = Dialect.encodeSetBlob(correlation, blob)
    correlation = sent.correlation
    blobs.push(sent.kvId)
    messages.push(sent.message)
  }
  return {
    // A turn that follows on this stream builds on this checkpoint (its blobs are on their way).
    state: { ...next, correlation, lastCheckpoint: projected.checkpoint },
    commands: [SessionCommand.SendTurnEnd({ replayed, messages: [...messages, ...end.messages], blobs, checkpoint: projected.checkpoint, end: end.end })]
  }
}

/** The turn's checkpoint; without its run request (a turn recovered or replayed after a restart), from the committed settings and history. */
const projectTurn = (state: SessionState, turn: TurnRef, conversation: ConversationState, maxTokens: number) => {
  const run = state.run
  const action = run?.action
  const turnMessages = conversation.messages.slice(conversation.turnStart)
  const userMessage = state.queuedUserMessage ??
    (action?._tag === "StartTurn"
      ? { text: action.userMessage.text, messageId: action.userMessageId, mode: run?.mode ?? "agent" as const }
      : action?._tag === "Summarize"
      ? (action.userMessage === undefined
        ? undefined
        : { text: action.userMessage.text, messageId: action.userMessageId, mode: run?.mode ?? "agent" as const })
      : turnMessages.length === 0 && Dialect.userMessageIdOf(turn.settings) === ""
      // A turn that only summarized, ended by a process without its run request: it adds no turn.
      ? undefined
      : Dialect.turnUserMessageOf(turn.settings, turnMessages))
  return Dialect.projectCheckpoint({
    previous: state.lastCheckpoint ?? (run !== undefined ? run.conversationState : Dialect.carriedCheckpointOf(turn.settings)),
    requestId: state.requestId,
    userMessage,
    turnMessages,
    transcript: conversation.messages,
    cursorToolCalls: state.cursorToolCalls,
    pendingToolCalls: [],
    todos: state.todos,
    summaries: state.summaries,
    plans: state.plans,
    subagentRuns: state.subagentRuns,
    mode: modeOfSettings(conversation.settings ?? turn.settings),
    // The context meter: what the model sees now (the last request and its answer), not the turn's sum.
    usedTokens: contextTokensOf(conversation),
    maxTokens,
    workspaceUris: run?.workspace.workspacePaths ?? Dialect.workspacePathsOf(turn.settings),
    mcpTools: toolContext(state, turn).mcpTools
  })
}
