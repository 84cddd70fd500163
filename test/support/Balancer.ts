/**
 * A load balancer for tests of several instances: each HTTP/1.1 request goes to the next
 * upstream in turn (no affinity: a turn's RunSSE and its appends land on different instances),
 * with the upstream's own Host, as a balancer set up for the servers sends it; an upstream that
 * refuses the connection (killed) is passed over for the next. Counts the requests each served.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { Effect } from "effect"
import type { Scope } from "effect"

export interface Balancer {
  readonly baseUrl: string
  /** Requests answered by each upstream, by its base URL. */
  readonly served: ReadonlyMap<string, number>
  /** What each request was and where it went, in arrival order (`POST /path -> upstream`). */
  readonly log: ReadonlyArray<string>
  readonly close: () => Promise<void>
}

export const start = (upstreams: ReadonlyArray<string>): Promise<Balancer> =>
  new Promise((resolve) => {
    const served = new Map(upstreams.map((upstream) => [upstream, 0]))
    const log: Array<string> = []
    const agent = new Http.Agent({ keepAlive: true })
    let next = 0
    const server = Http.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.once("end", () => {
        const body = Buffer.concat(chunks)
        const attempt = (tries: number) => {
          const upstream = upstreams[next++ % upstreams.length]!
          const url = new URL(request.url ?? "/", upstream)
          const outgoing = Http.request(url, { method: request.method, agent, headers: { ...request.headers, host: url.host } }, (answer) => {
            served.set(upstream, (served.get(upstream) ?? 0) + 1)
            log.push(`${request.method} ${request.url} -> ${upstream} ${answer.statusCode}`)
            response.writeHead(answer.statusCode ?? 502, answer.headers)
            answer.pipe(response)
          })
          outgoing.once("error", (error: NodeJS.ErrnoException) => {
            if (response.headersSent) return response.destroy()
            if (error.code === "ECONNREFUSED" && tries + 1 < upstreams.length) return attempt(tries + 1)
            response.writeHead(502).end(String(error.code ?? error.message))
          })
          // The client went away before its answer was written: the upstream's request goes too.
          response.once("close", () => {
            if (!response.writableFinished) outgoing.destroy()
          })
          outgoing.end(body)
        }
        attempt(0)
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as AddressInfo).port
      resolve({
        baseUrl: `http://127.0.0.1:${port}`,
        served,
        log,
        close: () =>
          new Promise((done) => {
            agent.destroy()
            server.closeAllConnections()
            server.close(() => done())
          })
      })
    })
  })

export const make = (upstreams: ReadonlyArray<string>): Effect.Effect<Balancer, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.promise(() => start(upstreams)), (balancer) => Effect.promise(() => balancer.close()))
