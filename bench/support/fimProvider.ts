/**
 * A loopback fake FIM provider for the Tab benchmark (OpenAI `/v1/completions` SSE, text in
 * `choices[0].text`) that stamps what it sees with `performance.now()`: the benchmark process
 * runs it and the clients, so the stamps share the clients' clock.
 *
 * A request is named by a marker anywhere in its body (the prompt): `TABBENCH:id=<id>:`, with
 * `stall=1:` after it for an answer that never ends. Per id it records when the request's body
 * was complete (`receivedAt`), when its first token was written (`firstWriteAt`, taken just
 * before the one `write` that carries the response head and the first event) and, for an
 * answer that did not finish, when its connection closed (`closedAt`: the caller aborted it).
 * A normal answer's first event holds `FIRST_TEXT`, four lines, so that the server can stream
 * its settled lines at once; the end (finish, usage, `[DONE]`) follows `restMs` later.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { performance } from "node:perf_hooks"

/** What the model "writes" first: the Tab service streams all but the last two lines of it before the end. */
export const FIRST_TEXT = "for (const item of items) {\n    sum += item\n  }\n  return sum\n"

export interface Stamps {
  receivedAt: number
  firstWriteAt: number
  closedAt: number
}

export interface FimProvider {
  /** `http://127.0.0.1:<port>/v1` */
  readonly baseUrl: string
  readonly stamps: (id: string) => Stamps | undefined
  /** Resolves with the stamps once request `id` was received. */
  readonly received: (id: string) => Promise<Stamps>
  /** Resolves with the stamps once the connection of request `id` closed before its answer ended. */
  readonly aborted: (id: string) => Promise<Stamps>
  readonly reset: () => void
  readonly close: () => Promise<void>
}

const MARKER = /TABBENCH:id=([A-Za-z0-9_-]+):(stall=1:)?/

export const marker = (id: string, stall = false): string => `TABBENCH:id=${id}:${stall ? "stall=1:" : ""}`

const event = (text: string, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: "cmpl-bench", object: "text_completion", model: "bench-fim", choices: [{ index: 0, text, finish_reason: finish }] })}\n\n`

const TAIL = event("", "stop") +
  `data: ${JSON.stringify({ id: "cmpl-bench", object: "text_completion", model: "bench-fim", choices: [], usage: { prompt_tokens: 100, completion_tokens: 20 } })}\n\n` +
  "data: [DONE]\n\n"

const HEAD = { "content-type": "text/event-stream", "cache-control": "no-cache" }

export const start = (options: { readonly restMs?: number } = {}): Promise<FimProvider> =>
  new Promise((resolve) => {
    const restMs = options.restMs ?? 5
    const stamps = new Map<string, Stamps>()
    const onReceived = new Map<string, (s: Stamps) => void>()
    const onAborted = new Map<string, (s: Stamps) => void>()
    const open = new Set<Http.ServerResponse>()
    let closing = false

    const waitFor = (waiters: Map<string, (s: Stamps) => void>, id: string, ready: (s: Stamps) => boolean) =>
      new Promise<Stamps>((done) => {
        const known = stamps.get(id)
        if (known !== undefined && ready(known)) return done(known)
        waiters.set(id, done)
      })
    const fire = (waiters: Map<string, (s: Stamps) => void>, id: string, s: Stamps) => {
      waiters.get(id)?.(s)
      waiters.delete(id)
    }

    const server = Http.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (data: Buffer) => chunks.push(data))
      request.on("end", () => {
        const receivedAt = performance.now()
        const match = MARKER.exec(Buffer.concat(chunks).toString("utf8"))
        const id = match?.[1] ?? `anon-${stamps.size}`
        const s: Stamps = { receivedAt, firstWriteAt: Number.NaN, closedAt: Number.NaN }
        stamps.set(id, s)
        open.add(response)
        response.on("close", () => {
          open.delete(response)
          if (response.writableFinished) return
          s.closedAt = performance.now()
          fire(onAborted, id, s)
        })
        fire(onReceived, id, s)
        response.writeHead(200, HEAD)
        if (match?.[2] !== undefined) {
          // A model that wrote one token and went quiet: only an abort ends it.
          response.write(event("it"))
          return
        }
        s.firstWriteAt = performance.now()
        response.write(event(FIRST_TEXT))
        setTimeout(() => {
          if (!closing && !response.destroyed) response.end(TAIL)
        }, restMs)
      })
    })
    server.keepAliveTimeout = 60_000
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resolve({
        baseUrl: `http://127.0.0.1:${port}/v1`,
        stamps: (id) => stamps.get(id),
        received: (id) => waitFor(onReceived, id, () => true),
        aborted: (id) => waitFor(onAborted, id, (s) => !Number.isNaN(s.closedAt)),
        reset: () => stamps.clear(),
        close: () =>
          new Promise<void>((done) => {
            closing = true
            for (const response of open) response.destroy()
            server.close(() => done())
            server.closeAllConnections()
          })
      })
    })
  })
