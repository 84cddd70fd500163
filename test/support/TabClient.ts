/**
 * The reference client's Tab half: Cursor's Tab calls as its Tab client makes them, on the
 * official Connect client in any of the three protocols (`OfficialClients.transportOf`): a
 * completion request for a file and a cursor, read as Cursor reads the answer (the model kind,
 * the line range replaced, the text pieces joined, the end) and applied to the file as Cursor
 * applies an accepted suggestion; the file sync; the fate reports. Plain Promises.
 */
import { create } from "@bufbuild/protobuf"
import { ConnectError, createClient } from "@connectrpc/connect"
import type { Client, Transport } from "@connectrpc/connect"
import { AiService } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { CppFate, CppService, FileSyncService, StreamCppRequestSchema } from "../../src/gen/aiserver/v1/tab_pb.js"
import type { StreamCppRequest, StreamCppResponse } from "../../src/gen/aiserver/v1/tab_pb.js"

export interface TabAsk {
  readonly path: string
  readonly contents: string
  /** 0-based line and UTF-16 column, as Cursor's editor counts. */
  readonly line: number
  readonly column: number
  readonly languageId?: string
  readonly workspaceId?: string
  /** The client holds the file at the server (`FileSyncService`) and sends no contents. */
  readonly relyOnFilesync?: boolean
  /** The SHA-256 (hex) of the file's text, as Cursor sends it beside a request relying on sync. */
  readonly sha256?: string
  readonly requestId?: string
}

export interface Suggestion {
  readonly frames: ReadonlyArray<StreamCppResponse>
  /** The 1-based lines replaced, as the answer named them; undefined: no suggestion. */
  readonly range: { readonly start: number; readonly endInclusive: number } | undefined
  /** The replacement text: the answer's text pieces joined. */
  readonly text: string
  readonly done: boolean
}

export const streamCppRequest = (ask: TabAsk): StreamCppRequest =>
  create(StreamCppRequestSchema, {
    currentFile: {
      relativeWorkspacePath: ask.path,
      contents: ask.relyOnFilesync === true ? "" : ask.contents,
      cursorPosition: { line: ask.line, column: ask.column },
      languageId: ask.languageId ?? "typescript",
      relyOnFilesync: ask.relyOnFilesync ?? false,
      ...(ask.sha256 === undefined ? {} : { sha256Hash: ask.sha256 })
    },
    workspaceId: ask.workspaceId ?? "ws-1"
  })

/** `contents` with a suggestion applied, as Cursor applies an accepted one: its lines replaced by its text. */
export const applied = (contents: string, suggestion: Suggestion): string => {
  if (suggestion.range === undefined) return contents
  const lines = contents.split("\n")
  lines.splice(suggestion.range.start - 1, suggestion.range.endInclusive - suggestion.range.start + 1, ...suggestion.text.split("\n"))
  return lines.join("\n")
}

export class TabClient {
  readonly ai: Client<typeof AiService>
  readonly cpp: Client<typeof CppService>
  readonly sync: Client<typeof FileSyncService>

  constructor(transport: Transport) {
    this.ai = createClient(AiService, transport)
    this.cpp = createClient(CppService, transport)
    this.sync = createClient(FileSyncService, transport)
  }

  /** One `StreamCpp`, read to its end. */
  async suggest(ask: TabAsk, signal?: AbortSignal): Promise<Suggestion> {
    const frames: Array<StreamCppResponse> = []
    const headers = ask.requestId === undefined ? undefined : { "x-request-id": ask.requestId }
    for await (const frame of this.ai.streamCpp(streamCppRequest(ask), { ...(signal === undefined ? {} : { signal }), ...(headers === undefined ? {} : { headers }) })) frames.push(frame)
    const range = frames.find((frame) => frame.rangeToReplace !== undefined)?.rangeToReplace
    return {
      frames,
      range: range === undefined ? undefined : { start: range.startLineNumber, endInclusive: range.endLineNumberInclusive },
      text: frames.map((frame) => frame.text).join(""),
      done: frames.at(-1)?.doneStream === true
    }
  }

  /** The error a `StreamCpp` ends with, as the Connect client reads it (throws when it ends well). */
  async failure(ask: TabAsk): Promise<ConnectError> {
    try {
      await this.suggest(ask)
    } catch (error) {
      return ConnectError.from(error)
    }
    throw new Error("the StreamCpp call did not fail")
  }

  upload(workspaceId: string, path: string, contents: string, modelVersion = 1) {
    return this.sync.fSUploadFile({ uuid: workspaceId, relativeWorkspacePath: path, contents, modelVersion })
  }

  fate(requestId: string, fate: "accept" | "reject" | "partial") {
    return this.cpp.recordCppFate({ requestId, fate: fate === "accept" ? CppFate.ACCEPT : fate === "reject" ? CppFate.REJECT : CppFate.PARTIAL_ACCEPT })
  }
}
