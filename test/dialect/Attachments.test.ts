/**
 * What the user attaches to a Cursor message reaches the model as text, byte for byte the same
 * for the same attachments (the provider's prompt cache keys on exact prefixes): every kind of
 * `SelectedContext`, escaping, empty items, slash commands, past chats, and the blobs read back.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc } from "effect"
import { createHash } from "node:crypto"
import { bytesToHex } from "../../src/dialect/Bytes.js"
import { fromClientMessage } from "../../src/dialect/Decode.js"
import { attachmentsOf, escapeAttribute, pastChatDigest } from "../../src/dialect/Attachments.js"
import { decodeRunRequest, SUMMARIZE_COMMAND, withContextParts } from "../../src/dialect/RunRequest.js"
import { toLlmUserMessage } from "../../src/dialect/UserMessage.js"
import {
  AgentClientMessageSchema,
  AgentRunRequestSchema,
  InvocationContextSchema,
  SelectedContextSchema,
  UserMessageSchema
} from "../../src/gen/agent/v1/agent_pb.js"
import type { Message } from "../../src/Llm.js"

type ContextInit = MessageInitShape<typeof SelectedContextSchema>

const utf8 = (text: string) => new TextEncoder().encode(text)
const sha256 = (data: Uint8Array) => new Uint8Array(createHash("sha256").update(data).digest())

/** The model's user message for `text` with `selected`, as the text of its blocks. */
const render = (
  selected: ContextInit,
  text = "go",
  options: { readonly blobs?: ReadonlyMap<string, Uint8Array>; readonly pastChats?: ReadonlyMap<string, string> } = {}
): ReadonlyArray<string> =>
  toLlmUserMessage(create(UserMessageSchema, { text, selectedContext: selected }), options.blobs ?? new Map(), new Set(), options.pastChats ?? new Map())
    .content.map((block) => (block.type === "text" ? block.text : `<${block.type}>`))

/** The attachment blocks alone (the instruction left out). */
const blocksOf = (selected: ContextInit, blobs: ReadonlyMap<string, Uint8Array> = new Map()) =>
  attachmentsOf(create(SelectedContextSchema, selected), "go", { blobs, alreadyAttached: new Set(), pastChats: new Map() }).blocks

