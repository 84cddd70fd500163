/**
 * Tab's calls in Cursor's terms and ours: a `StreamCpp` request read into a `TabRequest` (the
 * file, the cursor, the edits and files around it), and a suggestion written as the response
 * messages Cursor's Tab client takes: the model's kind, the line range replaced (1-based, whole
 * lines), the text in pieces, the stream's end (the order a peer verified against Cursor: each
 * in its own message). Pure.
 */
import { create, toBinary } from "@bufbuild/protobuf"
import { ErrorDetails_Error, ErrorDetailsSchema } from "../gen/aiserver/v1/aiserver_pb.js"
import { StreamCppResponseSchema } from "../gen/aiserver/v1/tab_pb.js"
import type { StreamCppRequest, StreamCppResponse } from "../gen/aiserver/v1/tab_pb.js"
import type { TabDiagnostic, TabFile, TabRequest } from "../Tab.js"

/** What a `StreamCpp` request asks, in our terms, and what only the Cursor side needs to answer it. */
export interface CppAsk {
  readonly request: TabRequest
  /** The file's line where `request.contents` starts (Cursor may send a window of the file). */
  readonly firstLine: number
  /** The client holds the file's text at the server (`FileSyncService`) and sent none. */
  readonly relyOnFilesync: boolean
  /** The Tab model the client picked (`CppService/AvailableModels`), "" when none. */
  readonly modelName: string
  /** The SHA-256 (hex) of the file's text as the client has it, when it says (a synced copy is checked against it). */
  readonly sha256: string | undefined
}

const diagnosticsOf = (request: StreamCppRequest): ReadonlyArray<TabDiagnostic> =>
  (request.linterErrors?.errors ?? []).map((error) => ({
    // Editor markers count lines from 1.
    line: Math.max(0, (error.range?.startPosition?.line ?? 1) - 1),
    message: error.message,
    severity: error.severity === undefined ? "" : ["", "error", "warning", "information", "hint"][error.severity] ?? ""
  }))

const editsOf = (request: StreamCppRequest): ReadonlyArray<string> => [
  ...request.diffHistory.filter((diff) => diff.trim() !== ""),
  ...request.fileDiffHistories.flatMap((history) =>
    history.diffHistory.filter((diff) => diff.trim() !== "").map((diff) => `${history.fileName}:\n${diff}`))
]

const otherFilesOf = (request: StreamCppRequest, path: string): ReadonlyArray<TabFile> => [
  ...request.contextItems.filter((item) => item.contents !== "").map((item) => ({ path: item.relativeWorkspacePath, contents: item.contents })),
  ...request.additionalFiles
    .filter((file) => file.relativeWorkspacePath !== path && file.visibleRangeContent.length > 0)
    .map((file) => ({ path: file.relativeWorkspacePath, contents: file.visibleRangeContent.join("\n...\n") }))
]

/** A `StreamCpp` request as a `TabRequest`; `contents` stays "" when the client relies on file sync. */
export const cppAskOf = (request: StreamCppRequest): CppAsk => {
  const file = request.currentFile
  const firstLine = Math.max(0, file?.contentsStartAtLine ?? 0)
  const path = file?.relativeWorkspacePath ?? ""
  return {
    request: {
      workspace: request.workspaceId ?? file?.workspaceRootPath ?? "",
      path,
      languageId: file?.languageId ?? "",
      contents: file?.contents ?? "",
      line: Math.max(0, (file?.cursorPosition?.line ?? 0) - firstLine),
      column: Math.max(0, file?.cursorPosition?.column ?? 0),
      recentEdits: editsOf(request),
      otherFiles: otherFilesOf(request, path),
      diagnostics: diagnosticsOf(request)
    },
    firstLine,
    relyOnFilesync: file?.relyOnFilesync === true && (file.contents ?? "") === "",
    modelName: request.modelName ?? "",
    sha256: file?.sha256Hash === undefined || file.sha256Hash === "" ? undefined : file.sha256Hash.toLowerCase()
  }
}

/** Before a suggestion's text: a plain (not fused, not multi-diff) model, and the line it replaces (`line`: 0-based, the file's). */
export const suggestionHead = (line: number): ReadonlyArray<StreamCppResponse> => [
  create(StreamCppResponseSchema, { modelInfo: { isFusedCursorPredictionModel: false, isMultidiffModel: false } }),
  create(StreamCppResponseSchema, { rangeToReplace: { startLineNumber: line + 1, endLineNumberInclusive: line + 1 } })
]

/** A piece of the suggestion's text (the pieces join into the replaced line's new text). */
export const suggestionText = (text: string): StreamCppResponse => create(StreamCppResponseSchema, { text })

/** The stream's last message: the suggestion, if any, is complete. */
export const suggestionDone: StreamCppResponse = create(StreamCppResponseSchema, { doneStream: true })

/** The error detail of a request that relied on file sync for a file not synced here: an expected FILE_NOT_FOUND, which Cursor answers by sending the file. */
export const notSyncedDetail: Uint8Array = toBinary(ErrorDetailsSchema, create(ErrorDetailsSchema, { error: ErrorDetails_Error.FILE_NOT_FOUND, isExpected: true }))
