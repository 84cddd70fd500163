/**
 * A client of the intercepting proxy, as Cursor is one: HTTP CONNECT to the proxy, then TLS to
 * the named host over that tunnel (trusting only the CAs it is given), then HTTP/1.1 or HTTP/2
 * requests. Plus a fake upstream proxy that counts the CONNECTs it relays.
 */
import * as Http from "node:http"
import * as Http2 from "node:http2"
import * as Https from "node:https"
import * as Net from "node:net"
import * as Tls from "node:tls"

/** Sends CONNECT host:port to the proxy; resolves with the socket after its 200, or rejects with the status line. */
export const connectTunnel = (proxyPort: number, target: string): Promise<Net.Socket> =>
  new Promise((resolve, reject) => {
    const socket = Net.connect({ host: "127.0.0.1", port: proxyPort })
    socket.once("error", reject)
    socket.once("connect", () => socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`))
    let head = Buffer.alloc(0)
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk])
      const end = head.indexOf("\r\n\r\n")
      if (end < 0) return
      socket.off("data", onData)
      const status = head.subarray(0, end).toString("latin1").split("\r\n")[0] ?? ""
      if (!status.includes(" 200 ")) {
        socket.destroy()
        return reject(new Error(`CONNECT ${target}: ${status}`))
      }
      socket.pause()
      const rest = head.subarray(end + 4)
      if (rest.length > 0) socket.unshift(rest)
      socket.removeAllListeners("error")
      resolve(socket)
    }
    socket.on("data", onData)
    socket.on("close", () => reject(new Error(`CONNECT ${target}: closed (${head.toString("latin1").split("\r\n")[0] ?? ""})`)))
  })

/** TLS to `servername` through the proxy, trusting only `ca`. */
export const tlsVia = async (proxyPort: number, servername: string, port: number, ca: ReadonlyArray<string>, alpn: ReadonlyArray<string>) => {
  const tunnel = await connectTunnel(proxyPort, `${servername}:${port}`)
  return new Promise<Tls.TLSSocket>((resolve, reject) => {
    const socket = Tls.connect({ socket: tunnel, servername, ca: [...ca], ALPNProtocols: [...alpn] })
    socket.once("secureConnect", () => resolve(socket))
    socket.once("error", reject)
  })
}

export interface Answer {
  readonly status: number
  readonly headers: Record<string, unknown>
  readonly body: Buffer
  readonly trailers: Record<string, unknown>
}

/** One HTTP/1.1 request over a fresh TLS connection through the proxy. */
export const http1Via = async (
  proxyPort: number,
  host: string,
  ca: ReadonlyArray<string>,
  request: { readonly method: string; readonly path: string; readonly headers?: Record<string, string>; readonly body?: Uint8Array }
): Promise<Answer> => {
  const socket = await tlsVia(proxyPort, host, 443, ca, ["http/1.1"])
  return new Promise((resolve, reject) => {
    const outgoing = Http.request({ createConnection: () => socket, method: request.method, path: request.path, headers: { host, ...request.headers } }, (answer) => {
      const chunks: Array<Buffer> = []
      answer.on("data", (chunk: Buffer) => chunks.push(chunk))
      answer.on("end", () => {
        resolve({ status: answer.statusCode ?? 0, headers: answer.headers, body: Buffer.concat(chunks), trailers: answer.trailers })
        socket.destroy()
      })
      answer.on("error", reject)
    })
    outgoing.on("error", reject)
    outgoing.end(request.body === undefined ? undefined : Buffer.from(request.body))
  })
}

/** One HTTP/2 request over a fresh TLS connection through the proxy. */
export const http2Via = async (
  proxyPort: number,
  host: string,
  ca: ReadonlyArray<string>,
  request: { readonly method: string; readonly path: string; readonly headers?: Record<string, string>; readonly body?: Uint8Array }
): Promise<Answer & { readonly alpn: string | false }> => {
  const socket = await tlsVia(proxyPort, host, 443, ca, ["h2"])
  const session = Http2.connect(`https://${host}`, { createConnection: () => socket })
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": request.method, ":path": request.path, ...request.headers })
    let status = 0
    let headers: Record<string, unknown> = {}
    let trailers: Record<string, unknown> = {}
    const chunks: Array<Buffer> = []
    stream.on("response", (received) => {
      status = Number(received[":status"])
      headers = received
    })
    stream.on("trailers", (received) => {
      trailers = received
    })
    stream.on("data", (chunk: Buffer) => chunks.push(chunk))
    stream.on("end", () => {
      resolve({ status, headers, body: Buffer.concat(chunks), trailers, alpn: socket.alpnProtocol ?? false })
      session.close()
    })
    stream.on("error", reject)
    stream.end(request.body === undefined ? undefined : Buffer.from(request.body))
  })
}

/** A minimal upstream HTTP proxy (CONNECT only) that records the targets it relayed. */
export const fakeUpstreamProxy = async () => {
  const targets: Array<string> = []
  const server = Http.createServer()
  server.on("connect", (request: Http.IncomingMessage, client: Net.Socket, head: Buffer) => {
    targets.push(request.url ?? "")
    const [host, port] = (request.url ?? "").split(":")
    const remote = Net.connect({ host: host === "localhost" ? "127.0.0.1" : host!, port: Number(port) }, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n")
      if (head.length > 0) remote.write(head)
      remote.pipe(client)
      client.pipe(remote)
    })
    remote.on("error", () => client.destroy())
    client.on("error", () => remote.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: (server.address() as Net.AddressInfo).port,
    targets,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

/** An https.Agent whose connections go through the proxy (CONNECT, then TLS trusting only `ca`), as Cursor's are. */
export const proxyAgent = (proxyPort: number, ca: ReadonlyArray<string>): Https.Agent => {
  const agent = new Https.Agent({ keepAlive: true, maxSockets: 64 })
  const connect = (options: { readonly host?: string | null; readonly port?: number | string | null }, done: (error: Error | null, socket?: Net.Socket) => void) => {
    const host = options.host ?? "localhost"
    tlsVia(proxyPort, host, Number(options.port ?? 443), ca, ["http/1.1"]).then((socket) => done(null, socket), (error: Error) => done(error))
    return undefined
  }
  ;(agent as unknown as { createConnection: typeof connect }).createConnection = connect
  return agent
}
