/**
 * Bad input against the running server: every answer is a Connect error (an HTTP 4xx/501 with
 * JSON `{code, message}`, or for RunSSE an end-stream frame carrying the error) or an
 * acknowledgement; the server keeps serving; and no conversation the bad input named changed.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as http from "node:http"
import { gzipSync } from "node:zlib"
import * as Dialect from "../../src/Dialect.js"
import { AgentClientMessageSchema } from "../../src/gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiAppendResponseSchema, BidiRequestIdSchema } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import {
  bidiAppendBody,
  envelope,
  FLAG_END_STREAM,
  runRequestMessage,
  runSseBody,
  scriptedWorkspace,
  seededRandom,
  toHex
} from "../support/CursorClient.js"
import type { ExecAnswer, RawResponse } from "../support/CursorClient.js"
import { clientFor } from "../support/Transcripts.js"
import { call, text, toolCalls, usage } from "../support/FakeRuntime.js"
import type { Script } from "../support/FakeRuntime.js"
import * as ServerHarness from "../support/ServerHarness.js"

const APPEND = "/aiserver.v1.BidiService/BidiAppend"
const RUN_SSE = "/agent.v1.AgentService/RunSSE"
const APPEND_LIMIT = 64 * 1024
const RUN_SSE_LIMIT = 1024

const badInputHarness = (scripts: ReadonlyArray<Script> = [], transport: NonNullable<ServerHarness.HarnessOptions["transport"]> = {}) =>
  ServerHarness.make({
    scripts,
    transport: { bidiAppendMaxBytes: APPEND_LIMIT, runSseMaxBytes: RUN_SSE_LIMIT, heartbeatMs: 50, blobAckTimeoutMs: 300, ...transport }
  })

const json = (response: RawResponse): unknown => JSON.parse(Buffer.from(response.body).toString("utf8"))

/** A unary Connect error: 4xx, 501 unimplemented or 503 unavailable (retryable), with a JSON `{code, message}` body. */
const isUnaryError = (response: RawResponse, code?: string): boolean => {
  if (!((response.status >= 400 && response.status < 500) || response.status === 501 || response.status === 503)) return false
  if (!String(response.headers["content-type"]).startsWith("application/json")) return false
  const body = json(response) as { code?: unknown; message?: unknown }
  return typeof body.code === "string" && typeof body.message === "string" && (code === undefined || body.code === code)
}

/** An acknowledged append: 200 with an empty `BidiAppendResponse`. */
const isAck = (response: RawResponse): boolean => {
  if (response.status !== 200 || response.headers["content-type"] !== "application/proto") return false
  try {
    fromBinary(BidiAppendResponseSchema, response.body)
    return true
  } catch {
    return false
  }
}

const assertUnaryError = (response: RawResponse, code: string) =>
  assert.isTrue(isUnaryError(response, code), `expected a Connect ${code} error, got ${response.status} ${Buffer.from(response.body).toString("utf8")}`)

const assertAck = (response: RawResponse) =>
  assert.isTrue(isAck(response), `expected an acknowledgement, got ${response.status} ${Buffer.from(response.body).toString("utf8")}`)

/** A RunSSE refused before it starts: HTTP 200 with exactly one end-stream frame carrying the error. */
const runSseError = (response: RawResponse): Dialect.EndStream | undefined => {
  const body = Buffer.from(response.body)
  if (response.status !== 200 || body.length < 5 || body[0] !== FLAG_END_STREAM) return undefined
  const length = body.readUInt32BE(1)
  if (body.length !== 5 + length) return undefined
  const end = Dialect.decodeEndStream(body.subarray(5))
  return end._tag === "Right" ? end.right : undefined
}

const assertRunSseError = (response: RawResponse, code: string) => {
  const end = runSseError(response)
  assert.isTrue(end?._tag === "Error" && end.code === code, `expected an end-stream ${code}, got ${response.status} ${Buffer.from(response.body).toString("utf8")}`)
}

