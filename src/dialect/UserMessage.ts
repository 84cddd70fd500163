/**
 * The user's message as the model sees it: Cursor's modes, then the attached images, the
 * selected context and the typed text as one neutral user message.
 */
import { AgentMode } from "../gen/agent/v1/agent_pb.js"
import type { UserMessage as CursorUserMessage } from "../gen/agent/v1/agent_pb.js"
import type { UserContent, UserMessage } from "../Llm.js"
import type { CursorMode } from "../Tools.js"
import { bytesToHex } from "./Bytes.js"

const MODES: Record<number, CursorMode> = { [AgentMode.AGENT]: "agent", [AgentMode.ASK]: "ask", [AgentMode.PLAN]: "plan" }

/** The Cursor mode of a user message (debug, triage... run as agent). */
export const cursorModeOf = (mode: AgentMode): CursorMode => MODES[mode] ?? "agent"

export const agentModeOf = (mode: CursorMode): AgentMode =>
  mode === "ask" ? AgentMode.ASK : mode === "plan" ? AgentMode.PLAN : AgentMode.AGENT

/** The text the user typed, as a neutral user message. */
/** An image the user attached: its bytes when at hand (inline, or among `blobs` by id), else the blob id to read back. */
interface AttachedImage {
  readonly data: Uint8Array | undefined
  readonly blobId: Uint8Array | undefined
  readonly path: string
  readonly mimeType: string
}

export const attachedImagesOf = (message: CursorUserMessage, blobs: ReadonlyMap<string, Uint8Array>): ReadonlyArray<AttachedImage> =>
  (message.selectedContext?.selectedImages ?? []).flatMap((image): ReadonlyArray<AttachedImage> => {
    const source = image.dataOrBlobId
    const inline = source.case === "data" ? source.value : source.case === "blobIdWithData" && source.value.data.length > 0 ? source.value.data : undefined
    const blobId = source.case === "blobId" ? source.value : source.case === "blobIdWithData" ? source.value.blobId : undefined
    if (inline === undefined && (blobId === undefined || blobId.length === 0)) return []
    const data = inline !== undefined && inline.length > 0 ? inline : blobId !== undefined ? blobs.get(bytesToHex(blobId)) : undefined
    return [{ data, blobId: blobId !== undefined && blobId.length > 0 ? blobId : undefined, path: image.path, mimeType: image.mimeType }]
  })

/** The image type from the first bytes, when the client did not say. */
const sniffImageType = (data: Uint8Array): string => {
  if (data[0] === 0x89 && data[1] === 0x50 && data[2] === 0x4e && data[3] === 0x47) return "image/png"
  if (data[0] === 0xff && data[1] === 0xd8 && data[2] === 0xff) return "image/jpeg"
  if (data[0] === 0x47 && data[1] === 0x49 && data[2] === 0x46) return "image/gif"
  if (data[0] === 0x52 && data[1] === 0x49 && data[2] === 0x46 && data[3] === 0x46 && data[8] === 0x57 && data[9] === 0x45 && data[10] === 0x42 && data[11] === 0x50) return "image/webp"
  return "image/png"
}

/**
 * What the user selected to go with the message, as text blocks: files (unless the request
 * context carries the same path, `alreadyAttached`), code and terminal selections, terminals,
 * and extra context.
 */
const selectionsOf = (message: CursorUserMessage, alreadyAttached: ReadonlySet<string>): Array<UserContent> => {
  const selected = message.selectedContext
  if (selected === undefined) return []
  const text = (value: string): UserContent => ({ type: "text", text: value })
  const where = (item: { readonly path: string; readonly relativePath?: string | undefined }) =>
    item.relativePath !== undefined && item.relativePath !== "" ? item.relativePath : item.path
  const titled = (item: { readonly title?: string | undefined }) => (item.title !== undefined && item.title !== "" ? ` title="${item.title}"` : "")
  return [
    ...selected.files.filter((file) => file.content !== "" && !alreadyAttached.has(file.path))
      .map((file) => text(`<attached_file path="${where(file)}">\n${file.content}\n</attached_file>`)),
    ...selected.codeSelections.filter((selection) => selection.content !== "")
      .map((selection) => text(`<code_selection path="${where(selection)}">\n${selection.content}\n</code_selection>`)),
    ...selected.terminals.filter((terminal) => terminal.content !== "")
      .map((terminal) => text(`<terminal${titled(terminal)}>\n${terminal.content}\n</terminal>`)),
    ...selected.terminalSelections.filter((selection) => selection.content !== "")
      .map((selection) => text(`<terminal_selection${titled(selection)}>\n${selection.content}\n</terminal_selection>`)),
    ...selected.extraContext.filter((extra) => extra !== "").map(text)
  ]
}

/**
 * The model's user message: the attached images (those at hand: inline, sent along or read back
 * by id, `blobs`), what the user selected to go with it (files, code and terminal selections),
 * then the typed text. An image that could not be had is a line of text saying so, never
 * silently dropped.
 */
export const toLlmUserMessage = (
  message: CursorUserMessage,
  blobs: ReadonlyMap<string, Uint8Array> = new Map(),
  alreadyAttached: ReadonlySet<string> = new Set()
): UserMessage => {
  const images = attachedImagesOf(message, blobs).map((image): UserContent =>
    image.data !== undefined
      ? { type: "image", data: Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength).toString("base64"), mimeType: image.mimeType !== "" ? image.mimeType : sniffImageType(image.data) }
      : { type: "text", text: `[An attached image${image.path !== "" ? ` (${image.path})` : ""} could not be read from the editor.]` }
  )
  const before = [...images, ...selectionsOf(message, alreadyAttached)]
  // No empty text block after the rest (some APIs refuse one).
  return { role: "user", content: message.text === "" && before.length > 0 ? before : [...before, { type: "text", text: message.text }] }
}
