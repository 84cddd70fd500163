/**
 * Past chats the user attached (`@Past Chats`): Cursor sends only the chat's id and name, so the
 * content is a digest of the conversation this server stored under that id, when it has one.
 */
import type { SelectedPastChat } from "../../gen/agent/v1/agent_pb.js"
import type { Message } from "../../Llm.js"
import { element, note } from "./Markup.js"

/** Digests of the conversations this server keeps, by Cursor agent (conversation) id. */
export type PastChatDigests = ReadonlyMap<string, string>

const TOOL_ARGUMENTS_CHARS = 120
const LEFT_OUT = "[Earlier messages of this chat are left out.]"

const oneLine = (text: string, max: number): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length <= max ? flat : `${flat.slice(0, max)}…`
}

/** One message of the digest: its text, a short line per tool call; tool results and thinking left out. */
const entryOf = (message: Message): string | undefined => {
  switch (message.role) {
    case "user": {
      const parts = message.content.map((block) => (block.type === "text" ? block.text : "[image]")).filter((part) => part !== "")
      return parts.length === 0 ? undefined : `User: ${parts.join("\n")}`
    }
    case "assistant": {
      const parts = message.content.flatMap((block) =>
        block.type === "text"
          ? block.text === "" ? [] : [block.text]
          : block.type === "toolCall"
          ? [`[tool call: ${block.name} ${oneLine(block.arguments, TOOL_ARGUMENTS_CHARS)}]`]
          : []
      )
      return parts.length === 0 ? undefined : `Assistant: ${parts.join("\n")}`
    }
    case "toolResult":
      return undefined
  }
}

/**
 * The user and assistant text of a stored conversation, at most `maxChars` long: tool calls are
 * one short line each, tool results are left out, images are a marker. When it must cut, it
 * keeps the end (whole messages when at least the last one fits, after a line saying so).
 */
export const pastChatDigest = (messages: ReadonlyArray<Message>, maxChars: number): string => {
  if (maxChars <= 0) return ""
  const entries = messages.flatMap((message) => entryOf(message) ?? [])
  const whole = entries.join("\n\n")
  if (whole.length <= maxChars) return whole
  const budget = maxChars - LEFT_OUT.length - 2
  // Too small for the note and an ellipsis (`slice(-0)` would be the whole text): the end alone.
  if (budget <= 1) return whole.slice(-maxChars)
  const kept: Array<string> = []
  let length = -2
  for (let i = entries.length - 1; i >= 0; i--) {
    const next = length + 2 + entries[i]!.length
    if (next > budget) break
    kept.unshift(entries[i]!)
    length = next
  }
  const tail = kept.length > 0 ? kept.join("\n\n") : `…${whole.slice(-(budget - 1))}`
  return `${LEFT_OUT}\n\n${tail}`
}

/** A past chat: its digest when this server stored it, else a line saying it is not here. */
export const pastChatText = (chat: SelectedPastChat, digests: PastChatDigests): ReadonlyArray<string> => {
  if (chat.agentId === "" && chat.name === "") return []
  const digest = chat.agentId !== "" ? digests.get(chat.agentId) : undefined
  if (digest !== undefined) return [element("past_chat", [["name", chat.name], ["id", chat.agentId]], digest)]
  const named = chat.name !== "" ? `"${chat.name}"` : ""
  const id = chat.agentId !== "" ? `(id ${chat.agentId})` : ""
  return [note(`The user refers to the past chat ${[named, id].filter((part) => part !== "").join(" ")}, which is not stored on this server.`)]
}
