/**
 * Shared helpers for tests that drive a server with the reference client: a client released
 * with the test's scope, and the usual ways of reading a turn's transcript.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Dialect from "../../src/Dialect.js"
import type { AgentServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import { CursorClient } from "./CursorClient.js"
import type { CursorClientOptions, Transcript } from "./CursorClient.js"

/** A reference client for a server at `server.baseUrl`, closed when the scope ends. */
export const clientFor = (server: { readonly baseUrl: string }, options: Omit<CursorClientOptions, "baseUrl"> = {}) =>
  Effect.acquireRelease(
    Effect.sync(() => new CursorClient({ baseUrl: server.baseUrl, ...options })),
    (client) => Effect.sync(() => client.close())
  )

export const kinds = (transcript: Transcript): ReadonlyArray<string> => transcript.events.map((e) => e.kind)

/** Consecutive repeats collapsed: the shape of a turn regardless of how many deltas each step had. */
export const shape = (transcript: Transcript): ReadonlyArray<string> =>
  kinds(transcript).filter((kind, i, all) => i === 0 || all[i - 1] !== kind)

/** How the turn ended: `Ok`, or the error's Connect code. */
export const endCode = (transcript: Transcript) => transcript.end?._tag === "Error" ? transcript.end.code : transcript.end?._tag

/** The turn ended with `{}` and the client saw no problem. */
export const assertCleanOk = (transcript: Transcript) => {
  assert.deepStrictEqual(transcript.problems, [])
  assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok())
}

/** A temp directory (a workspace) removed when the scope closes. */
export const tempDirectory = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), prefix))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )

/** The tool_call_completed message of a tool call. */
export const completedTool = (transcript: Transcript, callId: string): AgentServerMessage => {
  const frame = transcript.frames.find((f) => f.event.kind === "tool_call_completed" && f.event.callId === callId)
  assert.isDefined(frame, `no tool_call_completed for ${callId}`)
  return frame!.message
}

/** The typed Cursor tool of a tool_call_completed message. */
export const toolCallOf = (message: AgentServerMessage) => {
  const m = message.message
  if (m.case !== "interactionUpdate" || m.value.message.case !== "toolCallCompleted") throw new Error("not a tool_call_completed")
  return m.value.message.value.toolCall!.tool
}
