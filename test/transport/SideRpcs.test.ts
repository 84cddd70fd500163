import { create, fromBinary, fromJson, toBinary } from "@bufbuild/protobuf"
import type { DescMessage, JsonValue, MessageShape } from "@bufbuild/protobuf"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { GetDefaultModelForCliResponseSchema, GetUsableModelsRequestSchema, GetUsableModelsResponseSchema } from "../../src/gen/agent/v1/agent_pb.js"
import {
  AvailableModelsRequestSchema,
  AvailableModelsResponseSchema,
  GetDefaultModelNudgeDataResponseSchema,
  GetDefaultModelResponseSchema,
  GetServerConfigResponseSchema,
  Http2Config,
  ServerTimeResponseSchema
} from "../../src/gen/aiserver/v1/aiserver_pb.js"
import * as Account from "../../src/gen/aiserver/v1/account_pb.js"
import * as Telemetry from "../../src/gen/aiserver/v1/telemetry_pb.js"
import * as Metrics from "../../src/Metrics.js"
import * as SideRpcs from "../../src/transport/SideRpcs.js"
import { sideServer } from "../support/SideServer.js"

const catalogue: SideRpcs.CatalogueOptions = {
  models: [
    { id: "deepseek-chat", displayName: "DeepSeek V3", contextWindow: 128000, supportsThinking: false, supportsImages: false },
    { id: "claude-thinking", displayName: "Claude (thinking)", contextWindow: 200000, supportsThinking: true, supportsImages: true }
  ],
  defaultModel: "claude-thinking"
}

const { dispose, handler } = sideServer(catalogue, Metrics.layerRoutes)
afterAll(() => dispose())

const post = (path: string, body: Uint8Array, contentType = "application/proto") =>
  handler(new Request(`http://localhost${path}`, { method: "POST", body, headers: { "content-type": contentType } }))

const bytes = async (response: Response) => new Uint8Array(await response.arrayBuffer())

describe("side RPCs", () => {
  it("AvailableModels lists the configured models with their capabilities", async () => {
    const response = await post("/aiserver.v1.AiService/AvailableModels", toBinary(AvailableModelsRequestSchema, create(AvailableModelsRequestSchema, { isNightly: true })))
    assert.strictEqual(response.status, 200)
    const models = fromBinary(AvailableModelsResponseSchema, await bytes(response))
    assert.deepStrictEqual(models.modelNames, ["deepseek-chat", "claude-thinking"])
    const thinking = models.models[1]!
    assert.strictEqual(thinking.clientDisplayName, "Claude (thinking)")
    assert.strictEqual(thinking.supportsThinking, true)
    assert.strictEqual(thinking.supportsImages, true)
    assert.strictEqual(thinking.contextTokenLimit, 200000)
    assert.strictEqual(thinking.supportsAgent, true)
  })

  it("GetUsableModels answers in both services; GetDefaultModelForCli names the default", async () => {
    for (const path of ["/agent.v1.AgentService/GetUsableModels", "/aiserver.v1.AiService/GetUsableModels"]) {
      const response = await post(path, toBinary(GetUsableModelsRequestSchema, create(GetUsableModelsRequestSchema)))
      const usable = fromBinary(GetUsableModelsResponseSchema, await bytes(response))
      assert.deepStrictEqual(usable.models.map((m) => m.modelId), ["deepseek-chat", "claude-thinking"])
    }
    const chosen = fromBinary(GetDefaultModelForCliResponseSchema, await bytes(await post("/agent.v1.AgentService/GetDefaultModelForCli", new Uint8Array())))
    assert.strictEqual(chosen.model?.modelId, "claude-thinking")
  })

  it("GetServerConfig disables HTTP/2 in both services, in binary and JSON", async () => {
    for (const path of ["/aiserver.v1.AiService/GetServerConfig", "/aiserver.v1.ServerConfigService/GetServerConfig"]) {
      const config = fromBinary(GetServerConfigResponseSchema, await bytes(await post(path, new Uint8Array())))
      assert.strictEqual(config.http2Config, Http2Config.FORCE_ALL_DISABLED)
    }
    const json = await post("/aiserver.v1.AiService/GetServerConfig", new TextEncoder().encode("{}"), "application/json")
    assert.deepStrictEqual(await json.json(), { http2Config: "HTTP2_CONFIG_FORCE_ALL_DISABLED" })
  })

  it("a malformed request is invalid_argument; an unknown procedure is unimplemented; other paths 404", async () => {
    const bad = await post("/aiserver.v1.AiService/AvailableModels", new Uint8Array([0xff, 0xff, 0xff]))
    assert.strictEqual(bad.status, 400)
    assert.strictEqual((await bad.json() as { code: string }).code, "invalid_argument")
    const unknown = await post("/aiserver.v1.AiService/CountTokens", new Uint8Array())
    assert.strictEqual(unknown.status, 501)
    assert.strictEqual((await unknown.json() as { code: string }).code, "unimplemented")
    const other = await handler(new Request("http://localhost/nothing/here/at/all"))
    assert.strictEqual(other.status, 404)
  })

  it("healthz and metrics answer", async () => {
    const health = await handler(new Request("http://localhost/healthz"))
    assert.deepStrictEqual(await health.json(), { status: "ok" })
    const metrics = await (await handler(new Request("http://localhost/metrics"))).text()
    assert.include(metrics, "# TYPE byok_cache_read_ratio gauge")
  })
})

