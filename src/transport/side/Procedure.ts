/**
 * A side procedure: a method, a path and what answers it. Two kinds: an `rpc` (a unary call of
 * Cursor's, served at the front door in whichever protocol the request speaks,
 * `front/Rpc.ts`: `unary` decodes the request and encodes the answer in the call's codec, `sink`
 * counts a telemetry body and answers an empty message) and an `http` route of the Effect app
 * (`rest`, a JSON answer to a plain GET; `otlpSink`, OTLP/HTTP's export).
 */
import { create, fromBinary, fromJson, toBinary, toJsonString } from "@bufbuild/protobuf"
import type { DescMessage, MessageShape } from "@bufbuild/protobuf"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect } from "effect"
import { walkUnknown } from "../../dialect/Unknowns.js"
import { sinkFor } from "../../Drift.js"
import { readBody } from "../Body.js"
import { ConnectError, errorResponse } from "../Connect.js"
import type { CatalogueOptions } from "./Catalogue.js"

export type Path = `/${string}`

/** A unary call as the front door read it: its message in its codec, and what the request said. */
export interface RpcCall {
  /** The request message: binary protobuf, or JSON text (`codec`). */
  readonly message: Uint8Array
  readonly codec: "proto" | "json"
  /** The client's deadline (`connect-timeout-ms`, `grpc-timeout`), when it states one. */
  readonly timeoutMs: number | undefined
  /** When the request arrived, in Unix milliseconds. */
  readonly receivedAtMs: number
  /** The request's `x-cursor-client-version`: a binary request's unknown fields are counted under it (`Drift.ts`). */
  readonly clientVersion?: string | undefined
  /** The request's `x-request-id` (a server stream's: Tab's fate reports name it). */
  readonly requestId?: string | undefined
}

/** An RPC's answer: the response message in the call's codec, or the error to answer. */
export type RpcServe = (call: RpcCall) => Effect.Effect<Uint8Array, ConnectError>

export type Procedure =
  | {
    readonly kind: "rpc"
    readonly method: "POST"
    readonly path: Path
    /** A sink: any body up to `maxSinkBytes`, never decoded; answered whatever it holds. */
    readonly sink: boolean
    readonly serve: (options: CatalogueOptions) => RpcServe
  }
  | {
    readonly kind: "http"
    readonly method: "GET" | "POST"
    readonly path: Path
    readonly handle: (options: CatalogueOptions) => (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<HttpServerResponse.HttpServerResponse>
  }

/** Telemetry bodies are bounded: a client that sends more is refused, not buffered. */
export const maxSinkBytes = 4 * 1024 * 1024

const isJson = (request: HttpServerRequest.HttpServerRequest) => (request.headers["content-type"] ?? "").includes("json")

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** A message in a codec. */
export const encodeIn = <Desc extends DescMessage>(codec: RpcCall["codec"], schema: Desc, message: MessageShape<Desc>): Uint8Array =>
  codec === "json" ? encoder.encode(toJsonString(schema, message)) : toBinary(schema, message)

/** A request message of `schema` in a codec, or undefined when the bytes are not one. */
const decodeIn = <Desc extends DescMessage>(codec: RpcCall["codec"], schema: Desc, bytes: Uint8Array): MessageShape<Desc> | undefined => {
  try {
    if (codec === "proto") return fromBinary(schema, bytes)
    const text = decoder.decode(bytes)
    return fromJson(schema, text === "" ? {} : JSON.parse(text), { ignoreUnknownFields: true })
  } catch {
    return undefined
  }
}

/** A unary call's error: the Connect error JSON with its status (`Connect.errorResponse`), for the Effect app's routes. */
export const unaryError = errorResponse

/**
 * `answer` gets the decoded request message and the call (its arrival time, its deadline); its
 * message is encoded in the call's codec.
 */
export const unary = <In extends DescMessage, Out extends DescMessage>(
  path: Path,
  requestSchema: In,
  responseSchema: Out,
  answer: (options: CatalogueOptions, receivedAtMs: number, message: MessageShape<In>, call: RpcCall) => Effect.Effect<MessageShape<Out>>
): Procedure => ({
  kind: "rpc",
  method: "POST",
  path,
  sink: false,
  serve: (options) => unaryServe(path, requestSchema, responseSchema, (message, call) => answer(options, call.receivedAtMs, message, call))
})

/** A unary call's answer: the request decoded (its unknown fields counted), `answer`'s message encoded, in the call's codec. */
export const unaryServe = <In extends DescMessage, Out extends DescMessage, E = never>(
  path: Path,
  requestSchema: In,
  responseSchema: Out,
  answer: (message: MessageShape<In>, call: RpcCall) => Effect.Effect<MessageShape<Out>, E>
) =>
(call: RpcCall): Effect.Effect<Uint8Array, ConnectError | E> => {
  const message = decodeRequest(path, requestSchema, call)
  return message instanceof ConnectError ? Effect.fail(message) : Effect.map(answer(message, call), (out) => encodeIn(call.codec, responseSchema, out))
}

/** A call's request message, its unknown fields counted (`Drift.ts`), or the error that it is not one. */
export const decodeRequest = <In extends DescMessage>(path: Path, requestSchema: In, call: RpcCall): MessageShape<In> | ConnectError => {
  const message = decodeIn(call.codec, requestSchema, call.message)
  // JSON drops unknown fields (`ignoreUnknownFields`): only a binary request has any to count.
  if (message !== undefined && call.codec === "proto") walkUnknown(requestSchema, message, sinkFor(call.clientVersion))
  return message === undefined ? new ConnectError("invalid_argument", `the request body of ${path} is not a valid ${requestSchema.typeName}`) : message
}

/** Accepts any body up to `maxSinkBytes` and answers an empty `responseSchema`. */
export const sink = <Out extends DescMessage>(path: Path, responseSchema: Out): Procedure => ({
  kind: "rpc",
  method: "POST",
  path,
  sink: true,
  serve: () => (call) => Effect.succeed(encodeIn(call.codec, responseSchema, create(responseSchema)))
})

/** OTLP/HTTP export: 200 with an empty body of the request's type (`{}` for JSON). */
export const otlpSink = (path: Path): Procedure => ({
  kind: "http",
  method: "POST",
  path,
  handle: () => (request) => {
    const answer = isJson(request)
      ? HttpServerResponse.unsafeJson({})
      : HttpServerResponse.uint8Array(new Uint8Array(), { contentType: request.headers["content-type"] ?? "application/x-protobuf" })
    // Only a body over the limit is refused: what it holds is never looked at.
    return readBody(request, maxSinkBytes).pipe(
      Effect.as(answer),
      Effect.catchAll((error) =>
        Effect.succeed(error.code === "resource_exhausted" ? unaryError(new ConnectError("resource_exhausted", `the body of ${path} exceeds ${maxSinkBytes} bytes`)) : answer))
    )
  }
})

/** A plain `GET` answered with JSON. */
export const rest = (path: Path, answer: (options: CatalogueOptions) => unknown): Procedure => ({
  kind: "http",
  method: "GET",
  path,
  handle: (options) => () => Effect.sync(() => HttpServerResponse.unsafeJson(answer(options)))
})
