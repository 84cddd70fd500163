/**
 * A throwaway HTTP server on a loopback address for the web tests: it counts the requests it
 * gets (a refused fetch must leave it at 0) and closes, connections and all, with the scope.
 */
import { Effect, type Scope } from "effect"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export interface LoopbackServer {
  readonly port: number
  /** `http://127.0.0.1:<port>` (or `http://[::1]:<port>`). */
  readonly origin: string
  readonly requests: () => number
  /** The bodies of the requests received, in order. */
  readonly bodies: ReadonlyArray<string>
}

export type Handler = (request: IncomingMessage, response: ServerResponse, body: string) => void

export const loopbackServer = (handler: Handler, host = "127.0.0.1"): Effect.Effect<LoopbackServer, Error, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: ReturnType<typeof createServer>; readonly info: LoopbackServer }, Error>((resume) => {
      let count = 0
      const bodies: Array<string> = []
      const server = createServer((request, response) => {
        count++
        const chunks: Array<Buffer> = []
        request.on("data", (chunk: Buffer) => chunks.push(chunk))
        request.on("end", () => {
          const body = Buffer.concat(chunks).toString("utf8")
          bodies.push(body)
          handler(request, response, body)
        })
      })
      server.once("error", (error) => resume(Effect.fail(error)))
      server.listen(0, host, () => {
        const port = (server.address() as AddressInfo).port
        const origin = host.includes(":") ? `http://[${host}]:${port}` : `http://${host}:${port}`
        resume(Effect.succeed({ server, info: { port, origin, requests: () => count, bodies } }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ info }) => info))

/** A handler answering every request with one body and content type. */
export const answer = (contentType: string, body: string | Uint8Array, status = 200): Handler => (_request, response) => {
  response.writeHead(status, { "content-type": contentType })
  response.end(body)
}
