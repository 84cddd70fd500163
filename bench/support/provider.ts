/**
 * A loopback fake OpenAI Chat provider for the benchmarks that stamps every text delta with its
 * send time. Unlike `test/support/FakeProvider.ts` (whose scripts are fixed strings), the body
 * of each event is written at send time: delta `k` of stream `id` carries the text ` t<k>.` and
 * `sendTimes(id)[k]` holds `performance.now()` taken just before its `write`. The benchmark
 * process runs both this provider and the clients, so the two stamps share one clock.
 *
 * What a request gets is read from a marker anywhere in its body (the user message):
 * `BENCH:id=<id>:n=<deltas>:min=<ms>:max=<ms>:` streams `n` deltas spaced uniformly at random
 * in [min, max] ms; `max=0` writes them back to back as fast as the socket takes them (one
 * `write` per event, as a provider flushing each token). Requests without a marker get a
 * three-delta answer. A trailing `lead=1:` writes delta 0 in the response's first write, with
 * the headers and the role chunk, so that its stamp is the provider's first byte (the time to
 * first delta bench).
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { performance } from "node:perf_hooks"

export interface StampedProvider {
  readonly baseUrl: string
  /** Send times of stream `id`, indexed by delta number (NaN until sent). */
  readonly sendTimes: (id: string) => Float64Array | undefined
  /** Forgets the send times (between runs). */
  readonly reset: () => void
  /** Requests answered so far. */
  readonly requests: () => number
  readonly close: () => Promise<void>
}

const MARKER = /BENCH:id=([A-Za-z0-9_-]+):n=(\d+):min=(\d+):max=(\d+):(lead=1:)?/g

export const marker = (id: string, deltas: number, minMs: number, maxMs: number, lead = false): string =>
  `BENCH:id=${id}:n=${deltas}:min=${minMs}:max=${maxMs}:${lead ? "lead=1:" : ""}`

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${
    JSON.stringify({
      id: "chatcmpl-bench",
      object: "chat.completion.chunk",
      created: 1754693439,
      model: "bench-model",
      system_fingerprint: "fp_bench",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }]
    })
  }\n\n`

const TAIL = chunk({}, "stop") +
  `data: ${JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 100, completion_tokens: 10 } })}\n\n` +
  "data: [DONE]\n\n"

/** Stamps in a text: the delta numbers it carries (a frame may carry more than one). */
export const stampsIn = (text: string): Array<number> => {
  const out: Array<number> = []
  for (const match of text.matchAll(/t(\d+)\./g)) out.push(Number(match[1]))
  return out
}

export const start = (): Promise<StampedProvider> =>
  new Promise((resolve) => {
    const times = new Map<string, Float64Array>()
    const open = new Set<Http.ServerResponse>()
    let closing = false
    let answered = 0

    const stream = (response: Http.ServerResponse, id: string, n: number, minMs: number, maxMs: number, lead = false) => {
      const stamps = new Float64Array(n).fill(Number.NaN)
      times.set(id, stamps)
      let k = 0
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      if (lead && n > 0) {
        // The first byte of the body carries delta 0: its stamp is the provider's first byte.
        const first = chunk({ role: "assistant", content: "" }) + chunk({ content: ` t0.` })
        stamps[0] = performance.now()
        response.write(first)
        k = 1
      } else {
        response.write(chunk({ role: "assistant", content: "" }))
      }
      const finish = () => {
        open.delete(response)
        response.end(TAIL)
      }
      if (maxMs > 0) {
        const next = () => {
          if (closing || response.destroyed) return
          if (k >= n) return finish()
          const data = chunk({ content: ` t${k}.` })
          stamps[k] = performance.now()
          response.write(data)
          k++
          setTimeout(next, minMs + Math.random() * (maxMs - minMs))
        }
        setTimeout(next, minMs + Math.random() * (maxMs - minMs))
        return
      }
      // Unpaced: one write per event until the socket pushes back, then wait for drain; yield
      // to the event loop now and then so that concurrent streams and the clients progress.
      const pump = () => {
        let burst = 0
        while (k < n) {
          if (closing || response.destroyed) return
          const data = chunk({ content: ` t${k}.` })
          stamps[k] = performance.now()
          const more = response.write(data)
          k++
          if (!more) return void response.once("drain", pump)
          if (++burst >= 64) return void setImmediate(pump)
        }
        finish()
      }
      pump()
    }

    const server = Http.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (data: Buffer) => chunks.push(data))
      request.on("end", () => {
        answered++
        open.add(response)
        response.on("close", () => open.delete(response))
        const body = Buffer.concat(chunks).toString("utf8")
        let last: RegExpMatchArray | undefined
        for (const match of body.matchAll(MARKER)) last = match
        if (last === undefined) return stream(response, `anon-${answered}`, 3, 1, 2)
        stream(response, last[1]!, Number(last[2]), Number(last[3]), Number(last[4]), last[5] !== undefined)
      })
    })
    server.keepAliveTimeout = 60_000
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resolve({
        baseUrl: `http://127.0.0.1:${port}/v1`,
        sendTimes: (id) => times.get(id),
        reset: () => times.clear(),
        requests: () => answered,
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
