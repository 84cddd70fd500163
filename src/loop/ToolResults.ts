/**
 * The `ToolResult` input: a client's result for one of the tool calls the last answer named.
 * Results are matched by tool call id and appended in call order, whatever order they arrive
 * in; the next call is handed to the client once the previous one's result is in, and the model
 * is asked again once every call has its result.
 */
import type { ToolResultMessage } from "../Llm.js"
import { Command, settlesNothing } from "./Contract.js"
import type { Policy, Settles, Transition } from "./Contract.js"
import { appendMessages, appendQueued, heldAt } from "./State.js"
import type { RuntimeState } from "./State.js"
import { callLlm, settling, unchanged } from "./Steps.js"

export const onToolResult = (policy: Policy, state: RuntimeState, result: ToolResultMessage): Transition => {
  const committed = state.committed
  const waiting = committed.waiting
  if (committed.status !== "waitingClient" || waiting === null) return unchanged(state)
  // The first open call with this id; calls sharing an id (a provider bug) are answered in order.
  const position = waiting.toolCalls.findIndex((call, index) =>
    index >= waiting.appended && call.toolCall.id === result.toolCallId && heldAt(waiting, index) === undefined
  )
  // Unknown id, or every call with that id already answered.
  if (position < 0) return unchanged(state)
  // A result for a call not yet handed to the client is held; that call is then never sent.
  const settles: Settles = position < waiting.dispatched
    ? { operation: { operationId: waiting.toolCalls[position]!.operationId, result } }
    : settlesNothing

  const held = [...waiting.held, { position, result }]
  const ready: Array<ToolResultMessage> = []
  let appended = waiting.appended
  for (let next = held.find((h) => h.position === appended); next !== undefined; next = held.find((h) => h.position === appended)) {
    held.splice(held.indexOf(next), 1)
    ready.push(next.result)
    appended++
  }
  const settingsAfter = policy.settingsAfter
  const settings = settingsAfter === undefined || committed.settings === null ? committed.settings : ready.reduce(settingsAfter, committed.settings)
  const withResults = { ...appendMessages(committed, ready), settings }

  if (appended === waiting.toolCalls.length) {
    return settling(callLlm(policy, appendQueued({ ...withResults, waiting: null })), settles)
  }
  const stillWaiting = (dispatched: number): RuntimeState => ({
    ...state,
    committed: { ...withResults, waiting: { ...waiting, appended, dispatched, held } }
  })
  if (appended >= waiting.dispatched) {
    const next = waiting.toolCalls[appended]!
    return {
      state: stillWaiting(appended + 1),
      emit: [],
      command: Command.CallClient({ operationId: next.operationId, toolCall: next.toolCall, position: appended }),
      settles
    }
  }
  return { state: stillWaiting(waiting.dispatched), emit: [], command: Command.WaitInput(), settles }
}
