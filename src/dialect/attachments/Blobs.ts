/**
 * Attachments whose content may be a blob the client keeps: documents, extra-context entries and
 * the invocation context (a pull request, the IDE's open files, a Slack or Teams thread). Each is
 * rendered from its inline bytes, or from `blobs` (by hex id: sent along or read back); one whose
 * bytes are not at hand is a line saying so. `attachmentBlobRefsOf` names the blobs to read back.
 */
import { fromBinary } from "@bufbuild/protobuf"
import { InvocationContextSchema } from "../../gen/agent/v1/agent_pb.js"
import type {
  ExtraContextEntry,
  InvocationContext,
  InvocationContext_IdeState_File,
  SelectedContext,
  SelectedDocument
} from "../../gen/agent/v1/agent_pb.js"
import { bytesToHex } from "../Bytes.js"
import { displayPath, element, joinPresent, labelled, note } from "./Markup.js"

/** Blobs at hand, by hex id. */
export type Blobs = ReadonlyMap<string, Uint8Array>

/** An attachment named by blob id without its bytes, to read back from the client. */
export interface AttachmentBlobRef {
  readonly part: "document" | "extraContext" | "invocationContext"
  readonly blobId: Uint8Array
}

const documentSource = (document: SelectedDocument): { readonly inline: Uint8Array | undefined; readonly blobId: Uint8Array | undefined } => {
  const source = document.dataOrBlobId
  switch (source.case) {
    case "data":
      return { inline: source.value, blobId: undefined }
    case "blobIdWithData":
      return { inline: source.value.data.length > 0 ? source.value.data : undefined, blobId: source.value.blobId.length > 0 ? source.value.blobId : undefined }
    case "blobId":
      return { inline: undefined, blobId: source.value.length > 0 ? source.value : undefined }
    case undefined:
      return { inline: undefined, blobId: undefined }
  }
}

/** The blobs the attachments name without carrying them, in rendering order. */
export const attachmentBlobRefsOf = (selected: SelectedContext | undefined): ReadonlyArray<AttachmentBlobRef> => {
  if (selected === undefined) return []
  const refs: Array<AttachmentBlobRef> = []
  for (const entry of selected.extraContextEntries) {
    if (entry.dataOrBlobId.case === "blobId" && entry.dataOrBlobId.value.length > 0) refs.push({ part: "extraContext", blobId: entry.dataOrBlobId.value })
  }
  const invocation = selected.invocationContext?.data
  if (invocation?.case === "blobId" && invocation.value.length > 0) refs.push({ part: "invocationContext", blobId: invocation.value })
  for (const document of selected.selectedDocuments) {
    const source = documentSource(document)
    if (source.inline === undefined && source.blobId !== undefined) refs.push({ part: "document", blobId: source.blobId })
  }
  return refs
}

const NOT_READ = "could not be read from the editor"

const utf8 = (data: Uint8Array, fatal: boolean): string | undefined => {
  try {
    return new TextDecoder("utf-8", { fatal, ignoreBOM: false }).decode(data)
  } catch {
    return undefined
  }
}

export const extraContextEntryText = (entry: ExtraContextEntry, blobs: Blobs): ReadonlyArray<string> => {
  const source = entry.dataOrBlobId
  if (source.case === "data") return source.value === "" ? [] : [source.value]
  if (source.case !== "blobId" || source.value.length === 0) return []
  const data = blobs.get(bytesToHex(source.value))
  const text = data === undefined ? undefined : utf8(data, true)
  return text === undefined ? [note(`An extra context entry ${NOT_READ}.`)] : text === "" ? [] : [text]
}

const TEXT_TYPES = /^(text\/.*|application\/(json|xml|javascript|ecmascript|x-javascript|typescript|x-typescript|yaml|x-yaml|toml|x-toml|sql|csv|x-sh|x-shellscript|x-httpd-php|graphql|ld\+json|x-ndjson|markdown|x-markdown)|application\/.*\+(json|xml|yaml))$/

/** A text-like type is decoded as UTF-8; with no type given, bytes that are valid UTF-8 without NUL count as text. */
const documentText = (data: Uint8Array, mimeType: string): string | undefined => {
  const type = mimeType.split(";")[0]!.trim().toLowerCase()
  if (TEXT_TYPES.test(type)) return utf8(data, false)
  if (type !== "") return undefined
  const text = utf8(data, true)
  return text !== undefined && !text.includes("\u0000") ? text : undefined
}

