/**
 * The user's message as the model sees it: the attached images, the other attachments
 * (Attachments.ts) and the instruction as one neutral user message. (The modes: `Modes.ts`.)
 */
import type { UserMessage as CursorUserMessage } from "../gen/agent/v1/agent_pb.js"
import type { UserContent, UserMessage } from "../Llm.js"
import { attachmentsOf } from "./Attachments.js"
import { bytesToHex } from "./Bytes.js"

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
 * The model's user message: the attached images (those at hand: inline, sent along or read back
 * by id, `blobs`), the other attachments as text (Attachments.ts: files not already in the
 * request context, `alreadyAttached`; past chats from `pastChats`, digests by agent id), then
 * the user's instruction (the typed text, or the picked command's content). An image or
 * attachment that could not be had is a line of text saying so, never silently dropped.
 */
export const toLlmUserMessage = (
  message: CursorUserMessage,
  blobs: ReadonlyMap<string, Uint8Array> = new Map(),
  alreadyAttached: ReadonlySet<string> = new Set(),
  pastChats: ReadonlyMap<string, string> = new Map()
): UserMessage => {
  const images = attachedImagesOf(message, blobs).map((image): UserContent =>
    image.data !== undefined
      ? { type: "image", data: Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength).toString("base64"), mimeType: image.mimeType !== "" ? image.mimeType : sniffImageType(image.data) }
      : { type: "text", text: `[An attached image${image.path !== "" ? ` (${image.path})` : ""} could not be read from the editor.]` }
  )
  const attachments = attachmentsOf(message.selectedContext, message.text, { blobs, alreadyAttached, pastChats })
  const before = [...images, ...attachments.blocks.map((text): UserContent => ({ type: "text", text }))]
  // No empty text block after the rest (some APIs refuse one).
  return { role: "user", content: attachments.instruction === "" && before.length > 0 ? before : [...before, { type: "text", text: attachments.instruction }] }
}
