/**
 * A reconnecting RunSSE (no run request), as Cursor reopens it after a broken stream or a
 * server restart: reads the request's stream to its end-stream frame and acknowledges each
 * `set_blob` with an append numbered on from where the client's numbering is. For tests of a
 * restarted process (a turn's end replayed, a recovered turn streaming on).
 */
import * as Dialect from "../../src/Dialect.js"
import type { AgentServerMessage, ConversationStateStructure } from "../../src/gen/agent/v1/agent_pb.js"
import { frameEvent, openRawRunSse, sha256Hex, toHex } from "./CursorClient.js"
import type { CursorClient, FrameEvent } from "./CursorClient.js"

export interface Reattached {
  readonly events: ReadonlyArray<FrameEvent>
  readonly checkpoints: ReadonlyArray<ConversationStateStructure>
  readonly end: Dialect.EndStream | undefined
  /** Blobs stored by `set_blob`, by hex id. */
  readonly blobs: ReadonlyMap<string, Uint8Array>
  readonly problems: ReadonlyArray<string>
}

/**
 * Opens RunSSE for `requestId` and reads it to its end-stream (or `timeoutMs`), acknowledging each
 * `set_blob` with an append numbered on from `firstSeqno`, as the client's numbering goes on.
 */
export const reattach = (client: CursorClient, requestId: string, firstSeqno: number, timeoutMs = 15_000): Promise<Reattached> =>
  new Promise((resolve) => {
    const events: Array<FrameEvent> = []
    const checkpoints: Array<ConversationStateStructure> = []
    const blobs = new Map<string, Uint8Array>()
    const problems: Array<string> = []
    const acks: Array<Promise<void>> = []
    let end: Dialect.EndStream | undefined
    let seqno = firstSeqno
    let settled = false
    const settle = (problem?: string) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      request.destroy()
      if (problem !== undefined) problems.push(problem)
      void Promise.allSettled(acks).then(() => resolve({ events, checkpoints, end, blobs, problems }))
    }
    const timer = setTimeout(() => settle(`no end-stream within ${timeoutMs} ms`), timeoutMs)
    const onMessage = (message: AgentServerMessage) => {
      const event = frameEvent(message)
      if (event.kind !== "heartbeat") events.push(event)
      const m = message.message
      if (m.case === "conversationCheckpointUpdate") checkpoints.push(m.value)
      if (m.case === "kvServerMessage" && m.value.message.case === "setBlobArgs") {
        const { blobData, blobId } = m.value.message.value
        if (toHex(blobId) !== sha256Hex(blobData)) problems.push(`blob ${toHex(blobId)} is not the SHA-256 of its data`)
        blobs.set(toHex(blobId), blobData)
        const kvId = m.value.id
        acks.push(client.append(requestId, seqno++, { message: { case: "kvClientMessage", value: { id: kvId, message: { case: "setBlobResult", value: {} } } } })
          .then((response) => {
            if (response.status !== 200) problems.push(`the set_blob acknowledgement ${kvId} answered ${response.status}`)
          }, (error: Error) => void problems.push(`the set_blob acknowledgement ${kvId} failed: ${error.message}`)))
      }
    }
    const request = openRawRunSse(client.options.baseUrl, requestId, {
      onMessage: (message) => {
        if (!settled) onMessage(message)
      },
      onUndecodable: (error) => void problems.push(`undecodable server frame: ${error.message}`),
      onEnd: (decoded) => {
        if (decoded._tag === "Right") end = decoded.right
        else problems.push(`bad end-stream: ${decoded.left.message}`)
        settle()
      },
      onBroken: (how, error) =>
        settle(how === "ended" ? "RunSSE ended without an end-stream frame" : how === "failed" ? `RunSSE failed: ${error?.message ?? ""}` : "RunSSE broke")
    })
  })
