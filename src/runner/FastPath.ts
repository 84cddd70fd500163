/**
 * The delta fast path of a model stream (DESIGN.md §9): what one network read brings is
 * decoded, transitioned, encoded and written in the stream's own fiber, with no hand-off to
 * the conversation's actor, whenever that is safe.
 */
import { coalesceDeltas } from "../Llm.js"
import type { ResponseEvent } from "../Llm.js"
import { endsModelCall, Input } from "../Loop.js"
import type { RuntimeState } from "../Loop.js"
import { turnRefOf } from "./Actor.js"
import type { Actor, RunnerEnv } from "./Actor.js"

/**
 * The pure part of a model stream's events from `from` on: those the loop applies without a
 * commit (every event but a call's end, `endsModelCall`), folded into the runtime state with
 * what they emit; `applied` counts them. It stops before the first `Done` or `Error`, without
 * running the transition on it: `step` runs it, once, and commits what it decides.
 */
export const foldPure = (
  transition: RunnerEnv["transition"],
  start: RuntimeState,
  callId: string,
  events: ReadonlyArray<ResponseEvent>,
  from = 0
): { readonly runtime: RuntimeState; readonly emitted: ReadonlyArray<ResponseEvent>; readonly applied: number } => {
  let runtime = start
  const emitted: Array<ResponseEvent> = []
  let applied = 0
  for (let i = from; i < events.length; i++) {
    const event = events[i]!
    if (endsModelCall(event)) break
    const t = transition(runtime, Input.LlmEvent({ callId, event }))
    for (const e of t.emit) emitted.push(e)
    runtime = t.state
    applied++
  }
  return { runtime, emitted, applied }
}

/**
 * The delta fast path: a model stream's events applied in the stream's own fiber, as one plain
 * call, while the actor has nothing queued or in hand (`actor.pending === 0`, so no envelope
 * can be overtaken and `actor.state` is the state the actor would fold next). Only the events
 * `foldPure` takes (deltas: what `stepStream` folds without a commit) are applied; their emits
 * are published at once through `publishNow`. Returns how many of `events` were applied: the
 * rest (from the call's end, or all of them when the actor is busy or the turn's request is not
 * open) go to the actor in an envelope, in order after these.
 */
export const stepInline = (env: RunnerEnv, actor: Actor, callId: string, events: ReadonlyArray<ResponseEvent>, nowMs: number): number => {
  const acc = actor.state
  if (acc === undefined || actor.pending !== 0 || !env.isLive(actor)) return 0
  const { applied, emitted, runtime } = foldPure(env.transition, acc.runtime, callId, events)
  if (applied === 0) return 0
  // The transition is pure: when the request cannot take the frames now, nothing was changed.
  if (emitted.length > 0 && !env.gateway.publishNow(turnRefOf(runtime.committed), callId, coalesceDeltas(emitted), nowMs)) return 0
  actor.state = { runtime, version: acc.version }
  return applied
}
