/**
 * The Cursor dialect: Cursor's agent protocol (protobuf `agent.v1` / `aiserver.v1`) on one side,
 * the loop's neutral types (`Input`, `ResponseEvent`, `Command`) and the tool machines' exec
 * requests on the other.
 *
 * Decoding turns a BidiAppend body into an envelope `{ requestId, appendSeqno, message }`;
 * it never throws: bad bytes give a typed `DialectError`, and a oneof case from a newer client
 * gives `ClientMessage.Unknown` (log and drop). Encoding returns protobuf message objects
 * (`AgentServerMessage`); `toFrame` gives their bytes for the transport's Connect envelope.
 * The per-turn protocol correlation (exec ids, KV ids, tool call ids of the current model call,
 * summed usage) is an immutable `TurnCorrelation` value that the caller threads through the
 * encoders: no hidden state here.
 *
 * Also here, because they are protocol shapes: the end-stream JSON payload (`{}` or an error
 * with `aiserver.v1.ErrorDetails`), and the projection of a turn's committed messages into
 * the blobs and `ConversationStateStructure` checkpoint Cursor keeps (blob id = SHA-256).
 *
 * Pure: no I/O, no clock (times are arguments), no randomness.
 *
 * One concern per module of `dialect/`: `Bytes.ts` (the error, hex), `ClientMessage.ts` (what a
 * client message decodes to), `Decode.ts`, `Unknowns.ts` (the unknown fields of a decoded message), `UserMessage.ts` (modes, the model's user message),
 * `Attachments.ts` (what the user attached, as text), `RunRequest.ts` (the run request and its
 * context parts), `Settings.ts` (what is read back from a turn's settings), `Correlation.ts`,
 * `Encode.ts` (model events, tool calls and execs, turn end), `Kv.ts` (blobs), `Checkpoint.ts`
 * (the checkpoint projection), `EndStream.ts` and `Inputs.ts` (the loop's inputs from client
 * messages).
 */
export { bytesToHex, DialectError, DialectErrorReason, hexToBytes } from "./dialect/Bytes.js"
export * from "./dialect/ClientMessage.js"
export * from "./dialect/Decode.js"
export { walkUnknown } from "./dialect/Unknowns.js"
export { agentJson } from "./dialect/Json.js"
export type { UnknownSink } from "./dialect/Unknowns.js"
export { toLlmUserMessage } from "./dialect/UserMessage.js"
export { agentModeOf, cursorModeOf, customModeOf } from "./dialect/Modes.js"
export { pastChatDigest } from "./dialect/Attachments.js"
export { withContextParts } from "./dialect/RunRequest.js"
export * from "./dialect/Settings.js"
export { fromFrame, initialCorrelation, toFrame } from "./dialect/Correlation.js"
export type { Encoded, PendingKv, PendingQuery, RunningExec, StreamingToolCall, TurnCorrelation } from "./dialect/Correlation.js"
export * from "./dialect/Encode.js"
export { deltaBytesOf } from "./dialect/DeltaBytes.js"
export * from "./dialect/Kv.js"
export * from "./dialect/Checkpoint.js"
export * from "./dialect/PromptMessages.js"
export * from "./dialect/EndStream.js"
export * from "./dialect/Inputs.js"
