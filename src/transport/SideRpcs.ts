/**
 * The unary RPCs Cursor calls besides the agent stream: the model lists (so the configured
 * models appear in Cursor's picker), the server config (which keeps Cursor in the HTTP/1.1
 * RunSSE mode this server speaks), and `unimplemented` for every other procedure, so an
 * unknown call fails fast and visibly instead of hanging. Plus `GET /healthz`.
 *
 * `AiService/ServerTime` is among the unimplemented: the protocol tables we have name the
 * procedure but not its response's fields, and a guessed message could mislead the client's
 * clock more than an error does.
 */
import { create, fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf"
import type { DescMessage, MessageShape } from "@bufbuild/protobuf"
import { HttpLayerRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Layer } from "effect"
import {
  GetDefaultModelForCliRequestSchema,
  GetDefaultModelForCliResponseSchema,
  GetUsableModelsRequestSchema,
  GetUsableModelsResponseSchema,
  ModelDetailsSchema
} from "../gen/agent/v1/agent_pb.js"
import {
  AvailableModelsRequestSchema,
  AvailableModelsResponse_AvailableModelSchema,
  AvailableModelsResponseSchema,
  GetServerConfigRequestSchema,
  GetServerConfigResponseSchema,
  Http2Config
} from "../gen/aiserver/v1/aiserver_pb.js"
import { ConnectError, httpStatusOf } from "./Connect.js"

export interface ListedModel {
  readonly id: string
  readonly displayName: string
  readonly contextWindow: number | undefined
  readonly supportsThinking: boolean
  readonly supportsImages: boolean
}

export interface CatalogueOptions {
  readonly models: ReadonlyArray<ListedModel>
  readonly defaultModel: string | undefined
  /** Where the TLS listener serves `Run` (`https://host:port`), when it is on. */
  readonly agentUrl?: string | undefined
}

const modelDetails = (model: ListedModel) =>
  create(ModelDetailsSchema, {
    modelId: model.id,
    displayModelId: model.id,
    displayName: model.displayName,
    displayNameShort: model.displayName,
    aliases: []
  })

/** A unary Connect response in the codec the request used (binary protobuf, or JSON). */
const respond = <Desc extends DescMessage>(request: HttpServerRequest.HttpServerRequest, schema: Desc, message: MessageShape<Desc>) => {
  const json = (request.headers["content-type"] ?? "").includes("json")
  return json
    ? HttpServerResponse.unsafeJson(toJson(schema, message))
    : HttpServerResponse.uint8Array(toBinary(schema, message), { contentType: "application/proto" })
}

const unaryError = (error: ConnectError) => HttpServerResponse.unsafeJson(error.toJson(), { status: httpStatusOf(error.code) })

/** Reads (and validates) a unary request of `schema`; the content is not needed, only that it parses. */
const readUnary = <Desc extends DescMessage>(request: HttpServerRequest.HttpServerRequest, schema: Desc) =>
  Effect.gen(function*() {
    const body = new Uint8Array(yield* request.arrayBuffer.pipe(Effect.orElseSucceed(() => new ArrayBuffer(0))))
    try {
      if ((request.headers["content-type"] ?? "").includes("json")) {
        const text = new TextDecoder().decode(body)
        fromJson(schema, text === "" ? {} : JSON.parse(text), { ignoreUnknownFields: true })
      } else {
        fromBinary(schema, body)
      }
      return true
    } catch {
      return false
    }
  })

export const availableModels = (options: CatalogueOptions) =>
  create(AvailableModelsResponseSchema, {
    modelNames: options.models.map((m) => m.id),
    models: options.models.map((model) =>
      create(AvailableModelsResponse_AvailableModelSchema, {
        name: model.id,
        defaultOn: true,
        supportsAgent: true,
        supportsThinking: model.supportsThinking,
        supportsImages: model.supportsImages,
        supportsPlanMode: true,
        supportsNonMaxMode: true,
        supportsMaxMode: false,
        clientDisplayName: model.displayName,
        serverModelName: model.id,
        isUserAdded: true,
        ...(model.contextWindow !== undefined ? { contextTokenLimit: model.contextWindow } : {})
      })
    )
  })

export const usableModels = (options: CatalogueOptions) =>
  create(GetUsableModelsResponseSchema, { models: options.models.map(modelDetails) })

export const defaultModel = (options: CatalogueOptions) => {
  const chosen = options.models.find((m) => m.id === options.defaultModel) ?? options.models[0]
  return create(GetDefaultModelForCliResponseSchema, chosen === undefined ? {} : { model: modelDetails(chosen) })
}

/**
 * Without the TLS listener, HTTP/1.1 for everything: Cursor then uses RunSSE + BidiAppend. With
 * it, HTTP/2 is left to Cursor and its agent URLs point at the listener, where `Run` is served
 * (Cursor's HTTP/2 client does not go through `http.proxy`).
 */
export const serverConfig = (options: Pick<CatalogueOptions, "agentUrl"> = {}) =>
  options.agentUrl === undefined
    ? create(GetServerConfigResponseSchema, { http2Config: Http2Config.FORCE_ALL_DISABLED })
    : create(GetServerConfigResponseSchema, {
      http2Config: Http2Config.UNSPECIFIED,
      agentUrlConfig: { agentUrl: options.agentUrl, agentnUrl: options.agentUrl }
    })

export const layerRoutes = (options: CatalogueOptions): Layer.Layer<never, never, HttpLayerRouter.HttpRouter> =>
  HttpLayerRouter.use((router) =>
    Effect.gen(function*() {
      const unary = <In extends DescMessage, Out extends DescMessage>(
        path: `/${string}`,
        requestSchema: In,
        responseSchema: Out,
        answer: () => MessageShape<Out>
      ) =>
        router.add("POST", path, (request) =>
          Effect.gen(function*() {
            const valid = yield* readUnary(request, requestSchema)
            return valid
              ? respond(request, responseSchema, answer())
              : unaryError(new ConnectError("invalid_argument", `the request body of ${path} is not a valid ${requestSchema.typeName}`))
          }))
      const models = () => availableModels(options)
      const usable = () => usableModels(options)
      const chosen = () => defaultModel(options)
      const config = () => serverConfig(options)
      yield* unary("/aiserver.v1.AiService/AvailableModels", AvailableModelsRequestSchema, AvailableModelsResponseSchema, models)
      yield* unary("/aiserver.v1.AiService/GetUsableModels", GetUsableModelsRequestSchema, GetUsableModelsResponseSchema, usable)
      yield* unary("/agent.v1.AgentService/GetUsableModels", GetUsableModelsRequestSchema, GetUsableModelsResponseSchema, usable)
      yield* unary("/aiserver.v1.AiService/GetDefaultModelForCli", GetDefaultModelForCliRequestSchema, GetDefaultModelForCliResponseSchema, chosen)
      yield* unary("/agent.v1.AgentService/GetDefaultModelForCli", GetDefaultModelForCliRequestSchema, GetDefaultModelForCliResponseSchema, chosen)
      yield* unary("/aiserver.v1.AiService/GetServerConfig", GetServerConfigRequestSchema, GetServerConfigResponseSchema, config)
      yield* unary("/aiserver.v1.ServerConfigService/GetServerConfig", GetServerConfigRequestSchema, GetServerConfigResponseSchema, config)
      yield* router.add("GET", "/healthz", HttpServerResponse.unsafeJson({ status: "ok" }))
      yield* router.add("*", "/*", (request) =>
        Effect.succeed(
          /^\/[\w.]+\/\w+$/.test(new URL(request.url, "http://localhost").pathname)
            ? unaryError(new ConnectError("unimplemented", `${request.method} ${request.url} is not implemented by this server`))
            : HttpServerResponse.unsafeJson({ error: `no route for ${request.method} ${request.url}` }, { status: 404 })
        ))
    })
  )
