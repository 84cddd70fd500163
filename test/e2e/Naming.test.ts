/**
 * Titles, chat names, commit messages and branch names through the REAL server
 * (`AppHarness`: Server.layerApp, the model router over undici, SQLite) called by the official
 * `@connectrpc/connect-node` client, with the fake provider answering, failing or stalling.
 * A model that fails or stalls yields the deterministic fallback, never an error; a stalled
 * model is given up within the budget the client's own timeout leaves (`connect-timeout-ms`).
 */
import { createClient } from "@connectrpc/connect"
import { createConnectTransport } from "@connectrpc/connect-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { AgentService } from "../../src/gen/agent/v1/agent_pb.js"
import { AiService, ConversationMessage_MessageType } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { TITLE_INSTRUCTION } from "../../src/naming/Titles.js"
import * as AppHarness from "../support/AppHarness.js"
import { get } from "../support/ConsoleSession.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

const clients = (app: AppHarness.AppHarness) => {
  const transport = createConnectTransport({ baseUrl: app.baseUrl, httpVersion: "1.1" })
  return { agent: createClient(AgentService, transport), ai: createClient(AiService, transport) }
}

/** Well inside the test's patience; the server answers within three quarters of it. */
const CLIENT_TIMEOUT_MS = 2_000

const bodyOf = (app: AppHarness.AppHarness, index: number) => JSON.parse(app.provider.requests[index]!.body) as Record<string, unknown>

const DIFF = [
  "diff --git a/src/Naming.ts b/src/Naming.ts",
  "new file mode 100644",
  "--- /dev/null",
  "+++ b/src/Naming.ts",
  "@@ -0,0 +1,2 @@",
  "+export const title = \"hello\"",
  "+export const name = \"world\""
].join("\n")

