/**
 * Secrets never leave the process, end to end: the real server as a child process (`node
 * dist/main.js`, its log captured) calls a fake provider that quotes the API key back, as OpenAI
 * does on a 401 (`Incorrect API key provided: sk-...`): in a 401's JSON body, in an SSE error
 * event after a 200, and as a masked echo (`sk-proj-Secr***...***WXYZ`). A turn runs for each
 * with the reference Cursor client. Then the key (whole, masked, or any 12 characters of it) is
 * looked for everywhere text leaves the process: the server's log, the database and its WAL, every
 * frame the client received, the console's pages and `/metrics`. It is nowhere; the client's
 * error names it by the readable marker `[key of provider leaky]`.
 */
import { assert, describe, it } from "@effect/vitest"
import { toBinary } from "@bufbuild/protobuf"
import { Effect } from "effect"
import { existsSync, readFileSync } from "node:fs"
import * as Dialect from "../../src/Dialect.js"
import { AgentServerMessageSchema } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import * as ChildServer from "../support/ChildServer.js"
import { clientFor } from "../support/Transcripts.js"
import type { Transcript } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"

const KEY = "sk-proj-Secr3tKeyForTheE2eTest0123456789abcdWXYZ"
const MASKED = `${KEY.slice(0, 12)}***...***${KEY.slice(-4)}`
const MARKER = "[key of provider leaky]"

const refused = (quoted: string) => ({
  error: {
    message: `Incorrect API key provided: ${quoted}. You can find your API key at https://platform.openai.com/account/api-keys.`,
    type: "invalid_request_error",
    param: null,
    code: "invalid_api_key"
  }
})

const CASES: ReadonlyArray<{ readonly conversationId: string; readonly answer: FakeProvider.Scripted }> = [
  { conversationId: "conv-http-401", answer: FakeProvider.status(401, refused(KEY)) },
  { conversationId: "conv-sse-error", answer: FakeProvider.sse([FakeProvider.event(refused(KEY), "error")]) },
  { conversationId: "conv-masked-echo", answer: FakeProvider.status(401, refused(MASKED)) }
]

/** Every way the key may show: whole, masked, and any 12 consecutive characters of it. */
const leaksIn = (what: string, text: string): ReadonlyArray<string> => {
  const found: Array<string> = []
  if (text.includes(KEY)) found.push(`${what}: the key`)
  if (text.includes(MASKED)) found.push(`${what}: the masked key`)
  for (let start = 0; start + 12 <= KEY.length; start++) {
    if (text.includes(KEY.slice(start, start + 12))) {
      found.push(`${what}: "${KEY.slice(start, start + 12)}" of the key`)
      break
    }
  }
  return found
}

/** What the client received: each frame's message bytes and the end-stream payload, as text. */
const receivedText = (transcript: Transcript): string =>
  [
    ...transcript.connections.flat().map((frame) => Buffer.from(toBinary(AgentServerMessageSchema, frame.message)).toString("latin1")),
    transcript.end === undefined ? "" : Buffer.from(Dialect.encodeEndStream(transcript.end)).toString("utf8"),
    JSON.stringify(transcript.end ?? null),
    ...transcript.problems
  ].join("\n")

const fileText = (path: string) => (existsSync(path) ? readFileSync(path).toString("latin1") : "")

const get = (baseUrl: string, path: string) =>
  Effect.promise(async () => {
    const response = await fetch(`${baseUrl}${path}`)
    return { status: response.status, body: await response.text() }
  })

describe("Secrets end to end (child process)", () => {
  it.scopedLive("a provider quoting the key (401 body, SSE error event, masked echo): the key is in no log line, database byte, client frame, console page or metric", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const child = yield* ChildServer.make({
        config: AppHarness.fileConfigJson(provider.baseUrl, {
          providers: [{ id: "leaky", api: "openai-chat", baseUrl: provider.baseUrl, apiKeyEnv: "LEAKY_API_KEY" }],
          models: [{ id: "leaky-model", provider: "leaky", upstreamModel: "gpt-leaky", contextWindow: 100000 }]
        }),
        env: { LEAKY_API_KEY: KEY, BYOK_LOG_LEVEL: "debug" }
      })
      const client = yield* clientFor(child, { turnTimeoutMs: 20_000 })
      const leaks: Array<string> = []
      const ends: Array<Dialect.EndStream | undefined> = []
      for (const { answer, conversationId } of CASES) {
        provider.enqueue(answer)
        const transcript = yield* Effect.promise(() => client.run({ conversationId, text: "hello", model: "leaky-model" }))
        ends.push(transcript.end)
        leaks.push(...leaksIn(`frames of ${conversationId}`, receivedText(transcript)))
      }
      // The provider did get the key, in the header it belongs in.
      assert.strictEqual(provider.requests.length, CASES.length)
      assert.strictEqual(provider.requests[0]!.headers["authorization"], `Bearer ${KEY}`)

      const pages = ["/console", "/console/api/running", "/metrics", ...CASES.map((c) => `/console/conversations/${c.conversationId}?messages=1`)]
      for (const path of pages) {
        const page = yield* get(child.baseUrl, path)
        assert.strictEqual(page.status, 200, path)
        leaks.push(...leaksIn(path, page.body))
      }
      const stored = fileText(child.database) + fileText(`${child.database}-wal`)
      leaks.push(...leaksIn("the database and its WAL (running)", stored))
      yield* Effect.promise(() => child.kill("SIGTERM"))
      leaks.push(...leaksIn("the database and its WAL (stopped)", fileText(child.database) + fileText(`${child.database}-wal`)))
      const log = child.stdout() + child.stderr()
      leaks.push(...leaksIn("the server's log", log))
      assert.deepStrictEqual(leaks, [])

      // What the user reads names the key by its marker; the store and the log hold that text
      // (so the searches above looked where the error was written).
      ends.forEach((end, i) => {
        const what = CASES[i]!.conversationId
        assert.strictEqual(end?._tag, "Error", `${what}: ${JSON.stringify(end)}`)
        if (end?._tag !== "Error") return
        assert.include(end.message, MARKER, what)
        assert.include(end.detail?.detail ?? "", MARKER, what)
      })
      assert.include(stored, MARKER)
      assert.include(log, MARKER)
    }), { timeout: 90_000 })
})
