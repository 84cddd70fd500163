/**
 * One web fetch: GET a URL with @effect/platform's HttpClient over an undici `Agent` of its own,
 * follow redirects by hand (each hop's URL re-checked), read at most the byte cap of the body,
 * and turn it into Markdown (HTML) or pass it through (text, JSON, XML).
 *
 * The address policy holds at the connection, not only before it: the agent's connector resolves
 * the host itself, checks every address (`Address.resolveChecked`) and connects to the checked
 * address, so a DNS answer that changes between a check and the connection (rebinding) cannot
 * reach a refused address. The agent lives for one fetch and is destroyed with it (a timeout or a
 * stopped body read closes its sockets), so nothing outlives the time limit.
 */
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Duration, Effect } from "effect"
import { STATUS_CODES } from "node:http"
import { isIP } from "node:net"
import { createBrotliDecompress, createGunzip, createInflate, constants as zlib } from "node:zlib"
import { Agent, buildConnector } from "undici"
import type { WebConfig } from "../Config.js"
import { AddressRefused, bareHost, hostRefusal, isAllowed, type Lookup, portOf, redactUserinfo, resolveChecked, urlProblem } from "./Address.js"
import { describeCause, type FetchedPage, formatBytes, formatDuration, WebError } from "./Domain.js"
import { type Body, readCapped } from "./Body.js"
import { htmlToMarkdown } from "./Html.js"

export interface FetchSettings {
  readonly lookup: Lookup
  readonly userAgent: string
}

const accept = "text/html;q=1.0, application/xhtml+xml;q=0.9, text/markdown;q=0.9, text/plain;q=0.8, application/json;q=0.7, */*;q=0.1"

/** An allowed host's first address, unchecked. */
const resolveAny = async (hostname: string, lookup: Lookup): Promise<string> => {
  const host = bareHost(hostname)
  if (isIP(host) !== 0) return host
  const [first] = await lookup(host)
  if (first === undefined) throw Object.assign(new Error(`${host} has no address`), { code: "ENOTFOUND" })
  return first.address
}

/**
 * An agent whose every connection goes through the address policy; hosts in `allowHosts` connect
 * to the first address the lookup gives. Its `connect` option is a whole connector (not only a `lookup`)
 * because Node skips `lookup` for address literals and may call it again on retries.
 */
const guardedAgent = (allowHosts: ReadonlyArray<string>, lookup: Lookup): Agent => {
  const connect = buildConnector({})
  return new Agent({
    connect: (options, callback) => {
      const port = options.port !== "" ? Number(options.port) : options.protocol === "https:" ? 443 : 80
      const resolved = isAllowed(allowHosts, options.hostname, port) ? resolveAny(options.hostname, lookup) : resolveChecked(options.hostname, lookup)
      // `host` keeps the name, so TLS still verifies the certificate for it (SNI and identity).
      resolved.then(
        (address) => connect({ ...options, hostname: address }, callback),
        (error: Error) => callback(error, null)
      )
    }
  })
}

/** The first error in a cause chain (or an AggregateError's list) that satisfies `test`. */
const findInCauses = <A>(cause: unknown, test: (value: unknown) => value is A, depth = 0): A | undefined => {
  if (test(cause)) return cause
  if (typeof cause !== "object" || cause === null || depth > 8) return undefined
  const { cause: inner, errors } = cause as { cause?: unknown; errors?: unknown }
  if (Array.isArray(errors)) {
    for (const error of errors) {
      const found = findInCauses(error, test, depth + 1)
      if (found !== undefined) return found
    }
  }
  return inner === undefined || inner === cause ? undefined : findInCauses(inner, test, depth + 1)
}

const isRefusal = (value: unknown): value is AddressRefused => value instanceof AddressRefused
const hasCode = (value: unknown): value is { readonly code: string; readonly message?: string } =>
  typeof value === "object" && value !== null && typeof (value as { code?: unknown }).code === "string"

/** What failing to reach `url` means, in a sentence. */
const transportError = (url: URL, from: string | undefined, cause: unknown): WebError => {
  const refused = findInCauses(cause, isRefusal)
  if (refused !== undefined) return refusedError(url, from, refused.reason)
  const coded = findInCauses(cause, hasCode)
  const code = coded?.code ?? ""
  if (code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_NODATA" || code === "EAI_NONAME") {
    return new WebError({ kind: "Network", message: `Could not fetch ${url.href}: the host ${url.hostname} could not be resolved.` })
  }
  if (code === "ECONNREFUSED") return new WebError({ kind: "Network", message: `Could not fetch ${url.href}: the server refused the connection.` })
  if (code === "UND_ERR_CONNECT_TIMEOUT") return new WebError({ kind: "Timeout", message: `Could not fetch ${url.href}: connecting to ${url.host} timed out.` })
  if (/CERT|TLS|SSL/.test(code)) return new WebError({ kind: "Network", message: `Could not fetch ${url.href}: the TLS connection failed (${describeCause(coded)}).` })
  return new WebError({ kind: "Network", message: `Could not fetch ${url.href}: ${describeCause(cause)}.` })
}

