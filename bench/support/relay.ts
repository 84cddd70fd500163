/**
 * The floor the server is measured against: a bare `node:http` server that forwards each POST to
 * the upstream in `BENCH_UPSTREAM` (same path and body) and pipes the raw SSE bytes back
 * unchanged, chunk by chunk. `POST /ack` answers at once with an empty body (the floor of a
 * unary call). Prints `READY <port> <pid>`. Debug hook: see ipc.ts.
 *
 *   node --import tsx bench/support/relay.ts
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { installDebugHook } from "./ipc.js"

installDebugHook()
const upstream = new URL(process.env["BENCH_UPSTREAM"] ?? "http://127.0.0.1:1")
const agent = new Http.Agent({ keepAlive: true, maxSockets: Infinity })

const server = Http.createServer((request, response) => {
  const chunks: Array<Buffer> = []
  request.on("data", (data: Buffer) => chunks.push(data))
  request.on("end", () => {
    const body = Buffer.concat(chunks)
    if (request.url === "/ack") {
      response.writeHead(200, { "content-type": "application/proto", "content-length": "0" })
      response.end()
      return
    }
    const forward = Http.request({
      host: upstream.hostname,
      port: upstream.port,
      path: request.url,
      method: "POST",
      agent,
      headers: { "content-type": request.headers["content-type"] ?? "application/json", "content-length": String(body.length) }
    }, (answer) => {
      response.writeHead(answer.statusCode ?? 502, { "content-type": answer.headers["content-type"] ?? "text/event-stream", "cache-control": "no-cache" })
      response.flushHeaders()
      answer.pipe(response)
    })
    forward.on("error", () => response.destroy())
    response.on("close", () => forward.destroy())
    forward.end(body)
  })
})
server.keepAliveTimeout = 60_000
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`READY ${(server.address() as AddressInfo).port} ${process.pid}\n`)
})
