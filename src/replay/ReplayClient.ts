/**
 * The client half of a capture, sent again: the same calls on the same wire and protocol
 * (Connect, gRPC, gRPC-Web; HTTP/1.1 or h2c as captured, gRPC always on h2c), each client
 * message once the replayed server has sent as many messages as the capture's client had seen
 * before it sent that one (text and thinking deltas and heartbeats not counted: how a provider's
 * text was split is the network's), the appends one at a time, each after the previous answer.
 */
import { AgentServerMessageSchema, AgentClientMessageSchema } from "../gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiRequestIdSchema } from "../gen/aiserver/v1/aiserver_pb.js"
import { fromBinary, toBinary, create } from "@bufbuild/protobuf"
import * as Http from "node:http"
import * as Http2 from "node:http2"
import { envelope } from "../transport/Connect.js"
import type { ReadLine, WireFields } from "../capture/Format.js"
import { encodeJson } from "../capture/Json.js"
import type { Json } from "../capture/Json.js"

export interface ReplayTarget {
  /** `http://127.0.0.1:<port>`: the HTTP/1.1 listener. */
  readonly baseUrl: string
  /** `http://127.0.0.1:<port>`: the h2c listener. */
  readonly h2cUrl: string
}

type Action =
  | { readonly _tag: "RunSse"; readonly wire: WireFields; readonly requestId: string; readonly after: number }
  | { readonly _tag: "Append"; readonly wire: WireFields; readonly body: Uint8Array; readonly after: number }
  | { readonly _tag: "RunOpen"; readonly wire: WireFields; readonly header: string | undefined; readonly after: number }
  | { readonly _tag: "RunMessage"; readonly wire: WireFields; readonly payload: Uint8Array; readonly after: number }

const isObject = (json: Json | undefined): json is { [key: string]: Json } => json !== null && typeof json === "object" && !Array.isArray(json)

/** A server message the client counts: not a heartbeat, not a text or thinking delta. */
const countedJson = (message: Json | undefined): boolean => {
  const update = isObject(message) ? message["interactionUpdate"] : undefined
  return !(isObject(update) && (update["heartbeat"] !== undefined || update["textDelta"] !== undefined || update["thinkingDelta"] !== undefined))
}

const countedBytes = (payload: Uint8Array): boolean => {
  const message = fromBinary(AgentServerMessageSchema, payload)
  if (message.message.case !== "interactionUpdate") return true
  const kind = message.message.value.message.case
  return kind !== "heartbeat" && kind !== "textDelta" && kind !== "thinkingDelta"
}

/** What the capture's client did, in order, each with the count of server messages it had seen. */
export const actionsOf = (requestId: string, lines: ReadonlyArray<ReadLine>): ReadonlyArray<Action> => {
  const actions: Array<Action> = []
  let seen = 0
  for (const line of lines) {
    if (line.kind === "server" && line.wire !== "BidiAppend" && line.message !== undefined && countedJson(line.message)) seen++
    if (line.kind === "open") actions.push({ _tag: "RunOpen", wire: line, header: line.requestIdHeader ? requestId : undefined, after: seen })
    if (line.kind !== "client") continue
    if (line.codec !== "proto") throw new Error("replay takes binary captures (this one's agent calls were JSON)")
    if (line.wire === "RunSSE") actions.push({ _tag: "RunSse", wire: line, requestId, after: seen })
    else if (line.wire === "Run") {
      if (line.message !== null) actions.push({ _tag: "RunMessage", wire: line, payload: encodeJson(AgentClientMessageSchema, line.message), after: seen })
    } else {
      const json = line.message as { requestId: Json; appendSeqno: Json; message: Json }
      const message = json.message === null ? new Uint8Array(0) : encodeJson(AgentClientMessageSchema, json.message)
      const body = toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, {
        requestId: { requestId },
        appendSeqno: BigInt(String(json.appendSeqno ?? "0")),
        ...(line.encoding === "binary" ? { dataBinary: message } : { data: Buffer.from(message).toString("hex") })
      }))
      actions.push({ _tag: "Append", wire: line, body, after: seen })
    }
  }
  return actions
}

const CONTENT_TYPES = { connect: "application/connect+proto", grpc: "application/grpc", "grpc-web": "application/grpc-web+proto" } as const

/** Reads envelopes off a response as they come: counted messages, and the end (stream end, end-stream or trailer frame). */
class StreamReader {
  private pending: Buffer = Buffer.alloc(0)
  ended = false
  constructor(private readonly onMessage: () => void, private readonly onEnd: () => void) {}