const get = (path: string) => handler(new Request(`http://localhost${path}`))

/** Both codecs: the binary answer and the JSON answer, each decoded as `schema`. */
const answers = async <Desc extends DescMessage>(path: string, schema: Desc): Promise<ReadonlyArray<MessageShape<Desc>>> => {
  const binary = await post(path, new Uint8Array())
  assert.strictEqual(binary.status, 200, `${path} in binary`)
  assert.strictEqual(binary.headers.get("content-type"), "application/proto")
  const json = await post(path, new TextEncoder().encode("{}"), "application/json")
  assert.strictEqual(json.status, 200, `${path} in JSON`)
  return [fromBinary(schema, await bytes(binary)), fromJson(schema, await json.json() as JsonValue)]
}

const arbitraryBytes = new Uint8Array(Array.from({ length: 2048 }, (_, i) => (i * 151 + 7) % 256))

describe("start-up and session RPCs", () => {
  it("GetDefaultModel names the same default as GetDefaultModelForCli; NudgeData nudges nothing", async () => {
    for (const answer of await answers("/aiserver.v1.AiService/GetDefaultModel", GetDefaultModelResponseSchema)) {
      assert.strictEqual(answer.model, "claude-thinking")
    }
    for (const nudge of await answers("/aiserver.v1.AiService/GetDefaultModelNudgeData", GetDefaultModelNudgeDataResponseSchema)) {
      assert.deepStrictEqual(toBinary(GetDefaultModelNudgeDataResponseSchema, nudge), new Uint8Array())
    }
  })

  it("ServerTime stamps arrival and answer in Unix milliseconds, within the caller's wall clock", async () => {
    for (const codec of ["application/proto", "application/json"]) {
      const before = Date.now()
      const response = await post("/aiserver.v1.AiService/ServerTime", codec.includes("json") ? new TextEncoder().encode("{}") : new Uint8Array(), codec)
      const body = codec.includes("json")
        ? fromJson(ServerTimeResponseSchema, await response.json() as JsonValue)
        : fromBinary(ServerTimeResponseSchema, await bytes(response))
      const after = Date.now()
      assert.isAtLeast(body.receiveTimestamp, before)
      assert.isAtLeast(body.transmitTimestamp, body.receiveTimestamp)
      assert.isAtMost(body.transmitTimestamp, after)
    }
  })

  it("IsConnected answers (an empty message) in both codecs", async () => {
    assert.strictEqual((await answers("/aiserver.v1.NetworkService/IsConnected", Telemetry.IsConnectedResponseSchema)).length, 2)
  })

  it("a malformed body to a decoded procedure is invalid_argument", async () => {
    const bad = await post("/aiserver.v1.AiService/ServerTime", new Uint8Array([0xff, 0xff, 0xff]))
    assert.strictEqual(bad.status, 400)
    assert.strictEqual((await bad.json() as { code: string }).code, "invalid_argument")
  })

  it("the telemetry sinks accept arbitrary bytes and answer an empty message", async () => {
    const sinks: ReadonlyArray<readonly [string, DescMessage]> = [
      ["/aiserver.v1.AnalyticsService/SubmitLogs", Telemetry.SubmitLogsResponseSchema],
      ["/aiserver.v1.AnalyticsService/TrackEvents", Telemetry.TrackEventsResponseSchema],
      ["/aiserver.v1.AnalyticsService/BootstrapStatsig", Telemetry.BootstrapStatsigResponseSchema],
      ["/aiserver.v1.AnalyticsService/GetFirstWindowStatsigDecision", Telemetry.GetFirstWindowStatsigDecisionResponseSchema]
    ]
    for (const [path, schema] of sinks) {
      const response = await post(path, arbitraryBytes)
      assert.strictEqual(response.status, 200, path)
      assert.deepStrictEqual(await bytes(response), new Uint8Array())
      assert.strictEqual((await answers(path, schema)).length, 2)
    }
    const traces = await post("/v1/traces", arbitraryBytes, "application/x-protobuf")
    assert.strictEqual(traces.status, 200)
    assert.strictEqual(traces.headers.get("content-type"), "application/x-protobuf")
    assert.strictEqual((await bytes(traces)).length, 0)
    const jsonTraces = await post("/v1/traces", new TextEncoder().encode("{\"resourceSpans\":[]}"), "application/json")
    assert.deepStrictEqual(await jsonTraces.json(), {})
  })

  it("a sink body over the limit is refused with resource_exhausted", async () => {
    for (const path of ["/aiserver.v1.AnalyticsService/SubmitLogs", "/v1/traces"]) {
      const response = await post(path, new Uint8Array(SideRpcs.maxSinkBytes + 1))
      assert.strictEqual(response.status, 429, path)
      assert.strictEqual((await response.json() as { code: string }).code, "resource_exhausted")
    }
  })
})

