/**
 * Git attachments as text: the working tree's diff, the branch's diff to main, commits, lines
 * of a pull request's diff, pull requests, and the git action picked from the git menu (an
 * instruction the model can carry out with the shell).
 */
import type {
  SelectedAgenticGitAction,
  SelectedAgenticGitActionCommitParams,
  SelectedAgenticGitActionPushParams,
  SelectedGitCommit,
  SelectedGitDiff,
  SelectedGitDiffFromBranchToMain,
  SelectedGitPRDiffSelection,
  SelectedPullRequest
} from "../../gen/agent/v1/agent_pb.js"
import { element, joinPresent, labelled, note } from "./Markup.js"

/** A diff, with a line saying so when the client cut it short of its full length. */
const diffBody = (diff: SelectedGitDiff | SelectedGitDiffFromBranchToMain): string =>
  joinPresent([
    diff.content,
    diff.fullContentLengthCharCount > diff.content.length
      ? note(`Truncated: ${diff.content.length} of ${diff.fullContentLengthCharCount} characters shown.`)
      : undefined
  ])

export const gitDiffText = (diff: SelectedGitDiff | undefined): ReadonlyArray<string> =>
  diff === undefined || diff.content === "" ? [] : [element("git_diff", [], diffBody(diff))]

export const branchDiffText = (diff: SelectedGitDiffFromBranchToMain | undefined): ReadonlyArray<string> =>
  diff === undefined || diff.content === "" ? [] : [element("git_diff_from_branch_to_main", [], diffBody(diff))]

export const gitCommitText = (commit: SelectedGitCommit): ReadonlyArray<string> =>
  commit.sha === "" && commit.message === "" && (commit.description ?? "") === "" && commit.diff === ""
    ? []
    : [element("git_commit", [["sha", commit.sha]], joinPresent([commit.message, commit.description, commit.diff], "\n\n"))]

export const prDiffSelectionText = (selection: SelectedGitPRDiffSelection): ReadonlyArray<string> => {
  if (selection.prUrl === "" && selection.filePath === "" && (selection.diffContent ?? "") === "") return []
  const lines = selection.startLine > 0 || selection.endLine > 0 ? `${selection.startLine}-${selection.endLine}` : undefined
  return [element("pr_diff_selection", [["pr", selection.prUrl], ["path", selection.filePath], ["lines", lines]], selection.diffContent ?? "")]
}

export const pullRequestText = (pr: SelectedPullRequest): ReadonlyArray<string> => {
  const body = joinPresent([pr.description, labelled("Summary", pr.summaryJson)], "\n\n")
  if (pr.number === 0 && pr.url === "" && (pr.title ?? "") === "" && body === "") return []
  const number = pr.number !== 0 ? pr.number : undefined
  return [element("pull_request", [["number", number], ["url", pr.url], ["title", pr.title], ["folder", pr.folderPath]], body)]
}

const list = (paths: ReadonlyArray<string>) => paths.join(", ")

const commitDetails = (params: SelectedAgenticGitActionCommitParams): ReadonlyArray<string | undefined> => [
  params.shouldStageAllChanges ? "Stage all changes." : undefined,
  params.filesToCommit.length > 0 ? `Files to commit: ${list(params.filesToCommit)}.` : undefined,
  params.filesToExcludeFromCommit.length > 0 ? `Leave out of the commit: ${list(params.filesToExcludeFromCommit)}.` : undefined,
  params.createPrDraft === true ? "Open the pull request as a draft." : undefined
]

const pushDetails = (params: SelectedAgenticGitActionPushParams): ReadonlyArray<string | undefined> => [
  params.filesToPush.length > 0 ? `Files: ${list(params.filesToPush)}.` : undefined,
  params.createPrDraft === true ? "Open the pull request as a draft." : undefined
]

/** What the picked action asks, as a sentence, with its parameters. */
const actionOf = (params: SelectedAgenticGitAction["params"]): { readonly name: string; readonly parts: ReadonlyArray<string | undefined> } | undefined => {
  switch (params.case) {
    case "commitParams":
      return { name: "commit", parts: ["Commit the changes.", ...commitDetails(params.value)] }
    case "commitAndPushParams":
      return { name: "commit_and_push", parts: ["Commit the changes and push them.", ...commitDetails(params.value)] }
    case "pushParams":
      return { name: "push", parts: ["Push the current branch.", ...pushDetails(params.value)] }
    case "createPrParams":
      return { name: "create_pr", parts: ["Push the branch and create a pull request for it.", ...pushDetails(params.value)] }
    case "createPrWithChangesParams":
      return { name: "create_pr_with_changes", parts: ["Commit the changes, push them and create a pull request.", ...commitDetails(params.value)] }
    case "fixMergeConflictsParams":
      return {
        name: "fix_merge_conflicts",
        parts: [
          "Resolve the merge conflicts.",
          params.value.baseBranch !== undefined && params.value.baseBranch !== "" ? `Merge from: ${params.value.baseBranch}.` : undefined,
          params.value.prUrl !== undefined && params.value.prUrl !== "" ? `Pull request: ${params.value.prUrl}.` : undefined
        ]
      }
    case "applyLocallyParams":
      return { name: "apply_locally", parts: [`Apply the changes of the remote branch ${params.value.remoteBranch || "(not named)"} to the local working tree.`] }
    case "checkoutBranchParams":
      return { name: "checkout_branch", parts: [`Check out the remote branch ${params.value.remoteBranch || "(not named)"} locally.`] }
    case "createBranchAndCommitParams":
      return { name: "create_branch_and_commit", parts: ["Create a new branch and commit the changes on it.", ...commitDetails(params.value)] }
    case "createBranchCommitAndPushParams":
      return { name: "create_branch_commit_and_push", parts: ["Create a new branch, commit the changes on it and push it.", ...commitDetails(params.value)] }
    case "updateBranchParams":
      return {
        name: "update_branch",
        parts: [`Update the current branch with the latest changes of ${params.value.baseBranch !== undefined && params.value.baseBranch !== "" ? params.value.baseBranch : "its base branch"}.`]
      }
    case "createBranchParams":
      return { name: "create_branch", parts: ["Create a new branch for the current work."] }
    case undefined:
      return undefined
  }
}

/** The git action picked from the git menu, as an instruction; an action this server does not know says so. */
export const gitActionText = (action: SelectedAgenticGitAction | undefined): ReadonlyArray<string> => {
  if (action === undefined) return []
  const branch = action.branchContext
  const branchLine = joinPresent([
    branch?.currentBranch !== undefined && branch.currentBranch !== "" ? `Current branch: ${branch.currentBranch}.` : undefined,
    branch?.baseBranch !== undefined && branch.baseBranch !== "" ? `Base branch: ${branch.baseBranch}.` : undefined
  ], " ")
  const picked = actionOf(action.params)
  if (picked === undefined) {
    return branchLine === "" && (action.$unknown ?? []).length === 0
      ? []
      : [note("The user picked a git action from the git menu that this server does not recognise.")]
  }
  const instruction = joinPresent(["The user asks you to carry out this git action with git in the shell:", ...picked.parts, branchLine], " ")
  return [element("git_action", [["name", picked.name]], instruction)]
}
