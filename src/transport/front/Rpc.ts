/**
 * Cursor's side calls (model lists, server config, clock, naming, telemetry sinks: the table is
 * `SideRpcs.ts`; Tab's: `side/Tab.ts`) at the front door, in whichever protocol the request
 * speaks: the body read into the call's one message, the answer (or a server stream's
 * messages, each written as it comes) or the error written back the same way.
 */
import { Clock, Effect } from "effect"
import { clientVersionOf } from "../../Drift.js"
import { ConnectError, endStreamFrame, envelope, parseEnvelopes } from "../Connect.js"
import type { RpcCall, RpcServe } from "../side/Procedure.js"
import type { NodeRequest, NodeResponse, Protocol } from "./Wire.js"
import { refuse, serve } from "./Serve.js"
import type { RunFork } from "./Serve.js"
import { timeoutMsOf } from "./Status.js"

/**
 * A server stream's answer: `emit` writes one response message (in the call's codec) at once,
 * the stream's head before the first; the effect's end is the stream's end (its error, the
 * end-stream's). Interrupted when the client goes away.
 */
export type RpcStream = (call: RpcCall, emit: (message: Uint8Array) => void) => Effect.Effect<void, ConnectError>

/** A procedure at the door: a unary call (`serve`), or a server stream (`stream`: one message in, messages out). */
export type RpcRoute =
  | {
    /** A sink: its body is never decoded, and only one past the limit is refused. */
    readonly sink: boolean
    readonly serve: RpcServe
    readonly stream?: undefined
  }
  | { readonly stream: RpcStream }

/** Serves one RPC of the table at its path. */
export type RpcWire = (route: RpcRoute, path: string, protocol: Protocol, request: NodeRequest, response: NodeResponse) => void

/** A side call's body is bounded: a client that sends more is refused, not buffered. */
export const RPC_MAX_BYTES = 4 * 1024 * 1024

export const make = (runFork: RunFork): RpcWire => (route, path, protocol, request, response) => {
  if (route.stream !== undefined) return serveStream(runFork, route.stream, path, protocol, request, response)
  const { serve: answer, sink } = route
  const call = { name: path.slice(path.lastIndexOf("/") + 1) || path, kind: "unary" as const }
  protocol.read(request, RPC_MAX_BYTES, "unary", (body) => {
    if (body instanceof ConnectError && !(sink && body.code !== "resource_exhausted")) {
      return refuse(runFork, protocol, request, response, call, body)
    }
    const message = body instanceof ConnectError ? new Uint8Array(0) : body
    const timeoutMs = timeoutMsOf(request.headers)
    const answered = Effect.flatMap(Clock.currentTimeMillis, (receivedAtMs) => answer({ message, codec: protocol.codec, timeoutMs, receivedAtMs, clientVersion: clientVersionOf(request.headers) }))
    serve(runFork, protocol, request, response, call, answered, (bytes) => protocol.answer(response, bytes))
  })
}

/** A server stream: its one request message read from its envelope, its messages written as `stream` emits them. */
const serveStream = (runFork: RunFork, stream: RpcStream, path: string, protocol: Protocol, request: NodeRequest, response: NodeResponse) => {
  const call = { name: path.slice(path.lastIndexOf("/") + 1) || path, kind: "stream" as const }
  protocol.read(request, RPC_MAX_BYTES, "stream", (body) => {
    const message = body instanceof ConnectError ? body : oneMessage(body)
    if (message instanceof ConnectError) return refuse(runFork, protocol, request, response, call, message)
    let opened = false
    const emit = (bytes: Uint8Array) => {
      if (!opened) {
        opened = true
        protocol.open(response)
      }
      protocol.write(response, [envelope(0, bytes)])
    }
    const timeoutMs = timeoutMsOf(request.headers)
    const served = Effect.flatMap(Clock.currentTimeMillis, (receivedAtMs) =>
      stream({ message, codec: protocol.codec, timeoutMs, receivedAtMs, clientVersion: clientVersionOf(request.headers), requestId: headerOf(request, "x-request-id") }, emit))
    serve(runFork, protocol, request, response, call, Effect.tapError(served, (error) => Effect.sync(() => {
      // Once the stream began, its error is its end-stream; before, the call's error as the protocol answers one.
      if (opened) protocol.fail(response, error)
    })), () => {
      if (!opened) protocol.open(response)
      protocol.write(response, [endStreamFrame()])
      protocol.end(response)
    })
  })
}

/** A stream request's one message (its envelope's payload, inflated). */
const oneMessage = (body: Uint8Array): Uint8Array | ConnectError => {
  const envelopes = parseEnvelopes(body, RPC_MAX_BYTES)
  if (envelopes instanceof ConnectError) return envelopes
  const first = envelopes[0]
  return envelopes.length === 1 && first !== undefined ? first.payload : new ConnectError("invalid_argument", `a server-streaming call takes one request message; this one has ${envelopes.length}`)
}

const headerOf = (request: NodeRequest, name: string): string | undefined => {
  const value = request.headers[name]
  return typeof value === "string" ? value : undefined
}
