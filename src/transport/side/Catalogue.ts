/**
 * What the side RPCs answer from: the configured models (for Cursor's picker), the default
 * model, the TLS listener's agent URL, the offline identity, and the naming service (titles,
 * commit messages, branch names, chat names).
 */
import { create } from "@bufbuild/protobuf"
import { GetDefaultModelForCliResponseSchema, GetUsableModelsResponseSchema, ModelDetailsSchema } from "../../gen/agent/v1/agent_pb.js"
import {
  AvailableModelsResponse_AvailableModelSchema,
  AvailableModelsResponseSchema,
  GetServerConfigResponseSchema,
  Http2Config
} from "../../gen/aiserver/v1/aiserver_pb.js"
import type { ContextUsage } from "../../ContextUsage.js"
import type { Naming } from "../../Naming.js"

export interface ListedModel {
  readonly id: string
  readonly displayName: string
  readonly contextWindow: number | undefined
  readonly supportsThinking: boolean
  readonly supportsImages: boolean
}

/** Who the user is when there is no Cursor account behind the server. */
export interface Identity {
  readonly email: string
  readonly name: string
}

export const defaultIdentity: Identity = { email: "local@cursor-byok", name: "Local user" }

export interface CatalogueOptions {
  readonly models: ReadonlyArray<ListedModel>
  readonly defaultModel: string | undefined
  /** Where the TLS listener serves `Run` (`https://host:port`), when it is on. */
  readonly agentUrl?: string | undefined
  /** The offline identity; `defaultIdentity` when absent. */
  readonly identity?: Identity | undefined
  /**
   * Writes titles, commit messages and branch names with the user's model and keeps chat
   * names; without it, the deterministic fallbacks answer and names are not kept.
   */
  readonly naming?: Naming | undefined
  /** The context usage panel's breakdown (`GetPromptContextUsage`); without it, an empty snapshot. */
  readonly contextUsage?: ContextUsage | undefined
}

const modelDetails = (model: ListedModel) =>
  create(ModelDetailsSchema, {
    modelId: model.id,
    displayModelId: model.id,
    displayName: model.displayName,
    displayNameShort: model.displayName,
    aliases: []
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
        // The model's real window, in both modes (this server has no separate max mode), so
        // Cursor compacts at it rather than at its default.
        ...(model.contextWindow !== undefined ? { contextTokenLimit: model.contextWindow, contextTokenLimitForMaxMode: model.contextWindow } : {})
      })
    )
  })

export const usableModels = (options: CatalogueOptions) =>
  create(GetUsableModelsResponseSchema, { models: options.models.map(modelDetails) })

/** The configured default when it is one of the models, else the first model. */
export const chosenModel = (options: CatalogueOptions): ListedModel | undefined =>
  options.models.find((m) => m.id === options.defaultModel) ?? options.models[0]

export const defaultModel = (options: CatalogueOptions) => {
  const chosen = chosenModel(options)
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