export const documentTextOf = (document: SelectedDocument, blobs: Blobs): ReadonlyArray<string> => {
  const source = documentSource(document)
  const name = document.filename !== "" ? document.filename : document.path
  const described = `${name !== "" ? ` ${name}` : ""}${document.mimeType !== "" ? ` (${document.mimeType})` : ""}`
  if (source.inline === undefined && source.blobId === undefined) {
    return name === "" ? [] : [note(`The attached document${described} came without its content.`)]
  }
  const data = source.inline ?? blobs.get(bytesToHex(source.blobId!))
  if (data === undefined) return [note(`The attached document${described} ${NOT_READ}.`)]
  const text = documentText(data, document.mimeType)
  if (text === undefined) return [note(`The attached document${described} could not be read as text.`)]
  return [element("attached_document", [["name", document.filename], ["path", document.path], ["type", document.mimeType]], text)]
}

const ideFileLine = (file: InvocationContext_IdeState_File): string => {
  const details = [
    file.totalLines > 0 ? `${file.totalLines} lines` : undefined,
    file.cursorPosition !== undefined
      ? `cursor on line ${file.cursorPosition.line}${file.cursorPosition.text !== "" ? `: ${file.cursorPosition.text.trim()}` : ""}`
      : undefined,
    file.activeCommand !== undefined && file.activeCommand !== "" ? `running: ${file.activeCommand}` : undefined
  ].filter((detail) => detail !== undefined)
  return `- ${displayPath(file)}${details.length > 0 ? ` (${details.join("; ")})` : ""}`
}

const ideFiles = (label: string, files: ReadonlyArray<InvocationContext_IdeState_File>): string | undefined => {
  const present = files.filter((file) => file.path !== "" || (file.relativePath ?? "") !== "")
  return present.length === 0 ? undefined : `${label}:\n${present.map(ideFileLine).join("\n")}`
}

/** The invocation context when it came inline (or decoded from its blob). */
const inlineInvocationText = (data: InvocationContext["data"]): ReadonlyArray<string> => {
  switch (data.case) {
    case "githubPr": {
      const pr = data.value
      const body = joinPresent([labelled("Description", pr.description), labelled("Comments", pr.comments), labelled("CI failures", pr.ciFailures)], "\n\n")
      return pr.title === "" && body === "" ? [] : [element("github_pr", [["title", pr.title]], body)]
    }
    case "ideState": {
      const body = joinPresent([ideFiles("Visible files", data.value.visibleFiles), ideFiles("Recently viewed files", data.value.recentlyViewedFiles)], "\n\n")
      return body === "" ? [] : [element("ide_state", [], body)]
    }
    case "slackThread":
      return data.value.thread === "" ? [] : [element("slack_thread", [["channel", data.value.channelName]], data.value.thread)]
    case "microsoftTeamsThread":
      return data.value.thread === ""
        ? []
        : [element("teams_thread", [["team", data.value.teamName], ["channel", data.value.channelName]], data.value.thread)]
    case "blobId":
    case undefined:
      return []
  }
}

/**
 * The invocation context: what the user was looking at (a GitHub PR, the IDE's files, a Slack or
 * Teams thread). One named by blob id is read back: a serialized `InvocationContext`, else UTF-8
 * text.
 */
export const invocationContextText = (context: InvocationContext | undefined, blobs: Blobs): ReadonlyArray<string> => {
  if (context === undefined) return []
  if (context.data.case !== "blobId") return inlineInvocationText(context.data)
  if (context.data.value.length === 0) return []
  const data = blobs.get(bytesToHex(context.data.value))
  if (data === undefined) return [note(`The invocation context ${NOT_READ}.`)]
  let decoded: InvocationContext["data"] | undefined
  try {
    decoded = fromBinary(InvocationContextSchema, data).data
  } catch {
    decoded = undefined
  }
  if (decoded !== undefined && decoded.case !== undefined && decoded.case !== "blobId") return inlineInvocationText(decoded)
  const text = utf8(data, true)
  return text === undefined ? [note(`The invocation context ${NOT_READ}.`)] : text === "" ? [] : [element("invocation_context", [], text)]
}
