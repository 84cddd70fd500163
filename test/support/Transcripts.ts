/**
 * Shared helpers for tests that drive a server with the reference client: a client released
 * with the test's scope, and the usual ways of reading a turn's transcript.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import * as Dialect from "../../src/Dialect.js"
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

/** The turn ended with `{}` and the client saw no problem. */
export const assertCleanOk = (transcript: Transcript) => {
  assert.deepStrictEqual(transcript.problems, [])
  assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok())
}
