/**
 * What the dialect reads back from a turn's settings: the client's carried checkpoint, the
 * workspace, the user message that started the turn, the MCP tools, the mode and the Cursor
 * request the turn answers.
 */
import { fromBinary } from "@bufbuild/protobuf"
import { ConversationStateStructureSchema } from "../gen/agent/v1/agent_pb.js"
import type { ConversationStateStructure } from "../gen/agent/v1/agent_pb.js"
import type { Message, UserMessage } from "../Llm.js"
import type { TurnSettings } from "../Loop.js"
import { modeOfSettings } from "../Loop.js"
import type { CursorMode } from "../Tools.js"

/** The client's checkpoint as far as the turn's settings carry it (its earlier turns and todos), if the run request had one. */
export const carriedCheckpointOf = (settings: TurnSettings): ConversationStateStructure | undefined => {
  const carried = settings.carriedCheckpoint
  if (carried === undefined) return undefined
  try {
    return fromBinary(ConversationStateStructureSchema, Buffer.from(carried, "base64"))
  } catch {
    return undefined
  }
}

/** The workspace folders the run request named. */
export const workspacePathsOf = (settings: TurnSettings): ReadonlyArray<string> => settings.workspace?.workspacePaths ?? []

/**
 * The Cursor user message that started a turn, for its checkpoint, when the run request is not
 * at hand (a turn recovered or replayed after a restart): its id from the settings, its text
 * from the committed history (the last of the turn's leading user messages: attached context
 * comes first, the typed message last), the mode from the settings.
 */
export const turnUserMessageOf = (
  settings: TurnSettings,
  turnMessages: ReadonlyArray<Message>
): { readonly text: string; readonly messageId: string; readonly mode: CursorMode } => {
  let typed: UserMessage | undefined
  for (const message of turnMessages) {
    if (message.role !== "user") break
    typed = message
  }
  return {
    text: (typed?.content ?? []).flatMap((block) => (block.type === "text" ? [block.text] : [])).join(""),
    messageId: userMessageIdOf(settings),
    mode: modeOfSettings(settings)
  }
}

/** The id of the Cursor user message whose run request started the turn (`""` when it had none), from the settings. */
export const userMessageIdOf = (settings: TurnSettings): string => settings.userMessageId ?? ""

/** The Cursor request (RunSSE request id) the turn answers, if the settings name one. */
export const requestIdOfSettings = (settings: TurnSettings): string | undefined => settings.requestId

/** The settings with the Cursor request the turn answers. */
export const withRequestId = (settings: TurnSettings, requestId: string): TurnSettings => ({ ...settings, requestId })