const refusedError = (url: URL, from: string | undefined, reason: string) =>
  new WebError({
    kind: "Refused",
    message: `Refused to fetch ${url.href}${from === undefined ? "" : ` (redirected from ${from})`}: ${reason}. Only public addresses can be fetched.`
  })

/** The URL of a hop, or the sentence why it cannot be fetched (scheme, userinfo, a refused host known without DNS). */
const checkHop = (text: string, base: URL | undefined, from: string | undefined, allowHosts: ReadonlyArray<string>): Effect.Effect<URL, WebError> =>
  Effect.gen(function*() {
    let url: URL
    try {
      url = base === undefined ? new URL(text) : new URL(text, base)
    } catch {
      return yield* new WebError({
        kind: "InvalidUrl",
        message: from === undefined ? `${text} is not a valid URL.` : `${from} redirected to ${text}, which is not a valid URL.`
      })
    }
    const problem = urlProblem(url)
    if (problem !== undefined) {
      return yield* new WebError({ kind: "InvalidUrl", message: from === undefined ? problem : `${from} redirected to ${redactUserinfo(url)}: ${problem}` })
    }
    if (!isAllowed(allowHosts, url.hostname, portOf(url))) {
      const refusal = hostRefusal(url.hostname)
      if (refusal !== undefined) return yield* refusedError(url, from, `${bareHost(url.hostname)} is ${refusal}`)
    }
    return url
  })

type Kind = "html" | "text" | "unknown" | "unsupported"

const textTypes = new Set([
  "application/json", "application/xml", "application/javascript", "application/x-javascript", "application/ecmascript",
  "application/yaml", "application/x-yaml", "application/toml", "application/x-ndjson", "application/rss+xml", "application/atom+xml"
])

const kindOf = (mime: string): Kind => {
  if (mime === "") return "unknown"
  if (mime === "text/html" || mime === "application/xhtml+xml") return "html"
  if (mime.startsWith("text/") || textTypes.has(mime) || mime.endsWith("+json") || mime.endsWith("+xml")) return "text"
  return "unsupported"
}

const parseContentType = (header: string | undefined): { readonly mime: string; readonly charset: string | undefined } => {
  const [mime = "", ...params] = (header ?? "").split(";")
  const charset = params.map((param) => /^\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(param)?.[1]).find((value) => value !== undefined)
  return { mime: mime.trim().toLowerCase(), charset }
}

/** No content type: HTML if it looks like HTML, text if it has no NUL byte early on, else unreadable. */
const sniff = (bytes: Uint8Array): Kind => {
  const head = Buffer.from(bytes.subarray(0, 1024)).toString("latin1")
  if (/^\s*(<!doctype html|<html|<head|<body)/i.test(head)) return "html"
  return head.includes("\u0000") ? "unsupported" : "text"
}

