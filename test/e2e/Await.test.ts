/**
 * AwaitShell end to end (real server, fake provider, reference client with a real temp
 * workspace): the model waits for a background shell whose terminal file the editor keeps in
 * its terminals folder; the server reads it through the client, waits while the command runs,
 * reads again, and hands the model the exit code and output once the command ends.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { appendFileSync, mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as AppHarness from "../support/AppHarness.js"
import { LocalWorkspace } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, tempDirectory } from "../support/Transcripts.js"

const { text, toolCall } = FakeProvider.openAiChat

describe("AwaitShell end to end", () => {
  it.scopedLive("waits for a background shell to end, reading its terminal file again while it runs, then gives its exit code and output", () =>
    Effect.gen(function*() {
      const root = yield* tempDirectory("byok-await-")
      const terminals = join(root, "terminals")
      mkdirSync(terminals)
      const terminalFile = join(terminals, "5.txt")
      writeFileSync(terminalFile, ["---", "pid: 77", "cwd: \"/w\"", "command: \"npm run build\"", "started_at: 2026-12-02T01:00:00Z", "---", "compiling..."].join("\n"))
      const app = yield* AppHarness.make()
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000, workspace: new LocalWorkspace(root) })
      app.provider.enqueue(
        FakeProvider.sse(toolCall("call-wait", "AwaitShell", JSON.stringify({ shell_id: 5, block_until_ms: 20_000 }))),
        FakeProvider.sse(text("The build passed."))
      )
      const turn = client.turn({ conversationId: "conv-await", text: "wait for the build", terminalsFolder: terminals })
      // The first read finds it running; the command ends a moment later.
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "exec"))
      yield* Effect.sleep("300 millis")
      appendFileSync(terminalFile, "\ndone in 3s\n---\nexit_code: 0\nended_at: 2026-12-02T01:00:03Z\n---\n")
      const transcript = yield* Effect.promise(() => turn.done)
      assertCleanOk(transcript)
      const reads = transcript.events.filter((e) => e.kind === "exec" && e.exec === "readArgs").length
      assert.isAtLeast(reads, 2, "the file was read once only")
      const body = JSON.parse(app.provider.requests[1]!.body) as { messages: ReadonlyArray<{ role: string; content: unknown }> }
      const result = body.messages.at(-1)
      assert.strictEqual(result?.role, "tool")
      assert.strictEqual(result?.content, "Shell 5 (npm run build) finished with exit code 0.\nOutput:\ncompiling...\ndone in 3s")
      const names = (JSON.parse(app.provider.requests[0]!.body) as { tools: ReadonlyArray<{ function: { name: string } }> }).tools.map((tool) => tool.function.name)
      assert.include(names, "AwaitShell")
    }))
})
