/**
 * Subagents end to end (real server, SQLite file, fake provider, reference client playing
 * Cursor): a parent's Task sends `subagent_args`; the client opens the child as an agent run of
 * its own with `x-parent-request-id` / `x-parent-agent-tool-call-id` and `subagent_type_name`;
 * the child runs its own tool call with the subagent's prompt and tools, on the subagent model;
 * its final message returns as `subagent_result`, folded into the Task card and the parent's
 * tool result; the parent's checkpoint records the run. And the user stopping a subagent.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { SubagentRunStatus } from "../../src/gen/agent/v1/agent_pb.js"
import type { ConversationStateStructure, ExecServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import { CursorClient, LocalWorkspace } from "../support/CursorClient.js"
import type { ExecAnswer, Transcript, Workspace } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, endCode, tempDirectory } from "../support/Transcripts.js"

const { text, toolCall } = FakeProvider.openAiChat

interface ChatBody {
  readonly model: string
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string; readonly description: string } }>
}
const bodyOf = (app: AppHarness.AppHarness, index: number): ChatBody => JSON.parse(app.provider.requests[index]!.body) as ChatBody
const contentOf = (message: { readonly content: unknown } | undefined): string =>
  typeof message?.content === "string" ? message.content : JSON.stringify(message?.content ?? "")
const lastCheckpoint = (transcript: Transcript): ConversationStateStructure => transcript.checkpoints[transcript.checkpoints.length - 1]!

/**
 * A workspace that answers execs on `local`, and a `subagent_args` as Cursor does: the child runs
 * as its own agent run (headers naming the parent), and its last answer comes back as the result.
 */
class SubagentWorkspace implements Workspace {
  readonly children: Array<{ readonly agentId: string; readonly exec: ExecServerMessage; readonly transcript: Transcript }> = []
  constructor(readonly baseUrl: string, readonly local: LocalWorkspace, readonly parentRequestId: () => string) {}

  async *answer(exec: ExecServerMessage, signal: AbortSignal): AsyncIterable<ExecAnswer> {
    if (exec.message.case !== "subagentArgs") {
      yield* this.local.answer(exec, signal)
      return
    }
    const args = exec.message.value
    const agentId = `agent-${args.toolCallId}`
    const child = new CursorClient({
      baseUrl: this.baseUrl,
      workspace: this.local,
      turnTimeoutMs: 15_000,
      extraHeaders: { "x-parent-request-id": this.parentRequestId(), "x-parent-agent-tool-call-id": args.toolCallId }
    })
    try {
      const transcript = await child.run({ conversationId: agentId, text: args.prompt, model: args.modelId, subagentTypeName: args.subagentType })
      this.children.push({ agentId, exec, transcript })
      yield transcript.end?._tag === "Ok"
        ? { case: "subagentResult", value: { result: { case: "success", value: { agentId, finalMessage: transcript.text, toolCallCount: transcript.events.filter((e) => e.kind === "tool_call_completed").length } } } }
        : { case: "subagentResult", value: { result: { case: "error", value: { agentId, error: `the subagent ended ${transcript.end?._tag ?? "without an end"}` } } } }
    } finally {
      child.close()
    }
  }
}

