/**
 * Crash at every commit point (DESIGN §4, invariants 7-10; issue 7).
 *
 * A scripted two-turn session runs under the real server as a child process (`npm start`'s
 * `node dist/main.js`), against a loopback fake provider that answers from the request body:
 *
 *   turn 1  user "turn one: read notes.txt and log a line"
 *           model call 1 -> two tool calls in one message: Read notes.txt (idempotent),
 *                           Shell `echo hi >> log.txt` (not idempotent: counted in log.txt)
 *           model call 2 (both results in) -> text, which says whether the shell ran
 *   turn 2  user "turn two: anything else?"
 *           model call 3 -> text
 *
 * First a clean run with `BYOK_FAULT_LOG_WRITES=1` counts the Store writes N (the commit
 * points) and records the committed history and the provider request bodies. Then, for each
 * k in 1..N, a fresh server on a fresh database is started with
 * `BYOK_FAULT_CRASH_AFTER_WRITES=k` (SIGKILL right after its k-th write); as soon as it has
 * died it is restarted without the fault on the same database and port, and the client carries
 * on as Cursor does (`CrashDriver`: re-sends unacknowledged appends with the same seqnos,
 * reopens RunSSE with the same request id, answers the new process's execs). Every run must end
 * with the clean run's history (the shell call may instead carry the "interrupted" result, and
 * then the model's next answer is the fake's answer to that history), the shell run at most once,
 * no assistant message twice, every provider request's messages a prefix of the next one's, and
 * every request byte-identical to the clean run's request for the same history.
 *
 * The clean run has N = 12 commit points (1 commitInput Start+plan call 1, 2 markLlmCall
 * streaming, 3 commitInput Done (tool calls, Read planned), 4 markOperationSent Read,
 * 5 commitInput Read result (Shell planned), 6 markOperationSent Shell, 7 commitInput Shell
 * result (call 2 planned), 8 markLlmCall, 9 commitInput Done = end of turn 1, 10-12 the same
 * three for turn 2). The ks run in `CRASH_LANES` (default 2) concurrent lanes, each with its
 * own fake provider and workspace, one k after the other within a lane; histories and request
 * bodies are compared with the workspace path replaced by `<ROOT>`. A second test kills the
 * server from outside where no commit point lands (while the shell runs on the client, while a
 * model call streams). Two bugs this test found in src/ (a crash at a turn-end point, 9 or 12,
 * lost the turn's end; a re-sent append raced a recovered turn) are fixed, and their
 * reproductions stay as regression tests in their own describe at the end.
 *
 * No test asserts a duration; every wait is bounded; child processes, fake providers and temp
 * directories are released by scope finalizers. `CRASH_POINTS=3,7` runs only those ks. The runs
 * themselves are in `test/support/CrashRuns.ts`; the same on PostgreSQL: `CrashPostgres.test.ts`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { check, clean, crashRun, details, isInterrupted, KNOWN_BUG_TURN_END, LANES, makeLane, runPoints, runSession, selectedPoints, summary, turnEndPoints } from "../support/CrashRuns.js"

describe("Crash at every commit point (child process, SIGKILL right after Store write k, restart on the same database)", () => {
  it.scopedLive("every k: the clean run's history (or the shell reported interrupted), each tool at most once, no assistant message twice, request histories byte-prefix-stable", () =>
    Effect.gen(function*() {
      const reference = yield* clean
      const n = reference.writes.length
      const excluded = KNOWN_BUG_TURN_END ? new Set(turnEndPoints(reference)) : new Set<number>()
      const points = selectedPoints(Array.from({ length: n }, (_, i) => i + 1).filter((k) => !excluded.has(k)))
      const failed = yield* runPoints(reference, points, LANES)
      assert.deepStrictEqual(failed, [])
    }), { timeout: 600_000 })

  /*
   * Between two commit points, where no k lands: the server killed from outside (1) after the
   * shell exec reached the client and before its result (the command runs once; the restarted
   * server reports it interrupted and drops the late result), (2) while model call 2 streams
   * (the provider saw the request: it is re-issued byte for byte and answered once).
   */
  it.scopedLive("SIGKILL between commit points: while the shell runs on the client (interrupted, ran once), while a model call streams (re-issued byte-identical)", () =>
    Effect.gen(function*() {
      const reference = yield* clean
      const [shell, stream] = yield* Effect.all([
        Effect.flatMap(makeLane(), (lane) => runSession(lane, { kill: "whileShellRuns" })),
        Effect.flatMap(makeLane(), (lane) => runSession(lane, { kill: "whileModelStreams" }))
      ], { concurrency: "unbounded" })
      const shellFailures = check(reference, shell)
      if (!shell.crashed) shellFailures.unshift("the server was not killed")
      console.log(`[crash] ${summary("killed while the shell runs", reference, shell)}`)
      assert.deepStrictEqual(shellFailures, [], details("killed while the shell runs", reference, shell, shellFailures))
      assert.isTrue(shell.history.some((m) => isInterrupted(m)), "the shell call is reported interrupted")
      assert.strictEqual(shell.shellRuns, 1, "the shell command ran once (on the client, before the restart)")
      const streamFailures = check(reference, stream)
      if (!stream.crashed) streamFailures.unshift("the server was not killed")
      console.log(`[crash] ${summary("killed while model call 2 streams", reference, stream)}`)
      assert.deepStrictEqual(streamFailures, [], details("killed while model call 2 streams", reference, stream, streamFailures))
      // Call 2 went out twice, byte for byte (the clean run made 3 calls; here 4).
      assert.strictEqual(stream.bodies.length, 4, details("killed while model call 2 streams", reference, stream, []))
      assert.strictEqual(stream.bodies[2], stream.bodies[1])
      assert.strictEqual(stream.bodies[1], reference.bodies[1])
    }), { timeout: 300_000 })
})

