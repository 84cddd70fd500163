/**
 * Commit messages and branch names from a diff: the requests a model gets (the diff cut to a
 * budget, the recent commit messages for their style), the cleaning of what it answers (a
 * subject under 72 characters with an optional short body; a lowercase kebab-case branch name
 * with an optional type prefix), and the deterministic answers made from the changed files'
 * names when the model does not answer.
 */
import type { RequestMessages } from "../Llm.js"
import { changedFiles, truncateDiffs } from "./Diffs.js"
import { cutAtWord, unquote } from "./Titles.js"

export const SUBJECT_MAX_CHARS = 72
/** A body longer than this many lines is cut: a generated message stays concise. */
const BODY_MAX_LINES = 12
export const BRANCH_MAX_CHARS = 40
/** The recent commit messages shown for their style: this many, each at most this long. */
const PREVIOUS_COMMITS = 10
const PREVIOUS_COMMIT_MAX_CHARS = 300
/** How much of the branch request's free-text context the model reads. */
const CONTEXT_MAX_CHARS = 2_000

export const COMMIT_INSTRUCTION = [
  "You write git commit messages for the changes in a diff.",
  "Reply with the commit message only: a subject line in the imperative mood, under 72 characters",
  "(Conventional Commits such as `feat: ...` or `fix: ...`, unless the recent commits use another style: then follow theirs),",
  "optionally followed by a blank line and a short body of a few lines saying what changed and why.",
  "No code fences, no quotes, no preamble."
].join(" ")

export const BRANCH_INSTRUCTION = [
  "You name git branches for the changes in a diff.",
  "Reply with the branch name only: lowercase ASCII words joined by hyphens, at most 40 characters,",
  "optionally with a type prefix such as `feat/`, `fix/`, `chore/`, `docs/` or `refactor/`.",
  "No quotes, no explanation."
].join(" ")

const userText = (text: string): RequestMessages["messages"][number] => ({ role: "user", content: [{ type: "text", text }] })

/** The request for a commit message: recent messages (for their style), then the diffs cut to `diffBudget` characters. */
export const commitRequest = (
  diffs: ReadonlyArray<string>,
  previousMessages: ReadonlyArray<string>,
  diffBudget: number
): RequestMessages => {
  const previous = previousMessages
    .map((message) => message.trim().slice(0, PREVIOUS_COMMIT_MAX_CHARS))
    .filter((message) => message !== "")
    .slice(0, PREVIOUS_COMMITS)
  const sections = [
    ...(previous.length === 0 ? [] : [`Recent commit messages:\n${previous.map((message) => `- ${message}`).join("\n")}`]),
    `The diff to describe:\n${truncateDiffs(diffs, diffBudget)}`
  ]
  return { systemPrompt: COMMIT_INSTRUCTION, messages: [userText(sections.join("\n\n"))], tools: [] }
}

/** The request for a branch name: the user's context when Cursor sends one, then the diff cut to `diffBudget` characters. */
export const branchRequest = (diff: string, context: string | undefined, diffBudget: number): RequestMessages => {
  const about = context?.trim().slice(0, CONTEXT_MAX_CHARS) ?? ""
  const sections = [
    ...(about === "" ? [] : [`What the user is working on:\n${about}`]),
    `The diff:\n${truncateDiffs([diff], diffBudget)}`
  ]
  return { systemPrompt: BRANCH_INSTRUCTION, messages: [userText(sections.join("\n\n"))], tools: [] }
}

/**
 * A model's answer as a commit message: code fences, a "Commit message:" label and wrapping
 * quotes gone; the first line the subject (at most `SUBJECT_MAX_CHARS`, no trailing period);
 * the rest, if any, a body of at most `BODY_MAX_LINES` lines after one blank line.
 */
export const cleanCommitMessage = (raw: string): string | undefined => {
  const lines = unquote(raw.replace(/^\s*```[^\n]*\n?/, "").replace(/\n?```\s*$/, ""))
    .replace(/^\s*commit message\s*:\s*/i, "")
    .split(/\r?\n/)
    .map((line) => line.trimEnd())
  const first = lines.findIndex((line) => line.trim() !== "")
  if (first < 0) return undefined
  const subject = cutAtWord(unquote(lines[first]!.trim()).replace(/\s+/g, " "), SUBJECT_MAX_CHARS).replace(/\.+$/, "")
  if (subject === "") return undefined
  const body = lines.slice(first + 1).join("\n").replace(/\n{3,}/g, "\n\n").trim().split("\n").slice(0, BODY_MAX_LINES).join("\n").trim()
  return body === "" ? subject : `${subject}\n\n${body}`
}

const baseName = (path: string) => path.split("/").pop() ?? path

/** "Update <file>" for one changed file (its path, or its name when the path is long), "Update <n> files" for more. */
export const fallbackCommitMessage = (diffs: ReadonlyArray<string>): string => {
  const files = changedFiles(diffs)
  if (files.length === 0) return "Update files"
  if (files.length > 1) return `Update ${files.length} files`
  const file = files[0]!
  return `Update ${file.length + 7 <= SUBJECT_MAX_CHARS ? file : baseName(file)}`
}

const BRANCH_PREFIX = /^(feat|feature|fix|bugfix|hotfix|chore|docs|refactor|test|perf|build|ci|style)\//

/** Lowercase ASCII words joined by single hyphens (accents folded, anything else a separator). */
const kebab = (text: string) =>
  text.normalize("NFKD").replace(/[\u0300-\u036f]/g, "").toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "")

/** At most `max` characters, cut after a whole word when one fits. */
const cutKebab = (name: string, max: number) => {
  if (name.length <= max) return name
  const head = name.slice(0, max + 1)
  const dash = head.lastIndexOf("-")
  return (dash > 0 ? head.slice(0, dash) : name.slice(0, max)).replace(/-+$/, "")
}

/**
 * A model's answer as a branch name: its first line without quotes or a `git checkout -b`,
 * a known type prefix kept (`feat/`), the rest kebab-case, lowercase ASCII, at most
 * `BRANCH_MAX_CHARS` in all. `undefined` when nothing is left.
 */
export const cleanBranchName = (raw: string): string | undefined => {
  const line = raw.split(/\r?\n/).map((l) => l.trim()).find((l) => l !== "" && !l.startsWith("```")) ?? ""
  const named = unquote(line.replace(/^(?:branch(?: name)?\s*:\s*)/i, "").replace(/^git\s+(?:checkout\s+-b|switch\s+-c|branch)\s+/, "")).toLowerCase()
  const prefix = BRANCH_PREFIX.exec(named)?.[1]
  const rest = kebab(prefix === undefined ? named : named.slice(prefix.length + 1))
  if (rest === "") return undefined
  const head = prefix === undefined ? "" : `${prefix === "feature" ? "feat" : prefix}/`
  return head + cutKebab(rest, BRANCH_MAX_CHARS - head.length)
}

/** `update-<first changed file's name>`, or `update` when the diff names no file. */
export const fallbackBranchName = (diff: string): string => {
  const file = changedFiles([diff])[0]
  const name = file === undefined ? "" : kebab(baseName(file).replace(/\.[^.]+$/, ""))
  return name === "" ? "update" : cutKebab(`update-${name}`, BRANCH_MAX_CHARS)
}