describe("offline identity", () => {
  it("the account procedures answer the local user in both codecs", async () => {
    for (const email of await answers("/aiserver.v1.AuthService/GetEmail", Account.GetEmailResponseSchema)) assert.strictEqual(email.email, "local@cursor-byok")
    for (const me of await answers("/aiserver.v1.DashboardService/GetMe", Account.GetMeResponseSchema)) assert.strictEqual(me.email, "local@cursor-byok")
    for (const teams of await answers("/aiserver.v1.DashboardService/GetTeams", Account.GetTeamsResponseSchema)) {
      assert.deepStrictEqual(toBinary(Account.GetTeamsResponseSchema, teams), new Uint8Array())
    }
    for (const plan of await answers("/aiserver.v1.DashboardService/GetPlanInfo", Account.GetPlanInfoResponseSchema)) assert.isDefined(plan.planInfo)
    for (const privacy of await answers("/aiserver.v1.DashboardService/GetUserPrivacyMode", Account.GetUserPrivacyModeResponseSchema)) {
      assert.strictEqual(privacy.privacyMode, Account.PrivacyMode.NO_TRAINING)
    }
    const limits = "/aiserver.v1.DashboardService/GetUsageLimitStatusAndActiveGrants"
    for (const status of await answers(limits, Account.GetUsageLimitStatusAndActiveGrantsResponseSchema)) {
      assert.strictEqual(status.usageLimitPolicyStatus?.isInSlowPool, false)
    }
    for (const usage of await answers("/aiserver.v1.DashboardService/GetCurrentPeriodUsage", Account.GetCurrentPeriodUsageResponseSchema)) {
      assert.strictEqual(usage.enabled, false)
    }
    for (const pricing of await answers("/aiserver.v1.DashboardService/IsOnNewPricing", Account.IsOnNewPricingResponseSchema)) {
      assert.strictEqual(pricing.isOnNewPricing, true)
    }
    for (const profile of await answers("/aiserver.v1.DashboardService/GetUserProfile", Account.GetUserProfileResponseSchema)) {
      assert.strictEqual(profile.profile?.displayName, "Local user")
    }
  })

  it("GET /auth/full_stripe_profile is JSON with the local email; /auth/stripe_profile is JSON", async () => {
    const profile = await get("/auth/full_stripe_profile")
    assert.strictEqual(profile.status, 200)
    assert.include(profile.headers.get("content-type") ?? "", "application/json")
    assert.strictEqual((await profile.json() as { email: string }).email, "local@cursor-byok")
    const stripe = await get("/auth/stripe_profile")
    assert.strictEqual(stripe.status, 200)
    assert.strictEqual(await stripe.json(), "")
  })

  it("the identity comes from the options", async () => {
    const identity = { email: "me@example.org", name: "Me" }
    const custom = sideServer({ ...catalogue, identity })
    try {
      const response = await custom.handler(new Request("http://localhost/aiserver.v1.AuthService/GetEmail", { method: "POST", body: new Uint8Array() }))
      assert.strictEqual(fromBinary(Account.GetEmailResponseSchema, await bytes(response)).email, "me@example.org")
      const profile = await custom.handler(new Request("http://localhost/auth/full_stripe_profile"))
      assert.strictEqual((await profile.json() as { email: string }).email, "me@example.org")
    } finally {
      await custom.dispose()
    }
  })
})

