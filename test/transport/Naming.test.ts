/**
 * The naming pieces on their own: title cleaning and the titles made from a message, diff
 * splitting and its deterministic cut, commit-message and branch-name cleaning and fallbacks,
 * the quick model table, the budget under a client's deadline, chat names in the store, and the
 * side routes without a naming service (the fallbacks answer).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import { NameAgentRequestSchema, NameAgentResponseSchema, UpdateConversationMetadataRequestSchema } from "../../src/gen/agent/v1/agent_pb.js"
import {
  ConversationMessage_MessageType,
  GetChatTitleRequestSchema,
  GetChatTitleResponseSchema,
  WriteGitBranchNameRequestSchema,
  WriteGitBranchNameResponseSchema,
  WriteGitCommitMessageRequestSchema,
  WriteGitCommitMessageResponseSchema
} from "../../src/gen/aiserver/v1/aiserver_pb.js"
import type { RouterConfig } from "../../src/llm/Router.js"
import { budgetFor } from "../../src/Naming.js"
import { outputAllowance, quickRouterConfig, REASONING_ALLOWANCE } from "../../src/naming/Ask.js"
import * as Commits from "../../src/naming/Commits.js"
import { changedFiles, fileSections, truncateDiffs } from "../../src/naming/Diffs.js"
import * as Titles from "../../src/naming/Titles.js"
import * as Store from "../../src/Store.js"
import * as SideRpcs from "../../src/transport/SideRpcs.js"
import { sideServer } from "../support/SideServer.js"

const fileDiff = (path: string, lines: number, line = "+ a changed line") =>
  [`diff --git a/${path} b/${path}`, "index 1111111..2222222 100644", `--- a/${path}`, `+++ b/${path}`, `@@ -1,${lines} +1,${lines} @@`, ...Array.from({ length: lines }, () => line)].join("\n")

describe("chat titles", () => {
  it("a model's answer becomes one trimmed line without quotes, label, markdown or trailing period", () => {
    assert.strictEqual(Titles.cleanTitle("  \"Fix login redirect loop.\"  \nBecause the user asked"), "Fix login redirect loop")
    assert.strictEqual(Titles.cleanTitle("Title: **Refactor the store**"), "Refactor the store")
    assert.strictEqual(Titles.cleanTitle("\u201CAdd dark mode toggle\u201D"), "Add dark mode toggle")
    assert.strictEqual(Titles.cleanTitle("```\nSet up CI\n```"), "Set up CI")
    assert.strictEqual(Titles.cleanTitle("   \n  \n"), undefined)
    assert.strictEqual(Titles.cleanTitle("\"\""), undefined)
  })

  it("a long answer is cut at a word boundary to at most 60 characters", () => {
    const title = Titles.cleanTitle("Investigate why the nightly integration build fails on the arm64 runners since Tuesday")!
    assert.isAtMost(title.length, Titles.TITLE_MAX_CHARS)
    assert.strictEqual(title, "Investigate why the nightly integration build fails on the")
  })

  it("the fallback title is the first line with words, markdown and a slash command gone, cut near 48 characters", () => {
    assert.strictEqual(Titles.fallbackTitle("## Please fix the **flaky** test in `Store.test.ts`\nmore details"), "Please fix the flaky test in Store.test.ts")
    assert.strictEqual(Titles.fallbackTitle("/review check the [auth module](src/auth.ts) for races"), "Check the auth module for races")
    assert.strictEqual(Titles.fallbackTitle("```ts\nconst x = 1\n```\nwhy does this not compile?"), "Why does this not compile?")
    const long = Titles.fallbackTitle("refactor the conversation store so that segments are loaded lazily and cached")
    assert.isAtMost(long.length, Titles.FALLBACK_TITLE_MAX_CHARS)
    assert.strictEqual(long, "Refactor the conversation store so that segments")
  })

  it("a message with nothing usable is 'New chat'; a bare slash command names the chat after itself", () => {
    assert.strictEqual(Titles.fallbackTitle(""), Titles.EMPTY_TITLE)
    assert.strictEqual(Titles.fallbackTitle("   \n\t"), Titles.EMPTY_TITLE)
    assert.strictEqual(Titles.fallbackTitle("```\n\n```"), Titles.EMPTY_TITLE)
    assert.strictEqual(Titles.fallbackTitle("/fix-tests"), "Fix tests")
  })

  it("the title request is bounded: the instruction and at most the message's opening", () => {
    const request = Titles.titleRequest("x".repeat(50_000))
    assert.strictEqual(request.systemPrompt, Titles.TITLE_INSTRUCTION)
    assert.deepStrictEqual(request.tools, [])
    const text = (request.messages[0]!.content[0] as { text: string }).text
    assert.isAtMost(text.length, Titles.TITLE_INPUT_MAX_CHARS + 100)
  })
})

describe("diffs", () => {
  it("a diff splits into one section per file, named by its headers (added, deleted, plain diffs too)", () => {
    const added = "diff --git a/new.ts b/new.ts\nnew file mode 100644\n--- /dev/null\n+++ b/new.ts\n@@ -0,0 +1 @@\n+x"
    const deleted = "diff --git a/old.ts b/old.ts\ndeleted file mode 100644\n--- a/old.ts\n+++ /dev/null\n@@ -1 +0,0 @@\n-x"
    const sections = fileSections(`${fileDiff("src/a.ts", 2)}\n${added}\n${deleted}`)
    assert.deepStrictEqual(sections.map((s) => s.path), ["src/a.ts", "new.ts", "old.ts"])
    assert.deepStrictEqual(fileSections("--- a/x.md\n+++ b/x.md\n@@ -1 +1 @@\n-a\n+b").map((s) => s.path), ["x.md"])
    assert.deepStrictEqual(changedFiles([fileDiff("a.ts", 1), fileDiff("a.ts", 1), fileDiff("b.ts", 1)]), ["a.ts", "b.ts"])
    assert.deepStrictEqual(fileSections("  \n"), [])
  })

  it("the cut keeps whole sections first, then heads of the rest, then names; the same input gives the same text", () => {
    const small = fileDiff("small.ts", 5)
    const huge = fileDiff("huge.ts", 3_000)
    const also = fileDiff("also.ts", 5)
    const out = truncateDiffs([small, huge, also], 2_000)
    assert.isAtMost(out.length, 2_200)
    assert.include(out, small)
    assert.include(out, also)
    assert.include(out, "diff --git a/huge.ts b/huge.ts")
    assert.match(out, /\[\.\.\. \d+ more characters of this diff left out\]/)
    assert.strictEqual(truncateDiffs([small, huge, also], 2_000), out)
    // Under the budget, the text is the diffs themselves.
    assert.strictEqual(truncateDiffs([small, also], 24_000), `${small}\n${also}`)
  })

  it("files that get no room at all are named, at most 40 of them", () => {
    const many = Array.from({ length: 60 }, (_, i) => fileDiff(`f${i}.ts`, 40))
    const out = truncateDiffs(many, 3_000)
    assert.match(out, /\[diffs of \d+ more files left out: f\d+\.ts, /)
    assert.match(out, / and \d+ more\]$/)
    assert.isAtMost(out.length, 3_000 + 800)
  })
})

describe("commit messages and branch names", () => {
  it("a commit message keeps a subject under 72 characters and a short body, fences and quotes gone", () => {
    assert.strictEqual(Commits.cleanCommitMessage("```\nfeat: add chat titles.\n\n\n\nTitles come from the user's model.\n```"), "feat: add chat titles\n\nTitles come from the user's model.")
    assert.strictEqual(Commits.cleanCommitMessage("\"fix: handle empty diffs\""), "fix: handle empty diffs")
    const long = Commits.cleanCommitMessage(`refactor: ${"split the store into smaller modules ".repeat(4)}`)!
    assert.isAtMost(long.length, Commits.SUBJECT_MAX_CHARS)
    assert.strictEqual(Commits.cleanCommitMessage(" \n "), undefined)
  })

  it("the fallback commit message names the one changed file, or counts them", () => {
    assert.strictEqual(Commits.fallbackCommitMessage([fileDiff("src/Naming.ts", 2)]), "Update src/Naming.ts")
    assert.strictEqual(Commits.fallbackCommitMessage([fileDiff("a.ts", 1), fileDiff("b.ts", 1)]), "Update 2 files")
    assert.strictEqual(Commits.fallbackCommitMessage([`${fileDiff("a.ts", 1)}\n${fileDiff("b.ts", 1)}\n${fileDiff("c.ts", 1)}`]), "Update 3 files")
    assert.strictEqual(Commits.fallbackCommitMessage([]), "Update files")
    const deep = `${"very/".repeat(20)}deep.ts`
    assert.strictEqual(Commits.fallbackCommitMessage([fileDiff(deep, 1)]), "Update deep.ts")
  })

  it("the commit request carries the recent messages and the diff cut to its budget", () => {
    const request = Commits.commitRequest([fileDiff("huge.ts", 5_000)], ["feat: one", "", "fix: two"], 24_000)
    const text = (request.messages[0]!.content[0] as { text: string }).text
    assert.include(text, "- feat: one\n- fix: two")
    assert.isAtMost(text.length, 24_000 + 400)
  })

  it("a branch name is kebab-case lowercase ASCII of at most 40 characters, with a known prefix kept", () => {
    assert.strictEqual(Commits.cleanBranchName("`Feature/Add Chat Titles`"), "feat/add-chat-titles")
    assert.strictEqual(Commits.cleanBranchName("git checkout -b fix/Ünïcode_names!!"), "fix/unicode-names")
    assert.strictEqual(Commits.cleanBranchName("Branch name: improve the naming of branches and commits in the source control view"), "improve-the-naming-of-branches-and")
    assert.isAtMost(Commits.cleanBranchName("feat/" + "word-".repeat(30))!.length, Commits.BRANCH_MAX_CHARS)
    assert.strictEqual(Commits.cleanBranchName("!!!"), undefined)
  })

  it("the fallback branch name comes from the first changed file, else 'update'", () => {
    assert.strictEqual(Commits.fallbackBranchName(fileDiff("src/transport/SideRpcs.ts", 1)), "update-siderpcs")
    assert.strictEqual(Commits.fallbackBranchName(""), "update")
  })
})

describe("the bounded call's settings", () => {
  const config: RouterConfig = {
    providers: [
      { id: "oa", api: "openai-responses", baseUrl: "http://x/v1", apiKey: Redacted.make("k"), headers: {}, extraBody: {}, compat: {} },
      { id: "an", api: "anthropic", baseUrl: "http://y/v1", apiKey: Redacted.make("k"), headers: {}, extraBody: {}, compat: {} }
    ],
    models: [
      { id: "gpt", provider: "oa", upstreamModel: "gpt-5", thinking: { effort: "high" } },
      { id: "claude", provider: "an", upstreamModel: "claude", thinking: { budgetTokens: 2048 } },
      { id: "plain", provider: "oa", upstreamModel: "gpt-4.1" }
    ]
  }

  it("thinking is off where the API allows, lowest effort where it does not; reasoning models get room to reason", () => {
    const quick = quickRouterConfig(config)
    assert.deepStrictEqual(quick.models.map((m) => m.thinking), [{ effort: "low" }, undefined, undefined])
    assert.strictEqual(quickRouterConfig(config), quick)
    assert.strictEqual(outputAllowance(config, "plain", 32), 32)
    assert.strictEqual(outputAllowance(config, "gpt", 32), 32 + REASONING_ALLOWANCE)
    assert.strictEqual(outputAllowance(config, "claude", 32), 32)
  })

  it("the budget stays within three quarters of a client's stated timeout", () => {
    assert.strictEqual(budgetFor(4_000, undefined), 4_000)
    assert.strictEqual(budgetFor(8_000, 10_000), 7_500)
    assert.strictEqual(budgetFor(8_000, 60_000), 8_000)
    assert.strictEqual(budgetFor(8_000, 0), 8_000)
  })
})

describe("chat names in the store", () => {
  it.effect("a name is set, kept with only_set_name_if_empty, replaced without it, and cleared by an empty name", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const nameOf = store.conversationName("c1")
      assert.deepStrictEqual(yield* nameOf, Option.none())
      assert.isTrue(yield* store.nameConversation("c1", "First", true))
      assert.isFalse(yield* store.nameConversation("c1", "Second", true))
      assert.deepStrictEqual(yield* nameOf, Option.some("First"))
      assert.isTrue(yield* store.nameConversation("c1", "Third", false))
      assert.deepStrictEqual(yield* nameOf, Option.some("Third"))
      assert.isFalse(yield* store.nameConversation("c1", "", true))
      assert.deepStrictEqual(yield* nameOf, Option.some("Third"))
      assert.isTrue(yield* store.nameConversation("c1", "", false))
      assert.deepStrictEqual(yield* nameOf, Option.none())
    }).pipe(Effect.provide(Store.layerMemory), Effect.orDie))
})

describe("the naming routes without a naming service", () => {
  const catalogue: SideRpcs.CatalogueOptions = { models: [], defaultModel: undefined }
  const { dispose, handler } = sideServer(catalogue)
  afterAll(() => dispose())
  const post = async (path: string, body: Uint8Array) =>
    handler(new Request(`http://localhost${path}`, { method: "POST", body, headers: { "content-type": "application/proto" } }))
  const bytes = async (response: Response) => new Uint8Array(await response.arrayBuffer())

  it("the five procedures are answered locally, even with a Cursor account", () => {
    for (
      const path of [
        "/agent.v1.AgentService/NameAgent",
        "/aiserver.v1.AiService/NameAgent",
        "/aiserver.v1.AiService/GetChatTitle",
        "/agent.v1.AgentService/UpdateConversationMetadata",
        "/aiserver.v1.AiService/WriteGitCommitMessage",
        "/aiserver.v1.AiService/WriteGitBranchName"
      ]
    ) assert.include(SideRpcs.localProcedures, path)
  })

  it("each answers its fallback; a malformed body is invalid_argument", async () => {
    const named = await post("/agent.v1.AgentService/NameAgent", toBinary(NameAgentRequestSchema, create(NameAgentRequestSchema, { userMessage: "add a dark mode toggle" })))
    assert.strictEqual(fromBinary(NameAgentResponseSchema, await bytes(named)).name, "Add a dark mode toggle")
    const titled = await post(
      "/aiserver.v1.AiService/GetChatTitle",
      toBinary(GetChatTitleRequestSchema, create(GetChatTitleRequestSchema, { conversation: [{ text: "hello there", type: ConversationMessage_MessageType.HUMAN }] }))
    )
    assert.strictEqual(fromBinary(GetChatTitleResponseSchema, await bytes(titled)).title, "Hello there")
    const committed = await post("/aiserver.v1.AiService/WriteGitCommitMessage", toBinary(WriteGitCommitMessageRequestSchema, create(WriteGitCommitMessageRequestSchema, { diffs: [fileDiff("a.ts", 1)] })))
    assert.strictEqual(fromBinary(WriteGitCommitMessageResponseSchema, await bytes(committed)).commitMessage, "Update a.ts")
    const branched = await post("/aiserver.v1.AiService/WriteGitBranchName", toBinary(WriteGitBranchNameRequestSchema, create(WriteGitBranchNameRequestSchema, { diffs: fileDiff("a.ts", 1) })))
    assert.strictEqual(fromBinary(WriteGitBranchNameResponseSchema, await bytes(branched)).branchName, "update-a")
    const metadata = await post("/agent.v1.AgentService/UpdateConversationMetadata", toBinary(UpdateConversationMetadataRequestSchema, create(UpdateConversationMetadataRequestSchema, { conversationId: "c", name: "n" })))
    assert.strictEqual(metadata.status, 200)
    const bad = await post("/agent.v1.AgentService/NameAgent", new Uint8Array([0xff, 0xff, 0xff]))
    assert.strictEqual(bad.status, 400)
    assert.strictEqual((await bad.json() as { code: string }).code, "invalid_argument")
  })
})
