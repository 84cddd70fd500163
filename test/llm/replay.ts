/**
 * Drives an adapter's pure state machine with raw SSE bytes, the way the HTTP shell does, but
 * without any I/O: the shared helper of the adapter tests, the recorded suite and the benchmark.
 */
import type { LlmError, ResponseEvent } from "../../src/Llm.js"
import type { Machine, StreamMeta } from "../../src/llm/Common.js"
import { makeSseDecoder } from "../../src/llm/Sse.js"

export interface Replay {
  readonly events: Array<ResponseEvent>
  readonly error: LlmError | undefined
}

/** Feeds `body` in pieces of `chunkSize` bytes (default: all at once), then ends the input. */
export const replay = (
  makeMachine: (meta: StreamMeta) => Machine,
  meta: StreamMeta,
  body: string | Uint8Array,
  chunkSize?: number
): Replay => {
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body
  const machine = makeMachine(meta)
  const decoder = makeSseDecoder()
  const events: Array<ResponseEvent> = []
  const size = chunkSize ?? bytes.length
  for (let offset = 0; offset < bytes.length && !machine.finished(); offset += size) {
    for (const event of decoder.feedBytes(bytes.subarray(offset, offset + size))) {
      const error = machine.push(event, events)
      if (error !== undefined) return { events, error }
      if (machine.finished()) break
    }
  }
  if (!machine.finished()) {
    decoder.end()
    return { events, error: machine.end(events) }
  }
  return { events, error: undefined }
}

/** The `Done` message of a replay, or a thrown description of how it ended instead. */
export const doneOf = (result: Replay) => {
  const last = result.events[result.events.length - 1]
  if (result.error !== undefined) throw new Error(`stream failed: ${result.error.reason}: ${result.error.message}`)
  if (last?._tag !== "Done") throw new Error(`stream did not end with Done (last: ${last?._tag})`)
  return last
}

import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

/** The bytes of one of the project's own fixtures in `test/fixtures/llm/<api>/<name>`. */
export const fixture = (api: string, name: string): Uint8Array =>
  readFileSync(fileURLToPath(new URL(`../fixtures/llm/${api}/${name}`, import.meta.url)))

/** Chunkings every fixture is replayed with: the result must not depend on where the network cut the bytes. */
export const chunkSizes: ReadonlyArray<number | undefined> = [undefined, 1, 3, 64]
