/**
 * Tab's calls, answered here (`tab/Service.ts` serves them): the completion stream
 * (`StreamCpp`), its configuration and model list, the fate reports (counted for the
 * acceptance rate), the file sync (kept in memory as Tab's context, never stored), and the
 * companions Cursor's Tab client calls, answered as a server with no opinion on them
 * (no cursor jumps, no reranking, telemetry dropped). With Tab off, `StreamCpp` fails
 * `failed_precondition` and `CppConfig` says Tab is off; the proxy sends them to Cursor then.
 */
import { create } from "@bufbuild/protobuf"
import { Effect } from "effect"
import * as Dialect from "../../dialect/Tab.js"
import * as TabPb from "../../gen/aiserver/v1/tab_pb.js"
import { sha256Hex } from "../../tab/Files.js"
import { cursorLineOf } from "../../tab/Prompt.js"
import type { TabService } from "../../tab/Service.js"
import { ConnectError } from "../Connect.js"
import type { RpcRoute } from "../front/Rpc.js"
import type { Path, RpcServe } from "./Procedure.js"
import { decodeRequest, encodeIn, unaryServe } from "./Procedure.js"

const AI = "/aiserver.v1.AiService"
const CPP = "/aiserver.v1.CppService"
/** File sync, under the package the 2026 schema names and the one older clients used. */
const FILE_SYNC = ["/aiserver.v1.FileSyncService", "/filesync.v1.FileSyncService"] as const

export const STREAM_CPP_PATH: Path = `${AI}/StreamCpp`

const TAB_OFF = new ConnectError("failed_precondition", "Tab is off on this server: add a `tab` section to the configuration (see the README), or let Cursor answer Tab")

/** The file is not synced here: Cursor's client sends the request again with the file's contents. */
const notSynced = (path: string) =>
  new ConnectError("not_found", `${path} is not synced to this server; send its contents`, [{ type: "aiserver.v1.ErrorDetails", value: Dialect.notSyncedDetail }])

const route = (serve: RpcServe): RpcRoute => ({ sink: false, serve })

/** `StreamCpp`: the suggestion as it comes: the model's kind and the line replaced before the first text, the end after the last. */
const streamCpp = (tab: TabService): RpcRoute => ({
  stream: (call, emit) =>
    Effect.gen(function*() {
      const message = decodeRequest(STREAM_CPP_PATH, TabPb.StreamCppRequestSchema, call)
      if (message instanceof ConnectError) return yield* Effect.fail(message)
      if (tab.settings() === undefined) return yield* Effect.fail(TAB_OFF)
      const ask = Dialect.cppAskOf(message)
      let request = ask.request
      // The synced copy, if any: the file itself when the client sent none; its workspace's other files are context.
      const synced = tab.files.get(request.workspace, request.path)
      if (ask.relyOnFilesync) {
        if (synced === undefined || (ask.sha256 !== undefined && sha256Hex(synced.contents) !== ask.sha256)) return yield* Effect.fail(notSynced(request.path))
        request = { ...request, contents: synced.contents }
      }
      const settings = tab.settings()
      const context = settings === undefined ? [] : tab.files.recent(synced?.workspace ?? request.workspace, request.path, settings.limits.contextChars)
      if (context.length > 0) request = { ...request, otherFiles: [...request.otherFiles, ...context] }
      const out = (response: TabPb.StreamCppResponse) => emit(encodeIn(call.codec, TabPb.StreamCppResponseSchema, response))
      let opened = false
      const answered = yield* tab.complete(request, call.requestId, (piece) => {
        if (!opened) {
          opened = true
          for (const head of Dialect.suggestionHead(ask.firstLine + cursorLineOf(request.contents, request.line, request.column).line)) out(head)
        }
        if (piece !== "") out(Dialect.suggestionText(piece))
      }).pipe(Effect.mapError((error) => new ConnectError("unavailable", `Tab's model: ${error.message}`)))
      if (answered !== "Canceled") out(Dialect.suggestionDone)
    })
})

