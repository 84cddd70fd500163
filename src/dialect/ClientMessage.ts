/**
 * What a client's message decodes to: the run request (its action, settings and the context to
 * read back), the other client messages, and the BidiAppend envelope around them.
 */
import { Data } from "effect"
import type { Either } from "effect"
import type { DialectError } from "./Bytes.js"
import type {
  AgentRunRequest,
  ConversationStateStructure,
  PrewarmRequest,
  RequestContextPartReferences,
  UserMessage as CursorUserMessage
} from "../gen/agent/v1/agent_pb.js"
import type { UserContent, UserMessage } from "../Llm.js"
import type { TurnSettings, TurnWorkspace } from "../Loop.js"
import type { CursorMode, ExecReply, McpToolDescriptor, QueryReply } from "../Tools.js"

/** Where the client runs: what the prompt builder may tell the model about the machine (the turn settings' `workspace`). */
export type WorkspaceInfo = TurnWorkspace

/** The loop's `Input.Start` fields, ready for `Input.Start(start)`. */
export interface StartInput {
  readonly message: UserMessage
  readonly context: ReadonlyArray<UserContent>
  readonly settings: TurnSettings
}

/** What a run request asks for. */
export type RunAction = Data.TaggedEnum<{
  /** A new user turn (`user_message_action`). */
  StartTurn: { readonly start: StartInput; readonly userMessageId: string; readonly userMessage: CursorUserMessage }
  /**
   * Compact the conversation now: `summarize_action`, a message that is `/summarize [instructions]`,
   * or Cursor's summarize command picked as a slash command. `userMessage` is the message that
   * asked, when one did (it is shown as its own turn; it is not sent to the model).
   */
  Summarize: {
    readonly settings: TurnSettings
    readonly instructions: string
    readonly userMessageId: string
    readonly userMessage: CursorUserMessage | undefined
  }
  /** Continue the conversation from the checkpoint without a new message (`resume_action`, CLI reconnects). */
  Resume: { readonly settings: TurnSettings }
  /** An action we do not serve (summarize, plans, shell command...): `field` is its tag number. */
  Unsupported: { readonly field: number }
}>
export const RunAction = Data.taggedEnum<RunAction>()

export interface RunRequest {
  readonly conversationId: string | undefined
  readonly action: RunAction
  readonly model: string
  readonly mode: CursorMode
  readonly mcpTools: ReadonlyArray<McpToolDescriptor>
  readonly workspace: WorkspaceInfo
  /** The last checkpoint the client holds (empty for a new chat): the previous turns' blob ids live here. */
  readonly conversationState: ConversationStateStructure | undefined
  /** In `ref_only` context transport the rules / skills / subagents / MCP parts are blobs to fetch with get_blob. */
  readonly requestContextParts: RequestContextPartReferences | undefined
  /**
   * What to read back from the client's blob store before the turn starts: the parts of the
   * request context (`ref_only` context transport: the run request names them instead of
   * carrying them; without them the rules and MCP tools would be missing) and attachments
   * (images, documents, extra context entries, the invocation context) named only by blob id.
   * Empty when everything came inline. Give what was read to
   * `withContextParts`.
   */
  readonly contextToFetch: ReadonlyArray<ContextPartRef>
  /** The conversations of the past chats the user attached (agent ids): their digests are read from the store before the turn starts. */
  readonly pastChatsToRead: ReadonlyArray<string>
  /** The whole request, for fields this module does not lift out. */
  readonly raw: AgentRunRequest
}

/** A blob the client keeps that a turn needs: its id (SHA-256 of the bytes) and length (0: not given). */
export interface ContextPartRef {
  /** A request-context part (`rules`, `mcps`), or an attachment named only by blob id. */
  readonly part: "rules" | "mcps" | "skills" | "subagents" | "image" | "document" | "extraContext" | "invocationContext"
  readonly blobId: Uint8Array
  readonly byteLength: number
}

export type ClientMessage = Data.TaggedEnum<{
  RunRequest: RunRequest
  /** A follow-up `conversation_action.user_message_action` on a live request. */
  UserMessage: { readonly message: UserMessage; readonly messageId: string; readonly userMessage: CursorUserMessage }
  /** `conversation_action.cancel_subagent_action`: the user stops the subagent whose agent id this is. */
  CancelSubagent: { readonly subagentId: string }
  /** `conversation_action.cancel_action`: decided by its presence, the reason may be empty. */
  Cancel: { readonly reason: string }
  /** A final exec result; correlate with `resolveExec(correlation, id, execId)`. */
  ExecResult: { readonly id: number; readonly execId: string | undefined; readonly reply: ExecReply }
  /** One shell stream event (start, stdout, stderr, exit...); `terminal` when no more events follow. */
  ExecStream: { readonly id: number; readonly execId: string | undefined; readonly reply: Extract<ExecReply, { case: "shellStream" }>; readonly terminal: boolean }
  /** The client closed an exec's stream. Never a result: it may arrive before the result. */
  ExecStreamClose: { readonly id: number }
  /** The client failed to run an exec. */
  ExecThrow: { readonly id: number; readonly error: string; readonly errorCode: string | undefined }
  ExecHeartbeat: { readonly id: number }
  /** A KV answer: a blob read back (`getBlob`) or a write acknowledged (`setBlob`, empty error = success). */
  KvResult: { readonly id: number; readonly kind: "getBlob" | "setBlob"; readonly data: Uint8Array | undefined; readonly error: string | undefined }
  /**
   * The client's answer to an interaction query (`resolveQuery`); `reply` undefined for a case
   * this server does not know (`field` is then its tag number).
   */
  InteractionResponse: { readonly id: number; readonly reply: QueryReply | undefined; readonly field: number | undefined }
  /** `client_heartbeat`: liveness only. */
  Heartbeat: {}
  /** `prewarm_request`: the settings of a turn whose user message follows on the same request. */
  Prewarm: { readonly prewarm: PrewarmRequest }
  /** A oneof case this server does not know (a newer client): log `where` and drop. */
  Unknown: { readonly where: string; readonly fields: ReadonlyArray<number> }
}>
export const ClientMessage = Data.taggedEnum<ClientMessage>()

export interface BidiEnvelope {
  readonly requestId: string
  /** Exact int64: seq 0 (the run request) is absent on the wire and decodes as 0n. */
  readonly appendSeqno: bigint
  readonly message: ClientMessage
}

/**
 * A BidiAppend as the transport takes it: its request and seqno, and its message or why the
 * message could not be read (an unreadable message still takes its seqno: the client will not
 * send it again).
 */
export interface BidiAppendFrame {
  readonly requestId: string
  readonly appendSeqno: bigint
  readonly message: Either.Either<ClientMessage, DialectError>
}
