/**
 * The session machine's rules as properties, as the Loop has them: random interleavings of a
 * turn's appends (duplicated, reordered, gapped), of the runner's commits, of the context reads
 * and the start gate, of the turn's end and a queued message, and a restart between any two
 * steps. Every input is submitted once, in order; every append is acknowledged once, and only
 * after what it carried was applied; nothing is submitted for a turn that is not the current one.
 */
import { create } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { ClientMessage, RunAction } from "../../src/Dialect.js"
import type { RunRequest } from "../../src/Dialect.js"
import { UserMessageSchema } from "../../src/gen/agent/v1/agent_pb.js"
import { emptyUsage } from "../../src/Llm.js"
import { Command, initialConversation, Input } from "../../src/Loop.js"
import type { TurnRef } from "../../src/Runner.js"
import { initialState, SessionInput, sessionTransition } from "../../src/Session.js"
import type { SessionCommand, SessionState, StoreFacts } from "../../src/Session.js"

const REQUEST = "req-1"
const WINDOW = 64

type Kind = "follow" | "cancel" | "exec" | "heartbeat" | "kv"

const runRequest = (readContext: boolean): RunRequest => ({
  conversationId: "conv-1",
  action: RunAction.StartTurn({ start: {} as never, userMessageId: "u1", userMessage: create(UserMessageSchema, { text: "hi", messageId: "u1" }) }),
  contextToFetch: readContext ? [{ part: "rules", blobId: new Uint8Array([1]) }] : [],
  pastChatsToRead: []
}) as unknown as RunRequest

const messageOf = (seqno: number, kind: Kind, readContext: boolean): ClientMessage => {
  if (seqno === 0) return ClientMessage.RunRequest(runRequest(readContext))
  switch (kind) {
    case "follow":
      return ClientMessage.UserMessage({
        message: { role: "user", content: [{ type: "text", text: `m${seqno}` }] },
        messageId: `m${seqno}`,
        userMessage: create(UserMessageSchema, { text: `m${seqno}`, messageId: `m${seqno}` })
      })
    case "cancel":
      return ClientMessage.Cancel({ reason: `c${seqno}` })
    case "exec":
      return ClientMessage.ExecResult({ id: seqno, execId: undefined, reply: { case: undefined } as never })
    case "heartbeat":
      return ClientMessage.Heartbeat()
    case "kv":
      return ClientMessage.KvResult({ id: seqno, kind: "setBlob", data: undefined, error: undefined })
  }
}

/**
 * The input ids an append carries. An exec answer here names no running exec (the tool machines
 * are `session/ToolCalls.ts`'s, driven end to end by the wire suites): it is dropped and gives none.
 */
const carries = (seqno: number, kind: Kind, turnKey = "u1"): ReadonlyArray<string> =>
  seqno === 0 || kind === "follow" || kind === "cancel" ? [`${REQUEST}/${turnKey}:${seqno}`] : []

const TURN: TurnRef = { conversationId: "conv-1", turnId: "t1", settings: { model: "m", userMessageId: "u1", requestId: REQUEST } as never }

/**
 * A driver in miniature: carries the commands out as `transport/` does, with the runner's
 * commits, the context reads and the lock's deferred steps left pending for the test to release.
 */
class Harness {
  state: SessionState
  readonly submitted: Array<string> = []
  readonly acks: Array<number> = []
  /** What the client holds acknowledged: by an `Ack`, or at once by the wire. */
  readonly clientAcked = new Set<number>()
  readonly committed = new Set<string>()
  readonly pendingCommits: Array<string> = []
  readonly pendingReads: Array<Extract<SessionCommand, { readonly _tag: "StartTurn" }>> = []
  flushes = 0
  readonly log: Array<SessionCommand> = []
  /** Each Ack: whether every input its append carried was applied by then. */
  readonly ackedAfterCommit: Array<boolean> = []

  constructor(readonly kinds: ReadonlyArray<Kind>, state = initialState(REQUEST, "g1")) {
    this.state = state
  }

  feed(input: SessionInput): ReadonlyArray<SessionCommand> {
    const step = sessionTransition(this.state, input)
    this.state = step.state
    for (const command of step.commands) this.carryOut(command)
    return step.commands
  }