/** An HTML page's `<meta charset>`, when the header names none. */
const metaCharset = (bytes: Uint8Array): string | undefined =>
  /<meta[^>]+charset\s*=\s*["']?([\w-]+)/i.exec(Buffer.from(bytes.subarray(0, 2048)).toString("latin1"))?.[1]

const decode = (bytes: Uint8Array, charset: string | undefined): string => {
  try {
    return new TextDecoder(charset ?? "utf-8").decode(bytes)
  } catch {
    // An unknown label: UTF-8 (replacement characters) rather than nothing.
    return new TextDecoder("utf-8").decode(bytes)
  }
}

/**
 * A compressed body (sent although `identity` was asked), inflated up to `cap` bytes; a body cut
 * at the byte cap inflates as far as it goes.
 */
const decompress = (body: Body, encoding: string, cap: number): Effect.Effect<Body | undefined> =>
  Effect.async<Body | undefined>((resume) => {
    const inflater = encoding === "gzip" || encoding === "x-gzip"
      ? createGunzip({ finishFlush: zlib.Z_SYNC_FLUSH })
      : encoding === "deflate"
      ? createInflate({ finishFlush: zlib.Z_SYNC_FLUSH })
      : encoding === "br"
      ? createBrotliDecompress({ finishFlush: zlib.BROTLI_OPERATION_FLUSH })
      : undefined
    if (inflater === undefined) return resume(Effect.succeed(undefined))
    const parts: Array<Buffer> = []
    let size = 0
    let done = false
    const finish = (truncated: boolean) => {
      if (done) return
      done = true
      inflater.destroy()
      resume(Effect.succeed(size === 0 && !truncated && body.bytes.length > 0 ? undefined : { bytes: Buffer.concat(parts, size), truncated }))
    }
    inflater.on("data", (chunk: Buffer) => {
      if (done) return
      const room = cap - size
      parts.push(chunk.subarray(0, room))
      size += Math.min(room, chunk.length)
      if (chunk.length > room) finish(true)
    })
    inflater.on("end", () => finish(body.truncated))
    inflater.on("error", () => finish(body.truncated))
    inflater.end(body.bytes)
    return Effect.sync(() => inflater.destroy())
  })

const isRedirect = (status: number) => status === 301 || status === 302 || status === 303 || status === 307 || status === 308

const statusText = (status: number) => `${status}${STATUS_CODES[status] === undefined ? "" : ` ${STATUS_CODES[status]}`}`

/** Fetches `target` under `config` (read once, at the start of the fetch). */
export const fetchPage = (config: WebConfig, target: string, settings: FetchSettings): Effect.Effect<FetchedPage, WebError> => {
  const { allowHosts, maxBytes, maxRedirects, maxMarkdownChars } = config.fetch
  return Effect.gen(function*() {
    const agent = yield* Effect.acquireRelease(
      Effect.sync(() => guardedAgent(allowHosts, settings.lookup)),
      // Not awaited: destroying sockets is immediate, and a finalizer must never hold up a timeout.
      (agent) => Effect.sync(() => void agent.destroy().catch(() => undefined))
    )
    const client = NodeHttpClient.makeUndici(agent)
    let url = yield* checkHop(target.trim(), undefined, undefined, allowHosts)
    let from: string | undefined
    for (let redirects = 0;; redirects++) {
      const request = HttpClientRequest.get(url).pipe(
        HttpClientRequest.setHeaders({ "user-agent": settings.userAgent, accept, "accept-encoding": "identity" })
      )
      const hop = url
      const redirectedFrom = from
      const response = yield* client.execute(request).pipe(
        Effect.mapError((error) => transportError(hop, redirectedFrom, "cause" in error && error.cause !== undefined ? error.cause : error))
      )
      if (isRedirect(response.status)) {
        const location = response.headers["location"]
        if (location === undefined || location === "") {
          return yield* new WebError({ kind: "Http", status: response.status, message: `${url.href} answered ${statusText(response.status)} without saying where to.` })
        }
        if (redirects >= maxRedirects) {
          return yield* new WebError({
            kind: "Http",
            status: response.status,
            message: `Stopped fetching ${target}: more than ${maxRedirects} redirects (the last, from ${url.href}, pointed to ${location}).`
          })
        }
        from = url.href
        url = yield* checkHop(location, url, from, allowHosts)
        continue
      }
      if (response.status >= 300) {
        return yield* new WebError({ kind: "Http", status: response.status, message: `${url.href} answered ${statusText(response.status)}.` })
      }
      const contentTypeHeader = response.headers["content-type"] ?? ""
      const { charset, mime } = parseContentType(contentTypeHeader)
      let kind = kindOf(mime)
      if (kind === "unsupported") {
        return yield* new WebError({
          kind: "Unsupported",
          message: `${url.href} is ${mime}, which cannot be read as text; only HTML and text pages (plain text, Markdown, JSON, XML) can be fetched.`
        })
      }
      let body = yield* readCapped(response, maxBytes, (cause) => transportError(url, undefined, cause))
      const encoding = (response.headers["content-encoding"] ?? "identity").trim().toLowerCase()
      if (encoding !== "identity" && encoding !== "") {
        const inflated = yield* decompress(body, encoding, maxBytes)
        if (inflated === undefined) {
          return yield* new WebError({ kind: "Unsupported", message: `${url.href} was sent with content-encoding ${encoding}, which could not be decoded.` })
        }
        body = inflated
      }
      if (kind === "unknown") kind = sniff(body.bytes)
      if (kind === "unsupported") {
        return yield* new WebError({ kind: "Unsupported", message: `${url.href} has no content type and does not look like text; only HTML and text pages can be fetched.` })
      }
      const text = decode(body.bytes, charset ?? (kind === "html" ? metaCharset(body.bytes) : undefined))
      let markdown = kind === "html" ? htmlToMarkdown(text, url.href) : text
      let truncated = body.truncated
      const notes: Array<string> = []
      if (body.truncated) notes.push(`${url.href} is larger than ${formatBytes(maxBytes)}; only the first ${formatBytes(maxBytes)} were read.`)
      if (markdown.length > maxMarkdownChars) {
        notes.push(`The page's text is ${markdown.length} characters long; only the first ${maxMarkdownChars} are shown.`)
        markdown = markdown.slice(0, maxMarkdownChars)
        truncated = true
      }
      if (notes.length > 0) markdown = `${markdown}\n\n[${notes.join(" ")}]`
      return {
        url: url.href,
        status: response.status,
        contentType: contentTypeHeader === "" ? (kind === "html" ? "text/html" : "text/plain") : contentTypeHeader,
        markdown,
        truncated,
        bytesRead: body.bytes.length
      } satisfies FetchedPage
    }
  }).pipe(
    Effect.scoped,
    Effect.timeoutFail({
      duration: Duration.millis(config.timeoutMs),
      onTimeout: () => new WebError({ kind: "Timeout", message: `${target} did not load within ${formatDuration(config.timeoutMs)}; try again later or another source.` })
    })
  )
}
