/**
 * The procedures that name things: a new chat's title (`NameAgent`, in both services, and the
 * older `GetChatTitle`), a chat tab's name (`NameTab`), the name a user gives a chat (`UpdateConversationMetadata`), and the
 * commit message and branch name of Cursor's source control view. Answered by the catalogue's
 * naming service (the user's model, within a budget, else a deterministic fallback); without
 * one, by the fallbacks. A model failure is never an error to the client.
 */
import { create } from "@bufbuild/protobuf"
import { Effect } from "effect"
import {
  NameAgentRequestSchema,
  NameAgentResponseSchema,
  UpdateConversationMetadataRequestSchema,
  UpdateConversationMetadataResponseSchema
} from "../../gen/agent/v1/agent_pb.js"
import {
  ConversationMessage_MessageType,
  GetChatTitleRequestSchema,
  GetChatTitleResponseSchema,
  NameTabRequestSchema,
  NameTabResponseSchema,
  WriteGitBranchNameRequestSchema,
  WriteGitBranchNameResponseSchema,
  WriteGitCommitMessageRequestSchema,
  WriteGitCommitMessageResponseSchema
} from "../../gen/aiserver/v1/aiserver_pb.js"
import type { ConversationMessage } from "../../gen/aiserver/v1/aiserver_pb.js"
import type { Caller } from "../../Naming.js"
import * as Commits from "../../naming/Commits.js"
import * as Titles from "../../naming/Titles.js"
import type { CatalogueOptions } from "./Catalogue.js"
import type { Path } from "./Procedure.js"
import { unary } from "./Procedure.js"

const chatTitle = (options: CatalogueOptions, userMessage: string, caller: Caller) =>
  options.naming?.chatTitle(userMessage, caller) ?? Effect.succeed(Titles.fallbackTitle(userMessage))

const nameAgent = unary("/agent.v1.AgentService/NameAgent", NameAgentRequestSchema, NameAgentResponseSchema, (options, _, message, call) =>
  Effect.map(
    chatTitle(options, message.userMessage, { clientTimeoutMs: call.timeoutMs }),
    (name) => create(NameAgentResponseSchema, { name })
  ))

/** `AiService` declares `NameAgent` too, with the same (agent.v1) messages. */
export const nameAgentRpcs = [nameAgent, { ...nameAgent, path: "/aiserver.v1.AiService/NameAgent" as Path }]

/** The first message the user wrote, else the first with any text. */
const openingText = (conversation: ReadonlyArray<ConversationMessage>): string => {
  const withText = conversation.filter((m) => m.text.trim() !== "")
  return (withText.find((m) => m.type === ConversationMessage_MessageType.HUMAN) ?? withText[0])?.text ?? ""
}

export const chatTitleRpc = unary(
  "/aiserver.v1.AiService/GetChatTitle",
  GetChatTitleRequestSchema,
  GetChatTitleResponseSchema,
  (options, _, message, call) =>
    Effect.map(
      chatTitle(options, openingText(message.conversation), { clientTimeoutMs: call.timeoutMs }),
      (title) => create(GetChatTitleResponseSchema, { title })
    )
)

/**
 * A chat tab's name (`AiService/NameTab`): the tab's title from its opening message, as a new
 * chat's (the user's model, else the plain fallback made from the message).
 */
export const nameTabRpc = unary(
  "/aiserver.v1.AiService/NameTab",
  NameTabRequestSchema,
  NameTabResponseSchema,
  (options, _, message, call) =>
    Effect.map(
      chatTitle(options, openingText(message.messages), { clientTimeoutMs: call.timeoutMs }),
      (name) => create(NameTabResponseSchema, { name })
    )
)

/** Keeps the name (see `Naming.nameConversation`); the workspace paths are not used. */
export const updateConversationMetadataRpc = unary(
  "/agent.v1.AgentService/UpdateConversationMetadata",
  UpdateConversationMetadataRequestSchema,
  UpdateConversationMetadataResponseSchema,
  (options, _, message) =>
    Effect.gen(function*() {
      if (message.conversationId !== "" && message.name !== undefined) {
        if (options.naming === undefined) yield* Effect.logDebug(`conversation ${message.conversationId} named; no store to keep the name in`)
        else yield* options.naming.nameConversation(message.conversationId, message.name, message.onlySetNameIfEmpty === true)
      }
      return create(UpdateConversationMetadataResponseSchema)
    })
)

export const commitMessageRpc = unary(
  "/aiserver.v1.AiService/WriteGitCommitMessage",
  WriteGitCommitMessageRequestSchema,
  WriteGitCommitMessageResponseSchema,
  (options, _, message, call) =>
    Effect.map(
      options.naming?.commitMessage(message.diffs, message.previousCommitMessages, { clientTimeoutMs: call.timeoutMs }) ??
        Effect.succeed(Commits.fallbackCommitMessage(message.diffs)),
      (commitMessage) => create(WriteGitCommitMessageResponseSchema, { commitMessage })
    )
)

export const branchNameRpc = unary(
  "/aiserver.v1.AiService/WriteGitBranchName",
  WriteGitBranchNameRequestSchema,
  WriteGitBranchNameResponseSchema,
  (options, _, message, call) =>
    Effect.map(
      options.naming?.branchName(message.diffs, message.context, { clientTimeoutMs: call.timeoutMs }) ??
        Effect.succeed(Commits.fallbackBranchName(message.diffs)),
      (branchName) => create(WriteGitBranchNameResponseSchema, { branchName })
    )
)
