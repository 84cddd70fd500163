/**
 * The console's failure figures, pure: failed attempts count even when a fallback answered, a
 * call that broke off after answering and an older failed call without attempt rows count once,
 * the same error repeated reads as one line with its count, and a provider's figures are its
 * own attempts and answers; statuses read in words.
 */
import { assert, describe, it } from "@effect/vitest"
import { failureFigures } from "../../src/console/Failures.js"
import { attemptOutcomeWords, callStatusWords, conversationStatusWords } from "../../src/console/Words.js"
import type { RecentAttempt, RecentCall } from "../../src/Store.js"

const call = (id: string, status: string, overrides: Partial<RecentCall> = {}): RecentCall => ({
  callId: id, conversationId: "conv", turnId: "t", model: "m", status, systemPromptHash: "", toolsHash: "", segmentStart: 0, messageCount: 1,
  detached: false, usage: null, costUsd: null, error: null, createdAtMs: 1_000, updatedAtMs: 2_000, firstDeltaMs: status === "committed" ? 50 : null,
  target: status === "committed" ? "backup/b" : null, attempts: 1, requestChars: 0, ...overrides
})

const attempt = (callId: string, seq: number, atMs: number, overrides: Partial<RecentAttempt> = {}): RecentAttempt => ({
  callId, seq, provider: "down", upstreamModel: "a", attempt: seq + 1, status: null, reason: "network", error: "down: connection failed",
  startedAtMs: atMs - 5, failedAtMs: atMs, conversationId: "conv", model: "m", ...overrides
})

describe("failure figures", () => {
  it("a fallback that answered every call: no failed call, every failed attempt counted, the repeated error one line", () => {
    const calls = [call("c1", "committed"), call("c2", "committed")]
    const attempts = [attempt("c1", 0, 100), attempt("c1", 1, 110), attempt("c1", 2, 120), attempt("c2", 0, 200), attempt("c2", 1, 210), attempt("c2", 2, 220)]
    const figures = failureFigures(calls, attempts)
    assert.deepStrictEqual([figures.failedAttempts, figures.failures, figures.tries], [6, 6, 8])
    assert.strictEqual(figures.errorRate, 0.75)
    assert.strictEqual(figures.errors.length, 1)
    assert.deepStrictEqual([figures.errors[0]!.count, figures.errors[0]!.atMs, figures.errors[0]!.callId, figures.errors[0]!.outcome], [6, 220, "c2", "network error"])
  })

  it("a call that broke off after answering, and a failed call without attempt rows, each count once; distinct errors newest first", () => {
    const calls = [
      call("ok", "committed"),
      call("broke", "failed", { firstDeltaMs: 40, error: "stream cut", updatedAtMs: 3_000 }),
      call("old", "failed", { error: "before the attempts table", updatedAtMs: 500 }),
      call("refused", "failed", { error: "HTTP 400" })
    ]
    const attempts = [attempt("refused", 0, 2_500, { status: 400, reason: "badRequest", error: "HTTP 400" })]
    const figures = failureFigures(calls, attempts)
    // Tries: ok, broke, old, and the refused call's one attempt.
    assert.deepStrictEqual([figures.failedAttempts, figures.failures, figures.tries], [1, 3, 4])
    assert.deepStrictEqual(figures.errors.map((e) => [e.callId, e.outcome]), [["broke", "call failed"], ["refused", "HTTP 400 (bad request)"], ["old", "call failed"]])
    assert.isNull(failureFigures([], []).errorRate)
  })

  it("statuses in words", () => {
    assert.strictEqual(conversationStatusWords("waitingLlm"), "waiting for the model")
    assert.strictEqual(conversationStatusWords("final"), "finished")
    assert.strictEqual(callStatusWords("committed"), "answered")
    assert.strictEqual(callStatusWords("something-new"), "something-new")
    assert.strictEqual(attemptOutcomeWords({ status: 503, reason: "providerError" }), "HTTP 503 (provider error)")
    assert.strictEqual(attemptOutcomeWords({ status: null, reason: "idleTimeout" }), "timed out")
  })
})
