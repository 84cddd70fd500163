/**
 * The server's fiber scheduler: one run queue for the process, urgent tasks first, run in short
 * slices that give the event loop back between them.
 *
 * Effect's default scheduler gives each fiber its own chain of microtasks and falls back to a
 * timer only after 2,048 chained drains, so while many fibers have work the process reads no
 * socket. Node 20's libuv accepts one connection per event-loop iteration: under a burst of
 * turns (measured with `bench/ack.ts`, 200 at once) the accept queue of the listening socket
 * grew past 1,800 connections, and a BidiAppend waited seconds before the server even saw it,
 * then queued behind other conversations' work at each of its steps. Here:
 *
 * - a task is `urgent` when its fiber's scheduling priority is `URGENT` or more (what a client
 *   waits on at once: the HTTP requests and `Run` streams, see `Server.ts` and `Run.ts`, and a
 *   conversation's actor while it commits a client's input to a running turn, see `Runner.ts`)
 *   and `normal` otherwise (turn starts, model streams, priority 0); a drain runs every urgent
 *   task before the next normal one;
 * - urgent tasks start in a microtask (an idle server reacts at once); normal ones wait for the
 *   event loop's check phase (`setImmediate`), after the I/O callbacks of the iteration and
 *   the socket writes they queued (`process.nextTick`), which run only once the microtask
 *   queue is empty: a model call's fiber resumed by its response head, for one, no longer runs
 *   before the first delta in the same read is handled and written (it delayed it by ~0.4 ms,
 *   measured with `bench/first.ts` and a scratch trace);
 * - a drain stops, once `sliceMs` have passed, after the task that was running; the rest goes
 *   on in the next event-loop iteration (`setImmediate`), after the sockets that became
 *   readable were read and the next connection accepted. Until a drain empties the queue the
 *   process is behind (`backlogged`), and urgent tasks too wait for the check phase.
 * - while the process is behind, a model stream's read is not applied in its callback but
 *   queued (`queueStream`, see `ModelCall.ts`) in a lane of its own, taken after the urgent
 *   tasks, or before them once it has waited `STREAM_MAX_WAIT_MS`, and before normal work. A
 *   delta then never waits for a burst of turn starts (a turn start is ~10 ms of work, a
 *   read's delta ~0.05 ms). In the normal lane (measured with `bench/latency.ts` at 200
 *   streams: a burst of 200 turn starts while the first streams already answer) deltas waited
 *   behind the starts: added latency p50 64 ms, against 7 ms before the server had this
 *   scheduler. Behind the urgent lane with no limit they waited behind the burst's requests:
 *   p99 240-410 ms.
 *
 * A fiber still yields after `currentMaxOpsBeforeYield` operations, as on Effect's scheduler;
 * it is not preempted on time. Preempting on time made fibers yield at any operation, among
 * them the one between an Effect `Semaphore`'s `take` counting a permit and `withPermits`
 * installing its release (interruptible there): a fiber interrupted while it waited in that
 * gap kept its permit forever, and the SQL client's single-permit semaphore hung every later
 * statement (seen in `bench/ack.ts` runs).
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

export class SlicedScheduler implements Scheduler.Scheduler {
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