/** A POST with a chunked body (no content-length), for the streaming size limit. */
const chunkedPost = (baseUrl: string, path: string, chunks: ReadonlyArray<Uint8Array>): Promise<RawResponse> =>
  new Promise((resolve, reject) => {
    const url = new URL(baseUrl)
    const request = http.request({ host: url.hostname, port: url.port, path, method: "POST", headers: { "content-type": "application/proto", "transfer-encoding": "chunked" } }, (response) => {
      const parts: Array<Buffer> = []
      response.on("data", (chunk: Buffer) => parts.push(chunk))
      response.on("end", () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: new Uint8Array(Buffer.concat(parts)) }))
    })
    request.on("error", reject)
    for (const chunk of chunks) request.write(chunk)
    request.end()
  })

/** A RunSSE POST that gives up on a stream that opened (we only check how it answered). */
const runSsePost = (baseUrl: string, body: Uint8Array, readAll = false): Promise<RawResponse> =>
  new Promise((resolve, reject) => {
    const url = new URL(baseUrl)
    const request = http.request({
      host: url.hostname,
      port: url.port,
      path: RUN_SSE,
      method: "POST",
      headers: { "content-type": "application/connect+proto", "connect-protocol-version": "1", "content-length": String(body.length) }
    }, (response) => {
      if (!readAll && response.headers["content-type"] === "text/event-stream") {
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: new Uint8Array() })
        request.destroy()
        return
      }
      const parts: Array<Buffer> = []
      response.on("data", (chunk: Buffer) => parts.push(chunk))
      response.on("end", () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: new Uint8Array(Buffer.concat(parts)) }))
    })
    request.on("error", reject)
    request.end(body)
  })

const assertUntouched = (harness: ServerHarness.Harness, conversationId: string) =>
  Effect.gen(function*() {
    const loaded = yield* harness.store.load(conversationId)
    assert.isTrue(Option.isNone(loaded), `conversation ${conversationId} was changed by bad input`)
  })

/** Raw protobuf bytes of an AgentClientMessage whose run_request names `conversationId` and carries an unknown action case. */
const runRequestWithUnknownAction = (conversationId: string, field: number): Uint8Array =>
  new BinaryWriter()
    .tag(1, WireType.LengthDelimited).fork()
    .tag(5, WireType.LengthDelimited).string(conversationId)
    .tag(2, WireType.LengthDelimited).fork()
    .tag(field, WireType.LengthDelimited).bytes(new Uint8Array([0x0a, 0x01, 0x78]))
    .join()
    .join()
    .finish()

const appendOfBytes = (requestId: string, seqno: bigint, bytes: Uint8Array): Uint8Array =>
  toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId }, appendSeqno: seqno, data: toHex(bytes) }))

/** After the abuse, a normal turn still works end to end. */
const normalTurnWorks = (harness: ServerHarness.Harness, conversationId: string) =>
  Effect.gen(function*() {
    const client = yield* clientFor(harness)
    const transcript = yield* Effect.promise(() => client.run({ conversationId, text: "still there?" }))
    assert.deepStrictEqual(transcript.problems, [])
    assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok())
    assert.isDefined(transcript.usage)
    const loaded = yield* harness.store.load(conversationId)
    assert.deepStrictEqual(Option.getOrThrow(loaded).state.messages.map((m) => m.role), ["user", "assistant"])
  })

