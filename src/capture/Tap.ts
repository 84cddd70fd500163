/**
 * Capture mode at the front door: a call's `Protocol` wrapped so that what it reads (the
 * client's messages) and what it writes (the server's frames, answers, outcomes) also go to the
 * request's capture file, decoded to protobuf JSON and redacted. The door wraps only while
 * capture is on (`Front.ts`: one boolean test); the wrapper never throws into the call.
 */
import { randomUUID } from "node:crypto"
import { AgentClientMessageSchema, AgentServerMessageSchema } from "../gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiRequestIdSchema } from "../gen/aiserver/v1/aiserver_pb.js"
import { clientVersionOf } from "../Drift.js"
import { ConnectError, FLAG_END_STREAM, parseEnvelopes } from "../transport/Connect.js"
import type { AgentCall } from "../transport/front/Agent.js"
import type { NodeRequest, NodeResponse, Protocol } from "../transport/front/Wire.js"
import type { ErrorJson, WireFields } from "./Format.js"
import { decodeJson, methodOf, parseText } from "./Json.js"
import type { Json } from "./Json.js"
import type { CaptureFile, Recorder } from "./Recorder.js"
import { redactAny, redactMessage } from "./Redact.js"

/** Runs capture work; whatever it throws stays here. */
const safely = (work: () => void) => {
  try {
    work()
  } catch {
    // A capture is best effort: the call goes on.
  }
}

const errorJson = (error: ConnectError): ErrorJson => ({ code: error.code, message: error.message })

const headerOf = (request: NodeRequest, name: string): string => {
  const value = request.headers[name]
  return typeof value === "string" ? value : ""
}

const httpOf = (response: NodeResponse): "1.1" | "2" => ("stream" in response ? "2" : "1.1")

const objectAt = (json: Json | undefined, key: string): Json | undefined =>
  json !== null && typeof json === "object" && !Array.isArray(json) ? json[key] : undefined

/** An `AgentClientMessage` (bytes, or JSON in the JSON codec) as redacted JSON. */
const clientMessageJson = (file: CaptureFile, bytes: Uint8Array | Json | undefined): Json | undefined => {
  const json = bytes instanceof Uint8Array ? decodeJson(AgentClientMessageSchema, bytes) : bytes
  return json === undefined ? undefined : redactMessage(AgentClientMessageSchema, json, file.contents)
}

/** The client's run request names its conversation: that conversation's model calls go to this file. */
const bindRun = (recorder: Recorder, file: CaptureFile, message: Json | undefined) => {
  const conversationId = objectAt(objectAt(message, "runRequest"), "conversationId")
  if (objectAt(message, "runRequest") === undefined) return
  recorder.bindConversation(typeof conversationId === "string" && conversationId !== "" ? conversationId : file.requestId, file)
}

/** The server's frames (Connect envelopes) as lines: messages, and the outcome. */
const serverFrames = (file: CaptureFile, base: WireFields, codec: "proto" | "json", frames: ReadonlyArray<Uint8Array>) => {
  for (const frame of frames) {
    const envelopes = parseEnvelopes(frame, Number.MAX_SAFE_INTEGER)
    if (envelopes instanceof ConnectError) continue
    for (const { flags, payload } of envelopes) {
      if ((flags & FLAG_END_STREAM) !== 0) {
        file.write({ kind: "server", ...base, end: parseText(payload) ?? {} })
        continue
      }
      const json = codec === "json" ? parseText(payload) : decodeJson(AgentServerMessageSchema, payload)
      if (json !== undefined) file.write({ kind: "server", ...base, message: redactMessage(AgentServerMessageSchema, json, file.contents) })
    }
  }
}

/** The first message of a stream's request body (RunSSE's `BidiRequestId`). */
const firstMessage = (body: Uint8Array): Uint8Array | undefined => {
  const envelopes = parseEnvelopes(body, Number.MAX_SAFE_INTEGER)
  return envelopes instanceof ConnectError ? undefined : envelopes.find((e) => (e.flags & 0x80) === 0)?.payload
}