const cppConfig = (tab: TabService) =>
  unaryServe(`${AI}/CppConfig`, TabPb.CppConfigRequestSchema, TabPb.CppConfigResponseSchema, () =>
    Effect.sync(() => {
      const on = tab.settings() !== undefined
      return create(TabPb.CppConfigResponseSchema, {
        aboveRadius: 80,
        belowRadius: 80,
        isOn: on,
        isGhostText: true,
        shouldLetUserEnableCppEvenIfNotPro: on,
        // Recently viewed files' text comes with each request: the model's best context.
        enableRvfTracking: on,
        shouldFetchRvfText: on,
        globalDebounceDurationMillis: 150,
        clientDebounceDurationMillis: 100,
        useWhitespaceDiffHistory: true,
        // Empty: Tab's calls stay on the hosts the proxy answers.
        cppUrl: "",
        geoCppBackendUrl: ""
      })
    }))

const fateOf = (fate: TabPb.CppFate) =>
  fate === TabPb.CppFate.ACCEPT ? "accept" as const : fate === TabPb.CppFate.REJECT ? "reject" as const : fate === TabPb.CppFate.PARTIAL_ACCEPT ? "partial" as const : undefined

const recordFate = (tab: TabService, path: Path) =>
  unaryServe(path, TabPb.RecordCppFateRequestSchema, TabPb.RecordCppFateResponseSchema, (message) =>
    Effect.sync(() => {
      const fate = fateOf(message.fate)
      if (fate !== undefined) tab.stats.fate(message.requestId, fate)
      return create(TabPb.RecordCppFateResponseSchema)
    }))

type Entry = readonly [string, (tab: TabService) => RpcRoute]

const fileSync = (base: string): ReadonlyArray<Entry> => [
  [`${base}/FSIsEnabledForUser`, (tab) => route(unaryServe(`${base}/FSIsEnabledForUser` as Path, TabPb.FSIsEnabledForUserRequestSchema, TabPb.FSIsEnabledForUserResponseSchema, () =>
    Effect.sync(() => create(TabPb.FSIsEnabledForUserResponseSchema, { enabled: tab.settings() !== undefined }))))],
  [`${base}/FSConfig`, (tab) => route(unaryServe(`${base}/FSConfig` as Path, TabPb.FSConfigRequestSchema, TabPb.FSConfigResponseSchema, () =>
    Effect.sync(() => create(TabPb.FSConfigResponseSchema, { checkFilesyncHashPercent: 0, maxFileSizeToSyncBytes: tab.settings()?.files.maxFileBytes ?? 0, syncDebounceMs: 250 }))))],
  [`${base}/FSUploadFile`, (tab) => route(unaryServe(`${base}/FSUploadFile` as Path, TabPb.FSUploadFileRequestSchema, TabPb.FSUploadFileResponseSchema, (message) =>
    Effect.sync(() => {
      const result = tab.settings() === undefined
        ? "too_large"
        : tab.files.upload(message.uuid, message.relativeWorkspacePath, message.contents, message.modelVersion, message.sha256Hash)
      return create(TabPb.FSUploadFileResponseSchema, {
        error: result === "ok" ? TabPb.FSUploadErrorType.FS_UPLOAD_ERROR_TYPE_UNSPECIFIED : result === "mismatch" ? TabPb.FSUploadErrorType.FS_UPLOAD_ERROR_TYPE_HASH_MISMATCH : TabPb.FSUploadErrorType.FS_UPLOAD_ERROR_TYPE_NON_EXISTANT
      })
    })))],
  [`${base}/FSSyncFile`, (tab) => route(unaryServe(`${base}/FSSyncFile` as Path, TabPb.FSSyncFileRequestSchema, TabPb.FSSyncFileResponseSchema, (message) =>
    Effect.sync(() => {
      const updates = message.filesyncUpdates.map((update) => ({
        modelVersion: update.modelVersion,
        expectedFileLength: update.expectedFileLength,
        updates: update.updates.map((one) => ({ startPosition: one.startPosition, endPosition: one.endPosition, replacedString: one.replacedString }))
      }))
      const result = tab.settings() === undefined ? "missing" : tab.files.sync(message.uuid, message.relativeWorkspacePath, message.modelVersion, updates, message.sha256Hash)
      return create(TabPb.FSSyncFileResponseSchema, {
        error: result === "ok" ? TabPb.FSSyncErrorType.FS_SYNC_ERROR_TYPE_UNSPECIFIED : result === "mismatch" ? TabPb.FSSyncErrorType.FS_SYNC_ERROR_TYPE_HASH_MISMATCH : TabPb.FSSyncErrorType.FS_SYNC_ERROR_TYPE_NON_EXISTANT
      })
    })))]
]

