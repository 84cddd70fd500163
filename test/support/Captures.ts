/**
 * Records the capture files of `test/captures/` with the real capture mode: the real server
 * (`AppHarness`, capture on, its home a temp folder) driven by the reference clients, one turn
 * per wire and protocol:
 *
 * - `connect-sse`: the reference client (`CursorClient`) on RunSSE + BidiAppend, Connect over
 *   HTTP/1.1, a read tool call on a real workspace then a text answer;
 * - `connect-run`: the reference client on `Run` over h2c, Connect, the same turn;
 * - `grpcweb-sse`: the official gRPC-Web client on BidiAppend + RunSSE (HTTP/1.1), a text answer;
 * - `grpc-run`: the official gRPC client on `Run` (h2c), a text answer.
 *
 * `BYOK_RECORD_CAPTURES=1 npx vitest run test/captures/Record.test.ts` writes them again (`recordAll`).
 */
import { Effect } from "effect"
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as AppHarness from "./AppHarness.js"
import { CursorClient, LocalWorkspace } from "./CursorClient.js"
import * as FakeProvider from "./FakeProvider.js"
import { runTurn, sseTurn, transportOf } from "./OfficialClients.js"
import { tempDirectory } from "./Transcripts.js"

export const SCENARIOS = ["connect-sse", "connect-run", "grpcweb-sse", "grpc-run"] as const
export type Scenario = typeof SCENARIOS[number]

/** Runs one scenario on a fresh server with capture on; resolves with the capture file's path. */
export const recordScenario = (scenario: Scenario, contents: boolean) =>
  Effect.gen(function*() {
    const home = yield* tempDirectory("cursor-byok-capture-home-")
    const root = yield* tempDirectory("cursor-byok-capture-ws-")
    const app = yield* AppHarness.make({
      config: { home, capture: { enabled: true, contents }, http2: { cleartextPort: 0, tls: null }, blobAckTimeoutMs: 2_000 }
    })
    const requestId = `req-${scenario}`
    const conversationId = `conv-${scenario}`
    if (scenario.endsWith("-sse") && scenario.startsWith("connect") || scenario === "connect-run") {
      writeFileSync(join(root, "notes.txt"), "the secret plan: sk-abcdefghijklmnopqrstuvwx\nline two\n")
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.toolCall("call_read_1", "Read", JSON.stringify({ path: join(root, "notes.txt") }))))
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("The notes hold a plan and a second line.")))
      const client = new CursorClient({
        baseUrl: app.baseUrl,
        workspace: new LocalWorkspace(root),
        ...(scenario === "connect-run" ? { wire: "run" as const, runUrl: app.h2cUrl } : {})
      })
      const transcript = yield* Effect.promise(() => client.run({ requestId, conversationId, text: "what is in notes.txt?", messageId: `m-${scenario}`, workspacePaths: [root] }))
      client.close()
      if (transcript.end?._tag !== "Ok") return yield* Effect.dieMessage(`${scenario}: the turn did not end well: ${JSON.stringify(transcript.end)}`)
    } else {
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text(`an answer over ${scenario}`)))
      const transport = scenario === "grpc-run" ? transportOf("grpc", app.h2cUrl, "2") : transportOf("grpc-web", app.baseUrl, "1.1")
      yield* Effect.promise(() => (scenario === "grpc-run" ? runTurn : sseTurn)(transport, conversationId, `hello over ${scenario}`, requestId))
    }
    // The server's last lines are written off the request's path: wait for them.
    yield* Effect.sleep("300 millis")
    const folder = join(home, "captures")
    const files = readdirSync(folder).filter((name) => name.endsWith(".jsonl"))
    const file = files.find((name) => name.includes(requestId))
    if (file === undefined) return yield* Effect.dieMessage(`${scenario}: no capture among ${files.join(", ")}`)
    return { path: join(folder, file), folder, files }
  })

/** Records every scenario into `outDir` as `<scenario>.jsonl`. */
export const recordAll = (outDir: string) =>
  Effect.forEach(SCENARIOS, (scenario) =>
    Effect.scoped(Effect.gen(function*() {
      const { path } = yield* recordScenario(scenario, scenario !== "connect-sse")
      mkdirSync(outDir, { recursive: true })
      copyFileSync(path, join(outDir, `${scenario}.jsonl`))
      return `${scenario}.jsonl`
    })), { discard: false })
