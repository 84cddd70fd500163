/**
 * Writes the capture files of this folder again with the real capture mode
 * (`test/support/Captures.ts`): skipped unless asked for,
 *
 *   BYOK_RECORD_CAPTURES=1 npx vitest run test/captures/Record.test.ts
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { dirname } from "node:path"
import { fileURLToPath } from "node:url"
import { recordAll, SCENARIOS } from "../support/Captures.js"

it.live.skipIf(process.env["BYOK_RECORD_CAPTURES"] === undefined)("records the capture files of test/captures/", () =>
  Effect.gen(function*() {
    const written = yield* recordAll(dirname(fileURLToPath(import.meta.url)))
    assert.deepStrictEqual(written, SCENARIOS.map((scenario) => `${scenario}.jsonl`))
  }), 120_000)
