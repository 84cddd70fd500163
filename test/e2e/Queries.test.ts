/**
 * Questions to the client end to end (real server, SQLite file, fake provider, reference
 * client answering as the user would): CreatePlan and the Build that follows, AskQuestion at
 * once and answered later, SwitchMode applied from the next request, and the bad answers
 * (unknown id, wrong kind, a second answer, after a cancel) that must change nothing. What the
 * provider received is read back: the answers reach the model as tool results in call order.
 */
import { fromBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { rmSync } from "node:fs"
import { tmpdir } from "node:os"
import type * as Dialect from "../../src/Dialect.js"
import { AgentMode, ConversationPlanSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { ConversationStateStructure, InteractionQuery } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import { openRawRunSse, toHex } from "../support/CursorClient.js"
import type { CursorClient, CursorClientOptions, InteractionAnswer, Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, endCode } from "../support/Transcripts.js"
import { loopbackServer } from "../web/LoopbackServer.js"

const { text, toolCall } = FakeProvider.openAiChat

interface ChatBody {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown; readonly tool_call_id?: string }>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string } }>
}
const bodyOf = (app: AppHarness.AppHarness, index: number): ChatBody => JSON.parse(app.provider.requests[index]!.body) as ChatBody
const toolNames = (app: AppHarness.AppHarness, index: number) => (bodyOf(app, index).tools ?? []).map((tool) => tool.function.name)
const contentOf = (message: { readonly content: unknown } | undefined): string =>
  typeof message?.content === "string" ? message.content : JSON.stringify(message?.content ?? "")
const lastMessage = (app: AppHarness.AppHarness, index: number) => {
  const messages = bodyOf(app, index).messages
  return messages[messages.length - 1]
}
const systemOf = (app: AppHarness.AppHarness, index: number) => contentOf(bodyOf(app, index).messages[0])

const lastCheckpoint = (transcript: Transcript): ConversationStateStructure => {
  const checkpoint = transcript.checkpoints[transcript.checkpoints.length - 1]
  assert.isDefined(checkpoint, "the turn published no checkpoint")
  return checkpoint!
}

const queries = (transcript: Transcript): ReadonlyArray<InteractionQuery> =>
  transcript.frames.flatMap((frame) => (frame.message.message.case === "interactionQuery" ? [frame.message.message.value] : []))

const completed = (transcript: Transcript, toolCallId: string) => {
  const frame = transcript.frames.find((f) => f.event.kind === "tool_call_completed" && f.event.callId === toolCallId)
  assert.isDefined(frame, `no tool_call_completed for ${toolCallId}`)
  const m = frame!.message.message
  if (m.case !== "interactionUpdate" || m.value.message.case !== "toolCallCompleted") throw new Error("not a tool_call_completed")
  return m.value.message.value.toolCall!
}

/** A harness and a client that answers every query with `answer` (undefined: leave it waiting). */
const setup = (answer: (query: InteractionQuery) => InteractionAnswer | undefined, options: Omit<CursorClientOptions, "baseUrl"> = {}, config: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const app = yield* AppHarness.make({ config })
    const client = yield* clientFor(app, { turnTimeoutMs: 15_000, interactions: answer, ...options })
    return { app, client }
  })

const PLAN_ARGS = {
  name: "Add caching",
  overview: "Cache the parsed config.",
  plan: "# Add caching\n\n1. Add a cache in src/config.ts.\n2. Test it.",
  todos: [{ id: "t1", content: "Add the cache" }, { id: "t2", content: "Test it" }]
}

