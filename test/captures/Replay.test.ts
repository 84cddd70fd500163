/**
 * Replayed captures are tests: each capture of this folder (written by the real capture mode
 * from the reference clients, `Record.test.ts`) replayed on a fresh server with its recorded
 * model answers must give the captured server half; an altered capture must report where.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { replayText } from "../../src/replay/Replay.js"
import { SCENARIOS } from "../support/Captures.js"

const here = dirname(fileURLToPath(import.meta.url))
const captureOf = (scenario: string) => readFileSync(join(here, `${scenario}.jsonl`), "utf8")

describe("replayed captures", () => {
  for (const scenario of SCENARIOS) {
    it.live(`${scenario} replays to the captured server half`, () =>
      Effect.gen(function*() {
        const result = yield* Effect.scoped(replayText(captureOf(scenario)))
        assert.strictEqual(result.verdict._tag, "Matched", result.text)
        assert.match(result.text, /^replay matched \(\d+ server messages\)$/)
        if (result.verdict._tag === "Matched") assert.isAbove(result.verdict.count, 5)
      }), 60_000)
  }

  it.live("an altered capture reports the first divergence: its index, both messages and the field", () =>
    Effect.gen(function*() {
      const original = captureOf("grpcweb-sse")
      const altered = original.replace(/"textDelta":\{"text":"([^"]*)"/, (_, text: string) => `"textDelta":{"text":"${text.toUpperCase()}!"`)
      assert.notStrictEqual(altered, original)
      const result = yield* Effect.scoped(replayText(altered))
      assert.strictEqual(result.verdict._tag, "Diverged", result.text)
      assert.match(result.text, /^replay diverged at server message \d+/)
      assert.include(result.text, "message.interactionUpdate.textDelta.text: expected")
    }), 60_000)

  it.live("a capture whose recorded answer differs from what the server sent diverges too", () =>
    Effect.gen(function*() {
      const original = captureOf("connect-sse")
      // The model's recorded answer says something else than the captured stream shows.
      const altered = original.split("\n").map((line) => line.includes(`"kind":"model"`) ? line.replaceAll("The notes hold", "The notes keep") : line).join("\n")
      const result = yield* Effect.scoped(replayText(altered))
      assert.strictEqual(result.verdict._tag, "Diverged", result.text)
      assert.include(result.text, "The notes keep")
    }), 60_000)
})
