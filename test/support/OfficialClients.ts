/**
 * The official `@connectrpc/connect-node` transports as the tests use them, a turn driven through
 * them on each wire, and a throwaway TLS certificate for the TLS listener.
 */
import { create, toBinary } from "@bufbuild/protobuf"
import { createClient } from "@connectrpc/connect"
import type { Transport } from "@connectrpc/connect"
import { createTransport } from "@connectrpc/connect/protocol-connect"
import { createGrpcTransport, createGrpcWebTransport, createNodeHttpClient, Http2SessionManager } from "@connectrpc/connect-node"
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { AgentClientMessageSchema, AgentService } from "../../src/gen/agent/v1/agent_pb.js"
import type { AgentClientMessage, AgentServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import { BidiService } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { runRequestMessage, toHex } from "./CursorClient.js"

export type ProtocolName = "connect" | "grpc" | "grpc-web"
export type HttpVersion = "1.1" | "2"

/**
 * The official Connect client insists on `application/connect+proto` for a stream; Cursor's
 * RunSSE answers `text/event-stream` (as api2 does). This transport only rewrites that header,
 * so the envelopes and the end-stream frame are parsed by Connect's own code.
 */
export const connectShimTransport = (baseUrl: string, httpVersion: HttpVersion = "1.1", ca?: Buffer): Transport => {
  const session = httpVersion === "2" ? new Http2SessionManager(baseUrl, undefined, ca === undefined ? undefined : { ca }) : undefined
  const node = session === undefined ? createNodeHttpClient({ httpVersion: "1.1" }) : createNodeHttpClient({ httpVersion: "2", sessionProvider: () => session })
  return createTransport({
    baseUrl,
    httpClient: async (request) => {
      const response = await node(request)
      const header = new Headers(response.header)
      if (header.get("content-type") === "text/event-stream") header.set("content-type", "application/connect+proto")
      return { ...response, header }
    },
    useBinaryFormat: true,
    interceptors: [],
    acceptCompression: [],
    sendCompression: null,
    compressMinBytes: 1024,
    readMaxBytes: 0xffffffff,
    writeMaxBytes: 0xffffffff
  })
}

/** An official transport in `protocol` (gRPC is HTTP/2 only); `ca` trusts a TLS listener's certificate. */
export const transportOf = (protocol: ProtocolName, baseUrl: string, httpVersion: HttpVersion, ca?: Buffer): Transport => {
  const nodeOptions = ca === undefined ? {} : { nodeOptions: { ca } }
  if (protocol === "grpc") return createGrpcTransport({ baseUrl, ...nodeOptions })
  if (protocol === "grpc-web") return createGrpcWebTransport({ baseUrl, httpVersion, ...nodeOptions } as Parameters<typeof createGrpcWebTransport>[0])
  return connectShimTransport(baseUrl, httpVersion, ca)
}

/** A self-signed certificate for 127.0.0.1 in `dir` (openssl): its PEM files, and the certificate to trust. */
export const selfSignedCert = (dir: string) => {
  const certFile = join(dir, "cert.pem")
  const keyFile = join(dir, "key.pem")
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
    "-keyout", keyFile, "-out", certFile
  ], { stdio: "ignore" })
  return { certFile, keyFile, cert: readFileSync(certFile) }
}

/** The acknowledgement of a `set_blob` the server asks for (the official clients keep no blobs). */
export const blobAck = (message: AgentServerMessage): AgentClientMessage | undefined =>
  message.message.case === "kvServerMessage"
    ? create(AgentClientMessageSchema, { message: { case: "kvClientMessage", value: { id: message.message.value.id, message: { case: "setBlobResult", value: {} } } } })
    : undefined

/**
 * One turn on RunSSE + BidiAppend: the run request appended, the stream read to its end, blobs
 * acknowledged as they come; the stream read through `readTransport` when given (another
 * instance of a team's server).
 */
export const sseTurn = async (transport: Transport, conversationId: string, text: string, requestId = `req-${conversationId}`, readTransport = transport) => {
  const bidi = createClient(BidiService, transport)
  const agent = createClient(AgentService, readTransport)
  let seqno = 0
  const append = (message: AgentClientMessage) =>
    bidi.bidiAppend({ requestId: { requestId }, appendSeqno: BigInt(seqno++), data: toHex(toBinary(AgentClientMessageSchema, message)) })
  await append(create(AgentClientMessageSchema, runRequestMessage({ conversationId, text, messageId: `m-${conversationId}` })))
  const messages: Array<AgentServerMessage> = []
  for await (const message of agent.runSSE({ requestId }, { timeoutMs: 15_000 })) {
    messages.push(message)
    const ack = blobAck(message)
    if (ack !== undefined) await append(ack)
  }
  return messages
}

/** One turn on `Run`: the run request and the blob acknowledgements on the input stream, the output read to its end. */
export const runTurn = async (transport: Transport, conversationId: string, text: string, requestId = `req-${conversationId}`) => {
  const agent = createClient(AgentService, transport)
  const queue: Array<AgentClientMessage> = [create(AgentClientMessageSchema, runRequestMessage({ conversationId, text, messageId: `m-${conversationId}` }))]
  let wake: (() => void) | undefined
  let done = false
  async function* input() {
    while (!done) {
      const next = queue.shift()
      if (next !== undefined) {
        yield next
        continue
      }
      await new Promise<void>((resolve) => (wake = resolve))
    }
  }
  const messages: Array<AgentServerMessage> = []
  try {
    for await (const message of agent.run(input(), { timeoutMs: 15_000, headers: { "x-request-id": requestId } })) {
      messages.push(message)
      const ack = blobAck(message)
      if (ack !== undefined) {
        queue.push(ack)
        wake?.()
      }
    }
  } finally {
    done = true
    wake?.()
  }
  return messages
}
