/**
 * What the user attaches reaches the provider, end to end (real server, SQLite file, fake
 * provider, reference client): every kind of `selected_context` in the user message of the
 * provider's request body; attachments named only by blob id read back from the client with
 * get_blob; a slash command as the instruction; a live follow-up rendered the same way.
 */
import { create, toBinary } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { InvocationContextSchema, SelectedContextSchema } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import { blobIdBytes, sha256Hex } from "../support/CursorClient.js"
import type { CursorClient, Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

type ContextInit = MessageInitShape<typeof SelectedContextSchema>

const utf8 = (text: string) => new TextEncoder().encode(text)

/** The last user message the provider received in request `index`, as text (OpenAI Chat joins text blocks with a line break). */
const lastUserText = (app: AppHarness.AppHarness, index: number): string => {
  const request = app.provider.requests[index]
  assert.isDefined(request, `the provider saw no request #${index}`)
  const messages = (JSON.parse(request!.body) as { messages: ReadonlyArray<{ role: string; content: unknown }> }).messages
  const user = messages.filter((message) => message.role === "user").at(-1)
  assert.isDefined(user, `request #${index} has no user message`)
  assert.strictEqual(typeof user!.content, "string", "the user message is not plain text")
  return user!.content as string
}

const blobReads = (transcript: Transcript) => transcript.appends.filter((append) => append.what === "kvClientMessage.getBlobResult").length

/** The client keeps `data` in its blob store, as Cursor does for an attachment it sends by id. */
const keep = (client: CursorClient, data: Uint8Array) => client.blobs.set(sha256Hex(data), data)

const answer = (text: string) => FakeProvider.sse(FakeProvider.openAiChat.text(text))

describe("Attachments end to end", () => {
  it.scopedLive("every attachment kind reaches the provider's request, in order; a document and an extra context entry named only by blob id are read back with get_blob", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(answer("Seen."))
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const document = utf8("Quarterly numbers: 42")
      const entry = utf8("Remember the release freeze.")
      keep(client, document)
      keep(client, entry)
      const selectedContext: ContextInit = {
        files: [{ path: "/w/a.ts", relativePath: "a.ts", content: "export const a = 1" }],
        codeSelections: [{ path: "/w/b.ts", content: "b()" }],
        terminals: [{ title: "zsh", content: "$ npm test" }],
        terminalSelections: [{ content: "TypeError" }],
        extraContext: ["A plain extra note."],
        extraContextEntries: [{ dataOrBlobId: { case: "data", value: "An inline entry." } }, { dataOrBlobId: { case: "blobId", value: blobIdBytes(entry) } }],
        invocationContext: { data: { case: "ideState", value: { visibleFiles: [{ path: "/w/a.ts", relativePath: "a.ts", totalLines: 10, cursorPosition: { line: 3, text: "const a = 1" } }] } } },
        folders: [{ path: "/w/src", relativePath: "src", directoryTree: { absPath: "/w/src", childrenFiles: [{ name: "main.ts" }] } }],
        externalLinks: [{ url: "https://example.com/spec.pdf", filename: "spec.pdf", pdfContent: "Spec text" }],
        cursorRules: [{ rule: { fullPath: ".cursor/rules/tabs.mdc", content: "Use tabs." } }],
        selectedSkills: [{ fullPath: "/skills/deploy/SKILL.md", description: "Deploys", content: "Run deploy.sh" }],
        gitDiff: { content: "+working tree change", fullContentLengthCharCount: 20 },
        gitDiffFromBranchToMain: { content: "+branch change", fullContentLengthCharCount: 9000 },
        gitCommits: [{ sha: "abc123", message: "fix: parser", diff: "-old\n+new" }],
        gitPrDiffSelections: [{ prUrl: "https://github.com/o/r/pull/1", filePath: "p.ts", startLine: 1, endLine: 4, diffContent: "+pr line" }],
        selectedPullRequests: [{ number: 7, url: "https://github.com/o/r/pull/7", title: "Add x", description: "Adds x." }],
        documentations: [{ docId: "react", name: "React" }],
        uiElements: [{ element: "<button>Save</button>", xpath: "/html/body/button", textContent: "Save" }],
        consoleLogs: [{ level: "error", message: "Uncaught boom", clientName: "Chrome", stackTrace: { rawStackTrace: "at f (app.js:1:1)" } }],
        selectedBrowsers: [{ url: "http://localhost:3000", pageTitle: "My App" }],
        selectedDocuments: [{ filename: "q.txt", mimeType: "text/plain", dataOrBlobId: { case: "blobId", value: blobIdBytes(document) } }],
        pastChats: [{ agentId: "agent-elsewhere", name: "Old chat" }],
        recentAgentsContext: { recentAgents: [{ name: "Fix login", path: "/agents/1", overview: "Fixed the token refresh." }] },
        selectedSubagents: [{ name: "explorer" }],
        cursorCommands: [{ name: "lint", content: "Run the linter." }],
        selectedAgenticGitAction: { params: { case: "commitParams", value: { shouldStageAllChanges: true } } }
      }
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-attach-all", text: "check these", selectedContext }))
      assertCleanOk(transcript)
      assert.strictEqual(blobReads(transcript), 2, "the two blob-only attachments were not read back once each")
      const text = lastUserText(app, 0)
      const expected: ReadonlyArray<readonly [string, string]> = [
        ["files", "<attached_file path=\"a.ts\">\nexport const a = 1\n</attached_file>"],
        ["code_selections", "<code_selection path=\"/w/b.ts\">\nb()\n</code_selection>"],
        ["terminals", "<terminal title=\"zsh\">\n$ npm test\n</terminal>"],
        ["terminal_selections", "<terminal_selection>\nTypeError\n</terminal_selection>"],
        ["extra_context", "A plain extra note."],
        ["extra_context_entries (inline)", "An inline entry."],
        ["extra_context_entries (blob id)", "Remember the release freeze."],
        ["invocation_context", "<ide_state>\nVisible files:\n- a.ts (10 lines; cursor on line 3: const a = 1)\n</ide_state>"],
        ["folders", "<attached_folder path=\"src\">\n/w/src/\n  - main.ts\n</attached_folder>"],
        ["external_links", "<external_link url=\"https://example.com/spec.pdf\" filename=\"spec.pdf\">\nSpec text\n</external_link>"],
        ["cursor_rules", "<cursor_rule path=\".cursor/rules/tabs.mdc\">\nUse tabs.\n</cursor_rule>"],
        ["selected_skills", "<skill path=\"/skills/deploy/SKILL.md\" description=\"Deploys\">\nRun deploy.sh\n</skill>"],
        ["git_diff", "<git_diff>\n+working tree change\n</git_diff>"],
        ["git_diff_from_branch_to_main", "<git_diff_from_branch_to_main>\n+branch change\n[Truncated: 14 of 9000 characters shown.]\n</git_diff_from_branch_to_main>"],
        ["git_commits", "<git_commit sha=\"abc123\">\nfix: parser\n\n-old\n+new\n</git_commit>"],
        ["git_pr_diff_selections", "<pr_diff_selection pr=\"https://github.com/o/r/pull/1\" path=\"p.ts\" lines=\"1-4\">\n+pr line\n</pr_diff_selection>"],
        ["selected_pull_requests", "<pull_request number=\"7\" url=\"https://github.com/o/r/pull/7\" title=\"Add x\">\nAdds x.\n</pull_request>"],
        ["documentations", "[The user refers to this documentation: React (react)."],
        ["ui_elements", "<ui_element xpath=\"/html/body/button\">\nElement: <button>Save</button>\nText: Save\n</ui_element>"],
        ["console_logs", "<console_log level=\"error\" client=\"Chrome\">\nUncaught boom\nStack: at f (app.js:1:1)\n</console_log>"],
        ["selected_browsers", "<browser_tab url=\"http://localhost:3000\" title=\"My App\" />"],
        ["selected_documents (blob id)", "<attached_document name=\"q.txt\" type=\"text/plain\">\nQuarterly numbers: 42\n</attached_document>"],
        ["past_chats", "[The user refers to the past chat \"Old chat\" (id agent-elsewhere), which is not stored on this server.]"],
        ["recent_agents_context", "<recent_agent name=\"Fix login\" path=\"/agents/1\">\nFixed the token refresh.\n</recent_agent>"],
        ["selected_subagents", "[The user wants the subagent \"explorer\" used for this task.]"],
        ["cursor_commands", "<command name=\"lint\">\nRun the linter.\n</command>"],
        ["selected_agentic_git_action", "<git_action name=\"commit\">\nThe user asks you to carry out this git action with git in the shell: Commit the changes. Stage all changes.\n</git_action>"],
        ["the typed text", "check these"]
      ]
      let from = 0
      for (const [kind, part] of expected) {
        const at = text.indexOf(part, from)
        assert.isAtLeast(at, 0, `${kind} is missing from the provider's request, or out of order:\n${part}\n--- in ---\n${text}`)
        from = at + part.length
      }
      assert.isTrue(text.endsWith("\ncheck these"))
    }))

  it.scopedLive("an invocation context named by blob id is read back; a message that is only `/name` of a picked command, or empty, reaches the model as the command's content", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      app.provider.enqueue(answer("Reviewed."), answer("Linted."))
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const pr = toBinary(InvocationContextSchema, create(InvocationContextSchema, {
        data: { case: "githubPr", value: { title: "Fix the parser", description: "It broke on tabs.", comments: "alice: LGTM" } }
      }))
      keep(client, pr)
      const review = yield* Effect.promise(() =>
        client.run({
          conversationId: "conv-attach-command",
          text: "/review focus on tabs",
          cursorCommands: [{ name: "review", content: "Review the pull request for bugs." }],
          selectedContext: { invocationContext: { data: { case: "blobId", value: blobIdBytes(pr) } } }
        })
      )
      assertCleanOk(review)
      assert.strictEqual(blobReads(review), 1)
      assert.strictEqual(
        lastUserText(app, 0),
        "<github_pr title=\"Fix the parser\">\nDescription: It broke on tabs.\n\nComments: alice: LGTM\n</github_pr>\nReview the pull request for bugs.\n\nfocus on tabs"
      )
      const lint = yield* Effect.promise(() =>
        client.run({ conversationId: "conv-attach-empty", text: "", cursorCommands: [{ name: "lint", content: "Run the linter and fix what it reports." }] })
      )
      assertCleanOk(lint)
      assert.strictEqual(lastUserText(app, 1), "Run the linter and fix what it reports.")
    }))

  it.scopedLive("a live follow-up with attachments is rendered the same way; its blob-only document, not read back there, is a line saying so", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { queuedMessageGraceMs: 1_500 } })
      app.provider.enqueue(answer("first answer"), answer("second answer"))
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const turn = client.turn({ conversationId: "conv-attach-follow-up", text: "first" })
      yield* Effect.promise(() => turn.waitFor((frame) => frame.event.kind === "turn_ended"))
      yield* Effect.promise(() =>
        turn.send({
          message: {
            case: "conversationAction",
            value: {
              action: {
                case: "userMessageAction",
                value: {
                  userMessage: {
                    text: "and these?",
                    messageId: "m-follow-up",
                    selectedContext: {
                      cursorRules: [{ rule: { fullPath: ".cursor/rules/tabs.mdc", content: "Use tabs." } }],
                      selectedDocuments: [{ filename: "q.txt", mimeType: "text/plain", dataOrBlobId: { case: "blobId", value: blobIdBytes(utf8("not sent")) } }]
                    }
                  }
                }
              }
            }
          }
        })
      )
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)
      assert.strictEqual(blobReads(transcript), 0)
      assert.strictEqual(
        lastUserText(app, 1),
        "<cursor_rule path=\".cursor/rules/tabs.mdc\">\nUse tabs.\n</cursor_rule>\n[The attached document q.txt (text/plain) could not be read from the editor.]\nand these?"
      )
    }))

  it.scopedLive("a past chat this server holds reaches the model as a digest of that conversation; one it does not hold is named as missing", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      app.provider.enqueue(answer("Noted: the deploy key rotates on Fridays."), answer("Using what we said before."))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "conv-earlier", text: "remember: deploy keys rotate on Fridays" })))
      const later = yield* Effect.promise(() =>
        client.run({
          conversationId: "conv-later",
          text: "when do keys rotate?",
          selectedContext: { pastChats: [{ agentId: "conv-earlier", name: "Deploy notes" }, { agentId: "conv-elsewhere", name: "Other machine" }] }
        })
      )
      assertCleanOk(later)
      const text = lastUserText(app, 1)
      assert.include(text, "<past_chat name=\"Deploy notes\" id=\"conv-earlier\">")
      assert.include(text, "remember: deploy keys rotate on Fridays")
      assert.include(text, "Noted: the deploy key rotates on Fridays.")
      assert.include(text, "Other machine")
      assert.include(text, "not stored on this server")
      assert.isTrue(text.trimEnd().endsWith("when do keys rotate?"))
    }))
})