describe("naming through the real server", () => {
  it.scopedLive("NameAgent: the provider's answer is cleaned; the request was bounded and carried the user message", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const { agent } = clients(app)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("\"Fix the login redirect loop.\"\nsome chatter")))
      const answer = yield* Effect.promise(() => agent.nameAgent({ userMessage: "the login page keeps redirecting to itself, please fix" }))
      assert.strictEqual(answer.name, "Fix the login redirect loop")
      assert.strictEqual(app.provider.requests.length, 1)
      const body = bodyOf(app, 0)
      assert.strictEqual(body["max_completion_tokens"], 32)
      assert.isUndefined(body["tools"])
      const messages = body["messages"] as ReadonlyArray<{ role: string; content: unknown }>
      assert.strictEqual(messages[0]!.role, "system")
      assert.include(JSON.stringify(messages[0]!.content), TITLE_INSTRUCTION)
      assert.include(JSON.stringify(messages[1]!.content), "the login page keeps redirecting to itself")

      // The same procedure on AiService (not declared in our schema: agent.proto imports it), in Connect JSON.
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("Dark mode toggle")))
      const json = yield* Effect.promise(async () => {
        const response = await fetch(`${app.baseUrl}/aiserver.v1.AiService/NameAgent`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ userMessage: "add a dark mode toggle" })
        })
        return { status: response.status, body: await response.json() as unknown }
      })
      assert.deepStrictEqual(json, { status: 200, body: { name: "Dark mode toggle" } })
    }))

  it.scopedLive("NameAgent: a provider that fails or stalls yields the title made from the message; an empty message is 'New chat' without a model call", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const { agent } = clients(app)
      // Nothing scripted: every attempt (the retries included) is a 500.
      const failed = yield* Effect.promise(() => agent.nameAgent({ userMessage: "## Refactor the **store** module\nand more" }))
      assert.strictEqual(failed.name, "Refactor the store module")
      assert.isAtLeast(app.provider.requests.length, 1)

      app.provider.enqueue(FakeProvider.stall)
      const stalled = yield* Effect.promise(() =>
        agent.nameAgent({ userMessage: "/review check the auth module for races" }, { timeoutMs: CLIENT_TIMEOUT_MS })
      )
      assert.strictEqual(stalled.name, "Check the auth module for races")

      const before = app.provider.requests.length
      const empty = yield* Effect.promise(() => agent.nameAgent({ userMessage: "  " }))
      assert.strictEqual(empty.name, "New chat")
      assert.strictEqual(app.provider.requests.length, before)
    }))

  it.scopedLive("GetChatTitle: named from the first human message; a thinking model is asked with its thinking off", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { defaultModel: "fake-claude" } })
      const { ai } = clients(app)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.anthropic.text("Title: `Speed up the test suite`")))
      const answer = yield* Effect.promise(() =>
        ai.getChatTitle({
          conversation: [
            { text: "the tests take eight minutes, make them faster", type: ConversationMessage_MessageType.HUMAN },
            { text: "Sure, let me look.", type: ConversationMessage_MessageType.AI }
          ]
        })
      )
      assert.strictEqual(answer.title, "Speed up the test suite")
      const body = bodyOf(app, 0)
      assert.isUndefined(body["thinking"])
      assert.strictEqual(body["max_tokens"], 32)
      assert.include(JSON.stringify(body["messages"]), "the tests take eight minutes")
      assert.notInclude(JSON.stringify(body["messages"]), "let me look")

      const empty = yield* Effect.promise(() => ai.getChatTitle({}))
      assert.strictEqual(empty.title, "New chat")
    }))

  it.scopedLive("UpdateConversationMetadata: the name is kept (only_set_name_if_empty respected) and the console lists the chat under it", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const { agent } = clients(app)
      const conversationId = "conv-named"
      const nameOf = app.store.conversationName(conversationId).pipe(Effect.orDie)

      // Before the first turn: kept all the same.
      const answered = yield* Effect.promise(() => agent.updateConversationMetadata({ conversationId, name: "First name" }))
      assert.strictEqual(answered.$typeName, "agent.v1.UpdateConversationMetadataResponse")
      assert.deepStrictEqual(yield* nameOf, Option.some("First name"))
      yield* Effect.promise(() => agent.updateConversationMetadata({ conversationId, name: "Ignored", onlySetNameIfEmpty: true }))
      assert.deepStrictEqual(yield* nameOf, Option.some("First name"))
      yield* Effect.promise(() => agent.updateConversationMetadata({ conversationId, name: "  Renamed   chat  " }))
      assert.deepStrictEqual(yield* nameOf, Option.some("Renamed chat"))
      // Workspace paths only: the name stays.
      yield* Effect.promise(() => agent.updateConversationMetadata({ conversationId, workspacePaths: ["/tmp/x"] }))
      assert.deepStrictEqual(yield* nameOf, Option.some("Renamed chat"))
      // A name for a chat that has none, with the flag: set.
      yield* Effect.promise(() => agent.updateConversationMetadata({ conversationId: "conv-other", name: "Other", onlySetNameIfEmpty: true }))
      assert.deepStrictEqual(yield* app.store.conversationName("conv-other").pipe(Effect.orDie), Option.some("Other"))

      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("ok")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId, text: "the first user message" })))
      const listed = (yield* app.store.conversations(10, conversationId).pipe(Effect.orDie))[0]!
      assert.strictEqual(listed.title, "Renamed chat")
      const overview = yield* get(app, "/console")
      assert.include(overview.body, "Renamed chat")
    }))

  it.scopedLive("WriteGitCommitMessage: the model's message from the diff and recent messages; a stalled or failing model yields 'Update <file>'", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const { ai } = clients(app)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("```\nfeat: add the naming module.\n\nTitles come from the user's model.\n```")))
      const answer = yield* Effect.promise(() => ai.writeGitCommitMessage({ diffs: [DIFF], previousCommitMessages: ["fix: earlier change"] }))
      assert.strictEqual(answer.commitMessage, "feat: add the naming module\n\nTitles come from the user's model.")
      const prompt = JSON.stringify(bodyOf(app, 0)["messages"])
      assert.include(prompt, "export const title")
      assert.include(prompt, "fix: earlier change")

      app.provider.enqueue(FakeProvider.stall)
      const stalled = yield* Effect.promise(() => ai.writeGitCommitMessage({ diffs: [DIFF] }, { timeoutMs: CLIENT_TIMEOUT_MS }))
      assert.strictEqual(stalled.commitMessage, "Update src/Naming.ts")

      const failed = yield* Effect.promise(() => ai.writeGitCommitMessage({ diffs: [DIFF, DIFF.replaceAll("Naming", "Other")] }))
      assert.strictEqual(failed.commitMessage, "Update 2 files")
    }))

  it.scopedLive("WriteGitBranchName: the model's name in kebab-case; a failing model yields one from the first changed file", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const { ai } = clients(app)
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("feat/Add Naming Module")))
      const answer = yield* Effect.promise(() => ai.writeGitBranchName({ diffs: DIFF, context: "chat titles" }))
      assert.strictEqual(answer.branchName, "feat/add-naming-module")
      assert.include(JSON.stringify(bodyOf(app, 0)["messages"]), "chat titles")

      const failed = yield* Effect.promise(() => ai.writeGitBranchName({ diffs: DIFF }, { timeoutMs: CLIENT_TIMEOUT_MS }))
      assert.strictEqual(failed.branchName, "update-naming")
    }))
})
