/**
 * A Cursor-like client that survives server crashes, for the crash-at-every-commit-point test.
 *
 * What it does across a crash, as Cursor does:
 * - appends go out one at a time in seqno order (sequential delivery); an append that fails
 *   with a connection error (refused, reset, hang up) is kept, and once the server answers
 *   `/healthz` again it is sent again with the same request id and seqno; one answered
 *   `unavailable` (503: the server cannot acknowledge it yet, e.g. held until a recovered turn
 *   speaks) is sent again after a pause; only a 2xx answer acknowledges it;
 * - when RunSSE breaks without an end-stream frame, it waits for the server and opens RunSSE
 *   again with the same request id;
 * - it answers every exec of every RunSSE connection (a restarted process numbers its exec ids
 *   afresh, so answered ids are remembered per connection), and acknowledges every `set_blob`.
 *
 * Every wait is bounded: `serverBackTimeoutMs` for the server to come back, `turnTimeoutMs`
 * for a turn to end. Plain Promises on `node:http`.
 */
import { Either } from "effect"
import * as http from "node:http"
import * as Dialect from "../../src/Dialect.js"
import type { AgentServerMessage, ConversationStateStructure, ExecServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import {
  type AgentClientMessageInit,
  bidiAppendBody,
  type FrameEvent,
  frameEvent,
  openRawRunSse,
  runRequestMessage,
  type RunRequestSpec,
  sha256Hex,
  toHex,
  type Workspace
} from "./CursorClient.js"

export interface CrashClientOptions {
  /** `http://127.0.0.1:<port>` (the same port across restarts). */
  readonly baseUrl: string
  readonly workspace: Workspace
  /** How long to wait for the server to answer `/healthz` after a connection failure (default 60 s). */
  readonly serverBackTimeoutMs?: number
  /** How long a turn may take, restarts included (default 90 s). */
  readonly turnTimeoutMs?: number
}

export interface CrashTurnResult {
  readonly requestId: string
  /** Every non-heartbeat event, over all RunSSE connections, in arrival order. */
  readonly events: ReadonlyArray<FrameEvent & { readonly connection: number }>
  readonly end: Dialect.EndStream | undefined
  readonly checkpoints: ReadonlyArray<ConversationStateStructure>
  readonly text: string
  /** RunSSE connections opened (1 when nothing broke). */
  readonly connections: number
  /** Appends sent again after a connection failure or an `unavailable` answer. */
  readonly resentAppends: number
  /** Every append, with the status of its acknowledgement (0: never acknowledged). */
  readonly appends: ReadonlyArray<{ readonly seqno: number; readonly what: string; readonly attempts: number; readonly status: number }>
  /** Anything that went wrong from the client's point of view (a refused append, no end...). */
  readonly problems: ReadonlyArray<string>
}

const CONNECTION_ERRORS = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ECONNABORTED", "ENOTCONN"])

const isConnectionError = (error: unknown): boolean => {
  const e = error as NodeJS.ErrnoException
  return CONNECTION_ERRORS.has(e.code ?? "") || /socket hang up/.test(e.message ?? "")
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

const describe = (message: AgentClientMessageInit): string => {
  const m = message.message
  if (m === undefined || m.case === undefined) return "empty"
  const value = m.value as { message?: { case?: string }; action?: { case?: string } }
  const inner = value.message?.case ?? value.action?.case
  return inner === undefined ? m.case : `${m.case}.${inner}`
}

export class CrashClient {
  private readonly url: URL
  constructor(readonly options: CrashClientOptions) {
    this.url = new URL(options.baseUrl)
  }

  /** Resolves once `/healthz` answers 200; rejects after `serverBackTimeoutMs`. */
  async serverBack(): Promise<void> {
    const deadline = Date.now() + (this.options.serverBackTimeoutMs ?? 60_000)
    while (Date.now() < deadline) {
      const ok = await new Promise<boolean>((done) => {
        const request = http.get({ host: this.url.hostname, port: this.url.port, path: "/healthz", agent: false, timeout: 1_000 }, (response) => {
          response.resume()
          done(response.statusCode === 200)
        })
        request.on("timeout", () => request.destroy())
        request.on("error", () => done(false))
      })
      if (ok) return
      await sleep(100)
    }
    throw new Error(`the server did not come back within ${this.options.serverBackTimeoutMs ?? 60_000} ms`)
  }

  /** One POST on a fresh connection (no keep-alive: a dead process leaves no stale socket behind). */
  post(path: string, body: Uint8Array, headers: Readonly<Record<string, string>>): Promise<{ status: number; body: string }> {
    return new Promise((resolvePost, reject) => {
      const request = http.request({
        host: this.url.hostname,
        port: this.url.port,
        path,
        method: "POST",
        agent: false,
        headers: { "content-type": "application/proto", "connect-protocol-version": "1", ...headers, "content-length": String(body.length) }
      }, (response) => {
        const chunks: Array<Buffer> = []
        response.on("data", (chunk: Buffer) => chunks.push(chunk))
        response.on("end", () => resolvePost({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }))
        response.on("error", reject)
      })
      request.setTimeout(30_000, () => request.destroy(new Error("no answer within 30 s")))
      request.on("error", reject)
      request.end(body)
    })
  }

  /** Runs one turn to its end-stream frame, across any number of server restarts. */
  runTurn(spec: RunRequestSpec & { readonly requestId: string }): Promise<CrashTurnResult> {
    return new CrashTurn(this, spec).run()
  }
}

interface Pending {
  readonly seqno: number
  readonly message: AgentClientMessageInit
  readonly what: string
  attempts: number
  status: number
}

class CrashTurn {
  private nextSeqno = 0
  private readonly queue: Array<Pending> = []
  private readonly all: Array<Pending> = []
  private pumping = false
  private readonly events: Array<FrameEvent & { readonly connection: number }> = []
  private readonly checkpoints: Array<ConversationStateStructure> = []
  private readonly problems: Array<string> = []
  private end: Dialect.EndStream | undefined
  private connections = 0
  private resent = 0
  private over = false
  private current: http.ClientRequest | undefined
  private readonly execWork: Array<Promise<void>> = []
  private pumpDone: Promise<void> = Promise.resolve()

  constructor(readonly client: CrashClient, readonly spec: RunRequestSpec & { readonly requestId: string }) {}

  async run(): Promise<CrashTurnResult> {
    const timeoutMs = this.client.options.turnTimeoutMs ?? 90_000
    let timer: ReturnType<typeof setTimeout> | undefined
    const timedOut = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), timeoutMs)))
    this.send(runRequestMessage(this.spec))
    const outcome = await Promise.race([this.streamLoop().then(() => "ended" as const, (e: Error) => e), timedOut])
    clearTimeout(timer)
    this.over = true
    this.current?.destroy()
    if (outcome === "timeout") this.problems.push(`the turn did not end within ${timeoutMs} ms`)
    else if (outcome instanceof Error) this.problems.push(outcome.message)
    // Appends already produced (the last acknowledgements) go out before the result is read; bounded.
    await Promise.race([Promise.allSettled(this.execWork).then(() => this.pumpDone), sleep(10_000)])
    return {
      requestId: this.spec.requestId,
      events: this.events,
      end: this.end,
      checkpoints: this.checkpoints,
      text: this.events.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join(""),
      connections: this.connections,
      resentAppends: this.resent,
      appends: this.all.map(({ attempts, seqno, status, what }) => ({ seqno, what, attempts, status })),
      problems: this.problems
    }
  }

  // ---------------------------------------------------------------------------
  // Appends: one at a time, in seqno order, re-sent after a connection failure
  // ---------------------------------------------------------------------------

  private send(message: AgentClientMessageInit) {
    const pending: Pending = { seqno: this.nextSeqno++, message, what: describe(message), attempts: 0, status: 0 }
    this.queue.push(pending)
    this.all.push(pending)
    if (!this.pumping) {
      this.pumping = true
      this.pumpDone = this.pump().finally(() => {
        this.pumping = false
      })
    }
  }

  private async pump() {
    while (this.queue.length > 0) {
      const item = this.queue[0]!
      item.attempts++
      if (item.attempts > 1) this.resent++
      try {
        const response = await this.client.post(
          "/aiserver.v1.BidiService/BidiAppend",
          bidiAppendBody(this.spec.requestId, item.seqno, item.message),
          { "x-request-id": this.spec.requestId }
        )
        item.status = response.status
        if (response.status === 503 && item.attempts < 10) {
          await sleep(100)
          continue
        }
        if (response.status !== 200) this.problems.push(`append ${item.seqno} (${item.what}) answered ${response.status}: ${response.body}`)
        this.queue.shift()
      } catch (error) {
        if (!isConnectionError(error) || item.attempts >= 10) {
          this.problems.push(`append ${item.seqno} (${item.what}) failed: ${(error as Error).message}`)
          this.queue.shift()
          continue
        }
        try {
          await this.client.serverBack()
        } catch (e) {
          this.problems.push(`append ${item.seqno} (${item.what}): ${(e as Error).message}`)
          this.queue.length = 0
        }
      }
    }
  }

  // ---------------------------------------------------------------------------
  // RunSSE: reopened with the same request id until the end-stream frame
  // ---------------------------------------------------------------------------

  private async streamLoop(): Promise<void> {
    while (!this.over) {
      const outcome = await this.openOnce()
      if (outcome === "ended") return
      if (this.over) return
      await this.client.serverBack()
    }
  }

  private openOnce(): Promise<"ended" | "broken"> {
    const connection = ++this.connections
    const answeredExecs = new Set<number>()
    const answeredKv = new Set<number>()
    return new Promise((resolveStream) => {
      this.current = openRawRunSse(this.client.options.baseUrl, this.spec.requestId, {
        onStatus: (status) => {
          if (status !== 200) this.problems.push(`RunSSE answered HTTP ${status}`)
        },
        onMessage: (message) => this.onMessage(connection, message, answeredExecs, answeredKv),
        onUndecodable: (error) => void this.problems.push(`undecodable server frame: ${error.message}`),
        onEnd: (end) => {
          if (Either.isLeft(end)) this.problems.push(`bad end-stream frame: ${end.left.message}`)
          else this.end = end.right
          resolveStream("ended")
        },
        onBroken: () => resolveStream("broken")
      })
    })
  }

  private onMessage(connection: number, message: AgentServerMessage, answeredExecs: Set<number>, answeredKv: Set<number>) {
    const event = frameEvent(message)
    if (event.kind !== "heartbeat") this.events.push({ ...event, connection })
    const m = message.message
    switch (m.case) {
      case "conversationCheckpointUpdate":
        this.checkpoints.push(m.value)
        return
      case "execServerMessage":
        if (answeredExecs.has(m.value.id)) return
        answeredExecs.add(m.value.id)
        this.execWork.push(this.runExec(m.value))
        return
      case "kvServerMessage": {
        const kv = m.value.message
        if (answeredKv.has(m.value.id)) return
        answeredKv.add(m.value.id)
        if (kv.case === "setBlobArgs") {
          if (toHex(kv.value.blobId) !== sha256Hex(kv.value.blobData)) this.problems.push(`blob ${toHex(kv.value.blobId)} is not the SHA-256 of its data`)
          this.send({ message: { case: "kvClientMessage", value: { id: m.value.id, message: { case: "setBlobResult", value: {} } } } })
        } else if (kv.case === "getBlobArgs") {
          this.send({ message: { case: "kvClientMessage", value: { id: m.value.id, message: { case: "getBlobResult", value: { error: { message: "blob not found" } } } } } })
        }
        return
      }
      default:
        return
    }
  }

  private async runExec(exec: ExecServerMessage) {
    const controller = new AbortController()
    try {
      for await (const answer of this.client.options.workspace.answer(exec, controller.signal)) {
        if (answer.case === "throw") {
          this.send({ message: { case: "execClientControlMessage", value: { message: { case: "throw", value: { id: exec.id, error: answer.error } } } } })
        } else {
          this.send({ message: { case: "execClientMessage", value: { id: exec.id, message: answer } } })
        }
      }
    } catch (error) {
      this.send({ message: { case: "execClientControlMessage", value: { message: { case: "throw", value: { id: exec.id, error: String((error as Error).message) } } } } })
    }
    this.send({ message: { case: "execClientControlMessage", value: { message: { case: "streamClose", value: { id: exec.id } } } } })
  }
}