  append(seqno: number, facts: StoreFacts = {}, readContext = false) {
    const commands = this.feed(SessionInput.Append({ seqno, message: messageOf(seqno, this.kinds[seqno]!, readContext), atMs: 0, window: WINDOW, facts, newTurn: false }))
    // The wire acknowledges at once an append that owes nothing (and was not refused).
    if (commands.at(-1)?._tag !== "Refuse" && !this.state.owed.has(seqno)) this.clientAcked.add(seqno)
    return commands
  }

  private carryOut(command: SessionCommand) {
    this.log.push(command)
    switch (command._tag) {
      case "Ack":
        this.acks.push(command.seqno)
        this.clientAcked.add(command.seqno)
        this.ackedAfterCommit.push(carries(command.seqno, this.kinds[command.seqno]!).every((id) => this.committed.has(id)))
        return
      case "Submit":
        this.submitted.push(command.submission.inputId)
        this.pendingCommits.push(command.submission.inputId)
        return
      case "StartTurn":
        if (command.readContext) this.pendingReads.push(command)
        else this.ready(command)
        return
      case "Deliver":
        if (command.owes) this.feed(SessionInput.Delivered({ seqno: command.seqno, submissions: [] }))
        return
      case "FlushGate":
        this.flushes++
        return
      default:
        return
    }
  }

  private ready(command: Extract<SessionCommand, { readonly _tag: "StartTurn" }>) {
    this.feed(SessionInput.TurnReady({ inputId: command.inputId, run: command.run, start: { conversationId: "conv-1", input: Input.Cancel({ reason: "start" }), inputId: command.inputId } }))
  }

  /** Releases one pending thing: a commit (the runner applied the oldest submitted input), a context read, or a gate flush. */
  release(pick: number): boolean {
    const options: Array<() => void> = []
    if (this.pendingCommits.length > 0) {
      options.push(() => {
        const inputId = this.pendingCommits.shift()!
        this.committed.add(inputId)
        this.feed(SessionInput.Committed({ inputId }))
      })
    }
    if (this.pendingReads.length > 0) options.push(() => this.ready(this.pendingReads.shift()!))
    if (this.flushes > 0) {
      options.push(() => {
        this.flushes--
        this.feed(SessionInput.FlushGate())
      })
    }
    if (options.length === 0) return false
    options[pick % options.length]!()
    return true
  }

  settleAll() {
    for (let i = 0; this.release(i); i++);
  }
}

const kindArb = fc.constantFrom<Kind>("follow", "cancel", "exec", "heartbeat", "kv")

/** A turn's appends: the run request, then `n` messages; each sent 1-3 times, shuffled within windows of 8, with releases between. */
const turnArb = fc.record({
  kinds: fc.array(kindArb, { minLength: 1, maxLength: 24 }),
  readContext: fc.boolean(),
  copies: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 25, maxLength: 25 }),
  shuffle: fc.array(fc.nat(), { minLength: 80, maxLength: 80 }),
  releases: fc.array(fc.nat({ max: 3 }), { minLength: 80, maxLength: 80 })
})

type Turn = typeof turnArb extends fc.Arbitrary<infer T> ? T : never

const arrivalsOf = (turn: Turn, n: number): Array<number> => {
  const arrivals: Array<number> = []
  for (let seqno = 0; seqno < n; seqno++) for (let c = 0; c < turn.copies[seqno]!; c++) arrivals.push(seqno)
  // Shuffle within windows of 8 (concurrent POSTs and retries).
  for (let i = 0; i < arrivals.length; i++) {
    const j = Math.min(arrivals.length - 1, i + (turn.shuffle[i % turn.shuffle.length]! % 8))
    ;[arrivals[i], arrivals[j]] = [arrivals[j]!, arrivals[i]!]
  }
  return arrivals
}

/** With a context read, the turn has no tool calls before it starts: exec answers are left out then. */
const kindsOf = (turn: Turn): Array<Kind> => ["follow", ...turn.kinds.map((kind) => (turn.readContext && kind === "exec" ? "heartbeat" : kind))]

