import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { HttpLayerRouter } from "@effect/platform"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Layer } from "effect"
import { GetDefaultModelForCliResponseSchema, GetUsableModelsRequestSchema, GetUsableModelsResponseSchema } from "../../src/gen/agent/v1/agent_pb.js"
import {
  AvailableModelsRequestSchema,
  AvailableModelsResponseSchema,
  GetServerConfigResponseSchema,
  Http2Config
} from "../../src/gen/aiserver/v1/aiserver_pb.js"
import * as Metrics from "../../src/Metrics.js"
import * as SideRpcs from "../../src/transport/SideRpcs.js"

const catalogue: SideRpcs.CatalogueOptions = {
  models: [
    { id: "deepseek-chat", displayName: "DeepSeek V3", contextWindow: 128000, supportsThinking: false, supportsImages: false },
    { id: "claude-thinking", displayName: "Claude (thinking)", contextWindow: 200000, supportsThinking: true, supportsImages: true }
  ],
  defaultModel: "claude-thinking"
}

const { dispose, handler } = HttpLayerRouter.toWebHandler(Layer.mergeAll(SideRpcs.layerRoutes(catalogue), Metrics.layerRoutes), { disableLogger: true })
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
    const unknown = await post("/aiserver.v1.DashboardService/GetTeams", new Uint8Array())
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