describe("Interaction queries end to end", () => {
  it.scopedLive("CreatePlan in plan mode: the query carries the plan, the client's answer becomes the tool result, the checkpoint keeps the plan, its registry entry, its todos and plan mode", () =>
    Effect.gen(function*() {
      const { app, client } = yield* setup((query) =>
        query.query.case === "createPlanRequestQuery"
          ? { case: "createPlanRequestResponse", value: { result: { planUri: "file:///home/u/.cursor/plans/add-caching.plan.md", result: { case: "success", value: {} } } } }
          : undefined
      )
      app.provider.enqueue(FakeProvider.sse(toolCall("call-plan", "CreatePlan", JSON.stringify(PLAN_ARGS))), FakeProvider.sse(text("The plan is ready for review.")))
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-plan", text: "plan a cache", mode: "plan" }))
      assertCleanOk(turn)

      // Plan mode: read-only tools with CreatePlan; nothing that writes.
      assert.deepStrictEqual(toolNames(app, 0), ["Read", "Grep", "Glob", "Ls", "ReadLints", "TodoWrite", "CreatePlan", "AskQuestion", "SwitchMode", "WebFetch", "Task"])
      assert.include(systemOf(app, 0), "plan mode")

      const [query] = queries(turn)
      assert.strictEqual(query?.query.case, "createPlanRequestQuery")
      if (query?.query.case !== "createPlanRequestQuery") return
      assert.strictEqual(query.query.value.toolCallId, "call-plan")
      assert.strictEqual(query.query.value.args?.name, "Add caching")
      assert.strictEqual(query.query.value.args?.plan, PLAN_ARGS.plan)
      assert.deepStrictEqual(query.query.value.args?.todos.map((todo) => [todo.id, todo.content, todo.status]), [["t1", "Add the cache", 1], ["t2", "Test it", 1]])

      const typed = completed(turn, "call-plan")
      assert.strictEqual(typed.tool.case, "createPlanToolCall")
      if (typed.tool.case === "createPlanToolCall") assert.strictEqual(typed.tool.value.result?.result.case, "success")

      // The model reads the client's answer as the tool result, then answers.
      const result = lastMessage(app, 1)
      assert.strictEqual(result?.role, "tool")
      assert.include(contentOf(result), "was created and shown to the user (file:///home/u/.cursor/plans/add-caching.plan.md)")

      const checkpoint = lastCheckpoint(turn)
      assert.strictEqual(checkpoint.mode, AgentMode.PLAN)
      assert.isDefined(checkpoint.plan)
      const planBlob = client.blobs.get(toHex(checkpoint.plan!))
      assert.isDefined(planBlob, "the plan blob was not stored on the client before the checkpoint named it")
      assert.strictEqual(fromBinary(ConversationPlanSchema, planBlob!).plan, PLAN_ARGS.plan)
      assert.deepStrictEqual(Object.values(checkpoint.plans).map((entry) => [entry.id, entry.path]), [["plan-call-plan", "file:///home/u/.cursor/plans/add-caching.plan.md"]])
      assert.strictEqual(checkpoint.todos.length, 2)
    }))

  it.scopedLive("Build (execute_plan_action): an agent turn on the plan as the user saved it, with the agent's tools; the checkpoint says agent mode", () =>
    Effect.gen(function*() {
      const { app, client } = yield* setup(() => undefined)
      app.provider.enqueue(FakeProvider.sse(text("Building it now.")))
      const built = yield* Effect.promise(() =>
        client.run({
          conversationId: "conv-build",
          text: "",
          action: {
            case: "executePlanAction",
            value: {
              plan: { plan: "the plan as the model wrote it" },
              planFileContent: "# Add caching (edited by the user)\n\n1. Add a cache.",
              planFilePath: "/home/u/.cursor/plans/add-caching.plan.md",
              executionMode: AgentMode.AGENT,
              planId: "plan-call-plan",
              kickoffMessageId: "kickoff-1"
            }
          }
        })
      )
      assertCleanOk(built)
      assert.includeMembers(toolNames(app, 0), ["Shell", "Write", "StrReplace", "Delete"])
      assert.notInclude(toolNames(app, 0), "CreatePlan")
      assert.include(systemOf(app, 0), "agent mode")
      const kickoff = contentOf(lastMessage(app, 0))
      assert.include(kickoff, "Build the plan (/home/u/.cursor/plans/add-caching.plan.md)")
      assert.include(kickoff, "(edited by the user)")
      assert.notInclude(kickoff, "as the model wrote it")
      assert.strictEqual(lastCheckpoint(built).mode, AgentMode.AGENT)
    }))

  it.scopedLive("AskQuestion: the user's picks and typed answer reach the model as the tool result; a decline and a client error say so", () =>
    Effect.gen(function*() {
      const answers: Array<InteractionAnswer> = [
        {
          case: "askQuestionInteractionResponse",
          value: { result: { result: { case: "success", value: { answers: [{ questionId: "db", selectedOptionIds: ["sqlite"], freeformText: "keep it local" }] } } } }
        },
        { case: "askQuestionInteractionResponse", value: { result: { result: { case: "rejected", value: { reason: "later" } } } } },
        { case: "askQuestionInteractionResponse", value: { result: { result: { case: "error", value: { errorMessage: "ui closed" } } } } }
      ]
      const { app, client } = yield* setup(() => answers.shift())
      const ask = JSON.stringify({
        title: "Storage",
        questions: [{ id: "db", prompt: "Which database?", options: [{ id: "sqlite", label: "SQLite" }, { id: "pg", label: "PostgreSQL" }] }]
      })
      app.provider.enqueue(
        FakeProvider.sse(toolCall("call-ask", "AskQuestion", ask)),
        FakeProvider.sse(text("SQLite it is.")),
        FakeProvider.sse(toolCall("call-ask-2", "AskQuestion", ask)),
        FakeProvider.sse(text("I will decide.")),
        FakeProvider.sse(toolCall("call-ask-3", "AskQuestion", ask)),
        FakeProvider.sse(text("No answer, going on."))
      )
      const one = yield* Effect.promise(() => client.run({ conversationId: "conv-ask", text: "set up storage" }))
      assertCleanOk(one)
      const [query] = queries(one)
      assert.strictEqual(query?.query.case, "askQuestionInteractionQuery")
      assert.strictEqual(contentOf(lastMessage(app, 1)), "The user answered:\n- Which database?: SQLite; \"keep it local\"")
      const typed = completed(one, "call-ask")
      assert.strictEqual(typed.tool.case, "askQuestionToolCall")

      const two = yield* Effect.promise(() => client.run({ conversationId: "conv-ask", text: "again", conversationState: lastCheckpoint(one) }))
      assertCleanOk(two)
      assert.include(contentOf(lastMessage(app, 3)), "The user declined to answer (later)")
      const three = yield* Effect.promise(() => client.run({ conversationId: "conv-ask", text: "once more", conversationState: lastCheckpoint(two) }))
      assertCleanOk(three)
      assert.include(contentOf(lastMessage(app, 5)), "The questions could not be asked: ui closed")
    }))

  it.scopedLive("AskQuestion with run_async: answered `async` at once, the model goes on; the late answers (async_ask_question_completion_action) start a turn that hands them over", () =>
    Effect.gen(function*() {
      const { app, client } = yield* setup((query) =>
        query.query.case === "askQuestionInteractionQuery" ? { case: "askQuestionInteractionResponse", value: { result: { result: { case: "async", value: {} } } } } : undefined
      )
      const args = {
        title: "Naming",
        questions: [{ id: "name", prompt: "What should the module be called?", options: [{ id: "a", label: "cache" }, { id: "b", label: "memo" }] }],
        run_async: true
      }
      app.provider.enqueue(FakeProvider.sse(toolCall("call-async", "AskQuestion", JSON.stringify(args))), FakeProvider.sse(text("I will start meanwhile.")))
      const one = yield* Effect.promise(() => client.run({ conversationId: "conv-async", text: "add a cache module" }))
      assertCleanOk(one)
      const [query] = queries(one)
      if (query?.query.case !== "askQuestionInteractionQuery" || query.query.value.args === undefined) throw new Error("no AskQuestion query")
      const asked = query.query.value.args
      assert.isTrue(asked.runAsync)
      assert.strictEqual(query.query.value.args?.asyncOriginalToolCallId, "call-async")
      assert.include(contentOf(lastMessage(app, 1)), "who will answer later")

      app.provider.enqueue(FakeProvider.sse(text("Calling it memo.")))
      const late = yield* Effect.promise(() =>
        client.run({
          conversationId: "conv-async",
          text: "",
          conversationState: lastCheckpoint(one),
          action: {
            case: "asyncAskQuestionCompletionAction",
            value: {
              originalToolCallId: "call-async",
              originalArgs: asked,
              result: { result: { case: "success", value: { answers: [{ questionId: "name", selectedOptionIds: ["b"], freeformText: "" }] } } }
            }
          }
        })
      )
      assertCleanOk(late)
      const handed = lastMessage(app, 2)
      assert.strictEqual(handed?.role, "user")
      assert.strictEqual(contentOf(handed), "Here are my answers to the questions you asked (AskQuestion call-async).\nThe user answered:\n- What should the module be called?: memo")
      // The late answers continue the same history: the first turn's request is a prefix of this one's.
      assert.deepStrictEqual(bodyOf(app, 2).messages.slice(0, bodyOf(app, 1).messages.length + 1).length, bodyOf(app, 1).messages.length + 1)
    }))

  it.scopedLive("SwitchMode approved in plan mode: the next request has agent mode's prompt and tools, the checkpoint says agent; declined: the mode and tools stay", () =>
    Effect.gen(function*() {
      const verdicts: Array<InteractionAnswer> = [
        { case: "switchModeRequestResponse", value: { result: { case: "approved", value: {} } } },
        { case: "switchModeRequestResponse", value: { result: { case: "rejected", value: { reason: "stay in plan" } } } }
      ]
      const { app, client } = yield* setup(() => verdicts.shift())
      const toAgent = JSON.stringify({ target_mode_id: "agent", explanation: "The plan is approved; time to edit files." })
      app.provider.enqueue(FakeProvider.sse(toolCall("call-switch", "SwitchMode", toAgent)), FakeProvider.sse(text("Now in agent mode.")))
      const one = yield* Effect.promise(() => client.run({ conversationId: "conv-switch", text: "go ahead", mode: "plan" }))
      assertCleanOk(one)
      const [query] = queries(one)
      if (query?.query.case !== "switchModeRequestQuery") throw new Error("no SwitchMode query")
      assert.strictEqual(query.query.value.args?.targetModeId, "agent")
      assert.notInclude(toolNames(app, 0), "Shell")
      assert.includeMembers(toolNames(app, 1), ["Shell", "Write", "StrReplace"])
      assert.include(systemOf(app, 1), "agent mode")
      // The history is untouched by the switch: the second request extends the first's messages.
      assert.deepStrictEqual(bodyOf(app, 1).messages.slice(1, bodyOf(app, 0).messages.length), bodyOf(app, 0).messages.slice(1))
      assert.strictEqual(lastCheckpoint(one).mode, AgentMode.AGENT)
      const typed = completed(one, "call-switch")
      if (typed.tool.case !== "switchModeToolCall") throw new Error("not a switch mode card")
      assert.deepStrictEqual([typed.tool.value.result?.result.case, (typed.tool.value.result?.result.value as { fromModeId?: string } | undefined)?.fromModeId], ["success", "plan"])

      app.provider.enqueue(FakeProvider.sse(toolCall("call-switch-2", "SwitchMode", toAgent)), FakeProvider.sse(text("Staying.")))
      const two = yield* Effect.promise(() => client.run({ conversationId: "conv-switch-2", text: "go ahead", mode: "plan" }))
      assertCleanOk(two)
      assert.notInclude(toolNames(app, 3), "Shell")
      assert.include(contentOf(lastMessage(app, 3)), "The user kept plan mode (stay in plan)")
      assert.strictEqual(lastCheckpoint(two).mode, AgentMode.PLAN)
    }))

  it.scopedLive("bad answers change nothing: an unknown id, the wrong kind, then the right answer once; a second answer is acknowledged and ignored", () =>
    Effect.gen(function*() {
      const { app, client } = yield* setup(() => undefined)
      app.provider.enqueue(
        FakeProvider.sse(toolCall("call-q", "AskQuestion", JSON.stringify({ questions: [{ id: "q", prompt: "Yes?", options: [{ id: "y", label: "yes" }] }] }))),
        FakeProvider.sse(text("Done."))
      )
      const turn = client.turn({ conversationId: "conv-bad", text: "ask me" })
      const frame = yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "interaction_query"))
      const id = frame.event.kind === "interaction_query" ? frame.event.id : -1
      const yes: InteractionAnswer = { case: "askQuestionInteractionResponse", value: { result: { result: { case: "success", value: { answers: [{ questionId: "q", selectedOptionIds: ["y"], freeformText: "" }] } } } } }
      assert.strictEqual(yield* Effect.promise(() => turn.answerQuery(id + 41, yes)), 200)
      assert.strictEqual(yield* Effect.promise(() => turn.answerQuery(id, { case: "switchModeRequestResponse", value: { result: { case: "approved", value: {} } } })), 200)
      // Still waiting: no second model call yet.
      yield* Effect.sleep("150 millis")
      assert.strictEqual(app.provider.requests.length, 1)
      assert.strictEqual(yield* Effect.promise(() => turn.answerQuery(id, yes)), 200)
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)
      assert.strictEqual(app.provider.requests.length, 2)
      const toolResults = bodyOf(app, 1).messages.filter((message) => message.role === "tool")
      assert.strictEqual(toolResults.length, 1)
      assert.strictEqual(contentOf(toolResults[0]), "The user answered:\n- Yes?: yes")
      // A second answer after the turn: acknowledged, nothing more asked of the model.
      assert.strictEqual(yield* Effect.promise(() => turn.answerQuery(id, yes)), 200)
      yield* Effect.sleep("100 millis")
      assert.strictEqual(app.provider.requests.length, 2)
    }))

  it.scopedLive("a cancel while a question waits ends the turn canceled; the late answer is acknowledged and starts nothing", () =>
    Effect.gen(function*() {
      const { app, client } = yield* setup(() => undefined)
      app.provider.enqueue(FakeProvider.sse(toolCall("call-c", "AskQuestion", JSON.stringify({ questions: [{ id: "q", prompt: "Which?", options: [{ id: "a", label: "A" }] }] }))))
      const turn = client.turn({ conversationId: "conv-cancel-q", text: "ask me" })
      const frame = yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "interaction_query"))
      const id = frame.event.kind === "interaction_query" ? frame.event.id : -1
      yield* Effect.promise(() => turn.cancel())
      const transcript = yield* Effect.promise(() => turn.done)
      assert.strictEqual(endCode(transcript), "canceled")
      const status = yield* Effect.promise(() =>
        turn.answerQuery(id, { case: "askQuestionInteractionResponse", value: { result: { result: { case: "success", value: { answers: [] } } } } })
      )
      assert.strictEqual(status, 200)
      yield* Effect.sleep("100 millis")
      assert.strictEqual(app.provider.requests.length, 1)
    }))

  it.scopedLive("WebFetch: approved, the server fetches the page and the model reads it as Markdown; declined, nothing is fetched; a loopback address not allowed is refused with the reason", () =>
    Effect.gen(function*() {
      const site = yield* loopbackServer((_request, response) => {
        response.writeHead(200, { "content-type": "text/html; charset=utf-8" })
        response.end("<html><head><title>Release notes</title><script>track()</script></head><body><nav>menu</nav><main><h1>v2.0</h1><p>Adds <b>streaming</b>.</p></main></body></html>")
      })
      const other = yield* loopbackServer((_request, response) => response.end("secret"))
      const verdicts: Array<InteractionAnswer> = [
        { case: "webFetchRequestResponse", value: { result: { case: "approved", value: {} } } },
        { case: "webFetchRequestResponse", value: { result: { case: "rejected", value: { reason: "not that site" } } } },
        { case: "webFetchRequestResponse", value: { result: { case: "approved", value: {} } } }
      ]
      const { app, client } = yield* setup(() => verdicts.shift(), {}, { web: { fetch: { allowHosts: [`127.0.0.1:${site.port}`] } } })
      const page = `${site.origin}/notes`
      app.provider.enqueue(
        FakeProvider.sse(toolCall("call-f1", "WebFetch", JSON.stringify({ url: page }))),
        FakeProvider.sse(toolCall("call-f2", "WebFetch", JSON.stringify({ url: page }))),
        FakeProvider.sse(toolCall("call-f3", "WebFetch", JSON.stringify({ url: `${other.origin}/` }))),
        FakeProvider.sse(text("Read it."))
      )
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-fetch", text: "what is new in v2?" }))
      assertCleanOk(turn)
      const [first, second, third] = queries(turn)
      assert.strictEqual(first?.query.case, "webFetchRequestQuery")
      if (first?.query.case === "webFetchRequestQuery") assert.strictEqual(first.query.value.args?.url, page)
      assert.isDefined(second)
      assert.isDefined(third)

      const fetched = contentOf(lastMessage(app, 1))
      assert.include(fetched, `Contents of ${page}:`)
      assert.include(fetched, "v2.0")
      assert.include(fetched, "**streaming**")
      assert.notInclude(fetched, "track()")
      const typed = completed(turn, "call-f1")
      if (typed.tool.case !== "webFetchToolCall") throw new Error("not a web fetch card")
      assert.strictEqual(typed.tool.value.result?.result.case, "success")

      assert.include(contentOf(lastMessage(app, 2)), `The user did not allow fetching ${page} (not that site)`)
      assert.strictEqual(site.requests(), 1, "a declined fetch reached the site")

      const refused = lastMessage(app, 3)
      assert.include(contentOf(refused), "Refused")
      assert.include(contentOf(refused), "127.0.0.1")
      assert.strictEqual(other.requests(), 0, "a refused address was connected to")
    }))

  it.scopedLive("WebSearch through a configured SearXNG: approved, the results reach the model; with no backend configured the tool is not offered", () =>
    Effect.gen(function*() {
      const searx = yield* loopbackServer((request, response) => {
        const query = new URL(request.url ?? "/", "http://x").searchParams.get("q")
        response.writeHead(200, { "content-type": "application/json" })
        response.end(JSON.stringify({ results: [{ title: "Effect 3.22 released", url: "https://effect.website/blog/3.22", content: `About ${query}` }] }))
      })
      const { app, client } = yield* setup(
        () => ({ case: "webSearchRequestResponse", value: { result: { case: "approved", value: {} } } }),
        {},
        { web: { search: { backend: "searxng", url: searx.origin } } }
      )
      app.provider.enqueue(FakeProvider.sse(toolCall("call-s", "WebSearch", JSON.stringify({ search_term: "effect 3.22" }))), FakeProvider.sse(text("Found it.")))
      const turn = yield* Effect.promise(() => client.run({ conversationId: "conv-search", text: "latest effect?", mode: "ask" }))
      assertCleanOk(turn)
      assert.deepStrictEqual(toolNames(app, 0), ["Read", "Grep", "Glob", "Ls", "ReadLints", "AskQuestion", "SwitchMode", "WebSearch", "WebFetch"])
      assert.strictEqual(queries(turn)[0]?.query.case, "webSearchRequestQuery")
      assert.strictEqual(contentOf(lastMessage(app, 1)), "Results for \"effect 3.22\":\n\n1. Effect 3.22 released\nhttps://effect.website/blog/3.22\nAbout effect 3.22")
      const typed = completed(turn, "call-s")
      if (typed.tool.case !== "webSearchToolCall") throw new Error("not a web search card")
      assert.deepStrictEqual(typed.tool.value.result?.result.case, "success")

      // The client may turn the web tools off: then neither is offered, backend or not.
      app.provider.enqueue(FakeProvider.sse(text("ok")))
      const off = yield* Effect.promise(() => client.run({ conversationId: "conv-search-off", text: "hi", requestContext: { webSearchEnabled: false, webFetchEnabled: false } }))
      assertCleanOk(off)
      assert.notInclude(toolNames(app, 2), "WebSearch")
      assert.notInclude(toolNames(app, 2), "WebFetch")
    }))

  it.scopedLive("every mode gets its own tools and guidance in the provider body, and the checkpoint records the real mode; a custom mode's skill is its instructions", () =>
    Effect.gen(function*() {
      const { app, client } = yield* setup(() => undefined)
      const expected = {
        agent: [AgentMode.AGENT, "agent mode", true],
        ask: [AgentMode.ASK, "ask mode", false],
        plan: [AgentMode.PLAN, "plan mode", false],
        debug: [AgentMode.DEBUG, "debug mode", true],
        triage: [AgentMode.TRIAGE, "triage mode", false],
        project: [AgentMode.PROJECT, "project mode", false],
        multitask: [AgentMode.MULTITASK, "multitask mode", true]
      } as const
      let index = 0
      for (const [mode, [agentMode, guidance, writes]] of Object.entries(expected)) {
        app.provider.enqueue(FakeProvider.sse(text("ok")))
        const turn = yield* Effect.promise(() => client.run({ conversationId: `conv-mode-${mode}`, text: "hi", mode: mode as keyof typeof expected }))
        assertCleanOk(turn)
        assert.include(systemOf(app, index), guidance, mode)
        assert.strictEqual(toolNames(app, index).includes("Shell"), writes, `${mode}: Shell offered`)
        assert.strictEqual(toolNames(app, index).includes("CreatePlan"), mode === "plan" || mode === "project", `${mode}: CreatePlan offered`)
        assert.strictEqual(lastCheckpoint(turn).mode, agentMode, mode)
        index++
      }
      app.provider.enqueue(FakeProvider.sse(text("ok")))
      const custom = yield* Effect.promise(() =>
        client.run({
          conversationId: "conv-mode-custom",
          text: "review this",
          mode: "custom",
          customModeIntent: { intent: { case: "enter", value: { id: "reviewer", label: "Reviewer", sourcePath: "/home/u/.cursor/skills/reviewer/SKILL.md" } } },
          requestContext: { agentSkills: [{ fullPath: "/home/u/.cursor/skills/reviewer/SKILL.md", content: "Review like a strict senior engineer. Never edit files.", description: "" }] }
        })
      )
      assertCleanOk(custom)
      assert.include(systemOf(app, index), "<custom_mode name=\"Reviewer\">\nReview like a strict senior engineer. Never edit files.\n</custom_mode>")
      assert.strictEqual(lastCheckpoint(custom).mode, AgentMode.CUSTOM)
    }))

  it.scopedLive("a restart while a question waits: the new process asks it again on the reattached stream, the answer completes the turn once", () =>
    Effect.gen(function*() {
      const database = `${tmpdir()}/byok-queries-${process.pid}-${Date.now()}.sqlite`
      yield* Effect.addFinalizer(() => Effect.sync(() => ["", "-wal", "-shm"].forEach((suffix) => rmSync(`${database}${suffix}`, { force: true }))))
      const provider = yield* FakeProvider.make
      const requestId = "req-restart-query"
      // The first process: the model asks, the client sees the query, then the server stops.
      const firstId = yield* Effect.scoped(Effect.gen(function*() {
        const app = yield* AppHarness.make({ provider, database })
        const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
        provider.enqueue(FakeProvider.sse(toolCall("call-r", "AskQuestion", JSON.stringify({ questions: [{ id: "q", prompt: "Go?", options: [{ id: "y", label: "yes" }] }] }))))
        const turn = client.turn({ conversationId: "conv-restart-q", text: "ask me", requestId })
        const frame = yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "interaction_query"))
        return frame.event.kind === "interaction_query" ? frame.event.id : -1
      }))
      assert.strictEqual(firstId, 1)
      // The second process on the same database: the question is asked again; answering it finishes the turn.
      const app = yield* AppHarness.make({ provider, database })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      provider.enqueue(FakeProvider.sse(text("Going.")))
      const asked = yield* Effect.promise(() => reattachAnswering(client, requestId, 2, { case: "askQuestionInteractionResponse", value: { result: { result: { case: "success", value: { answers: [{ questionId: "q", selectedOptionIds: ["y"], freeformText: "" }] } } } } }))
      assert.deepStrictEqual(asked.problems, [])
      assert.strictEqual(asked.end?._tag, "Ok")
      assert.strictEqual(asked.queries, 1)
      assert.strictEqual(provider.requests.length, 2)
      const results = bodyOf(app, 1).messages.filter((message) => message.role === "tool")
      assert.deepStrictEqual(results.map(contentOf), ["The user answered:\n- Go?: yes"])
    }))
})