describe("the session machine", () => {
  it("every input is submitted once and in seqno order; every append is acknowledged once, after its inputs were applied", () => {
    fc.assert(fc.property(turnArb, (turn) => {
      const kinds = kindsOf(turn)
      const h = new Harness(kinds)
      arrivalsOf(turn, kinds.length).forEach((seqno, i) => {
        h.append(seqno, {}, turn.readContext)
        if (turn.releases[i % turn.releases.length]! > 1) h.release(turn.releases[i]!)
      })
      h.settleAll()
      const expected = kinds.flatMap((kind, seqno) => carries(seqno, kind))
      assert.deepStrictEqual(h.submitted, expected, "each input once, in order")
      assert.deepStrictEqual([...h.acks].sort((a, b) => a - b), [...new Set(h.acks)].sort((a, b) => a - b), "no append acknowledged twice")
      assert.isTrue(h.ackedAfterCommit.every(Boolean), "an acknowledgement only after what the append carried was applied")
      assert.strictEqual(h.state.owed.size, 0, "nothing owed once everything committed")
      assert.strictEqual(h.state.inbox.next, kinds.length)
      assert.strictEqual(h.state.gate._tag, "Open")
    }), { numRuns: 300 })
  })

  it("an append held behind a gap is not acknowledged until the gap fills, nor before the run request commits; a copy of an acknowledged append owes nothing", () => {
    fc.assert(fc.property(fc.integer({ min: 2, max: 20 }), (n) => {
      const kinds: Array<Kind> = Array.from({ length: n + 1 }, () => "heartbeat")
      const h = new Harness(kinds)
      for (let seqno = n; seqno >= 1; seqno--) h.append(seqno)
      assert.deepStrictEqual(h.acks, [], "all held behind seqno 0")
      assert.strictEqual(h.state.owed.size, n)
      h.append(0)
      h.settleAll()
      assert.deepStrictEqual([...h.acks].sort((a, b) => a - b), Array.from({ length: n + 1 }, (_, i) => i))
      const before = h.acks.length
      h.append(n)
      assert.strictEqual(h.acks.length, before, "a late copy is acknowledged at once by its wire, with no command")
      assert.isFalse(h.state.owed.has(n))
    }))
  })

  it("an append too far ahead is refused and changes nothing", () => {
    fc.assert(fc.property(fc.integer({ min: WINDOW + 1, max: 10_000 }), (seqno) => {
      const h = new Harness(["follow"])
      h.append(0)
      const before = h.state
      const commands = h.feed(SessionInput.Append({ seqno, message: ClientMessage.Heartbeat(), atMs: 0, window: WINDOW, facts: {}, newTurn: false }))
      assert.strictEqual(commands.at(-1)?._tag, "Refuse")
      assert.strictEqual(h.state, before)
    }))
  })

  it("follow-ups and cancels sent while the context is read wait behind the start, then go in order", () => {
    fc.assert(fc.property(fc.array(fc.constantFrom<Kind>("follow", "cancel", "heartbeat"), { minLength: 1, maxLength: 10 }), (rest) => {
      const kinds: Array<Kind> = ["follow", ...rest]
      const h = new Harness(kinds)
      for (let seqno = 0; seqno < kinds.length; seqno++) h.append(seqno, {}, true)
      assert.deepStrictEqual(h.submitted, [], "nothing before the start")
      h.release(1) // the context read: the start is submitted
      assert.deepStrictEqual(h.submitted, [`${REQUEST}/u1:0`])
      h.release(0) // the start commits: the gate flushes under the lock
      h.settleAll()
      assert.deepStrictEqual(h.submitted, kinds.flatMap((kind, seqno) => carries(seqno, kind)))
      assert.strictEqual(h.state.gate._tag, "Open")
    }))
  })

  it("a message queued while the turn ends starts the next turn on the stream; a turn's end goes once; nothing is taken after the end", () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 6 }), fc.boolean(), (n, queued) => {
      const kinds: Array<Kind> = Array.from({ length: n + 2 }, (_, i) => (i === n + 1 ? "follow" : "heartbeat"))
      const h = new Harness(kinds)
      for (let seqno = 0; seqno <= n; seqno++) h.append(seqno)
      h.feed(SessionInput.Spoke({ turn: TURN }))
      h.settleAll()
      const ending = SessionInput.Ending({ turn: TURN, outcome: Command.Canceled({ reason: "done" }), conversation: initialConversation("conv-1"), usage: emptyUsage, maxTokens: 1000 })
      const end = h.feed(ending)
      assert.deepStrictEqual(end.map((c) => c._tag), ["SendTurnEnd"])
      assert.deepStrictEqual(h.feed(ending), [], "the end goes once")
      if (queued) {
        h.append(n + 1)
        assert.isTrue(h.state.queuedTurnExpected)
        assert.strictEqual(h.state.queuedUserMessage?.messageId, `m${n + 1}`)
        const next = h.feed(SessionInput.Spoke({ turn: { ...TURN, turnId: "t2" } }))
        assert.deepStrictEqual(next.map((c) => c._tag), ["NextTurn"])
        assert.strictEqual(h.state.lifecycle._tag, "Running")
        assert.isFalse(h.state.queuedTurnExpected)
      } else {
        h.feed(SessionInput.Ended({ atMs: 1 }))
        const submitted = h.submitted.length
        // A late follow-up on an ended request: a reused request id is the run request's to decide; this one names no new turn.
        h.append(n + 1)
        assert.strictEqual(h.state.lifecycle._tag, "Ended")
        assert.isAtMost(h.submitted.length - submitted, 1)
      }
    }))
  })

  it("a restart between any two steps: the new process applies what the old one did not, each input once, and acknowledges every re-sent append", () => {
    fc.assert(fc.property(turnArb, fc.nat(), (turn, cut) => {
      const kinds = kindsOf({ ...turn, readContext: false })
      const arrivals = arrivalsOf(turn, kinds.length)
      const before = new Harness(kinds)
      const stop = cut % (arrivals.length + 1)
      arrivals.slice(0, stop).forEach((seqno, i) => {
        before.append(seqno)
        if (turn.releases[i % turn.releases.length]! > 1) before.release(turn.releases[i]!)
      })
      // The process dies: what it committed stays committed; the client re-sends every append it holds no acknowledgement for.
      const resent = [...new Set(arrivals)].filter((seqno) => !before.clientAcked.has(seqno))
      // What the client holds acknowledged is a prefix of what it sent: a restart leaves no gap a re-send cannot fill.
      const ackedSorted = [...before.clientAcked].sort((a, b) => a - b)
      assert.deepStrictEqual(ackedSorted, ackedSorted.map((_, i) => i), "acknowledged appends form a prefix")
      const after = new Harness(kinds)
      for (const id of before.committed) after.committed.add(id)
      const runRequestCommitted = before.committed.has(`${REQUEST}/u1:0`)
      if (runRequestCommitted) after.feed(SessionInput.Spoke({ turn: TURN }))
      for (const seqno of shuffled(resent, turn.shuffle)) {
        const facts: StoreFacts = seqno === 0 && runRequestCommitted ? { runRequestCommitted: true, resentTurn: "Running" } : {}
        after.append(seqno, facts)
      }
      // Gaps (appends the old process acknowledged) are passed over: their inputs are committed.
      for (let guard = 0; guard < 200 && after.state.inbox.held.size > 0; guard++) {
        const gap = after.state.inbox.next
        const committed = carries(gap, kinds[gap]!).every((id) => after.committed.has(id))
        after.feed(SessionInput.PassGap({ committed, atMs: 10_000, graceMs: 1 }))
      }
      after.settleAll()
      // The runner skips an input it committed already: what it applies, across both processes, is each input once.
      const applied = new Set<string>(before.committed)
      for (const id of after.submitted) applied.add(id)
      const sent = new Set(arrivals)
      const expected = kinds.flatMap((kind, seqno) => (sent.has(seqno) ? carries(seqno, kind) : []))
      assert.deepStrictEqual([...applied].sort(), [...expected].sort(), "every input applied, none lost")
      assert.strictEqual(new Set(after.submitted).size, after.submitted.length, "the new process submits each input once")
      for (const seqno of resent) assert.isFalse(after.state.owed.has(seqno), `re-sent append ${seqno} acknowledged`)
      assert.isTrue(after.ackedAfterCommit.every(Boolean))
    }), { numRuns: 300 })
  })
})

const shuffled = <A>(items: ReadonlyArray<A>, seed: ReadonlyArray<number>): Array<A> => {
  const out = [...items]
  for (let i = out.length - 1; i > 0; i--) {
    const j = seed[i % seed.length]! % (i + 1)
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}