  push(chunk: Buffer) {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk])
    while (this.pending.length >= 5) {
      const length = this.pending.readUInt32BE(1)
      if (this.pending.length < 5 + length) return
      const flags = this.pending[0]!
      const payload = new Uint8Array(this.pending.subarray(5, 5 + length))
      this.pending = this.pending.subarray(5 + length)
      if ((flags & 0x82) !== 0) this.end()
      else if (countedBytes(payload)) this.onMessage()
    }
  }

  end() {
    if (this.ended) return
    this.ended = true
    this.onEnd()
  }
}

/** Sends the client half of a capture to `target`; resolves when it is all sent and the streams ended, or `timeoutMs` passed waiting. */
export const replayClient = async (target: ReplayTarget, actions: ReadonlyArray<Action>, timeoutMs = 15_000): Promise<{ readonly stalled: string | undefined }> => {
  const agent = new Http.Agent({ keepAlive: true })
  let session: Http2.ClientHttp2Session | undefined
  const h2 = () => (session ??= Http2.connect(target.h2cUrl))
  let seen = 0
  const waiters: Array<() => void> = []
  const wake = () => waiters.splice(0).forEach((resolve) => resolve())
  const readers: Array<StreamReader> = []
  const runStreams = new Map<number, Http2.ClientHttp2Stream>()
  const reader = () => {
    const made = new StreamReader(() => {
      seen++
      wake()
    }, wake)
    readers.push(made)
    return made
  }
  const until = async (done: () => boolean) => {
    const deadline = Date.now() + timeoutMs
    while (!done()) {
      if (Date.now() > deadline) return false
      await new Promise<void>((resolve) => {
        waiters.push(resolve)
        setTimeout(resolve, 100)
      })
    }
    return true
  }
  /** A POST over HTTP/1.1 or h2c, its response read by `read`. */
  const post = (wire: WireFields, path: string, body: Uint8Array, headers: Record<string, string>, read: StreamReader | undefined): Promise<void> =>
    new Promise((resolve, reject) => {
      const head = { "content-type": wire.wire === "BidiAppend" && wire.protocol === "connect" ? "application/proto" : CONTENT_TYPES[wire.protocol], ...headers }
      if (wire.protocol === "connect") Object.assign(head, { "connect-protocol-version": "1" })
      if (wire.protocol === "grpc") Object.assign(head, { te: "trailers" })
      if (wire.http === "2" || wire.protocol === "grpc") {
        const stream = h2().request({ ":method": "POST", ":path": path, ...head })
        stream.on("data", (chunk: Buffer) => read?.push(chunk))
        stream.on("end", () => (read?.end(), resolve()))
        stream.on("error", reject)
        stream.end(body)
        return
      }
      const url = new URL(target.baseUrl)
      const request = Http.request({ host: url.hostname, port: url.port, path, method: "POST", agent, headers: { ...head, "content-length": String(body.length) } }, (response) => {
        response.on("data", (chunk: Buffer) => read?.push(chunk))
        response.on("end", () => (read?.end(), resolve()))
        response.on("error", reject)
      })
      request.on("error", reject)
      request.end(body)
    })

  let stalled: string | undefined
  try {
    for (const [index, action] of actions.entries()) {
      if (!(await until(() => seen >= action.after))) {
        stalled = `the replayed server sent ${seen} messages; the capture's client had seen ${action.after} before its message ${index}`
        break
      }
      const unary = action.wire.protocol === "connect" ? (bytes: Uint8Array) => bytes : (bytes: Uint8Array) => envelope(0, bytes)
      if (action._tag === "RunSse") {
        const body = envelope(0, toBinary(BidiRequestIdSchema, create(BidiRequestIdSchema, { requestId: action.requestId })))
        void post(action.wire, "/agent.v1.AgentService/RunSSE", body, {}, reader()).catch(() => undefined)
      } else if (action._tag === "Append") {
        await post(action.wire, "/aiserver.v1.BidiService/BidiAppend", unary(action.body), {}, undefined)
      } else if (action._tag === "RunOpen") {
        const read = reader()
        const head = { ":method": "POST", ":path": "/agent.v1.AgentService/Run", "content-type": CONTENT_TYPES[action.wire.protocol], ...(action.header === undefined ? {} : { "x-request-id": action.header }) }
        const stream = h2().request(action.wire.protocol === "connect" ? { ...head, "connect-protocol-version": "1" } : action.wire.protocol === "grpc" ? { ...head, te: "trailers" } : head)
        stream.on("data", (chunk: Buffer) => read.push(chunk))
        stream.on("end", () => read.end())
        stream.on("close", () => read.end())
        stream.on("error", () => read.end())
        runStreams.set(action.wire.call, stream)
      } else {
        runStreams.get(action.wire.call)?.write(envelope(0, action.payload))
      }
    }
    if (stalled === undefined && !(await until(() => readers.every((r) => r.ended)))) stalled = "the replayed streams did not end"
  } finally {
    for (const stream of runStreams.values()) stream.close()
    session?.close()
    agent.destroy()
  }
  return { stalled }
}
