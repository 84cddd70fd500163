/**
 * Cursor's unary side calls (model lists, server config, clock, naming, telemetry sinks: the
 * table is `SideRpcs.ts`) at the front door, in whichever protocol the request speaks: the
 * body read into the call's one message, the answer or the error written back the same way.
 */
import { Clock, Effect } from "effect"
import { clientVersionOf } from "../../Drift.js"
import { ConnectError } from "../Connect.js"
import type { RpcServe } from "../side/Procedure.js"
import type { NodeRequest, NodeResponse, Protocol } from "./Wire.js"
import { refuse, serve } from "./Serve.js"
import type { RunFork } from "./Serve.js"
import { timeoutMsOf } from "./Status.js"

export interface RpcRoute {
  /** A sink: its body is never decoded, and only one past the limit is refused. */
  readonly sink: boolean
  readonly serve: RpcServe
}

/** Serves one RPC of the table at its path. */
export type RpcWire = (route: RpcRoute, path: string, protocol: Protocol, request: NodeRequest, response: NodeResponse) => void

/** A side call's body is bounded: a client that sends more is refused, not buffered. */
export const RPC_MAX_BYTES = 4 * 1024 * 1024

export const make = (runFork: RunFork): RpcWire => (route, path, protocol, request, response) => {
  const call = { name: path.slice(path.lastIndexOf("/") + 1) || path, kind: "unary" as const }
  protocol.read(request, RPC_MAX_BYTES, "unary", (body) => {
    if (body instanceof ConnectError && !(route.sink && body.code !== "resource_exhausted")) {
      return refuse(runFork, protocol, request, response, call, body)
    }
    const message = body instanceof ConnectError ? new Uint8Array(0) : body
    const timeoutMs = timeoutMsOf(request.headers)
    const answered = Effect.flatMap(Clock.currentTimeMillis, (receivedAtMs) => route.serve({ message, codec: protocol.codec, timeoutMs, receivedAtMs, clientVersion: clientVersionOf(request.headers) }))
    serve(runFork, protocol, request, response, call, answered, (bytes) => protocol.answer(response, bytes))
  })
}