/** An agent call's protocol, capturing. */
export const tapAgent = (recorder: Recorder, call: AgentCall, protocol: Protocol, request: NodeRequest, response: NodeResponse): Protocol => {
  const clientVersion = clientVersionOf(request.headers)
  let file: CaptureFile | undefined
  let base: WireFields = { wire: call, protocol: protocol.name, codec: protocol.codec, http: httpOf(response), call: 0 }
  let append: string | undefined
  if (call === "Run") {
    const header = headerOf(request, "x-request-id")
    file = recorder.fileFor(header || `run-${randomUUID()}`, clientVersion)
    base = { ...base, call: file.nextCall("Run") }
    file.write({ kind: "open", ...base, requestIdHeader: header !== "" })
  }
  const server = (fields: { readonly message?: Json; readonly end?: Json; readonly answer?: Json; readonly error?: ErrorJson; readonly closed?: true }) =>
    file?.write({ kind: "server", ...base, ...fields, ...(append === undefined ? {} : { append }) })

  const readBody = (body: Uint8Array) => {
    if (call === "BidiAppend") {
      const json = protocol.codec === "json" ? parseText(body) : decodeJson(BidiAppendRequestSchema, body)
      const requestId = objectAt(objectAt(json, "requestId"), "requestId")
      if (typeof requestId !== "string" || requestId === "") return
      file = recorder.fileFor(requestId, clientVersion)
      base = { ...base, call: file.nextCall("BidiAppend") }
      const seqno = objectAt(json, "appendSeqno")
      append = seqno === undefined ? "0" : String(seqno)
      const hex = objectAt(json, "data")
      const raw = objectAt(json, "dataBinary")
      const bytes = typeof hex === "string" && hex !== "" ? new Uint8Array(Buffer.from(hex, "hex"))
        : typeof raw === "string" ? new Uint8Array(Buffer.from(raw, "base64")) : undefined
      const message = bytes === undefined ? undefined : clientMessageJson(file, bytes)
      bindRun(recorder, file, message)
      file.write({ kind: "client", ...base, encoding: typeof hex === "string" && hex !== "" ? "hex" : "binary", message: { requestId: { requestId }, appendSeqno: append, message: message ?? null } })
      return
    }
    const payload = firstMessage(body)
    if (payload === undefined) return
    const json = protocol.codec === "json" ? parseText(payload) : decodeJson(BidiRequestIdSchema, payload)
    const requestId = objectAt(json, "requestId")
    if (typeof requestId !== "string" || requestId === "") return
    file = recorder.fileFor(requestId, clientVersion)
    base = { ...base, call: file.nextCall("RunSSE") }
    file.write({ kind: "client", ...base, message: { requestId } })
  }

  return {
    ...protocol,
    read: (req, limit, kind, done) =>
      protocol.read(req, limit, kind, (body) => {
        if (!(body instanceof ConnectError)) safely(() => readBody(body))
        done(body)
      }),
    answer: (res, message) => {
      safely(() => server({ answer: {} }))
      protocol.answer(res, message)
    },
    write: (res, frames) => {
      safely(() => file !== undefined && serverFrames(file, base, protocol.codec, frames))
      protocol.write(res, frames)
    },
    end: (res) => {
      safely(() => server({ closed: true }))
      protocol.end(res)
    },
    fail: (res, error) => {
      safely(() => server({ end: { error: { ...errorJson(error) } } }))
      protocol.fail(res, error)
    },
    error: (res, kind, error) => {
      safely(() => server({ error: errorJson(error) }))
      protocol.error(res, kind, error)
    },
    inbound: (payload) =>
      safely(() => {
        if (file === undefined) return
        const message = clientMessageJson(file, payload)
        bindRun(recorder, file, message)
        file.write({ kind: "client", ...base, message: message ?? null })
      })
  }
}

/** A side call's protocol, capturing into the files of the same client version (only when there are some). */
export const tapRpc = (recorder: Recorder, path: string, protocol: Protocol, request: NodeRequest): Protocol => {
  const files = recorder.filesOfVersion(clientVersionOf(request.headers))
  const method = methodOf(path)
  if (files.length === 0) return protocol
  let requestJson: Json | undefined
  const decode = (bytes: Uint8Array, which: "input" | "output"): Json | undefined => {
    if (protocol.codec === "json") return redactAny(parseText(bytes) ?? null, files[0]!.contents)
    const schema = method?.[which]
    if (schema === undefined) return { bytes: bytes.length }
    const json = decodeJson(schema, bytes)
    return json === undefined ? { bytes: bytes.length } : redactMessage(schema, json, files[0]!.contents)
  }
  const record = (fields: { readonly response?: Json; readonly error?: ErrorJson }) => {
    for (const file of files) file.write({ kind: "side", path, protocol: protocol.name, ...(requestJson === undefined ? {} : { request: requestJson }), ...fields })
  }
  return {
    ...protocol,
    read: (req, limit, kind, done) =>
      protocol.read(req, limit, kind, (body) => {
        if (!(body instanceof ConnectError)) safely(() => void (requestJson = decode(body, "input")))
        done(body)
      }),
    answer: (res, message) => {
      safely(() => record({ response: decode(message, "output") ?? null }))
      protocol.answer(res, message)
    },
    error: (res, kind, error) => {
      safely(() => record({ error: errorJson(error) }))
      protocol.error(res, kind, error)
    }
  }
}
