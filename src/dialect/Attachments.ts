/**
 * What the user attached to a message (`SelectedContext`), as the text blocks the model sees.
 * Deterministic bytes, because the provider's prompt cache keys on exact prefixes: the kinds in
 * a fixed order (`attachmentsOf`), each kind's items in the client's order, no times or ids of
 * our own, attributes escaped the one way of `attachments/Markup.ts`. An empty item is skipped;
 * one that cannot be shown (a blob not read back, a binary document) is a line saying so.
 * Images are not here: they are image blocks (UserMessage.ts).
 */
import type {
  AgentSkill,
  LsDirectoryTreeNode,
  SelectedBrowser,
  SelectedConsoleLog,
  SelectedContext,
  SelectedCursorRule,
  SelectedDocumentation,
  SelectedExternalLink,
  SelectedFolder,
  SelectedSubagent,
  SelectedUIElement
} from "../gen/agent/v1/agent_pb.js"
import { formatTree } from "../tools/Outcomes.js"
import { documentTextOf, extraContextEntryText, invocationContextText } from "./attachments/Blobs.js"
import type { Blobs } from "./attachments/Blobs.js"
import { commandsAndInstruction } from "./attachments/Commands.js"
import { branchDiffText, gitActionText, gitCommitText, gitDiffText, prDiffSelectionText, pullRequestText } from "./attachments/Git.js"
import { displayPath, element, joinPresent, labelled, note } from "./attachments/Markup.js"
import { pastChatText } from "./attachments/PastChats.js"
import type { PastChatDigests } from "./attachments/PastChats.js"

export { attachmentBlobRefsOf, type AttachmentBlobRef, type Blobs } from "./attachments/Blobs.js"
export { escapeAttribute } from "./attachments/Markup.js"
export { pastChatDigest, type PastChatDigests } from "./attachments/PastChats.js"

/** What the renderers may use besides the attachments themselves. */
export interface AttachmentSources {
  /** Blobs at hand by hex id: sent along with the request, or read back from the client. */
  readonly blobs: Blobs
  /** Paths whose contents the request context carries already: those files are not attached twice. */
  readonly alreadyAttached: ReadonlySet<string>
  /** Digests of the past chats this server keeps, by agent id. */
  readonly pastChats: PastChatDigests
}

export interface RenderedAttachments {
  /** The attachments as text blocks, in order. */
  readonly blocks: ReadonlyArray<string>
  /** The user's instruction: the typed text, or the picked command's content when the text only names it. */
  readonly instruction: string
}

const titled = (item: { readonly title?: string | undefined }) => [["title", item.title]] as const

const folderText = (folder: SelectedFolder): ReadonlyArray<string> => {
  const path = displayPath(folder)
  const tree = folder.directoryTree
  const hasListing = tree !== undefined && (tree.childrenDirs.length > 0 || tree.childrenFiles.length > 0)
  if (path === "" && !hasListing) return []
  const root: LsDirectoryTreeNode | undefined = hasListing ? { ...tree, absPath: tree.absPath !== "" ? tree.absPath : folder.path } : undefined
  return [element("attached_folder", [["path", path]], root !== undefined ? formatTree(root) : note("The editor sent no listing of this folder."))]
}

const externalLinkText = (link: SelectedExternalLink): ReadonlyArray<string> =>
  link.url === "" && (link.pdfContent ?? "") === "" ? [] : [element("external_link", [["url", link.url], ["filename", link.filename]], link.pdfContent ?? "")]

const cursorRuleText = ({ rule }: SelectedCursorRule): ReadonlyArray<string> =>
  rule === undefined || (rule.fullPath === "" && rule.content === "") ? [] : [element("cursor_rule", [["path", rule.fullPath]], rule.content)]

const skillText = (skill: AgentSkill): ReadonlyArray<string> =>
  skill.fullPath === "" && skill.content === "" && skill.description === ""
    ? []
    : [element("skill", [["path", skill.fullPath], ["description", skill.description]], skill.content)]

const documentationsText = (docs: ReadonlyArray<SelectedDocumentation>): ReadonlyArray<string> => {
  const named = docs
    .filter((doc) => doc.name !== "" || doc.docId !== "")
    .map((doc) => (doc.name !== "" && doc.docId !== "" && doc.docId !== doc.name ? `${doc.name} (${doc.docId})` : doc.name !== "" ? doc.name : doc.docId))
  return named.length === 0
    ? []
    : [note(`The user refers to this documentation: ${named.join("; ")}. Look it up with the web search and web fetch tools when the answer depends on it.`)]
}

