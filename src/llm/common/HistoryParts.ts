/**
 * ONE HISTORY MESSAGE'S SHARE OF A REQUEST BODY, REMEMBERED. Every model call sends the whole
 * history, and an adapter turned each message into its wire JSON again at every call: 12-22 ms
 * of CPU per call for a history of 800 messages and 1.4 MB (`bench/body.ts`, every wire API),
 * paid before the request leaves, at each step of an agent's loop (now ~3-5 ms, most of it
 * joining and flattening the 1.4 MB).
 * The history is append-only and its messages are immutable objects that the runner keeps from
 * call to call, so what an adapter makes of a message is remembered by the message object: the
 * next call serializes only what is new.
 *
 * What a message becomes depends on the message and on the call's target (the wire API, the
 * provider and model, which decide how a message from another model is replayed, and the
 * provider's base URL and compat settings): that is the memo's key, and a call with another key
 * starts the conversation's memo afresh. Memos are kept for the conversations whose bodies were
 * built last (`CONVERSATIONS`), so the memory they add (about one more copy of those histories'
 * text) is bounded; a call without a conversation (`promptCacheKey` unset) remembers nothing.
 * The bytes are those of a build from nothing: the tests compare the two.
 */
import { canonicalJson } from "../../Llm.js"
import type { Message } from "../../Llm.js"
import type { CallSettings } from "../Adapter.js"
import { type Group, pushMessage } from "../Common.js"

/** One message's share of the body: the group it opens or joins (`Common.pushMessage`), and its parts. */
export interface MessageParts {
  readonly open: string
  readonly close: string
  readonly mergeKey: string | undefined
  readonly parts: ReadonlyArray<string>
}

/** How many conversations keep a memo: those with a turn running, with room to spare. */
export const CONVERSATIONS = 16

interface Memo {
  readonly key: string
  readonly parts: WeakMap<Message, MessageParts>
  /** The last system prompt and what it became (OpenAI Chat sends it as a message). */
  system: { readonly text: string; readonly json: string } | undefined
}

/** Memos by conversation, the least recently built first. */
const memos = new Map<string, Memo>()

/** The memo of one body build: `partsOf` remembers by message object, `systemOf` the last system prompt. */
export interface PartsMemo {
  readonly partsOf: (message: Message, make: (message: Message) => MessageParts) => MessageParts
  readonly systemOf: (text: string, make: (text: string) => string) => string
}

const none: PartsMemo = {
  partsOf: (message, make) => make(message),
  systemOf: (text, make) => make(text)
}

/** The memo for a body of `conversation` built for a target described by `key` (none without a conversation). */
export const partsMemo = (conversation: string | undefined, key: string): PartsMemo => {
  if (conversation === undefined) return none
  let memo = memos.get(conversation)
  memos.delete(conversation)
  if (memo === undefined || memo.key !== key) memo = { key, parts: new WeakMap(), system: undefined }
  memos.set(conversation, memo)
  if (memos.size > CONVERSATIONS) memos.delete(memos.keys().next().value!)
  const current = memo
  return {
    partsOf: (message, make) => {
      const known = current.parts.get(message)
      if (known !== undefined) return known
      const made = make(message)
      current.parts.set(message, made)
      return made
    },
    systemOf: (text, make) => {
      if (current.system?.text === text) return current.system.json
      const json = make(text)
      current.system = { text, json }
      return json
    }
  }
}

/** The memo of a call's body: its conversation (`promptCacheKey`) and everything besides a message that decides what the message becomes. */
export const memoFor = (api: string, settings: CallSettings): PartsMemo =>
  partsMemo(settings.promptCacheKey, [api, settings.provider, settings.model, settings.baseUrl, canonicalJson(settings.compat)].join("\n"))

/** A message that is items of the body's array, with no group of its own (the OpenAI APIs: one item, or several for an answer). */
export const itemsOf = (parts: ReadonlyArray<string>): MessageParts => ({ open: "", close: "", mergeKey: undefined, parts })

/**
 * A message that is parts of a `{"<field>":[...],"role":"<role>"}` group (Anthropic's
 * `content`, Gemini's `parts`); consecutive user-side messages join one group.
 */
export const groupOf = (field: string, role: string, parts: ReadonlyArray<string>): MessageParts =>
  ({ open: `{${JSON.stringify(field)}:[`, close: `],"role":${JSON.stringify(role)}}`, mergeKey: role === "user" ? "user" : undefined, parts })

/** Pushes each message's parts (`make` for those the memo does not know yet) into the body's groups. */
export const pushHistory = (
  groups: Array<Group>,
  memo: PartsMemo,
  messages: ReadonlyArray<Message>,
  make: (message: Message) => MessageParts
): void => {
  for (const message of messages) {
    const { close, mergeKey, open, parts } = memo.partsOf(message, make)
    pushMessage(groups, open, close, mergeKey, parts)
  }
}
