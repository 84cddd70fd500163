/**
 * Custom slash commands (`selected_context.cursor_commands`): their content is the instruction.
 * A message that is empty, or only `/name` of a picked command (maybe followed by more words),
 * becomes the command's content followed by those words, never an empty or literal-slash
 * message; the other picked commands go along as `<command>` blocks. Cursor's own summarize
 * command is handled before a turn starts and is left out here.
 */
import type { SelectedCursorCommand } from "../../gen/agent/v1/agent_pb.js"
import { element, joinPresent, note } from "./Markup.js"

/** Cursor's own summarize command (the same name as `SUMMARIZE_COMMAND` in RunRequest.ts, which handles it). */
const SUMMARIZE = "glass-action-summarize"

export interface CommandsAndInstruction {
  /** The `<command>` blocks of the commands that did not become the instruction. */
  readonly blocks: ReadonlyArray<string>
  /** The user's instruction: the typed text, or what the commands make of it. */
  readonly instruction: string
}

const missingContent = (command: SelectedCursorCommand) => note(`The user picked the command /${command.name}, but the editor sent no content for it.`)

const asInstruction = (command: SelectedCursorCommand) => (command.content !== "" ? command.content : missingContent(command))

const blockOf = (command: SelectedCursorCommand) =>
  command.content !== "" ? element("command", [["name", command.name]], command.content) : missingContent(command)

/** The commands as blocks, and the instruction the typed `text` amounts to with them. */
export const commandsAndInstruction = (commands: ReadonlyArray<SelectedCursorCommand>, text: string): CommandsAndInstruction => {
  const picked = commands.filter((command) => command.name !== SUMMARIZE && (command.name !== "" || command.content !== ""))
  if (picked.length === 0) return { blocks: [], instruction: text }
  const typed = text.trim()
  if (typed === "") return { blocks: [], instruction: picked.map(asInstruction).join("\n\n") }
  const invoked = typed.startsWith("/")
    ? picked.findIndex((command) => command.name !== "" && typed.startsWith(`/${command.name}`) && /^(\s|$)/.test(typed.slice(command.name.length + 1)))
    : -1
  if (invoked < 0) return { blocks: picked.map(blockOf), instruction: text }
  const command = picked[invoked]!
  return {
    blocks: picked.filter((_, index) => index !== invoked).map(blockOf),
    instruction: joinPresent([asInstruction(command), typed.slice(command.name.length + 1).trim()], "\n\n")
  }
}
