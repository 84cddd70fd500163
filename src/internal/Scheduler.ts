/**
 * The server's fiber scheduler: one run queue for the process, urgent tasks first (what a client
 * waits on), run in short slices that give the event loop back between them; while the process
 * is behind, a model stream's reads wait in a lane of their own. Why each rule, with the
 * measurements behind it: docs/architecture.md, "The scheduler in detail".
 */
import type { Fiber } from "effect"
import { Scheduler } from "effect"
import { performance } from "node:perf_hooks"

/** The scheduling priority of work a client waits on at once. */
export const URGENT = 1

/** The longest a stream's read waits behind urgent tasks (`SlicedScheduler.queueStream`). */
export const STREAM_MAX_WAIT_MS = 2

/** A model stream's read and when it was queued (`performance.now()`). */
interface StreamTask {
  readonly task: Scheduler.Task
  readonly queuedAt: number
}

/** A FIFO that reuses its array (no `shift`). */
class TaskQueue<A = Scheduler.Task> {
  private items: Array<A | undefined> = []
  private head = 0

  get size() {
    return this.items.length - this.head
  }

  push(task: A) {
    this.items.push(task)
  }

  /** The oldest item, left in the queue. */
  peek(): A | undefined {
    return this.head < this.items.length ? this.items[this.head] : undefined
  }

  take(): A | undefined {
    if (this.head >= this.items.length) return undefined
    const task = this.items[this.head]
    this.items[this.head++] = undefined
    if (this.head === this.items.length) {
      this.items = []
      this.head = 0
    } else if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head)
      this.head = 0
    }
    return task
  }
}

/** A scheduler's lane for model-stream reads (`SlicedScheduler` has one). */
export interface StreamLane {
  /** Tasks wait for a later slice: the process is behind. */
  readonly backlogged: boolean
  /** Queues a read in the check phase, after the urgent tasks and before the normal ones. */
  queueStream(task: () => void): void
}

/** The scheduler's stream lane, when it offers one. */
export const streamLaneOf = (scheduler: Scheduler.Scheduler): StreamLane | undefined =>
  scheduler instanceof SlicedScheduler ? scheduler : undefined

export class SlicedScheduler implements Scheduler.Scheduler, StreamLane {
  private readonly urgent = new TaskQueue()
  private readonly streams = new TaskQueue<StreamTask>()
  private readonly normal = new TaskQueue()
  /** A drain of the urgent tasks is queued as a microtask or running. */
  private microtaskDrain = false
  /** A drain of every task is queued for the event loop's check phase (`setImmediate`) or running. */
  private immediateDrain = false
  /** That drain is running (it takes the urgent tasks queued meanwhile itself). */
  private drainingAll = false
  /** The last drain ran out of its slice with tasks left: the process is behind. */
  private behind = false

  constructor(readonly sliceMs: number) {}

  shouldYield(fiber: Fiber.RuntimeFiber<unknown, unknown>): number | false {
    return Scheduler.defaultScheduler.shouldYield(fiber)
  }

  /**
   * A fiber's task by its priority. A task without a fiber is a wake-up (a `Mailbox` releasing
   * its taker: the woken fiber's own step is then queued by its priority), run as urgent so
   * that an input offered to a conversation's actor does not wait behind the backlog before
   * the actor even sees it.
   */
  scheduleTask(task: Scheduler.Task, priority: number, fiber?: Fiber.RuntimeFiber<unknown, unknown>): void {
    this.enqueue(task, fiber === undefined || priority >= URGENT)
  }

  /** Queues work that is not a fiber's at the normal priority. */
  queueNormal(task: Scheduler.Task): void {
    this.enqueue(task, false)
  }

  /** Queues a model stream's read (`ModelCall.ts`): in the check phase, after the urgent tasks and before the normal ones. */
  queueStream(task: Scheduler.Task): void {
    this.streams.push({ task, queuedAt: performance.now() })
    this.scheduleImmediate()
  }

  private enqueue(task: Scheduler.Task, urgent: boolean): void {
    if (urgent) {
      this.urgent.push(task)
      // Behind, urgent work too waits for the check phase, so that the poll phase stays short
      // (new connections are accepted one per event-loop iteration).
      if (!this.microtaskDrain && !this.drainingAll && !this.behind) {
        this.microtaskDrain = true
        queueMicrotask(this.drainUrgent)
      }
    } else {
      this.normal.push(task)
      this.scheduleImmediate()
    }
  }

  private scheduleImmediate(): void {
    if (this.immediateDrain) return
    this.immediateDrain = true
    setImmediate(this.drainAll)
  }

  /** Tasks waiting to run. */
  get pending(): number {
    return this.urgent.size + this.streams.size + this.normal.size
  }

  /** Tasks wait for a later slice: the process is behind, so new work should queue rather than jump ahead. */
  get backlogged(): boolean {
    return this.behind
  }

  /**
   * The urgent tasks, in a microtask: what a client waits on starts at once. It stops at the
   * end of its slice; the rest (and the normal tasks) go on in the check phase.
   */
  private readonly drainUrgent = () => {
    const deadline = performance.now() + this.sliceMs
    try {
      for (;;) {
        const task = this.urgent.take()
        if (task === undefined) {
          this.microtaskDrain = false
          return
        }
        task()
        if (this.urgent.size > 0 && performance.now() >= deadline) {
          this.microtaskDrain = false
          this.behind = true
          this.scheduleImmediate()
          return
        }
      }
    } catch (error) {
      // A task that throws (a defect outside any fiber) does not stop the others.
      this.microtaskDrain = false
      this.scheduleImmediate()
      throw error
    }
  }

  /**
   * The next task of a drain: a stream's read that has waited `STREAM_MAX_WAIT_MS`, else the
   * urgent tasks, the streams' reads, and normal work, in that order.
   */
  private take(now: number): Scheduler.Task | undefined {
    const oldest = this.streams.peek()
    if (oldest !== undefined && now - oldest.queuedAt >= STREAM_MAX_WAIT_MS) return this.streams.take()!.task
    return this.urgent.take() ?? this.streams.take()?.task ?? this.normal.take()
  }

  /** Every task (`take`'s order), in the check phase: it waits for the I/O of the event loop's iteration. */
  private readonly drainAll = () => {
    let now = performance.now()
    const deadline = now + this.sliceMs
    this.drainingAll = true
    try {
      for (;;) {
        const task = this.take(now)
        if (task === undefined) {
          this.immediateDrain = false
          this.behind = false
          return
        }
        task()
        now = performance.now()
        if (this.pending > 0 && now >= deadline) {
          this.behind = true
          setImmediate(this.drainAll)
          return
        }
      }
    } catch (error) {
      setImmediate(this.drainAll)
      throw error
    } finally {
      this.drainingAll = false
    }
  }
}

/**
 * The scheduler `npm start` runs the server on (`Cli.ts`): slices of 0.5 ms. Measured with
 * `bench/ack.ts` against 2 ms and 1 ms: the shortest slice accepted the burst of connections
 * fastest and acknowledged appends soonest.
 */
export const server = new SlicedScheduler(0.5)