describe("Bad input over the wire", () => {
  it.scopedLive("RunSSE: a malformed envelope, an empty body, bad protobuf, a missing id, an oversized body: an end-stream error, no session", () =>
    Effect.gen(function*() {
      const harness = yield* badInputHarness([text("fine", usage(1, 1))])
      const client = yield* clientFor(harness)
      const sessions = harness.transport.sessionCount()
      const valid = runSseBody("req-x")
      // Declares more bytes than it carries.
      assertRunSseError(yield* Effect.promise(() => client.post(RUN_SSE, valid.subarray(0, valid.length - 2), { "content-type": "application/connect+proto" })), "invalid_argument")
      // A header cut short.
      assertRunSseError(yield* Effect.promise(() => client.post(RUN_SSE, new Uint8Array([0, 0, 0]), { "content-type": "application/connect+proto" })), "invalid_argument")
      assertRunSseError(yield* Effect.promise(() => client.post(RUN_SSE, new Uint8Array(), { "content-type": "application/connect+proto" })), "invalid_argument")
      assertRunSseError(yield* Effect.promise(() => client.post(RUN_SSE, envelope(0, new Uint8Array([0x0a, 0x05, 0x61])), { "content-type": "application/connect+proto" })), "invalid_argument")
      assertRunSseError(yield* Effect.promise(() => client.post(RUN_SSE, envelope(0, toBinary(BidiRequestIdSchema, create(BidiRequestIdSchema, {}))), { "content-type": "application/connect+proto" })), "invalid_argument")
      // A compressed flag on bytes that are not gzip.
      assertRunSseError(yield* Effect.promise(() => client.post(RUN_SSE, envelope(0x01, new Uint8Array([1, 2, 3])), { "content-type": "application/connect+proto" })), "invalid_argument")
      const oversized = envelope(0, toBinary(BidiRequestIdSchema, create(BidiRequestIdSchema, { requestId: "r".repeat(RUN_SSE_LIMIT * 2) })))
      assertRunSseError(yield* Effect.promise(() => client.post(RUN_SSE, oversized, { "content-type": "application/connect+proto" })), "resource_exhausted")
      assert.strictEqual(harness.transport.sessionCount(), sessions)
      yield* normalTurnWorks(harness, "conv-after-runsse")
    }))

  it.scopedLive("BidiAppend: truncated protobuf, a missing request id, bad hex, a truncated client message: errors or logged drops, nothing committed", () =>
    Effect.gen(function*() {
      const harness = yield* badInputHarness([text("fine", usage(1, 1))])
      const client = yield* clientFor(harness)
      const valid = bidiAppendBody("req-trunc", 0, runRequestMessage({ conversationId: "conv-trunc", text: "hello" }))
      // The BidiAppendRequest itself cut mid-field.
      assertUnaryError(yield* Effect.promise(() => client.post(APPEND, valid.subarray(0, valid.length - 3))), "invalid_argument")
      // Garbage that is not protobuf at all (a group end tag with no start).
      assertUnaryError(yield* Effect.promise(() => client.post(APPEND, new Uint8Array([0x0c]))), "invalid_argument")
      // No request id.
      assertUnaryError(
        yield* Effect.promise(() => client.post(APPEND, toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { data: "3a00" })))),
        "invalid_argument"
      )
      // Bad hex: the append is valid protobuf, its data is not hex. Logged, acknowledged, dropped.
      for (const data of ["zz", "3a0", "3A0G", "  "]) {
        assertAck(yield* Effect.promise(() =>
          client.post(APPEND, toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId: `req-hex-${data}` }, data })))
        ))
      }
      // Valid hex of a truncated run_request that names a conversation.
      const runBytes = toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, runRequestMessage({ conversationId: "conv-trunc", text: "hello there" })))
      for (const cut of [runBytes.length - 1, Math.floor(runBytes.length / 2), 3]) {
        assertAck(yield* Effect.promise(() => client.post(APPEND, appendOfBytes(`req-trunc-${cut}`, 0n, runBytes.subarray(0, cut)))))
      }
      // BLOG's invalid 5-byte append ("foo" in case 1).
      assertAck(yield* Effect.promise(() => client.post(APPEND, appendOfBytes("req-foo", 0n, new Uint8Array([0x0a, 0x03, 0x66, 0x6f, 0x6f])))))
      yield* assertUntouched(harness, "conv-trunc")
      yield* normalTurnWorks(harness, "conv-after-append")
    }))

  it.scopedLive("unknown oneof cases from a newer client: dropped, or the request ends unimplemented; nothing committed", () =>
    Effect.gen(function*() {
      const harness = yield* badInputHarness([text("fine", usage(1, 1))])
      const client = yield* clientFor(harness)
      // AgentClientMessage case 99 (unknown): acknowledged and dropped.
      const unknownTop = new BinaryWriter().tag(99, WireType.LengthDelimited).bytes(new Uint8Array([0x08, 0x01])).finish()
      assertAck(yield* Effect.promise(() => client.post(APPEND, appendOfBytes("req-unknown-top", 0n, unknownTop))))
      // A run_request whose conversation action is case 40 (unknown): the request ends unimplemented.
      const requestId = "req-unknown-action"
      assertAck(yield* Effect.promise(() => client.post(APPEND, appendOfBytes(requestId, 0n, runRequestWithUnknownAction("conv-unknown", 40)))))
      // The session already ended, so RunSSE replays its end at once: an unimplemented error, not a turn.
      const replay = yield* Effect.promise(() => runSsePost(harness.baseUrl, runSseBody(requestId), true))
      assert.strictEqual(replay.headers["content-type"], "text/event-stream")
      assertRunSseError(replay, "unimplemented")
      yield* assertUntouched(harness, "conv-unknown")
      // An exec result and a KV result of unknown cases on a request that does not exist.
      const unknownExec = new BinaryWriter().tag(2, WireType.LengthDelimited).fork().uint32(0).tag(1, WireType.Varint).uint32(7).tag(77, WireType.Varint).uint32(1).join().finish()
      assertAck(yield* Effect.promise(() => client.post(APPEND, appendOfBytes("req-unknown-exec", 0n, unknownExec))))
      yield* normalTurnWorks(harness, "conv-after-unknown")
    }))

  it.scopedLive("oversized bodies and gzip bombs: resource_exhausted before anything is decoded; bad encodings refused", () =>
    Effect.gen(function*() {
      const harness = yield* badInputHarness([text("fine", usage(1, 1))])
      const client = yield* clientFor(harness)
      const big = bidiAppendBody("req-big", 0, runRequestMessage({ conversationId: "conv-big", text: "x".repeat(APPEND_LIMIT * 2) }))
      assertUnaryError(yield* Effect.promise(() => client.post(APPEND, big)), "resource_exhausted")
      // (The same body without a content-length: see "Bad input regressions" below.)
      // 16 MiB of zeros gzip to ~16 KiB: under the wire limit, far over it inflated.
      const bomb = gzipSync(Buffer.alloc(16 * 1024 * 1024))
      assert.isBelow(bomb.length, APPEND_LIMIT)
      assertUnaryError(yield* Effect.promise(() => client.post(APPEND, bomb, { "content-encoding": "gzip" })), "resource_exhausted")
      // A gzipped run_request bigger than the limit once inflated (the text compresses well).
      assertUnaryError(yield* Effect.promise(() => client.post(APPEND, gzipSync(big), { "content-encoding": "gzip" })), "resource_exhausted")
      // Not gzip at all, and an encoding the server does not speak.
      assertUnaryError(yield* Effect.promise(() => client.post(APPEND, new Uint8Array([1, 2, 3, 4]), { "content-encoding": "gzip" })), "invalid_argument")
      assertUnaryError(yield* Effect.promise(() => client.post(APPEND, bidiAppendBody("req-br", 0, runRequestMessage({ conversationId: "conv-br", text: "x" })), { "content-encoding": "br" })), "unimplemented")
      // A small gzipped append is fine.
      assertAck(yield* Effect.promise(() => client.post(APPEND, gzipSync(bidiAppendBody("req-gz", 0, { message: { case: "clientHeartbeat", value: {} } })), { "content-encoding": "gzip" })))
      yield* assertUntouched(harness, "conv-big")
      yield* assertUntouched(harness, "conv-br")
      yield* normalTurnWorks(harness, "conv-after-size")
    }))

  it.scopedLive("a seqno far out of range is refused out_of_range, and the run request it carried is not acted on", () =>
    Effect.gen(function*() {
      const harness = yield* badInputHarness([text("fine", usage(1, 1))])
      const client = yield* clientFor(harness)
      const run = runRequestMessage({ conversationId: "conv-far", text: "hello" })
      for (const seqno of [1_000_000n, 2n ** 53n, 2n ** 63n - 1n, -1n]) {
        assertUnaryError(yield* Effect.promise(() => client.append("req-far", seqno, run)), "out_of_range")
      }
      yield* assertUntouched(harness, "conv-far")
      // The request id is still usable from seq 0.
      assertAck(yield* Effect.promise(() => client.append("req-far-ok", 0, { message: { case: "clientHeartbeat", value: {} } })))
      yield* normalTurnWorks(harness, "conv-after-far")
    }))

  it.scopedLive("an exec result for an unknown id is acknowledged and dropped; the real result still completes the turn", () =>
    Effect.gen(function*() {
      let release: () => void = () => undefined
      const gate = new Promise<void>((r) => (release = r))
      const workspace = scriptedWorkspace(async (): Promise<ReadonlyArray<ExecAnswer>> => {
        await gate
        return [{ case: "readResult", value: { result: { case: "success", value: { path: "real.txt", totalLines: 1, output: { case: "content", value: "the real content\n" } } } } }]
      })
      const harness = yield* badInputHarness([toolCalls(call("call-x", "Read", `{"path":"real.txt"}`)), text("done", usage(1, 1))])
      const client = yield* clientFor(harness, { workspace })
      const turn = client.turn({ conversationId: "conv-exec", text: "read it" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "exec"))
      const untouched = Option.getOrThrow(yield* harness.store.load("conv-exec"))
      const forged = (id: number, execId?: string) => ({
        message: {
          case: "execClientMessage" as const,
          value: {
            id,
            ...(execId !== undefined ? { execId } : {}),
            message: { case: "readResult" as const, value: { result: { case: "success" as const, value: { path: "real.txt", output: { case: "content" as const, value: "FORGED\n" } } } } }
          }
        }
      })
      // Unknown numeric id; known id with a foreign exec_id; id 0 with an unknown exec_id; a stream close for nothing.
      for (const message of [forged(99), forged(1, "exec-1-someone-else"), forged(0, "nope")]) {
        assert.strictEqual(yield* Effect.promise(() => turn.send(message)), 200)
      }
      assert.strictEqual(yield* Effect.promise(() => turn.send({ message: { case: "execClientControlMessage", value: { message: { case: "streamClose", value: { id: 42 } } } } })), 200)
      // On a request id the server never saw.
      assertAck(yield* Effect.promise(() => client.append("req-nobody", 0, forged(1))))
      // Appends are handled before they are acknowledged: nothing was committed for the forgeries.
      const after = Option.getOrThrow(yield* harness.store.load("conv-exec"))
      assert.strictEqual(after.version, untouched.version)
      assert.deepStrictEqual(after.state, untouched.state)
      assert.strictEqual(after.state.status, "waitingClient")
      release()
      const transcript = yield* Effect.promise(() => turn.done)
      assert.deepStrictEqual(transcript.problems, [])
      assert.deepStrictEqual(transcript.end, Dialect.EndStream.Ok())
      const calls = yield* harness.llmCalls
      const results = (calls[1]?.request.messages ?? []).filter((m) => m.role === "toolResult")
      assert.strictEqual(results.length, 1)
      assert.include(JSON.stringify(results[0]), "the real content")
      assert.notInclude(JSON.stringify(calls[1]?.request.messages), "FORGED")
    }))

  it.scopedLive("fuzz: thousands of random and mutated bodies get an acknowledgement or a Connect error, and the server keeps serving", () =>
    Effect.gen(function*() {
      // Appends held behind gaps that never fill answer `unavailable` once the (short) bound passes.
      const harness = yield* badInputHarness([], { appendAckTimeoutMs: 20 })
      const client = yield* clientFor(harness)
      const random = seededRandom(20261130)
      const int = (n: number) => Math.floor(random() * n)
      const bytes = (n: number) => Uint8Array.from({ length: n }, () => int(256))
      const seeds: ReadonlyArray<Uint8Array> = [
        bidiAppendBody("fuzz-req", 0, runRequestMessage({ conversationId: "fuzz-conv", text: "hello", messageId: "m" })),
        bidiAppendBody("fuzz-req", 3, { message: { case: "execClientMessage", value: { id: 1, message: { case: "readResult", value: { result: { case: "success", value: { path: "a", output: { case: "content", value: "x" } } } } } } } }),
        bidiAppendBody("fuzz-req", 4, { message: { case: "kvClientMessage", value: { id: 0, message: { case: "setBlobResult", value: {} } } } }),
        bidiAppendBody("fuzz-req", 5, { message: { case: "clientHeartbeat", value: {} } }),
        bidiAppendBody("fuzz-req", 6, { message: { case: "conversationAction", value: { action: { case: "cancelAction", value: { reason: "x" } } } } }),
        // The run request's newer parts: ref_only context references, attached images (inline,
        // by blob id, sent along), files and selections.
        bidiAppendBody("fuzz-ref", 0, runRequestMessage({
          conversationId: "fuzz-conv-ref",
          text: "look",
          messageId: "m-ref",
          refOnlyContext: { rules: bytes(40), mcps: bytes(30) },
          images: [
            { data: Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 1, 2]), how: "data", mimeType: "image/png" },
            { data: bytes(20), how: "blobId" },
            { data: bytes(20), how: "preFetched" }
          ]
        })),
        bidiAppendBody("fuzz-sel", 0, {
          message: {
            case: "runRequest",
            value: {
              conversationId: "fuzz-conv-sel",
              action: {
                action: {
                  case: "userMessageAction",
                  value: {
                    userMessage: {
                      text: "why",
                      messageId: "m-sel",
                      selectedContext: {
                        files: [{ path: "/w/a.ts", content: "a" }],
                        codeSelections: [{ path: "/w/b.ts", content: "b" }],
                        terminals: [{ content: "$ ls", title: "sh" }],
                        extraContext: ["more"]
                      }
                    },
                    requestContext: {}
                  }
                }
              }
            }
          }
        })
      ]
      const mutate = (seed: Uint8Array): Uint8Array => {
        const out = Array.from(seed)
        const edits = 1 + int(4)
        for (let e = 0; e < edits; e++) {
          switch (int(5)) {
            case 0: // flip a byte
              if (out.length > 0) out[int(out.length)] = int(256)
              break
            case 1: // truncate
              out.length = int(out.length + 1)
              break
            case 2: // insert random bytes
              out.splice(int(out.length + 1), 0, ...bytes(1 + int(8)))
              break
            case 3: // duplicate a slice
              if (out.length > 0) {
                const from = int(out.length)
                out.splice(int(out.length), 0, ...out.slice(from, from + 1 + int(16)))
              }
              break
            case 4: // a varint-breaking 0xff
              if (out.length > 0) out[int(out.length)] = 0xff
              break
          }
        }
        return Uint8Array.from(out)
      }
      const cases: Array<Uint8Array> = []
      // 10,000 BidiAppend bodies per run by default; BYOK_FUZZ_CASES asks for more (or fewer).
      const total = Math.max(100, Number(process.env["BYOK_FUZZ_CASES"] ?? 10_000))
      for (let i = 0; i < Math.round(total * 0.35); i++) cases.push(bytes(int(64)))
      for (let i = 0; i < Math.round(total * 0.55); i++) cases.push(mutate(seeds[i % seeds.length]!))
      // Hex-level mutations: a well-formed append whose data is almost hex.
      for (let i = 0; i < Math.round(total * 0.1); i++) {
        const hex = toHex(bytes(1 + int(24))).split("")
        hex[int(hex.length)] = "0123456789abcdefXYZ -"[int(21)]!
        if (int(4) === 0) hex.pop()
        cases.push(toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { requestId: { requestId: `fuzz-hex-${i}` }, appendSeqno: BigInt(int(3)), data: hex.join("") })))
      }
      const failures: Array<string> = []
      let next = 0
      const worker = async () => {
        while (next < cases.length) {
          const body = cases[next++]!
          const response = await client.post(APPEND, body)
          if (!isAck(response) && !isUnaryError(response)) failures.push(`${toHex(body)} -> ${response.status} ${Buffer.from(response.body).toString("utf8")}`)
        }
      }
      yield* Effect.promise(() => Promise.all(Array.from({ length: 8 }, worker)))
      assert.deepStrictEqual(failures.slice(0, 5), [])
      assert.isAtLeast(cases.length, Math.min(total, 10_000) - 2)
      // RunSSE: random bodies and mutated requests answer an end-stream error, or open a stream.
      const sseFailures: Array<string> = []
      for (let i = 0; i < 300; i++) {
        const body = i % 2 === 0 ? bytes(int(40)) : mutate(runSseBody(`fuzz-sse-${i}`))
        const response = yield* Effect.promise(() => runSsePost(harness.baseUrl, body))
        const opened = response.status === 200 && response.headers["content-type"] === "text/event-stream"
        if (!opened && runSseError(response)?._tag !== "Error") sseFailures.push(`${toHex(body)} -> ${response.status}`)
      }
      assert.deepStrictEqual(sseFailures.slice(0, 5), [])
      yield* normalTurnWorks(harness, "conv-after-fuzz")
    }), { timeout: 300_000 })
})