const uiElementText = (ui: SelectedUIElement): ReadonlyArray<string> => {
  const body = joinPresent([labelled("Element", ui.element), labelled("Text", ui.textContent), labelled("Props", ui.componentPropsJson), labelled("Extra", ui.extra)])
  return body === "" && ui.xpath === "" && (ui.component ?? "") === "" ? [] : [element("ui_element", [["xpath", ui.xpath], ["component", ui.component]], body)]
}

const consoleLogText = (log: SelectedConsoleLog): ReadonlyArray<string> => {
  const body = joinPresent([log.message, labelled("Data", log.objectDataJson), labelled("Stack", log.stackTrace?.rawStackTrace)])
  return body === "" ? [] : [element("console_log", [["level", log.level], ["client", log.clientName]], body)]
}

const browserText = (browser: SelectedBrowser): ReadonlyArray<string> =>
  browser.url === "" && (browser.pageTitle ?? "") === "" ? [] : [element("browser_tab", [["url", browser.url], ["title", browser.pageTitle]])]

const subagentText = (subagent: SelectedSubagent): ReadonlyArray<string> =>
  subagent.name === "" ? [] : [note(`The user wants the subagent "${subagent.name}" used for this task.`)]

/**
 * The attachments as text blocks, kinds in this order: files, code selections, terminals,
 * terminal selections, extra context (strings, then entries), invocation context, folders,
 * external links, cursor rules, skills, git diff, branch diff to main, git commits, PR diff
 * selections, pull requests, documentation, UI elements, console logs, browser tabs, documents,
 * past chats, recent agents, subagents, commands, the git action; and the user's instruction.
 */
export const attachmentsOf = (selected: SelectedContext | undefined, text: string, sources: AttachmentSources): RenderedAttachments => {
  if (selected === undefined) return { blocks: [], instruction: text }
  const commands = commandsAndInstruction(selected.cursorCommands, text)
  const blocks: ReadonlyArray<ReadonlyArray<string>> = [
    selected.files.flatMap((file) => (file.content === "" || sources.alreadyAttached.has(file.path) ? [] : [element("attached_file", [["path", displayPath(file)]], file.content)])),
    selected.codeSelections.flatMap((selection) => (selection.content === "" ? [] : [element("code_selection", [["path", displayPath(selection)]], selection.content)])),
    selected.terminals.flatMap((terminal) => (terminal.content === "" ? [] : [element("terminal", titled(terminal), terminal.content)])),
    selected.terminalSelections.flatMap((selection) => (selection.content === "" ? [] : [element("terminal_selection", titled(selection), selection.content)])),
    selected.extraContext.filter((extra) => extra !== ""),
    selected.extraContextEntries.flatMap((entry) => extraContextEntryText(entry, sources.blobs)),
    invocationContextText(selected.invocationContext, sources.blobs),
    selected.folders.flatMap(folderText),
    selected.externalLinks.flatMap(externalLinkText),
    selected.cursorRules.flatMap(cursorRuleText),
    selected.selectedSkills.flatMap(skillText),
    gitDiffText(selected.gitDiff),
    branchDiffText(selected.gitDiffFromBranchToMain),
    selected.gitCommits.flatMap(gitCommitText),
    selected.gitPrDiffSelections.flatMap(prDiffSelectionText),
    selected.selectedPullRequests.flatMap(pullRequestText),
    documentationsText(selected.documentations),
    selected.uiElements.flatMap(uiElementText),
    selected.consoleLogs.flatMap(consoleLogText),
    selected.selectedBrowsers.flatMap(browserText),
    selected.selectedDocuments.flatMap((document) => documentTextOf(document, sources.blobs)),
    selected.pastChats.flatMap((chat) => pastChatText(chat, sources.pastChats)),
    (selected.recentAgentsContext?.recentAgents ?? []).flatMap((agent) =>
      agent.name === "" && agent.path === "" && (agent.overview ?? "") === "" ? [] : [element("recent_agent", [["name", agent.name], ["path", agent.path]], agent.overview ?? "")]
    ),
    selected.selectedSubagents.flatMap(subagentText),
    commands.blocks,
    gitActionText(selected.selectedAgenticGitAction)
  ]
  return { blocks: blocks.flat(), instruction: commands.instruction }
}