describe("Attachments: each kind as text", () => {
  it("exact text: folder tree, external link with PDF text, cursor rule, truncated git diff, document, past chat", () => {
    assert.deepStrictEqual(render({
      folders: [{
        path: "/w/src",
        relativePath: "src",
        directoryTree: { absPath: "/w/src", childrenDirs: [{ absPath: "/w/src/lib", childrenFiles: [{ name: "x.ts" }] }], childrenFiles: [{ name: "main.ts" }] }
      }],
      externalLinks: [{ url: "https://x.dev/spec.pdf", filename: "spec.pdf", pdfContent: "Section 1", isPdf: true }],
      cursorRules: [{ rule: { fullPath: ".cursor/rules/style.mdc", content: "Use tabs." } }],
      gitDiff: { content: "diff --git a/x b/x", fullContentLengthCharCount: 5000 },
      selectedDocuments: [{ filename: "notes.md", mimeType: "text/markdown", dataOrBlobId: { case: "data", value: utf8("# Notes") } }],
      pastChats: [{ agentId: "agent-1", name: "Build setup" }]
    }, "go", { pastChats: new Map([["agent-1", "User: how?\n\nAssistant: esbuild."]]) }), [
      "<attached_folder path=\"src\">\n/w/src/\n  - lib/\n    - x.ts\n  - main.ts\n</attached_folder>",
      "<external_link url=\"https://x.dev/spec.pdf\" filename=\"spec.pdf\">\nSection 1\n</external_link>",
      "<cursor_rule path=\".cursor/rules/style.mdc\">\nUse tabs.\n</cursor_rule>",
      "<git_diff>\ndiff --git a/x b/x\n[Truncated: 18 of 5000 characters shown.]\n</git_diff>",
      "<attached_document name=\"notes.md\" type=\"text/markdown\">\n# Notes\n</attached_document>",
      "<past_chat name=\"Build setup\" id=\"agent-1\">\nUser: how?\n\nAssistant: esbuild.\n</past_chat>",
      "go"
    ])
  })

  it("the invocation context: a GitHub PR, the IDE's visible and recently viewed files with the cursor, a Slack and a Teams thread", () => {
    const one = (data: NonNullable<MessageInitShape<typeof InvocationContextSchema>["data"]>) => blocksOf({ invocationContext: { data } })
    assert.deepStrictEqual(one({ case: "githubPr", value: { title: "Fix \"x\"", description: "Fixes x.", comments: "LGTM", ciFailures: "lint failed" } }), [
      "<github_pr title=\"Fix &quot;x&quot;\">\nDescription: Fixes x.\n\nComments: LGTM\n\nCI failures: lint failed\n</github_pr>"
    ])
    assert.deepStrictEqual(one({
      case: "ideState",
      value: {
        visibleFiles: [{ path: "/w/a.ts", relativePath: "a.ts", totalLines: 40, cursorPosition: { line: 12, text: "const x = 1" } }],
        recentlyViewedFiles: [{ path: "/w/b.ts" }]
      }
    }), ["<ide_state>\nVisible files:\n- a.ts (40 lines; cursor on line 12: const x = 1)\n\nRecently viewed files:\n- /w/b.ts\n</ide_state>"])
    assert.deepStrictEqual(one({ case: "slackThread", value: { thread: "alice: it broke", channelName: "eng" } }), ["<slack_thread channel=\"eng\">\nalice: it broke\n</slack_thread>"])
    assert.deepStrictEqual(one({ case: "microsoftTeamsThread", value: { thread: "bob: see logs", teamName: "Core", channelName: "ops" } }), [
      "<teams_thread team=\"Core\" channel=\"ops\">\nbob: see logs\n</teams_thread>"
    ])
  })

  const kinds: ReadonlyArray<readonly [string, ContextInit, ReadonlyArray<string>]> = [
    ["extra_context_entries", { extraContextEntries: [{ dataOrBlobId: { case: "data", value: "The deploy is on Friday." } }] }, ["The deploy is on Friday."]],
    ["git_diff_from_branch_to_main", { gitDiffFromBranchToMain: { content: "+added", fullContentLengthCharCount: 6 } }, ["<git_diff_from_branch_to_main>", "+added"]],
    ["documentations", { documentations: [{ docId: "react", name: "React" }] }, ["React (react)", "web search"]],
    ["ui_elements", { uiElements: [{ element: "<button>Save</button>", xpath: "/html/body/button", textContent: "Save", component: "SaveButton", componentPropsJson: "{\"primary\":true}" }] }, [
      "<ui_element xpath=\"/html/body/button\" component=\"SaveButton\">",
      "Element: <button>Save</button>",
      "Text: Save",
      "Props: {\"primary\":true}"
    ]],
    ["console_logs", { consoleLogs: [{ level: "error", message: "boom", clientName: "Chrome", timestamp: 1234, stackTrace: { rawStackTrace: "at f (a.js:1:2)" } }] }, [
      "<console_log level=\"error\" client=\"Chrome\">",
      "boom",
      "Stack: at f (a.js:1:2)"
    ]],
    ["git_commits", { gitCommits: [{ sha: "abc123", message: "fix: x", description: "Because.", diff: "-a\n+b" }] }, ["<git_commit sha=\"abc123\">\nfix: x\n\nBecause.\n\n-a\n+b\n</git_commit>"]],
    ["git_pr_diff_selections", { gitPrDiffSelections: [{ prUrl: "https://gh/o/r/pull/1", filePath: "a.ts", startLine: 3, endLine: 9, diffContent: "+x" }] }, [
      "<pr_diff_selection pr=\"https://gh/o/r/pull/1\" path=\"a.ts\" lines=\"3-9\">\n+x\n</pr_diff_selection>"
    ]],
    ["selected_pull_requests", { selectedPullRequests: [{ number: 7, url: "https://gh/o/r/pull/7", title: "Add x", description: "Adds x.", summaryJson: "{\"files\":2}" }] }, [
      "<pull_request number=\"7\" url=\"https://gh/o/r/pull/7\" title=\"Add x\">",
      "Adds x.",
      "Summary: {\"files\":2}"
    ]],
    ["selected_subagents", { selectedSubagents: [{ name: "explorer" }] }, ["subagent \"explorer\""]],
    ["selected_browsers", { selectedBrowsers: [{ browserId: "b1", url: "http://localhost:3000", pageTitle: "App" }] }, ["<browser_tab url=\"http://localhost:3000\" title=\"App\" />"]],
    ["selected_skills", { selectedSkills: [{ fullPath: "/s/deploy/SKILL.md", description: "Deploys", content: "1. build" }] }, ["<skill path=\"/s/deploy/SKILL.md\" description=\"Deploys\">\n1. build\n</skill>"]],
    ["recent_agents_context", { recentAgentsContext: { recentAgents: [{ name: "Fix login", path: "/agents/1", overview: "Fixed the token refresh." }] } }, [
      "<recent_agent name=\"Fix login\" path=\"/agents/1\">\nFixed the token refresh.\n</recent_agent>"
    ]],
    ["selected_agentic_git_action", {
      selectedAgenticGitAction: {
        branchContext: { currentBranch: "feat", baseBranch: "main" },
        params: { case: "commitAndPushParams", value: { shouldStageAllChanges: true, filesToExcludeFromCommit: ["secret.env"] } }
      }
    }, ["<git_action name=\"commit_and_push\">", "Commit the changes and push them.", "Stage all changes.", "secret.env", "Current branch: feat.", "Base branch: main."]],
    ["cursor_commands (not the message's)", { cursorCommands: [{ name: "lint", content: "Run the linter." }] }, ["<command name=\"lint\">\nRun the linter.\n</command>"]]
  ]
  for (const [kind, selected, expected] of kinds) {
    it(`${kind} reaches the model`, () => {
      const text = blocksOf(selected).join("\n")
      for (const part of expected) assert.include(text, part)
    })
  }

  it("every git action names what to do", () => {
    const actions = [
      ["commitParams", "commit"], ["pushParams", "push"], ["createPrParams", "create_pr"], ["createPrWithChangesParams", "create_pr_with_changes"],
      ["fixMergeConflictsParams", "fix_merge_conflicts"], ["applyLocallyParams", "apply_locally"], ["checkoutBranchParams", "checkout_branch"],
      ["createBranchAndCommitParams", "create_branch_and_commit"], ["createBranchCommitAndPushParams", "create_branch_commit_and_push"],
      ["updateBranchParams", "update_branch"], ["createBranchParams", "create_branch"]
    ] as const
    for (const [params, name] of actions) {
      const blocks = blocksOf({ selectedAgenticGitAction: { params: { case: params, value: {} } as never } })
      assert.strictEqual(blocks.length, 1)
      assert.match(blocks[0]!, new RegExp(`^<git_action name="${name}">\nThe user asks you to carry out this git action with git in the shell: [A-Z]`))
    }
    assert.include(blocksOf({ selectedAgenticGitAction: { params: { case: "checkoutBranchParams", value: { remoteBranch: "origin/fix" } } } })[0], "origin/fix")
  })

  it("documents: text types decoded as UTF-8, a PDF or other binary a line saying it is not text, one named by blob id read from the blobs at hand or a line saying it could not be read", () => {
    const json = utf8("{\"a\":1}")
    assert.deepStrictEqual(blocksOf({
      selectedDocuments: [
        { filename: "a.json", mimeType: "application/json", dataOrBlobId: { case: "blobIdWithData", value: { blobId: sha256(json), data: json } } },
        { filename: "r.pdf", mimeType: "application/pdf", dataOrBlobId: { case: "data", value: utf8("%PDF-1.7") } },
        { filename: "x.bin", mimeType: "", dataOrBlobId: { case: "data", value: new Uint8Array([0xff, 0xfe, 0]) } },
        { filename: "b.txt", mimeType: "text/plain", dataOrBlobId: { case: "blobId", value: sha256(utf8("kept")) } },
        { filename: "c.txt", mimeType: "text/plain", dataOrBlobId: { case: "blobId", value: sha256(utf8("not here")) } }
      ]
    }, new Map([[bytesToHex(sha256(utf8("kept"))), utf8("kept")]])), [
      "<attached_document name=\"a.json\" type=\"application/json\">\n{\"a\":1}\n</attached_document>",
      "[The attached document r.pdf (application/pdf) could not be read as text.]",
      "[The attached document x.bin could not be read as text.]",
      "<attached_document name=\"b.txt\" type=\"text/plain\">\nkept\n</attached_document>",
      "[The attached document c.txt (text/plain) could not be read from the editor.]"
    ])
  })
})