describe("Subagents end to end", () => {
  it.scopedLive("a parent's Task runs a child of its own: the child's tool call and report, the parent's tool result and Task card, the checkpoint's run state", () =>
    Effect.gen(function*() {
      const root = yield* tempDirectory("byok-subagent-")
      writeFileSync(join(root, "config.ts"), "export const port = 8080\n")
      const app = yield* AppHarness.make({ config: { subagentModel: "fake-gemini" } })
      let parentRequest = ""
      const workspace = new SubagentWorkspace(app.baseUrl, new LocalWorkspace(root), () => parentRequest)
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000, workspace })
      const task = { description: "Find the port", prompt: "Find which port the server listens on and report the file and line.", subagent_type: "explore" }
      app.provider.enqueue(
        // The parent asks for a subagent.
        FakeProvider.sse(toolCall("call-task", "Task", JSON.stringify(task))),
        // The child (on the subagent model) reads a file, then reports.
        FakeProvider.sse([FakeProvider.gemini.chunk([{ functionCall: { name: "Read", args: { path: "config.ts" } } }], "STOP")]),
        FakeProvider.sse(FakeProvider.gemini.text("The port is 8080 (config.ts line 1).")),
        // The parent answers with the report.
        FakeProvider.sse(text("The server listens on 8080."))
      )
      const turn = client.turn({ conversationId: "conv-parent", text: "which port?" })
      parentRequest = turn.requestId
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)

      // The parent offered Task naming Cursor's subagents; the exec names the type, the prompt and the subagent model.
      const parentTools = (bodyOf(app, 0).tools ?? []).map((tool) => tool.function.name)
      assert.strictEqual(parentTools.at(-1), "Task")
      assert.strictEqual(workspace.children.length, 1)
      const [child] = workspace.children
      if (child?.exec.message.case !== "subagentArgs") throw new Error("no subagent exec")
      assert.deepStrictEqual(
        [child.exec.message.value.toolCallId, child.exec.message.value.subagentType, child.exec.message.value.modelId, child.exec.message.value.readonly, child.exec.message.value.parentConversationId],
        ["call-task", "explore", "fake-gemini", true, "conv-parent"]
      )

      // The child: its own conversation, on the subagent model, with the subagent's prompt and read-only tools (no Task, no questions).
      assertCleanOk(child.transcript)
      const childRequest = app.provider.requests[1]!
      assert.include(childRequest.path, "gemini-fake")
      const childBody = JSON.parse(childRequest.body) as { systemInstruction?: { parts: ReadonlyArray<{ text: string }> }; tools?: ReadonlyArray<{ functionDeclarations: ReadonlyArray<{ name: string }> }> }
      assert.include(childBody.systemInstruction?.parts[0]?.text ?? "", "You are a subagent (explore)")
      const childTools = (childBody.tools ?? []).flatMap((tool) => tool.functionDeclarations.map((declaration) => declaration.name))
      assert.includeMembers(childTools, ["Read", "Grep"])
      for (const name of ["Task", "AskQuestion", "SwitchMode", "Shell", "Write"]) assert.notInclude(childTools, name)
      assert.include(child.transcript.events.map((e) => e.kind), "tool_call_completed")

      // The parent reads the child's report as the Task's result, then answers.
      const result = bodyOf(app, 3).messages.at(-1)
      assert.strictEqual(result?.role, "tool")
      assert.include(contentOf(result), "The subagent (agent-call-task) finished after 1 tool calls. Its report:\n\nThe port is 8080 (config.ts line 1).")
      const card = transcript.frames.find((f) => f.event.kind === "tool_call_completed" && f.event.callId === "call-task")
      const m = card?.message.message
      if (m?.case !== "interactionUpdate" || m.value.message.case !== "toolCallCompleted") throw new Error("no Task card")
      const typed = m.value.message.value.toolCall?.tool
      if (typed?.case !== "taskToolCall") throw new Error("not a Task card")
      assert.strictEqual(typed.value.result?.result.case, "success")
      assert.strictEqual(typed.value.args?.agentId, "agent-call-task")

      // While the subagent ran, the checkpoint showed it running: first without, then with the child's agent id; at the end, done.
      const running = transcript.checkpoints.slice(0, -1).map((checkpoint) => checkpoint.subagentRunsByParentToolCallId["call-task"])
      assert.deepStrictEqual(running.map((state) => [state?.status, state?.subagentId]), [[SubagentRunStatus.RUNNING, undefined], [SubagentRunStatus.RUNNING, "agent-call-task"]])
      assert.strictEqual(transcript.checkpoints[0]!.pendingToolCalls.length, 1)
      const run = lastCheckpoint(transcript).subagentRunsByParentToolCallId["call-task"]
      assert.isDefined(run)
      assert.deepStrictEqual([run?.subagentId, run?.status, run?.title], ["agent-call-task", SubagentRunStatus.SUCCESS, "Find the port"])
      assert.deepStrictEqual(lastCheckpoint(transcript).pendingToolCalls, [])
    }))

  it.scopedLive("the user stops a running subagent: the child's turn is canceled, the parent's Task ends saying so and the parent goes on; a late subagent_result changes nothing", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      // Cursor runs the child itself: this client keeps the subagent exec open (the test opens the child by hand).
      const waiting: Workspace = {
        answer: (_exec, signal) => ({
          async *[Symbol.asyncIterator]() {
            await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()))
          }
        })
      }
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000, workspace: waiting })
      app.provider.enqueue(
        FakeProvider.sse(toolCall("call-t", "Task", JSON.stringify({ description: "Long check", prompt: "Run every check." }))),
        // The child streams slowly; the user stops it meanwhile.
        FakeProvider.sse(FakeProvider.openAiChat.pacedText(["one ", "two ", "three ", "four ", "five"], 400)),
        FakeProvider.sse(text("Stopped as asked."))
      )
      const parent = client.turn({ conversationId: "conv-stop", text: "check everything" })
      const exec = yield* Effect.promise(() => parent.waitFor((f) => f.event.kind === "exec"))
      assert.strictEqual(exec.message.message.case === "execServerMessage" ? exec.message.message.value.message.case : undefined, "subagentArgs")
      const childClient = new CursorClient({
        baseUrl: app.baseUrl,
        turnTimeoutMs: 15_000,
        extraHeaders: { "x-parent-request-id": parent.requestId, "x-parent-agent-tool-call-id": "call-t" }
      })
      yield* Effect.addFinalizer(() => Effect.sync(() => childClient.close()))
      const child = childClient.turn({ conversationId: "agent-stop", text: "Run every check.", subagentTypeName: "generalPurpose" })
      yield* Effect.promise(() => child.waitFor((f) => f.event.kind === "text_delta"))
      yield* Effect.promise(() => parent.send({ message: { case: "conversationAction", value: { action: { case: "cancelSubagentAction", value: { subagentId: "agent-stop" } } } } }))
      const childEnd = yield* Effect.promise(() => child.done)
      assert.strictEqual(endCode(childEnd), "canceled")
      // A late result from the client for the stopped Task: acknowledged, nothing more.
      const late = yield* Effect.promise(() =>
        parent.send({
          message: {
            case: "execClientMessage",
            value: { id: exec.event.kind === "exec" ? exec.event.id : 0, message: { case: "subagentResult", value: { result: { case: "success", value: { agentId: "agent-stop", finalMessage: "late" } } } } }
          }
        })
      )
      assert.strictEqual(late, 200)
      const transcript = yield* Effect.promise(() => parent.done)
      assertCleanOk(transcript)
      assert.strictEqual(app.provider.requests.length, 3)
      const toolResults = bodyOf(app, 2).messages.filter((message) => message.role === "tool")
      assert.strictEqual(toolResults.length, 1)
      assert.include(contentOf(toolResults[0]), "The user stopped the subagent (agent-stop)")
      const run = lastCheckpoint(transcript).subagentRunsByParentToolCallId["call-t"]
      assert.strictEqual(run?.status, SubagentRunStatus.ABORTED)
      // A RUNNING run a canceled turn left in the client's checkpoint is ended by the next turn's checkpoint.
      const stale = transcript.checkpoints.find((checkpoint) => checkpoint.subagentRunsByParentToolCallId["call-t"]?.status === SubagentRunStatus.RUNNING)
      assert.isDefined(stale, "no running checkpoint while the subagent ran")
      app.provider.enqueue(FakeProvider.sse(text("Next.")))
      const next = yield* Effect.promise(() => client.run({ conversationId: "conv-stop", text: "go on", conversationState: stale! }))
      assertCleanOk(next)
      assert.strictEqual(lastCheckpoint(next).subagentRunsByParentToolCallId["call-t"]?.status, SubagentRunStatus.ABORTED)
    }))

  it.scopedLive("a restart with one subagent finished and one running: the finished one's report is handed back once, the running one is reported and not run again", () =>
    Effect.gen(function*() {
      const database = join(yield* tempDirectory("byok-subagent-restart-"), "byok.sqlite")
      const provider = yield* FakeProvider.make
      const holding: Workspace = {
        answer: (_exec, signal) => ({
          async *[Symbol.asyncIterator]() {
            await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()))
          }
        })
      }
      // The first process: two parents, each waiting on a Task; A's child finishes, B's child is still streaming.
      yield* Effect.scoped(Effect.gen(function*() {
        const app = yield* AppHarness.make({ provider, database })
        const client = yield* clientFor(app, { turnTimeoutMs: 20_000, workspace: holding })
        const openChild = (parent: { readonly requestId: string }, toolCallId: string, agentId: string) => {
          const child = new CursorClient({ baseUrl: app.baseUrl, turnTimeoutMs: 15_000, extraHeaders: { "x-parent-request-id": parent.requestId, "x-parent-agent-tool-call-id": toolCallId } })
          return { child, turn: child.turn({ conversationId: agentId, text: "look around", subagentTypeName: "explore" }) }
        }
        provider.enqueue(FakeProvider.sse(toolCall("call-a", "Task", JSON.stringify({ description: "A", prompt: "look around" }))), FakeProvider.sse(text("Report A: all fine.")))
        const parentA = client.turn({ conversationId: "conv-parent-a", text: "check A" })
        yield* Effect.promise(() => parentA.waitFor((f) => f.event.kind === "exec"))
        const a = openChild(parentA, "call-a", "agent-a")
        assertCleanOk(yield* Effect.promise(() => a.turn.done))
        a.child.close()
        provider.enqueue(FakeProvider.sse(toolCall("call-b", "Task", JSON.stringify({ description: "B", prompt: "look around" }))), FakeProvider.stall)
        const parentB = client.turn({ conversationId: "conv-parent-b", text: "check B" })
        yield* Effect.promise(() => parentB.waitFor((f) => f.event.kind === "exec"))
        const b = openChild(parentB, "call-b", "agent-b")
        yield* Effect.promise(() => b.turn.waitFor((f) => f.event.kind === "heartbeat"))
        yield* Effect.sleep("100 millis")
        b.child.close()
      }))
      const before = provider.requests.length
      // The second process on the same database: recovery answers both Tasks without running either again.
      provider.enqueue(FakeProvider.sse(text("ok")), FakeProvider.sse(text("ok")), FakeProvider.sse(text("ok")))
      const app = yield* AppHarness.make({ provider, database })
      const deadline = Date.now() + 10_000
      const toolResultsOf = () =>
        provider.requests.slice(before).flatMap((request) => (JSON.parse(request.body) as ChatBody).messages.filter((message) => message.role === "tool").map(contentOf))
      while (Date.now() < deadline && toolResultsOf().length < 2) yield* Effect.sleep("50 millis")
      const results = toolResultsOf()
      assert.include(results, "The subagent (agent-a) finished. Its report:\n\nReport A: all fine.")
      assert.isTrue(results.some((result) => result.startsWith("The subagent (agent-b) had not finished (waitingLlm) when the server restarted; it was not started again.")), results.join(" | "))
      // Each handed back once: one follow-up request per parent carries its Task's result.
      yield* Effect.sleep("200 millis")
      assert.strictEqual(toolResultsOf().filter((result) => result.includes("(agent-a)")).length, 1)
      assert.strictEqual(toolResultsOf().filter((result) => result.includes("(agent-b)")).length, 1)
      assert.isAtLeast(app.provider.requests.length, before + 2)
    }))

  it.scopedLive("a child run naming a parent that does not exist here runs as a conversation of its own (a subagent's, with its guidance); nothing else changes", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      const orphan = new CursorClient({
        baseUrl: app.baseUrl,
        turnTimeoutMs: 15_000,
        extraHeaders: { "x-parent-request-id": "no-such-request", "x-parent-agent-tool-call-id": "no-such-call" }
      })
      yield* Effect.addFinalizer(() => Effect.sync(() => orphan.close()))
      app.provider.enqueue(FakeProvider.sse(text("Nothing found.")))
      const transcript = yield* Effect.promise(() => orphan.run({ conversationId: "agent-orphan", text: "look for TODOs" }))
      assertCleanOk(transcript)
      assert.strictEqual(app.provider.requests.length, 1)
      const body = bodyOf(app, 0)
      assert.include(contentOf(body.messages[0]), "You are a subagent (generalPurpose)")
      assert.notInclude((body.tools ?? []).map((tool) => tool.function.name), "Task")
    }))

  it.scopedLive("a subagent run naming one of Cursor's hosted models runs on the configured subagent model; a configured one is kept", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { subagentModel: "fake-gemini" } })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      app.provider.enqueue(FakeProvider.sse(FakeProvider.gemini.text("Found it.")), FakeProvider.sse(text("Found it too.")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "agent-hosted", text: "find it", model: "composer-2.5-fast", subagentTypeName: "explore" })))
      assert.include(app.provider.requests[0]!.path, "gemini-fake")
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "agent-configured", text: "find it", model: "fake-model", subagentTypeName: "explore" })))
      assert.strictEqual((JSON.parse(app.provider.requests[1]!.body) as { model: string }).model, "fake-upstream")
    }))
})
