/**
 * What Cursor asks at start-up and all along, answered from the catalogue: the model lists,
 * the server config, the default model, the clock, the connectivity probe, and the telemetry
 * sinks (which keep Cursor's logs, events and traces on this machine).
 */
import { create } from "@bufbuild/protobuf"
import { Clock, Effect } from "effect"
import {
  GetDefaultModelForCliRequestSchema,
  GetDefaultModelForCliResponseSchema,
  GetUsableModelsRequestSchema,
  GetUsableModelsResponseSchema,
  NotifyConversationCloneRequestSchema,
  NotifyConversationCloneResponseSchema
} from "../../gen/agent/v1/agent_pb.js"
import {
  AvailableModelsRequestSchema,
  AvailableModelsResponseSchema,
  GetDefaultModelNudgeDataRequestSchema,
  GetDefaultModelNudgeDataResponseSchema,
  GetDefaultModelRequestSchema,
  GetDefaultModelResponseSchema,
  GetServerConfigRequestSchema,
  GetServerConfigResponseSchema,
  ServerTimeRequestSchema,
  ServerTimeResponseSchema
} from "../../gen/aiserver/v1/aiserver_pb.js"
import {
  BootstrapStatsigResponseSchema,
  GetFirstWindowStatsigDecisionResponseSchema,
  IsConnectedRequestSchema,
  IsConnectedResponseSchema,
  SubmitLogsResponseSchema,
  TrackEventsResponseSchema
} from "../../gen/aiserver/v1/telemetry_pb.js"
import { availableModels, chosenModel, defaultModel, serverConfig, usableModels } from "./Catalogue.js"
import { otlpSink, sink, unary } from "./Procedure.js"

export const availableModelsRpc = unary("/aiserver.v1.AiService/AvailableModels", AvailableModelsRequestSchema, AvailableModelsResponseSchema, (options) =>
  Effect.sync(() => availableModels(options)))

const usable = unary("/aiserver.v1.AiService/GetUsableModels", GetUsableModelsRequestSchema, GetUsableModelsResponseSchema, (options) =>
  Effect.sync(() => usableModels(options)))
export const usableModelsRpcs = [usable, { ...usable, path: "/agent.v1.AgentService/GetUsableModels" as const }]

const forCli = unary("/aiserver.v1.AiService/GetDefaultModelForCli", GetDefaultModelForCliRequestSchema, GetDefaultModelForCliResponseSchema, (options) =>
  Effect.sync(() => defaultModel(options)))
export const defaultModelForCliRpcs = [forCli, { ...forCli, path: "/agent.v1.AgentService/GetDefaultModelForCli" as const }]

const config = unary("/aiserver.v1.AiService/GetServerConfig", GetServerConfigRequestSchema, GetServerConfigResponseSchema, (options) =>
  Effect.sync(() => serverConfig(options)))
export const serverConfigRpcs = [config, { ...config, path: "/aiserver.v1.ServerConfigService/GetServerConfig" as const }]

/** The same choice as `GetDefaultModelForCli`, by id. */
export const defaultModelRpc = unary("/aiserver.v1.AiService/GetDefaultModel", GetDefaultModelRequestSchema, GetDefaultModelResponseSchema, (options) =>
  Effect.sync(() => create(GetDefaultModelResponseSchema, { model: chosenModel(options)?.id ?? "" })))

/** An empty answer: no nudge towards another model, at start-up or on a new chat. */
export const defaultModelNudgeDataRpc = unary(
  "/aiserver.v1.AiService/GetDefaultModelNudgeData",
  GetDefaultModelNudgeDataRequestSchema,
  GetDefaultModelNudgeDataResponseSchema,
  () => Effect.succeed(create(GetDefaultModelNudgeDataResponseSchema))
)

/** Cursor derives its clock offset from these two Unix-millisecond stamps. */
export const serverTimeRpc = unary("/aiserver.v1.AiService/ServerTime", ServerTimeRequestSchema, ServerTimeResponseSchema, (_, receivedAtMs) =>
  Effect.map(Clock.currentTimeMillis, (transmitAtMs) => create(ServerTimeResponseSchema, { receiveTimestamp: receivedAtMs, transmitTimestamp: transmitAtMs })))

/**
 * Answering at all means "connected": without an answer Cursor's probe, about 10 s into a slow
 * request, aborts the work in flight. The response's fields are not in any public schema we
 * found, so the message is empty (see telemetry.proto).
 */
export const isConnectedRpc = unary("/aiserver.v1.NetworkService/IsConnected", IsConnectedRequestSchema, IsConnectedResponseSchema, () =>
  Effect.succeed(create(IsConnectedResponseSchema)))

/**
 * A forked chat: nothing to do here. The fork's first run request names the history it was
 * cloned with (its checkpoint's prompt-message ids), and the runner seeds the new conversation
 * from the stored messages with those ids, whichever conversation holds them.
 */
export const notifyConversationCloneRpc = unary(
  "/agent.v1.AgentService/NotifyConversationClone",
  NotifyConversationCloneRequestSchema,
  NotifyConversationCloneResponseSchema,
  () => Effect.succeed(create(NotifyConversationCloneResponseSchema))
)

export const submitLogsRpc = sink("/aiserver.v1.AnalyticsService/SubmitLogs", SubmitLogsResponseSchema)
export const trackEventsRpc = sink("/aiserver.v1.AnalyticsService/TrackEvents", TrackEventsResponseSchema)
export const tracesRpc = otlpSink("/v1/traces")

/** No feature flags and no first-window experiment from this server. */
export const bootstrapStatsigRpc = sink("/aiserver.v1.AnalyticsService/BootstrapStatsig", BootstrapStatsigResponseSchema)
export const firstWindowStatsigDecisionRpc = sink(
  "/aiserver.v1.AnalyticsService/GetFirstWindowStatsigDecision",
  GetFirstWindowStatsigDecisionResponseSchema
)