/**
 * While a bug is open, its test pins the exact symptom (so it fails if the bug changes shape or
 * goes away); once the bug is fixed, its flag is false and the test asserts the right behaviour
 * (and, for the turn end, the main test runs every k). Both bugs below are fixed.
 */
const KNOWN_BUG_HELD_APPEND = false

const expectKnownBug = (open: boolean, outcome: { readonly failures: ReadonlyArray<string>; readonly report: string }, symptoms: ReadonlyArray<string>) => {
  if (!open) {
    assert.deepStrictEqual(outcome.failures, [], outcome.report)
    return
  }
  assert.isNotEmpty(outcome.failures, `this known bug no longer reproduces: if src/ fixed it, set its flag to false\n${outcome.report}`)
  assert.deepStrictEqual(outcome.failures, symptoms, `the known bug's symptom changed:\n${outcome.report}`)
}

/**
 * Bugs in src/ this test found, both fixed: their reproductions, kept as regression tests (with
 * the old symptom pinned should a flag be set back to true). The held re-sent append: a
 * recovered turn adopts appends that arrived before it spoke. The lost turn end: the restarted
 * process replays it from the store.
 */
describe("Bugs found by the crash test (fixed; regression tests)", () => {
  /*
   * A crash right after the commit that ends a turn (clean write 9 = turn 1's final Done
   * commitInput; 12 = turn 2's): the history is complete, but the process dies before
   * `ClientGateway.finish` sends set_blob / turn_ended / checkpoint / end-stream. The restarted
   * process has nothing in flight (`listInFlight` is empty, no "recovered" log line), and the
   * client's RunSSE reconnect with the same request id reaches a process with no turn for it.
   * Before the fix it got heartbeats forever, later a readable `unavailable` error after
   * `orphanTimeoutMs`, and never that turn's turn_ended and checkpoint. Now the store says which
   * input started each turn: once the RunSSE has waited `orphanTimeoutMs` (5 s here) without a
   * new run request, the request's turn is found ended and its end is replayed from the committed
   * state (turn_ended with the turn's usage, the blobs, the checkpoint, end-stream `{}`).
   */
  it.scopedLive(`crash right after a turn's final commit: the reconnected RunSSE gets the turn's end (turn_ended, checkpoint, end-stream)${KNOWN_BUG_TURN_END ? " [OPEN: symptom pinned]" : ""}`, () =>
    Effect.gen(function*() {
      const reference = yield* clean
      const [turn1End] = turnEndPoints(reference)
      const lane = yield* makeLane()
      const outcome = yield* crashRun(lane, reference, turn1End!, { turnTimeoutMs: 30_000 })
      expectKnownBug(KNOWN_BUG_TURN_END, outcome, [
        "turn 1: ended with {\"code\":\"unavailable\",\"message\":\"The server has no turn for this request (it may have restarted after the turn ended). The conversation is saved; send your message again.\",\"_tag\":\"Error\"}",
        "turn 1: no turn_ended",
        "turn 1: no checkpoint"
      ])
    }), { timeout: 300_000 })

  /*
   * A re-sent append that reaches the restarted process before the recovered turn has spoken
   * (here the model answers 1.5 s after each request). Crash after clean write 5 (the Read
   * result's commitInput): that append (seqno s > 0) was not acknowledged, so the client sends
   * it again at once. `bidiAppend` creates the session (not adopted: `turnSession` has not run
   * for it yet), whose inbox expects seqno 0, so append s is held (acknowledged only once the
   * recovered turn adopts it, see Transport `ACKNOWLEDGING AN APPEND`). Before the
   * fix, when the runner then spoke, the session was not marked adopted (`inbox.held.size > 0`)
   * and every later append of the turn was held as well: the set_blob acknowledgements never
   * reached the transport and the turn ended without its checkpoint (a further tool call would
   * have hung). Fixed: `adoptHeld` starts the inbox at the first held append and hands on those
   * in order. With an immediate model answer the runner usually speaks first, which is why the
   * main test passed at k=5, 7, 8 even before the fix.
   */
  it.scopedLive(`crash after a tool result's commit, re-sent append reaches the new process before the recovered turn speaks: later appends still go through, the turn gets its checkpoint${KNOWN_BUG_HELD_APPEND ? " [OPEN: symptom pinned]" : ""}`, () =>
    Effect.gen(function*() {
      const reference = yield* clean
      const lane = yield* makeLane(1_500)
      const readResultCommit = reference.writes.findIndex((w, i) => w.endsWith("commitInput") && reference.writes[i - 1]?.endsWith("markOperationSent")) + 1
      const outcome = yield* crashRun(lane, reference, readResultCommit, { turnTimeoutMs: 60_000 })
      expectKnownBug(KNOWN_BUG_HELD_APPEND, outcome, ["turn 1: no checkpoint"])
    }), { timeout: 300_000 })
})
