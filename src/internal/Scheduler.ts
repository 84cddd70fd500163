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
 * - a drain starts in a microtask when the queue was empty (an idle server reacts at once) and
 *   stops, once `sliceMs` have passed, after the task that was running; the rest goes on in
 *   the next event-loop iteration (`setImmediate`), after the sockets that became readable
 *   were read and the next connection accepted.
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

/** A FIFO of tasks that reuses its array (no `shift`). */
class TaskQueue {
  private items: Array<Scheduler.Task | undefined> = []
  private head = 0

  get size() {
    return this.items.length - this.head
  }

  push(task: Scheduler.Task) {
    this.items.push(task)
  }

  take(): Scheduler.Task | undefined {
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
  private readonly normal = new TaskQueue()
  /** A drain is queued (microtask or `setImmediate`) or running. */
  private scheduled = false

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

  /** Queues work that is not a fiber's at the normal priority (a model stream's read, see `ModelCall.ts`). */
  queueNormal(task: Scheduler.Task): void {
    this.enqueue(task, false)
  }

  private enqueue(task: Scheduler.Task, urgent: boolean): void {
    if (urgent) this.urgent.push(task)
    else this.normal.push(task)
    if (!this.scheduled) {
      this.scheduled = true
      queueMicrotask(this.drain)
    }
  }

  /** Tasks waiting to run. */
  get pending(): number {
    return this.urgent.size + this.normal.size
  }

  /** Tasks wait for a later slice: the process is behind, so new work should queue rather than jump ahead. */
  get backlogged(): boolean {
    return this.pending > 0
  }

  private readonly drain = () => {
    const deadline = performance.now() + this.sliceMs
    try {
      for (;;) {
        const task = this.urgent.take() ?? this.normal.take()
        if (task === undefined) {
          this.scheduled = false
          return
        }
        task()
        if (this.pending > 0 && performance.now() >= deadline) {
          setImmediate(this.drain)
          return
        }
      }
    } catch (error) {
      // A task that throws (a defect outside any fiber) does not stop the others.
      setImmediate(this.drain)
      throw error
    }
  }
}

/**
 * The scheduler `npm start` runs the server on (`Cli.ts`): slices of 0.5 ms. Measured with
 * `bench/ack.ts` against 2 ms and 1 ms: the shortest slice accepted the burst of connections
 * fastest and acknowledged appends soonest.
 */
export const server = new SlicedScheduler(0.5)