/**
 * A reconnecting RunSSE after a restart that answers the first interaction query it sees with
 * `answer` and acknowledges set_blob, numbering its appends from `firstSeqno`; read to the end.
 */
const reattachAnswering = (client: CursorClient, requestId: string, firstSeqno: number, answer: InteractionAnswer) =>
  new Promise<{ readonly end: Dialect.EndStream | undefined; readonly queries: number; readonly problems: ReadonlyArray<string> }>((resolve) => {
    let seqno = firstSeqno
    let queries = 0
    const problems: Array<string> = []
    const send = (message: Parameters<CursorClient["append"]>[2]) =>
      void client.append(requestId, seqno++, message).then((response) => {
        if (response.status !== 200) problems.push(`append answered ${response.status}`)
      })
    const timer = setTimeout(() => {
      problems.push("no end-stream within 15 s")
      request.destroy()
      resolve({ end: undefined, queries, problems })
    }, 15_000)
    const request = openRawRunSse(client.options.baseUrl, requestId, {
      onMessage: (message) => {
        const m = message.message
        if (m.case === "interactionQuery") {
          queries++
          send({ message: { case: "interactionResponse", value: { id: m.value.id, result: answer } } })
        }
        if (m.case === "kvServerMessage" && m.value.message.case === "setBlobArgs") {
          send({ message: { case: "kvClientMessage", value: { id: m.value.id, message: { case: "setBlobResult", value: {} } } } })
        }
      },
      onUndecodable: (error) => void problems.push(error.message),
      onEnd: (end) => {
        clearTimeout(timer)
        resolve({ end: end._tag === "Right" ? end.right : undefined, queries, problems })
      },
      onBroken: () => undefined
    })
  })
