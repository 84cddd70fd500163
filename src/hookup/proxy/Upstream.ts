/**
 * Where the proxy's own outgoing connections go: straight to the target, or through the user's
 * upstream proxy (`HTTPS_PROXY` or configuration) with an HTTP CONNECT, so a user behind a
 * corporate proxy keeps it. Written by hand: Node has no CONNECT client, and the proxy needs the
 * raw socket (to tunnel bytes, or to start TLS or HTTP/2 on it) rather than an HTTP agent.
 */
import * as Net from "node:net"

export interface Address {
  readonly host: string
  readonly port: number
}

export interface UpstreamProxy extends Address {
  /** `Proxy-Authorization` value, from the URL's user info. */
  readonly authorization: string | undefined
  readonly url: string
  /** Hosts reached directly, not through it (`NO_PROXY`): names (a leading dot or none: the name and every name under it), IPs, `*`. */
  readonly bypass?: ReadonlyArray<string> | undefined
}

/** Whether a host is reached directly rather than through the upstream proxy. */
export const bypasses = (upstream: UpstreamProxy | undefined, host: string): boolean => {
  if (upstream === undefined) return true
  const name = host.toLowerCase().replace(/^\[|\]$/g, "").replace(/\.$/, "")
  return (upstream.bypass ?? []).some((entry) => {
    if (entry === "*") return true
    const base = entry.startsWith(".") ? entry.slice(1) : entry
    return name === base || name.endsWith(`.${base}`)
  })
}

/** Reads an upstream proxy URL (`http://[user:pass@]host:port`); a URL we cannot use is an error message. */
export const parseProxyUrl = (text: string): UpstreamProxy | string => {
  let url: URL
  try {
    url = new URL(text.includes("://") ? text : `http://${text}`)
  } catch {
    return `the upstream proxy ${text} is not a URL`
  }
  if (url.protocol !== "http:") return `the upstream proxy ${text} must be an http:// proxy (it is ${url.protocol})`
  const authorization = url.username === ""
    ? undefined
    : `Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString("base64")}`
  return { host: url.hostname.replace(/^\[|\]$/g, ""), port: url.port === "" ? 80 : Number(url.port), authorization, url: `http://${url.host}` }
}

const HEAD_LIMIT = 16 * 1024

/** A TCP connection to `target`, through `via` unless `name` (default: the target's host) bypasses it. Resolves once bytes can flow. */
export const openTcp = (target: Address, via: UpstreamProxy | undefined, options: { readonly timeoutMs?: number; readonly name?: string } = {}): Promise<Net.Socket> =>
  new Promise((resolve, reject) => {
    const timeoutMs = options.timeoutMs ?? 10_000
    // NO_PROXY is about the name the client asked for, not where it was resolved to.
    const upstream = bypasses(via, options.name ?? target.host) ? undefined : via
    const first = upstream ?? target
    const socket = Net.connect({ host: first.host, port: first.port })
    const fail = (message: string) => {
      socket.destroy()
      reject(new Error(message))
    }
    socket.setTimeout(timeoutMs, () => fail(`no connection to ${first.host}:${first.port} within ${timeoutMs} ms`))
    socket.once("error", (error) => fail(`${upstream === undefined ? "" : `proxy ${upstream.url}: `}${error.message}`))
    socket.once("connect", () => {
      if (upstream === undefined) {
        socket.setTimeout(0)
        socket.removeAllListeners("error")
        return resolve(socket)
      }
      const authority = target.host.includes(":") ? `[${target.host}]:${target.port}` : `${target.host}:${target.port}`
      socket.write(
        `CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n` +
          (upstream.authorization === undefined ? "" : `Proxy-Authorization: ${upstream.authorization}\r\n`) + "\r\n"
      )
      let head = Buffer.alloc(0)
      const onData = (chunk: Buffer) => {
        head = Buffer.concat([head, chunk])
        const end = head.indexOf("\r\n\r\n")
        if (end < 0) {
          if (head.length > HEAD_LIMIT) fail(`upstream proxy ${upstream.url} sent an oversized CONNECT answer`)
          return
        }
        socket.off("data", onData)
        const status = /^HTTP\/1\.[01] (\d{3})/.exec(head.subarray(0, end).toString("latin1"))?.[1]
        if (status !== "200") {
          return fail(`upstream proxy ${upstream.url} refused CONNECT ${authority} (${status === undefined ? "not HTTP" : `HTTP ${status}`})`)
        }
        socket.pause()
        const rest = head.subarray(end + 4)
        if (rest.length > 0) socket.unshift(rest)
        socket.setTimeout(0)
        socket.removeAllListeners("error")
        resolve(socket)
      }
      socket.on("data", onData)
    })
  })
