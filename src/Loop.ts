/**
 * The agent loop as one pure function: `transition(state, input) -> { state, emit, command, settles }`.
 *
 * The model only names tools; the loop decides what happens next. A turn starts with a user
 * message, asks the model, runs the tool calls it names one at a time on the client, appends
 * their results, and asks again until the model answers without tools. The outer runner
 * performs each `Command` and feeds what comes back (stream events, tool results, user
 * messages, cancels) in as the next `Input`.
 *
 * A long conversation is compacted: before a call whose estimated prompt passes a share of the
 * model's window (or once after the provider refused it as too long, or when the user asks),
 * a summary call sends the same prefix plus an instruction, and its summary opens a new history
 * segment [summary, verbatim tail]. A client whose checkpoint names a strict prefix of the
 * history (an edited earlier message, a restored checkpoint) rewinds it: a new segment holds
 * that prefix. The journal itself is never rewritten (the store appends each segment).
 *
 * Rules this module keeps, each guarded by a property test:
 * - history (`messages`, the current segment) is append-only; streamed deltas live in
 *   `pending` (memory only) and the one assistant message committed per model call is the
 *   one in `Done` (a summary call's answer becomes the new segment's summary instead);
 * - within a segment each request's messages extend the previous request's; a new segment
 *   opens at the journal's end, its tail verbatim and never starting with a tool result;
 * - an automatic compaction is tried at most once until an answer commits (never loops);
 * - a `length` stop never runs its (possibly truncated) tool calls;
 * - tool calls run one at a time in content order, and their results are appended in that
 *   order, matched by tool call id, whatever order they arrive in;
 * - errors and aborts never become assistant messages (a call a new turn supersedes keeps the
 *   text it had streamed, as its partial answer before the new turn's message);
 * - duplicate and late inputs change nothing;
 * - of a model stream, only the call's end (`Done`, `Error`) changes the committed state: a
 *   runner applies the other events without a commit (`endsModelCall`);
 * - ids are derived from the state, never from a clock or a random source.
 *
 * What goes in and comes out is the contract in `loop/Contract.ts`: the `Input`s named above, the
 * `Command`s the runner performs (call the model, call the client, wait, end the turn), and what
 * each input settles of the work in flight (the model call it ends, the client operation a tool
 * result completes, where a compaction stands: `loop/Compactions.ts`), decided here so that the
 * runner records it and derives nothing. The transitions live beside it by input kind: `loop/Turns.ts` (Start, Summarize, UserMessage,
 * Cancel), `loop/ModelEvents.ts` (LlmEvent), `loop/ToolResults.ts` (ToolResult), and the steps
 * they end in, `loop/Steps.ts` (ask the model, compact first, end the step).
 *
 * No I/O, no services, no clock: it imports `effect` data modules, `Llm.ts` and its own
 * `loop/` (the contract, the state and its operations, segments and their pure choices, the
 * transitions by input kind).
 */
import type { Input, Policy, Transition } from "./loop/Contract.js"
import type { RuntimeState } from "./loop/State.js"
import { compactionOf } from "./loop/Compactions.js"
import { onLlmEvent } from "./loop/ModelEvents.js"
import { summarizeSettings } from "./loop/Steps.js"
import { onToolResult } from "./loop/ToolResults.js"
import { onCancel, onStart, onSummarize, onUserMessage } from "./loop/Turns.js"

export * from "./loop/Contract.js"
export * from "./loop/Segments.js"
export * from "./loop/State.js"
export { CUT_OFF_RESULT, endsModelCall } from "./loop/ModelEvents.js"
export { CANCELED_RESULT, SUPERSEDED_REASON, SUPERSEDED_RESULT } from "./loop/Turns.js"

/** The loop, for a policy: one pure function from a state and an input to the next transition. */
export const makeTransition = (policy: Policy) => (state: RuntimeState, input: Input): Transition => {
  const t = step(policy, state, input)
  // Where a compaction stands after it (most inputs: nowhere, and nothing is allocated).
  const compaction = compactionOf(state.committed, input, t)
  return compaction === undefined ? t : { ...t, settles: { ...t.settles, compaction } }
}

const step = (policy: Policy, state: RuntimeState, input: Input): Transition => {
  switch (input._tag) {
    // A new turn (superseding a running one), or one that only compacts the history.
    case "Start": return onStart(policy, state, input.message, input.context, input.settings, input.clientHistory)
    // Its summary call keeps the conversation's prompt and tools, whatever context the request carried.
    case "Summarize": return onSummarize(policy, state, input.instructions, summarizeSettings(state.committed.settings, input.settings), input.clientHistory)
    // A model stream's event: a delta to show, or the call's end (an answer to commit, an error).
    case "LlmEvent": return onLlmEvent(policy, state, input.callId, input.event)
    // A client's result for a tool call: appended in call order, then the next call or the model again.
    case "ToolResult": return onToolResult(policy, state, input.message)
    // Mid-turn it waits for the step's end; between turns it starts the next.
    case "UserMessage": return onUserMessage(policy, state, input.message)
    case "Cancel": return onCancel(state, input.reason)
  }
}
