/**
 * Chat titles: the instruction and request a model gets to name a chat from its first user
 * message, the cleaning of what it answers (one short line, no quotes, no trailing period), and
 * the deterministic title made from the message itself when the model does not answer.
 */
import type { RequestMessages } from "../Llm.js"

/** A cleaned title is at most this long (cut at a word boundary). */
export const TITLE_MAX_CHARS = 60
/** A title made from the message itself is at most this long. */
export const FALLBACK_TITLE_MAX_CHARS = 48
/** How much of the user message the model reads: the opening says what a chat is about. */
export const TITLE_INPUT_MAX_CHARS = 2_000
/** The title of a chat whose first message says nothing usable. */
export const EMPTY_TITLE = "New chat"

export const TITLE_INSTRUCTION = [
  "You name chats between a user and a coding assistant.",
  "Reply with a title of 2 to 6 words that says what the user's message is about.",
  "Reply with the title only: one line, no quotes, no trailing period, no preamble, no markdown."
].join(" ")

/** The whole request for a title: the instruction, and the user's message (its opening). */
export const titleRequest = (userMessage: string): RequestMessages => ({
  systemPrompt: TITLE_INSTRUCTION,
  messages: [{
    role: "user",
    content: [{ type: "text", text: `The user's message:\n\n${userMessage.slice(0, TITLE_INPUT_MAX_CHARS)}` }]
  }],
  tools: []
})

const QUOTES = /["'`\u2018\u2019\u201C\u201D\u00AB\u00BB]/

/** Without the quotes (straight, curly, guillemets, backticks) that wrap the whole text. */
export const unquote = (text: string): string => {
  let out = text.trim()
  while (out.length >= 2 && QUOTES.test(out[0]!) && QUOTES.test(out[out.length - 1]!)) out = out.slice(1, -1).trim()
  return out
}

/**
 * At most `max` characters, cut at the last space when that keeps at least half of them (a
 * single long word is cut where it is), without the punctuation left dangling at the cut.
 */
export const cutAtWord = (text: string, max: number): string => {
  if (text.length <= max) return text
  const head = text.slice(0, max + 1)
  const space = head.lastIndexOf(" ")
  const cut = space >= max / 2 ? head.slice(0, space) : text.slice(0, max)
  return cut.replace(/[\s,;:\-\u2013\u2014(/]+$/u, "")
}

/** Markdown emphasis, inline code marks, links (their text kept) and heading, list or quote markers. */
const withoutMarkdown = (line: string): string =>
  line
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/^\s*(?:#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+)/, "")
    .replace(/(\*\*|__|\*|_|~~|`)(\S(?:.*?\S)?)\1/g, "$2")
    .replace(/`/g, "")

/**
 * What a model answered, as a title: its first non-empty line without a "Title:" label,
 * markdown, quotes or a trailing period, whitespace collapsed, at most `TITLE_MAX_CHARS`.
 * `undefined` when nothing is left.
 */
export const cleanTitle = (raw: string): string | undefined => {
  const line = raw.split(/\r?\n/).map((l) => l.trim()).find((l) => l !== "" && !/^```/.test(l)) ?? ""
  let title = unquote(withoutMarkdown(line).replace(/^(?:chat\s+)?title\s*[:\-\u2013]\s*/i, ""))
  title = title.replace(/["\u201C\u201D]/g, "").replace(/\s+/g, " ").trim()
  title = cutAtWord(title, TITLE_MAX_CHARS).replace(/[.\u3002!]+$/u, "").trim()
  return title === "" ? undefined : title
}

/** A leading slash command (`/review`, `/fix-tests`) and what follows it. */
const SLASH_COMMAND = /^\/([\w][\w:-]*)\s*/

const sentenceCase = (text: string) => text.charAt(0).toUpperCase() + text.slice(1)

/**
 * The title made from the message itself: its first line with words in it once code blocks,
 * markdown and a leading slash command are gone (a message that is only a command is named
 * after it), cut at a word boundary; `EMPTY_TITLE` when nothing is left.
 */
export const fallbackTitle = (userMessage: string): string => {
  const prose = userMessage.replace(/```[\s\S]*?(?:```|$)/g, "\n")
  const command = SLASH_COMMAND.exec(prose.trimStart())
  const rest = command === null ? prose : prose.trimStart().slice(command[0].length)
  const line = rest.split(/\r?\n/).map((l) => withoutMarkdown(l).replace(/\s+/g, " ").trim()).find((l) => /[\p{L}\p{N}]/u.test(l))
  if (line !== undefined) return sentenceCase(cutAtWord(unquote(line), FALLBACK_TITLE_MAX_CHARS).replace(/[.\u3002]+$/u, ""))
  if (command !== null) return sentenceCase(command[1]!.replace(/[-_:]+/g, " ").trim())
  return EMPTY_TITLE
}
