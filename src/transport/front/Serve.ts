/**
 * One call's effect, served: run in a fiber of its own (`RunFork`), stopped when the client goes
 * away first; a Connect error is answered in the call's protocol and logged as a refusal, a
 * defect answered `internal` and logged; `onSuccess` answers the rest.
 */
import { Cause, Effect, Exit, Option } from "effect"
import type { Fiber } from "effect"
import { ConnectError } from "../Connect.js"
import type { CallKind, NodeRequest, NodeResponse, Protocol } from "./Wire.js"

/** Forks an effect in the front's fiber set (`FiberSet.makeRuntime`). */
export type RunFork = <A, E>(effect: Effect.Effect<A, E, never>) => Fiber.RuntimeFiber<A, E>

/** What a served call is: its name in the log, and its kind. */
export interface CallOf {
  readonly name: string
  readonly kind: CallKind
}

const headerOf = (request: NodeRequest, name: string): string => {
  const value = request.headers[name]
  return typeof value === "string" ? value : ""
}

/** A refused call: its answer in its protocol, and a warning in the log. */
export const refuse = (runFork: RunFork, protocol: Protocol, request: NodeRequest, response: NodeResponse, call: CallOf, error: ConnectError) => {
  protocol.error(response, call.kind, error)
  runFork(Effect.logWarning(`${call.name} refused: ${error.code}: ${error.message}`).pipe(
    Effect.annotateLogs({ requestId: headerOf(request, "x-request-id"), protocol: protocol.name })
  ))
}

export const serve = <A>(
  runFork: RunFork,
  protocol: Protocol,
  request: NodeRequest,
  response: NodeResponse,
  call: CallOf,
  effect: Effect.Effect<A, ConnectError>,
  onSuccess: (value: A) => void
) => {
  const fiber = runFork(effect)
  const onClose = () => {
    if (!response.writableEnded) fiber.unsafeInterruptAsFork(fiber.id())
  }
  response.once("close", onClose)
  fiber.addObserver((exit) => {
    response.off("close", onClose)
    if (Exit.isSuccess(exit)) return onSuccess(exit.value)
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure)) return refuse(runFork, protocol, request, response, call, failure.value)
    if (Cause.isInterruptedOnly(exit.cause)) return
    protocol.error(response, call.kind, new ConnectError("internal", `the ${call.name} request could not be handled`))
    runFork(Effect.logError(`${call.name} failed`, exit.cause))
  })
}