describe("routing lists", () => {
  it("every path in localProcedures and accountProcedures is answered, none twice", async () => {
    const all = [...SideRpcs.localProcedures, ...SideRpcs.accountProcedures]
    assert.strictEqual(new Set(all).size, all.length)
    for (const path of all) {
      const method = SideRpcs.procedures.find((p) => p.path === path)?.method
      const response = method === "GET" ? await get(path) : await post(path, new Uint8Array())
      assert.strictEqual(response.status, 200, path)
    }
  })

  it("telemetry, the model calls and the clone notice are local; the statsig, auth and dashboard calls are the account's", () => {
    for (const path of ["/aiserver.v1.AiService/AvailableModels", "/aiserver.v1.ServerConfigService/GetServerConfig", "/agent.v1.AgentService/GetDefaultModelForCli", "/aiserver.v1.NetworkService/IsConnected", "/agent.v1.AgentService/NotifyConversationClone", "/aiserver.v1.AnalyticsService/SubmitLogs", "/aiserver.v1.AnalyticsService/TrackEvents", "/v1/traces"]) {
      assert.include(SideRpcs.localProcedures, path)
    }
    for (const path of ["/aiserver.v1.AnalyticsService/BootstrapStatsig", "/aiserver.v1.AnalyticsService/GetFirstWindowStatsigDecision", "/aiserver.v1.AuthService/GetEmail", "/aiserver.v1.DashboardService/GetMe", "/auth/full_stripe_profile", "/auth/stripe_profile"]) {
      assert.include(SideRpcs.accountProcedures, path)
    }
    // 21, and NameTab and GetPromptContextUsage (issue 39 item 5).
    assert.strictEqual(SideRpcs.localProcedures.length, 23)
    assert.strictEqual(SideRpcs.accountProcedures.length, 13)
  })
})

describe("Prometheus rendering", () => {
  it("renders counters with labels, histograms with buckets, and the cache-read ratio", async () => {
    const { Effect, Metric } = await import("effect")
    await Effect.runPromise(Effect.all([
      Metric.increment(Metric.tagged(Metrics.turnsFinished, "outcome", "stop")),
      Metrics.countTokens({ input: 30, output: 5, cacheRead: 70, cacheWrite: 0, reasoning: 0 }),
      Metric.update(Metrics.timeToFirstDelta, 0.3)
    ]))
    const text = Metrics.renderPrometheus(await Effect.runPromise(Metric.snapshot))
    assert.match(text, /byok_turns_finished_total\{outcome="stop"\} \d+/)
    assert.match(text, /byok_time_to_first_delta_seconds_bucket\{le="0\.4"\} [1-9]/)
    assert.match(text, /byok_time_to_first_delta_seconds_count [1-9]/)
    assert.match(text, /byok_cache_read_ratio 0\.\d+/)
  })
})
