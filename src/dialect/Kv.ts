/**
 * KV: the client is the blob store. A blob's id is the SHA-256 of its bytes; `set_blob` and
 * `get_blob` requests are correlated by KV id per request, and a checkpoint is published only
 * once the blobs it names are acknowledged.
 */
import type { AgentServerMessage, ConversationStateStructure } from "../gen/agent/v1/agent_pb.js"
import { sha256Digest } from "../internal/Sha256.js"
import { bytesToHex } from "./Bytes.js"
import { server } from "./Correlation.js"
import type { PendingKv, TurnCorrelation } from "./Correlation.js"

export interface Blob {
  /** The raw 32-byte SHA-256 of `data`. */
  readonly id: Uint8Array
  readonly data: Uint8Array
}

export const blobIdOf = (data: Uint8Array): Uint8Array => sha256Digest(data)

export const blobOf = (data: Uint8Array): Blob => ({ id: blobIdOf(data), data })

/** `kv_server_message.set_blob_args`: the checkpoint naming this blob must wait for its `set_blob_result`. */
export const encodeSetBlob = (correlation: TurnCorrelation, blob: Blob): { readonly correlation: TurnCorrelation; readonly kvId: number; readonly message: AgentServerMessage } => {
  const id = correlation.nextKvId
  return {
    correlation: { ...correlation, nextKvId: id + 1, kvs: [...correlation.kvs, { id, kind: "setBlob", blobId: bytesToHex(blob.id) }] },
    kvId: id,
    message: server({ message: { case: "kvServerMessage", value: { id, message: { case: "setBlobArgs", value: { blobId: blob.id, blobData: blob.data } } } } })
  }
}

/** `kv_server_message.get_blob_args`: reads a blob back (ref_only request context parts, previous turns). */
export const encodeGetBlob = (correlation: TurnCorrelation, blobId: Uint8Array): { readonly correlation: TurnCorrelation; readonly kvId: number; readonly message: AgentServerMessage } => {
  const id = correlation.nextKvId
  return {
    correlation: { ...correlation, nextKvId: id + 1, kvs: [...correlation.kvs, { id, kind: "getBlob", blobId: bytesToHex(blobId) }] },
    kvId: id,
    message: server({ message: { case: "kvServerMessage", value: { id, message: { case: "getBlobArgs", value: { blobId } } } } })
  }
}

/** Takes a KV answer: the request it answers (undefined for an unknown or repeated id) and the next correlation. */
export const resolveKv = (correlation: TurnCorrelation, id: number): { readonly correlation: TurnCorrelation; readonly pending: PendingKv | undefined } => {
  const pending = correlation.kvs.find((kv) => kv.id === id)
  return pending === undefined
    ? { correlation, pending }
    : { correlation: { ...correlation, kvs: correlation.kvs.filter((kv) => kv.id !== id) }, pending }
}

/** `conversation_checkpoint_update`: publish only after every blob it names is acknowledged. */
export const encodeCheckpoint = (checkpoint: ConversationStateStructure): AgentServerMessage =>
  server({ message: { case: "conversationCheckpointUpdate", value: checkpoint } })
