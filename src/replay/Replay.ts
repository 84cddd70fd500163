/**
 * `cursor-byok replay FILE`: a capture run again. A fresh in-process server (a temp SQLite
 * database and home, the capture's models and timings, capture mode on with the capture's own
 * `contents`) whose model is scripted with the capture's recorded answers (`model` lines, by
 * call id, else in order); the client half sent again as captured (`ReplayClient.ts`); then the
 * server half the replay captured compared with the capture's (`Compare.ts`).
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as HttpServer from "@effect/platform/HttpServer"
import { Chunk, Context, Effect, FiberRef, Layer, LogLevel, Schema, Stream } from "effect"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Config from "../Config.js"
import { Llm, LlmError } from "../Llm.js"
import type { ResponseEvent } from "../Llm.js"
import * as Server from "../Server.js"
import * as Run from "../transport/Run.js"
import { CaptureRecorder } from "../capture/Capture.js"
import { compare, describeVerdict, normalize } from "./Compare.js"
import type { Verdict } from "./Compare.js"
import { parseCapture } from "../capture/Format.js"
import type { CaptureHeader, ReadLine } from "../capture/Format.js"
import { actionsOf, replayClient } from "./ReplayClient.js"

type ModelLine = Extract<ReadLine, { readonly kind: "model" }>

/** The model of a replay: each call answers what the capture recorded for its call id (else the next unused answer). */
export const scriptedLlm = (answers: ReadonlyArray<ModelLine>): Layer.Layer<Llm> => {
  const unused = [...answers]
  return Layer.succeed(Llm, Llm.of({
    stream: (_request, options) =>
      Stream.suspend(() => {
        const index = unused.findIndex((answer) => answer.callId === options.callId)
        const answer = index === -1 ? unused.shift() : unused.splice(index, 1)[0]
        if (answer === undefined) return Stream.fail(new LlmError({ reason: "providerError", message: `replay: the capture recorded no answer for model call ${options.callId}`, retryable: false }))
        const chunks = (answer.chunks as unknown as ReadonlyArray<ReadonlyArray<ResponseEvent>>).map((events) => Chunk.unsafeFromArray(events))
        const events = Stream.fromChunks(...chunks)
        const error = answer.error as { reason?: string; message?: string; retryable?: boolean; status?: number } | undefined
        return error === undefined ? events : Stream.concat(events, Stream.fail(new LlmError({
          reason: (error.reason ?? "providerError") as LlmError["reason"],
          message: error.message ?? "replayed failure",
          retryable: error.retryable ?? false,
          ...(error.status === undefined ? {} : { status: error.status })
        })))
      })
  }))
}

/** The replay server's configuration: the capture's models and timings, a provider that is never called, capture on. */
const configOf = (header: CaptureHeader, dir: string): Config.ServerConfig => {
  const server = header.server
  const file = {
    home: dir,
    database: join(dir, "replay.sqlite"),
    http2: { cleartextPort: null, tls: null },
    proxy: { port: null },
    heartbeatMs: server.heartbeatMs,
    orphanTimeoutMs: server.orphanTimeoutMs,
    blobAckTimeoutMs: server.blobAckTimeoutMs,
    queuedMessageGraceMs: server.queuedMessageGraceMs,
    maxLlmCallsPerTurn: server.maxLlmCallsPerTurn,
    compaction: server.compaction,
    limits: { appendWindow: server.appendWindow },
    capture: { enabled: true, contents: header.contents },
    providers: [{ id: "replay", api: "openai-chat", baseUrl: "http://127.0.0.1:9/v1" }],
    models: server.models.map((model) => ({ ...model, provider: "replay", upstreamModel: model.id })),
    ...(server.defaultModel === undefined ? {} : { defaultModel: server.defaultModel }),
    ...(server.subagentModel === undefined ? {} : { subagentModel: server.subagentModel }),
    ...(server.aliases === undefined ? {} : { aliases: server.aliases })
  }
  return Config.resolve(Schema.decodeUnknownSync(Config.FileConfig)(file), {})
}

/** Replays a capture's text; the verdict, and where the replay stalled if it did. */
export const replayText = (text: string) =>
  Effect.gen(function*() {
    const { header, lines } = parseCapture(text)
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "cursor-byok-replay-"))),
      (made) => Effect.sync(() => rmSync(made, { recursive: true, force: true }))
    )
    const config = configOf(header, dir)
    const models = lines.filter((line): line is ModelLine => line.kind === "model")
    const app = Run.layer({ host: "127.0.0.1", cleartextPort: 0, tls: undefined }).pipe(
      Layer.orDie,
      Layer.provideMerge(Server.layerApp(config, { llm: scriptedLlm(models) })),
      Layer.provideMerge(Server.layerHttp(Server.listenOptions(0, "127.0.0.1"))),
      Layer.provide(NodeHttpClient.dispatcherLayer),
      Layer.provide(NodeContext.layer)
    )
    const replayed = yield* Effect.scoped(Effect.gen(function*() {
      // The replay's own server says only what went wrong.
      const context = yield* Layer.build(app).pipe(Effect.orDie, Effect.locally(FiberRef.currentMinimumLogLevel, LogLevel.Warning))
      const address = Context.get(context, HttpServer.HttpServer).address
      if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("the replay server is not on TCP")
      const target = { baseUrl: `http://127.0.0.1:${address.port}`, h2cUrl: `http://127.0.0.1:${Context.get(context, Run.Http2Endpoints).cleartextPort}` }
      const actions = actionsOf(header.requestId, lines)
      const { stalled } = yield* Effect.promise(() => replayClient(target, actions))
      const recorder = Context.get(context, CaptureRecorder)
      // The server's last lines are written after the stream's end reached the client.
      yield* Effect.sleep("100 millis")
      yield* Effect.promise(() => recorder.flush())
      return { stalled, folder: recorder.folder }
    }))
    const file = readdirSyncSafe(replayed.folder).find((name) => name.endsWith(".jsonl") && name.includes(header.requestId.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 80)))
    const got = file === undefined ? [] : parseCapture(readFileSync(join(replayed.folder, file), "utf8")).lines
    const verdict: Verdict = compare(normalize(lines), normalize(got))
    return { verdict, stalled: replayed.stalled, text: describeVerdict(verdict) + (verdict._tag === "Diverged" && replayed.stalled !== undefined ? `\n  (${replayed.stalled})` : "") }
  })

const readdirSyncSafe = (folder: string): ReadonlyArray<string> => {
  try {
    return readdirSync(folder)
  } catch {
    return []
  }
}

/** Replays the capture in `path`. */
export const replayFile = (path: string) => Effect.flatMap(Effect.sync(() => readFileSync(path, "utf8")), replayText)