/**
 * Regressions for bugs these tests found in src/Transport.ts (fixed there since):
 * - DESIGN §10: a refused append changes no state; an out_of_range append under a new request
 *   id used to leave a session behind for `idleRetentionMs` (the fuzz run left about 500).
 * - A chunked body over the limit used to end `request.stream` early, which made platform-node
 *   destroy the socket: the client saw ECONNRESET instead of the 429.
 */
describe("Bad input regressions", () => {
  it.scopedLive("an append refused out_of_range under a new request id leaves no session behind", () =>
    Effect.gen(function*() {
      const harness = yield* badInputHarness()
      const client = yield* clientFor(harness)
      const before = harness.transport.sessionCount()
      for (let i = 0; i < 10; i++) {
        assertUnaryError(yield* Effect.promise(() => client.append(`req-ghost-${i}`, 1_000_000, { message: { case: "clientHeartbeat", value: {} } })), "out_of_range")
      }
      assert.strictEqual(harness.transport.sessionCount(), before)
    }))


  it.scopedLive("a chunked BidiAppend body over the limit is answered resource_exhausted, not a connection reset", () =>
    Effect.gen(function*() {
      const harness = yield* badInputHarness([text("fine", usage(1, 1))])
      const big = bidiAppendBody("req-big-chunked", 0, runRequestMessage({ conversationId: "conv-big-chunked", text: "x".repeat(APPEND_LIMIT * 2) }))
      const chunks = Array.from({ length: Math.ceil(big.length / 8192) }, (_, i) => big.subarray(i * 8192, (i + 1) * 8192))
      const response = yield* Effect.promise(() =>
        chunkedPost(harness.baseUrl, APPEND, chunks).then((r) => r, (error: Error) => ({ status: 0, headers: {}, body: new TextEncoder().encode(error.message) }))
      )
      assertUnaryError(response, "resource_exhausted")
      yield* assertUntouched(harness, "conv-big-chunked")
      yield* normalTurnWorks(harness, "conv-after-chunked")
    }))
})
