/**
 * ACKNOWLEDGING AN APPEND. The client re-sends only the appends it holds no acknowledgement
 * for, so an acknowledgement promises that what the append carried survives a crash. An append
 * is acknowledged once it was handed on in seqno order (a held one waits for its gap), the
 * inputs it carried (a run request, a follow-up, a cancel, the exec answer that completes a tool
 * call) were applied, and every append before it was acknowledged: what the client holds
 * acknowledged is always a prefix, so after a restart it re-sends a suffix and the new process
 * finds no gap the old one made (a heartbeat acknowledged while the run request before it had
 * not committed would leave one that no re-send fills). Until then it is `owed`; a copy that
 * arrives meanwhile waits for the same acknowledgement, one that arrives after is acknowledged
 * at once. The appends of a turn that is over and will never take them are acknowledged
 * unapplied (`dropHeld`).
 *
 * The start gate: while a run request's context is read back and its start commits, follow-ups
 * and cancels queue, and are submitted in order once it committed.
 */
import { Gate, type Owed, type SessionState, type Submission } from "./State.js"
import { NO_COMMANDS, SessionCommand, type Step } from "./Types.js"

/** Records what append `seqno` now owes; an empty set of input ids means nothing: it is acknowledged. */
export const owe = (state: SessionState, seqno: number, owed: Owed, commands: Array<SessionCommand>): SessionState => {
  if (typeof owed !== "string" && owed.size === 0) return settle(state, seqno, commands)
  const next = new Map(state.owed)
  next.set(seqno, owed)
  return { ...state, owed: next }
}

/**
 * Append `seqno` owes nothing more of its own: acknowledged now when no append before it is
 * owed (with the ones after it that waited only for it), else `behind` them.
 */
export const settle = (state: SessionState, seqno: number, commands: Array<SessionCommand>): SessionState => {
  const owed = state.owed
  if (owed.size === 0) return state
  let lowest = Infinity
  for (const owing of owed.keys()) if (owing < lowest && owing !== seqno) lowest = owing
  if (lowest < seqno) {
    if (owed.get(seqno) === "behind") return state
    const next = new Map(owed)
    next.set(seqno, "behind")
    return { ...state, owed: next }
  }
  if (!owed.has(seqno)) return state
  const next = new Map(owed)
  next.delete(seqno)
  commands.push(SessionCommand.Ack({ seqno }))
  // The appends after it that waited only for the ones before them, in order up to the next still owed.
  const after = [...next.keys()].sort((a, b) => a - b)
  for (const owing of after) {
    if (next.get(owing) !== "behind") break
    next.delete(owing)
    commands.push(SessionCommand.Ack({ seqno: owing }))
  }
  return { ...state, owed: next }
}

/** Submits `submission` now, or queues it behind the start gate; append `seqno` owes its commit. */
export const submitInOrder = (state: SessionState, seqno: number, submission: Submission, owner: string, commands: Array<SessionCommand>): SessionState => {
  const gate = state.gate
  const owing = owe(state, seqno, addTo(state.owed.get(seqno), submission.inputId), commands)
  if (gate._tag === "Open") {
    commands.push(SessionCommand.Submit({ submission, owner }))
    return owing
  }
  return { ...owing, gate: { ...gate, queued: [...gate.queued, submission] } }
}

const addTo = (owed: Owed | undefined, inputId: string): ReadonlySet<string> =>
  owed === undefined || typeof owed === "string" ? new Set([inputId]) : new Set(owed).add(inputId)

/** The runner applied `inputId`: the appends that waited only for it are acknowledged; a start it was lets what queued go in. */
export const committed = (state: SessionState, inputId: string): Step => {
  const commands: Array<SessionCommand> = []
  let next = state
  for (const [seqno, owed] of state.owed) {
    if (typeof owed === "string" || !owed.has(inputId)) continue
    const left = new Set(owed)
    left.delete(inputId)
    next = owe(next, seqno, left, commands)
  }
  const gate = next.gate
  if (gate._tag === "Starting" && gate.inputId === inputId) {
    // A commit is reported outside the request's lock: what queued goes in under it (`FlushGate`).
    next = { ...next, gate: Gate.Flushing({ queued: gate.queued }) }
    commands.push(SessionCommand.FlushGate())
  }
  return { state: next, commands: commands.length === 0 ? NO_COMMANDS : commands }
}

/** Opens the start gate: what queued behind it is submitted, in order. */
export const openGate = (state: SessionState, commands: Array<SessionCommand>): SessionState => {
  const gate = state.gate
  if (gate._tag === "Open") return state
  for (const submission of gate.queued) commands.push(SessionCommand.Submit({ submission, owner: state.requestId }))
  return { ...state, gate: Gate.Open() }
}

/**
 * The driver carried out a delivered message: the append now owes the commits of the inputs it
 * gave (tool results, subagent cancels), submitted at once: they follow no run request's start.
 */
export const delivered = (state: SessionState, seqno: number, submissions: ReadonlyArray<Submission>): Step => {
  const commands: Array<SessionCommand> = []
  if (submissions.length === 0) return { state: settle(state, seqno, commands), commands }
  const owed = new Map(state.owed)
  owed.set(seqno, new Set(submissions.map((submission) => submission.inputId)))
  for (const submission of submissions) commands.push(SessionCommand.Submit({ submission, owner: state.requestId }))
  return { state: { ...state, owed }, commands }
}

/**
 * The held appends of a turn that is over (its end replayed, or its request id reused for a
 * new turn): never to be handed on, they are acknowledged, as every later append of that turn.
 */
export const dropHeld = (state: SessionState, commands: Array<SessionCommand>): SessionState => {
  const owed = new Map(state.owed)
  for (const [seqno, owing] of state.owed) {
    if (!state.inbox.held.has(seqno) && owing !== "behind") continue
    owed.delete(seqno)
    commands.push(SessionCommand.Ack({ seqno }))
  }
  return owed.size === state.owed.size ? state : { ...state, owed }
}