/** An answer that depends on nothing the request says. */
const fixed = <In extends Parameters<typeof unaryServe>[1], Out extends Parameters<typeof unaryServe>[2]>(
  path: Path,
  requestSchema: In,
  responseSchema: Out,
  answer: () => Parameters<typeof create<Out>>[1]
): Entry => [path, () => route(unaryServe(path, requestSchema, responseSchema, () => Effect.sync(() => create(responseSchema, answer()))))]

/** No cursor jumps are predicted here: "not in range", then the end. */
const noCursorPrediction: RpcRoute = {
  stream: (call, emit) =>
    Effect.sync(() => emit(encodeIn(call.codec, TabPb.StreamNextCursorPredictionResponseSchema, create(TabPb.StreamNextCursorPredictionResponseSchema, { response: { case: "isNotInRange", value: true } }))))
}

const table: ReadonlyArray<Entry> = [
  [STREAM_CPP_PATH, streamCpp],
  [`${AI}/StreamNextCursorPrediction`, () => noCursorPrediction],
  [`${AI}/CppConfig`, (tab) => route(cppConfig(tab))],
  [`${AI}/RecordCppFate`, (tab) => route(recordFate(tab, `${AI}/RecordCppFate`))],
  [`${CPP}/RecordCppFate`, (tab) => route(recordFate(tab, `${CPP}/RecordCppFate`))],
  [`${CPP}/AvailableModels`, (tab) => route(unaryServe(`${CPP}/AvailableModels`, TabPb.AvailableCppModelsRequestSchema, TabPb.AvailableCppModelsResponseSchema, () =>
    Effect.sync(() => {
      const model = tab.settings()?.model
      return create(TabPb.AvailableCppModelsResponseSchema, model === undefined ? {} : { models: [model], defaultModel: model })
    })))],
  fixed(`${AI}/CppEditHistoryStatus`, TabPb.CppEditHistoryStatusRequestSchema, TabPb.CppEditHistoryStatusResponseSchema, () => ({ on: true, onlyIfExplicit: false })),
  fixed(`${AI}/CppAppend`, TabPb.CppAppendRequestSchema, TabPb.CppAppendResponseSchema, () => ({ success: true })),
  fixed(`${AI}/CppEditHistoryAppend`, TabPb.EditHistoryAppendChangesRequestSchema, TabPb.EditHistoryAppendChangesResponseSchema, () => ({ success: true })),
  fixed(`${AI}/RefreshTabContext`, TabPb.RefreshTabContextRequestSchema, TabPb.RefreshTabContextResponseSchema, () => ({})),
  fixed(`${AI}/GetCppEditClassification`, TabPb.GetCppEditClassificationRequestSchema, TabPb.GetCppEditClassificationResponseSchema, () => ({ shouldNoop: false })),
  fixed(`${AI}/ShouldTurnOnCppOnboarding`, TabPb.ShouldTurnOnCppOnboardingRequestSchema, TabPb.ShouldTurnOnCppOnboardingResponseSchema, () => ({ shouldTurnOnCppOnboarding: false })),
  fixed(`${AI}/IsCursorPredictionEnabled`, TabPb.IsCursorPredictionEnabledRequestSchema, TabPb.IsCursorPredictionEnabledResponseSchema, () => ({ enabled: false })),
  ...FILE_SYNC.flatMap(fileSync)
]

/** Tab's procedures, by path, served by `tab`. */
export const tabRoutes = (tab: TabService): ReadonlyMap<string, RpcRoute> => new Map(table.map(([path, make]) => [path, make(tab)]))

/** The paths of Tab's procedures: the proxy answers them here while Tab is on. */
export const TAB_PATHS: ReadonlyArray<string> = table.map(([path]) => path)