describe("Attachments: deterministic bytes, escaping, empty items", () => {
  it("attribute values escape quotes, ampersands, angle brackets and line breaks; bodies stay as they are", () => {
    assert.strictEqual(escapeAttribute("a\"b&c<d\ne\rf"), "a&quot;b&amp;c&lt;d&#10;e&#13;f")
    assert.deepStrictEqual(blocksOf({ files: [{ path: "/w/say \"hi\".ts", content: "x = \"y\"" }] }), ["<attached_file path=\"/w/say &quot;hi&quot;.ts\">\nx = \"y\"\n</attached_file>"])
  })

  it("empty items of every kind are skipped: only the typed text reaches the model", () => {
    assert.deepStrictEqual(render({
      files: [{ path: "/w/a.ts", content: "" }],
      extraContext: [""],
      extraContextEntries: [{ dataOrBlobId: { case: "data", value: "" } }, {}],
      invocationContext: { data: { case: "ideState", value: { visibleFiles: [], recentlyViewedFiles: [] } } },
      folders: [{}],
      externalLinks: [{}],
      cursorRules: [{}, { rule: {} }],
      gitDiff: {},
      gitDiffFromBranchToMain: {},
      cursorCommands: [{}],
      documentations: [{}],
      uiElements: [{}],
      consoleLogs: [{}],
      gitCommits: [{}],
      pastChats: [{}],
      gitPrDiffSelections: [{}],
      selectedPullRequests: [{}],
      selectedSubagents: [{}],
      selectedBrowsers: [{}],
      selectedDocuments: [{}],
      selectedSkills: [{}],
      recentAgentsContext: { recentAgents: [{}] },
      selectedAgenticGitAction: {}
    }), ["go"])
  })

  it("an item that cannot be shown says so: a folder without its listing, a blob-only extra context entry or invocation context not at hand", () => {
    assert.deepStrictEqual(blocksOf({
      folders: [{ path: "/w/empty" }],
      extraContextEntries: [{ dataOrBlobId: { case: "blobId", value: sha256(utf8("x")) } }],
      invocationContext: { data: { case: "blobId", value: sha256(utf8("y")) } }
    }), [
      "[An extra context entry could not be read from the editor.]",
      "[The invocation context could not be read from the editor.]",
      "<attached_folder path=\"/w/empty\">\n[The editor sent no listing of this folder.]\n</attached_folder>"
    ])
  })

  // A SelectedContext of random kinds and strings (quotes, newlines, unicode included).
  const text = fc.oneof(fc.constant(""), fc.string({ maxLength: 12 }), fc.constantFrom("a\"b", "line\nbreak", "<tag>", "&amp;", "ü😀"))
  const selectedContext: fc.Arbitrary<ContextInit> = fc.record({
    files: fc.array(fc.record({ path: text, content: text }), { maxLength: 3 }),
    // Extra context goes as it is: no markup of ours to check in it.
    extraContext: fc.array(fc.constantFrom("", "a note", "say \"hi\""), { maxLength: 2 }),
    folders: fc.array(fc.record({ path: text, directoryTree: fc.record({ absPath: text, childrenFiles: fc.array(fc.record({ name: text }), { maxLength: 3 }) }) }), { maxLength: 2 }),
    externalLinks: fc.array(fc.record({ url: text, filename: text, pdfContent: text }), { maxLength: 2 }),
    cursorRules: fc.array(fc.record({ rule: fc.record({ fullPath: text, content: text }) }), { maxLength: 2 }),
    gitCommits: fc.array(fc.record({ sha: text, message: text, diff: text }), { maxLength: 2 }),
    cursorCommands: fc.array(fc.record({ name: text, content: text }), { maxLength: 2 }),
    documentations: fc.array(fc.record({ docId: text, name: text }), { maxLength: 2 }),
    consoleLogs: fc.array(fc.record({ level: text, message: text, clientName: text, timestamp: fc.double({ noNaN: true }) }), { maxLength: 2 }),
    pastChats: fc.array(fc.record({ agentId: text, name: text }), { maxLength: 2 }),
    selectedPullRequests: fc.array(fc.record({ number: fc.integer({ min: 0, max: 99 }), url: text, title: text }), { maxLength: 2 }),
    selectedBrowsers: fc.array(fc.record({ url: text, pageTitle: text }), { maxLength: 2 }),
    selectedDocuments: fc.array(fc.record({ filename: text, mimeType: fc.constantFrom("", "text/plain", "application/pdf"), dataOrBlobId: fc.record({ case: fc.constant("data" as const), value: fc.uint8Array({ maxLength: 8 }) }) }), { maxLength: 2 }),
    selectedSkills: fc.array(fc.record({ fullPath: text, description: text, content: text }), { maxLength: 2 })
  })

  it.prop("the same attachments render to the same bytes, whatever the message went through (a protobuf round trip), with every tag's attributes quoted and no empty block", [selectedContext, text], ([selected, typed]) => {
    const message = create(UserMessageSchema, { text: typed, selectedContext: selected })
    const again = fromBinary(UserMessageSchema, toBinary(UserMessageSchema, message))
    const first = JSON.stringify(toLlmUserMessage(message))
    assert.strictEqual(JSON.stringify(toLlmUserMessage(again)), first)
    assert.strictEqual(JSON.stringify(toLlmUserMessage(message)), first)
    const blocks = toLlmUserMessage(message).content
    for (const block of blocks.slice(0, -1)) assert.notStrictEqual(block.type === "text" ? block.text : "image", "")
    for (const block of blocks.slice(0, -1)) {
      if (block.type === "text" && block.text.startsWith("<")) {
        // An opening tag: a name, then name="value" pairs without raw quotes or line breaks.
        assert.match(block.text, /^<[a-z_]+( [a-z_]+="[^"\n\r]*")*( \/>$|>\n)/)
      }
    }
  })
})

describe("Attachments: slash commands", () => {
  const commands = [{ name: "review", content: "Review the diff for bugs." }, { name: "lint", content: "Run the linter." }]

  it("an empty message with a picked command is the command's content, not an empty message", () => {
    assert.deepStrictEqual(render({ cursorCommands: [commands[0]!] }, ""), ["Review the diff for bugs."])
    assert.deepStrictEqual(render({ cursorCommands: commands }, "  "), ["Review the diff for bugs.\n\nRun the linter."])
  })

  it("`/name` alone is the command's content; `/name more words` is the content then the words; the other commands go along as blocks", () => {
    assert.deepStrictEqual(render({ cursorCommands: commands }, "/review"), ["<command name=\"lint\">\nRun the linter.\n</command>", "Review the diff for bugs."])
    assert.deepStrictEqual(render({ cursorCommands: [commands[0]!] }, "/review focus on the parser\nand the lexer"), ["Review the diff for bugs.\n\nfocus on the parser\nand the lexer"])
    // A longer name that starts with a picked one is not that command.
    assert.deepStrictEqual(render({ cursorCommands: [commands[0]!] }, "/reviewer now"), ["<command name=\"review\">\nReview the diff for bugs.\n</command>", "/reviewer now"])
  })

  it("a command without content says so instead of sending the literal slash; Cursor's summarize command is left out", () => {
    assert.deepStrictEqual(render({ cursorCommands: [{ name: "deploy" }] }, "/deploy"), ["[The user picked the command /deploy, but the editor sent no content for it.]"])
    assert.deepStrictEqual(render({ cursorCommands: [{ name: "deploy" }] }, "/deploy to staging"), [
      "[The user picked the command /deploy, but the editor sent no content for it.]\n\nto staging"
    ])
    assert.deepStrictEqual(render({ cursorCommands: [{ name: SUMMARIZE_COMMAND, content: "Summarize." }, commands[1]!] }, "keep it short"), [
      "<command name=\"lint\">\nRun the linter.\n</command>",
      "keep it short"
    ])
  })
})

describe("Attachments: past chats", () => {
  it("with a digest the chat's text goes along; without, a line says this server does not have it", () => {
    const digests = new Map([["agent-1", "User: hi"]])
    assert.deepStrictEqual(render({ pastChats: [{ agentId: "agent-1", name: "Say \"hi\"" }, { agentId: "agent-2", name: "Elsewhere" }] }, "go", { pastChats: digests }), [
      "<past_chat name=\"Say &quot;hi&quot;\" id=\"agent-1\">\nUser: hi\n</past_chat>",
      "[The user refers to the past chat \"Elsewhere\" (id agent-2), which is not stored on this server.]",
      "go"
    ])
  })

  const assistant = (content: Extract<Message, { role: "assistant" }>["content"]): Message => ({
    role: "assistant",
    content,
    api: "openai-chat",
    provider: "fake",
    model: "m",
    usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
    stopReason: "stop"
  })
  const conversation: ReadonlyArray<Message> = [
    { role: "user", content: [{ type: "image", data: "AAAA", mimeType: "image/png" }, { type: "text", text: "what is this?" }] },
    assistant([{ type: "thinking", thinking: "hmm" }, { type: "text", text: "Let me look." }, { type: "toolCall", id: "c1", name: "Read", arguments: "{\"path\":\n\"/w/a.ts\"}" }]),
    { role: "toolResult", toolCallId: "c1", toolName: "Read", content: [{ type: "text", text: "SECRET FILE CONTENT" }], isError: false },
    assistant([{ type: "text", text: "A cat." }]),
    { role: "user", content: [{ type: "text", text: "thanks" }] }
  ]

  it("pastChatDigest: user and assistant text, a short line per tool call, no tool results or thinking, images as a marker", () => {
    assert.strictEqual(
      pastChatDigest(conversation, 10_000),
      "User: [image]\nwhat is this?\n\nAssistant: Let me look.\n[tool call: Read {\"path\": \"/w/a.ts\"}]\n\nAssistant: A cat.\n\nUser: thanks"
    )
  })

  it("pastChatDigest keeps the end when it must cut: whole messages after a line saying earlier ones are left out, else the tail", () => {
    const cut = pastChatDigest(conversation, 80)
    assert.strictEqual(cut, "[Earlier messages of this chat are left out.]\n\nAssistant: A cat.\n\nUser: thanks")
    const tail = pastChatDigest([{ role: "user", content: [{ type: "text", text: "x".repeat(500) }] }], 100)
    assert.strictEqual(tail.length, 100)
    assert.isTrue(tail.endsWith("xxxx"))
    assert.strictEqual(pastChatDigest(conversation, 0), "")
  })

  it.prop("pastChatDigest never exceeds maxChars and is the same for the same messages", [fc.integer({ min: 0, max: 300 })], ([maxChars]) => {
    const digest = pastChatDigest(conversation, maxChars)
    assert.isAtMost(digest.length, maxChars)
    assert.strictEqual(pastChatDigest(conversation, maxChars), digest)
  })

  it("pastChatDigest at every small budget stays within it (a budget of one character after the note once returned the whole text)", () => {
    for (let maxChars = 0; maxChars <= 120; maxChars++) assert.isAtMost(pastChatDigest(conversation, maxChars).length, maxChars, `maxChars ${maxChars}`)
  })
})

describe("Attachments: blobs read back from the client", () => {
  const documentBytes = utf8("Quarterly numbers: 42")
  const entryBytes = utf8("Remember the release freeze.")
  const invocation = toBinary(InvocationContextSchema, create(InvocationContextSchema, { data: { case: "slackThread", value: { thread: "carol: prod is down", channelName: "incidents" } } }))
  const selected: ContextInit = {
    extraContextEntries: [{ dataOrBlobId: { case: "blobId", value: sha256(entryBytes) } }],
    invocationContext: { data: { case: "blobId", value: sha256(invocation) } },
    selectedDocuments: [
      { filename: "q.txt", mimeType: "text/plain", dataOrBlobId: { case: "blobId", value: sha256(documentBytes) } },
      // The same blob twice is read once.
      { filename: "q-again.txt", mimeType: "text/plain", dataOrBlobId: { case: "blobIdWithData", value: { blobId: sha256(documentBytes), data: new Uint8Array() } } }
    ]
  }
  const run = decodeRunRequest(create(AgentRunRequestSchema, {
    conversationId: "c",
    action: { action: { case: "userMessageAction", value: { userMessage: { text: "look", messageId: "m", selectedContext: selected }, requestContext: {} } } }
  }))
  const contentOf = (r: typeof run) => (r.action._tag === "StartTurn" ? r.action.start.message.content.map((block) => (block.type === "text" ? block.text : block.type)) : [])

  it("documents, extra context entries and the invocation context named by blob id are read back, then rendered", () => {
    assert.deepStrictEqual(run.contextToFetch.map((ref) => [ref.part, bytesToHex(ref.blobId)]), [
      ["extraContext", bytesToHex(sha256(entryBytes))],
      ["invocationContext", bytesToHex(sha256(invocation))],
      ["document", bytesToHex(sha256(documentBytes))]
    ])
    const read = withContextParts(run, new Map([documentBytes, entryBytes, invocation].map((data) => [bytesToHex(sha256(data)), data])))
    assert.deepStrictEqual(read.problems, [])
    assert.deepStrictEqual(contentOf(read.run), [
      "Remember the release freeze.",
      "<slack_thread channel=\"incidents\">\ncarol: prod is down\n</slack_thread>",
      "<attached_document name=\"q.txt\" type=\"text/plain\">\nQuarterly numbers: 42\n</attached_document>",
      "<attached_document name=\"q-again.txt\" type=\"text/plain\">\nQuarterly numbers: 42\n</attached_document>",
      "look"
    ])
  })

  it("a blob that was not read back, or is not what its id names, is a problem and a line saying it could not be read", () => {
    const read = withContextParts(run, new Map([[bytesToHex(sha256(documentBytes)), utf8("tampered")]]))
    assert.deepStrictEqual(read.problems, [
      "an extra context entry was not read back",
      "the invocation context was not read back",
      "an attached document does not match its id or length"
    ])
    assert.deepStrictEqual(contentOf(read.run), [
      "[An extra context entry could not be read from the editor.]",
      "[The invocation context could not be read from the editor.]",
      "[The attached document q.txt (text/plain) could not be read from the editor.]",
      "[The attached document q-again.txt (text/plain) could not be read from the editor.]",
      "look"
    ])
  })

  it("a live follow-up gets the same rendering, and its blob-only attachments (not read back there) a line each", () => {
    const decoded = fromClientMessage(create(AgentClientMessageSchema, {
      message: {
        case: "conversationAction",
        value: { action: { case: "userMessageAction", value: { userMessage: { text: "/review", messageId: "m2", selectedContext: { ...selected, cursorCommands: [{ name: "review", content: "Review it." }] } } } } }
      }
    }))
    if (Either.isLeft(decoded) || decoded.right._tag !== "UserMessage") return assert.fail("expected a follow-up user message")
    assert.deepStrictEqual(decoded.right.message.content.map((block) => (block.type === "text" ? block.text : block.type)), [
      "[An extra context entry could not be read from the editor.]",
      "[The invocation context could not be read from the editor.]",
      "[The attached document q.txt (text/plain) could not be read from the editor.]",
      "[The attached document q-again.txt (text/plain) could not be read from the editor.]",
      "Review it."
    ])
  })
})
