/**
 * A side procedure: a method, a path and a handler built from the catalogue. Three kinds:
 * `unary` (a Connect unary call whose request is decoded and whose answer is in the request's
 * codec), `sink` (a telemetry call whose body is counted, never decoded, and answered with an
 * empty message) and `rest` (a JSON answer to a plain HTTP call).
 */
import { create, fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf"
import type { DescMessage, MessageShape } from "@bufbuild/protobuf"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Clock, Effect } from "effect"
import { readBody } from "../Body.js"
import { ConnectError, errorResponse } from "../Connect.js"
import type { CatalogueOptions } from "./Catalogue.js"

export type Path = `/${string}`

export interface Procedure {
  readonly method: "GET" | "POST"
  readonly path: Path
  readonly handle: (options: CatalogueOptions) => (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<HttpServerResponse.HttpServerResponse>
}

/** Telemetry bodies are bounded: a client that sends more is refused, not buffered. */
export const maxSinkBytes = 4 * 1024 * 1024

const isJson = (request: HttpServerRequest.HttpServerRequest) => (request.headers["content-type"] ?? "").includes("json")

/** A unary Connect response in the codec the request used (binary protobuf, or JSON). */
export const respond = <Desc extends DescMessage>(request: HttpServerRequest.HttpServerRequest, schema: Desc, message: MessageShape<Desc>) =>
  isJson(request)
    ? HttpServerResponse.unsafeJson(toJson(schema, message))
    : HttpServerResponse.uint8Array(toBinary(schema, message), { contentType: "application/proto" })

/** A unary call's error: the Connect error JSON with its status (`Connect.errorResponse`). */
export const unaryError = errorResponse

/** Reads a unary request of `schema`: the message, or `undefined` when the body is not one. */
const readUnary = <Desc extends DescMessage>(request: HttpServerRequest.HttpServerRequest, schema: Desc) =>
  Effect.gen(function*() {
    const body = new Uint8Array(yield* request.arrayBuffer.pipe(Effect.orElseSucceed(() => new ArrayBuffer(0))))
    try {
      if (isJson(request)) {
        const text = new TextDecoder().decode(body)
        return fromJson(schema, text === "" ? {} : JSON.parse(text), { ignoreUnknownFields: true })
      }
      return fromBinary(schema, body)
    } catch {
      return undefined
    }
  })

const tooLarge = (path: Path) => unaryError(new ConnectError("resource_exhausted", `the body of ${path} exceeds ${maxSinkBytes} bytes`))

/** A sink's answer once its body is read (and dropped); only a body over the limit is refused: what it holds is never looked at. */
const sinking = (path: Path, request: HttpServerRequest.HttpServerRequest, answer: HttpServerResponse.HttpServerResponse) =>
  readBody(request, maxSinkBytes).pipe(
    Effect.as(answer),
    Effect.catchAll((error) => Effect.succeed(error.code === "resource_exhausted" ? tooLarge(path) : answer))
  )

/**
 * `answer` gets the time the request arrived, in Unix milliseconds (from `Clock`), the decoded
 * request message, and the HTTP request (for its headers).
 */
export const unary = <In extends DescMessage, Out extends DescMessage>(
  path: Path,
  requestSchema: In,
  responseSchema: Out,
  answer: (
    options: CatalogueOptions,
    receivedAtMs: number,
    message: MessageShape<In>,
    request: HttpServerRequest.HttpServerRequest
  ) => Effect.Effect<MessageShape<Out>>
): Procedure => ({
  method: "POST",
  path,
  handle: (options) => (request) =>
    Effect.gen(function*() {
      const receivedAtMs = yield* Clock.currentTimeMillis
      const message = yield* readUnary(request, requestSchema)
      return message !== undefined
        ? respond(request, responseSchema, yield* answer(options, receivedAtMs, message, request))
        : unaryError(new ConnectError("invalid_argument", `the request body of ${path} is not a valid ${requestSchema.typeName}`))
    })
})

/** The client's deadline for a unary call (Connect's `connect-timeout-ms` header), when it states one. */
export const clientTimeoutMs = (request: HttpServerRequest.HttpServerRequest): number | undefined => {
  const value = Number(request.headers["connect-timeout-ms"])
  return Number.isFinite(value) && value > 0 ? value : undefined
}

/** Accepts any body up to `maxSinkBytes` and answers an empty `responseSchema`. */
export const sink = <Out extends DescMessage>(path: Path, responseSchema: Out): Procedure => ({
  method: "POST",
  path,
  handle: () => (request) =>
    sinking(path, request, respond(request, responseSchema, create(responseSchema)))
})

/** OTLP/HTTP export: 200 with an empty body of the request's type (`{}` for JSON). */
export const otlpSink = (path: Path): Procedure => ({
  method: "POST",
  path,
  handle: () => (request) =>
    sinking(
      path,
      request,
      isJson(request)
        ? HttpServerResponse.unsafeJson({})
        : HttpServerResponse.uint8Array(new Uint8Array(), { contentType: request.headers["content-type"] ?? "application/x-protobuf" })
    )
})

/** A plain `GET` answered with JSON. */
export const rest = (path: Path, answer: (options: CatalogueOptions) => unknown): Procedure => ({
  method: "GET",
  path,
  handle: (options) => () => Effect.sync(() => HttpServerResponse.unsafeJson(answer(options)))
})
