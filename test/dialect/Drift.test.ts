/**
 * Protocol drift made visible (`dialect/Unknowns.ts`, `Drift.ts`): the unknown fields of decoded
 * client messages, nested ones and unknown oneof cases included, are counted per protobuf type,
 * field number and client version, in `byok_client_unknown_fields_total`, in the console's
 * drift section, and in exactly one warning per kind. A message that decodes fully adds nothing.
 * Unknown fields are made the way a newer client's are: extra tags appended with protobuf-es's
 * `BinaryWriter`, or `$unknown` records that `toBinary` writes out.
 */
import { create, toBinary } from "@bufbuild/protobuf"
import type { UnknownField } from "@bufbuild/protobuf"
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Logger, LogLevel, Metric } from "effect"
import * as Dialect from "../../src/Dialect.js"
import * as Drift from "../../src/Drift.js"
import { AgentClientMessageSchema, ConversationActionSchema } from "../../src/gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiRequestIdSchema } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { GetDefaultModelNudgeDataRequestSchema } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import { driftSection } from "../../src/console/Pages.js"
import { renderPrometheus } from "../../src/Metrics.js"
import { unary } from "../../src/transport/side/Procedure.js"
import { bidiAppendBody, clientHeartbeat, runRequestMessage, toHex } from "../support/CursorClient.js"

const concat = (...parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return out
}

/** A heartbeat `AgentClientMessage` with an extra varint field 99 appended (a top-level unknown field). */
const heartbeatWithField99 = (): Uint8Array =>
  concat(toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, clientHeartbeat())), new BinaryWriter().tag(99, WireType.Varint).uint32(7).finish())

const appendOf = (message: Uint8Array, seqno = 1, extra: Uint8Array = new Uint8Array()): Uint8Array =>
  concat(toBinary(BidiAppendRequestSchema, create(BidiAppendRequestSchema, { data: toHex(message), requestId: { requestId: "drift-req" }, appendSeqno: BigInt(seqno) })), extra)

/** `message` carrying `fields` as unknown fields (`create` does not take `$unknown`; `toBinary` writes it). */
const withUnknown = <M extends { $unknown?: Array<UnknownField> | undefined }>(message: M, fields: Array<UnknownField>): M => {
  message.$unknown = fields
  return message
}

const kindOf = (type: string, field: number, version: string) =>
  Drift.kindsSeen().find((k) => k.type === type && k.field === field && k.clientVersion === version)

/** The counter's value for one series, read from the /metrics text (0 when absent). */
const metricValue = (type: string, field: number, version: string) =>
  Effect.map(Metric.snapshot, (pairs) => {
    const line = renderPrometheus(pairs).split("\n").find((l) =>
      l.startsWith("byok_client_unknown_fields_total{") && l.includes(`type="${type}"`) && l.includes(`field="${field}"`) && l.includes(`client_version="${version}"`)
    )
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1))
  })

const totalCount = () => Drift.kindsSeen().reduce((n, k) => n + k.count, 0)

/** Runs `body` with `Drift.layerLog` writing to `lines`, then gives its fiber time to write. */
const withLog = <A>(body: (lines: Array<string>) => Effect.Effect<A>) => {
  const lines: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    if (logLevel._tag === "Warning") lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
  })
  return Effect.scoped(Effect.gen(function*() {
    yield* Layer.build(Drift.layerLog)
    const result = yield* body(lines)
    yield* Effect.sleep("30 millis")
    return { result, lines }
  })).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)), Effect.provide(Logger.minimumLogLevel(LogLevel.Debug)))
}

describe("client protocol drift", () => {
  it.live("a top-level unknown field: counted per type, field and version, listed, logged once", () =>
    Effect.gen(function*() {
      const version = "9.1.0-toplevel"
      const type = "agent.v1.AgentClientMessage"
      const before = yield* metricValue(type, 99, version)
      const { lines } = yield* withLog(() =>
        Effect.sync(() => {
          for (let i = 0; i < 3; i++) {
            const frame = Dialect.decodeBidiAppendFrame(appendOf(heartbeatWithField99(), i + 1), Drift.sinkFor(version))
            // The unknown field changes nothing of what the message decodes to.
            assert.isTrue(Either.isRight(frame) && Either.isRight(frame.right.message) && frame.right.message.right._tag === "Heartbeat")
          }
        })
      )
      assert.strictEqual((yield* metricValue(type, 99, version)) - before, 3)
      const kind = kindOf(type, 99, version)
      assert.isDefined(kind)
      assert.strictEqual(kind!.count, 3)
      assert.strictEqual(kind!.wireType, WireType.Varint)
      // A field outside every oneof of a message whose oneof is set is not a oneof case.
      assert.isUndefined(kind!.unsetOneof)
      const mine = lines.filter((line) => line.includes(version))
      assert.strictEqual(mine.length, 1, lines.join("\n"))
      assert.include(mine[0], `${type} carries field 99 (wire type 0)`)
      const section = driftSection({ nowMs: Date.now(), range: "48h", conversations: [], running: [], models: [], buckets: [], drift: Drift.kindsSeen() }).value
      assert.include(section, `data-drift="${type}#99#${version}"`)
      assert.match(section, new RegExp(`<code>${type}</code></td><td class="num">99</td><td>0 \\(varint\\)</td>\\s*<td class="num">3</td>`))
    }))

  it.live("nested unknown fields and an unknown oneof case, in the envelope, the message and below", () =>
    Effect.gen(function*() {
      const version = "9.2.0-nested"
      // A newer ConversationAction case (number 90, a message `{1: 1}`; an unknown field's data is
      // what follows its tag: here the length, then the bytes) inside a known AgentClientMessage case...
      const message = toBinary(AgentClientMessageSchema, create(AgentClientMessageSchema, {
        message: { case: "conversationAction", value: withUnknown(create(ConversationActionSchema), [{ no: 90, wireType: WireType.LengthDelimited, data: new Uint8Array([2, 8, 1]) }]) }
      }))
      // ...and an unknown field in the envelope's nested BidiRequestId and in the envelope itself.
      const body = toBinary(BidiAppendRequestSchema, withUnknown(create(BidiAppendRequestSchema, {
        data: toHex(message),
        appendSeqno: 1n,
        requestId: withUnknown(create(BidiRequestIdSchema, { requestId: "drift-nested" }), [{ no: 5, wireType: WireType.Varint, data: new Uint8Array([1]) }])
      }), [{ no: 12, wireType: WireType.Bit32, data: new Uint8Array([1, 0, 0, 0]) }]))
      const { lines } = yield* withLog(() =>
        Effect.sync(() => {
          const frame = Dialect.decodeBidiAppendFrame(body, Drift.sinkFor(version))
          assert.isTrue(Either.isRight(frame))
          const decoded = Either.getOrThrow(Either.getOrThrow(frame).message)
          // The Dialect's own view of it: an unknown case, dropped.
          assert.deepStrictEqual(decoded, Dialect.ClientMessage.Unknown({ where: "ConversationAction", fields: [90] }))
        })
      )
      assert.strictEqual(kindOf("aiserver.v1.BidiAppendRequest", 12, version)?.wireType, WireType.Bit32)
      assert.strictEqual(kindOf("aiserver.v1.BidiRequestId", 5, version)?.count, 1)
      const actionKind = kindOf("agent.v1.ConversationAction", 90, version)
      assert.strictEqual(actionKind?.unsetOneof, "action")
      assert.strictEqual(actionKind?.wireType, WireType.LengthDelimited)
      const mine = lines.filter((line) => line.includes(version))
      assert.strictEqual(mine.length, 3, lines.join("\n"))
      assert.isTrue(mine.some((line) => line.includes("oneof action is unset")))
    }))

  it.live("a kind seen again later, by another logger, is not logged again; another version is a kind of its own", () =>
    Effect.gen(function*() {
      const { lines } = yield* withLog(() =>
        Effect.sync(() => {
          Dialect.decodeClientMessage(heartbeatWithField99(), Drift.sinkFor("9.1.0-toplevel"))
          Dialect.decodeClientMessage(heartbeatWithField99(), Drift.sinkFor(" 9.3.0 beta/x "))
        })
      )
      assert.deepStrictEqual(lines.filter((line) => line.includes("9.1.0-toplevel")), [])
      assert.strictEqual(lines.filter((line) => line.includes("9.3.0_beta_x")).length, 1, lines.join("\n"))
      assert.isDefined(kindOf("agent.v1.AgentClientMessage", 99, "9.3.0_beta_x"))
    }))

  it.live("messages that decode fully add nothing: a heartbeat, a run request, a RunSSE request", () =>
    Effect.gen(function*() {
      const kinds = Drift.kindsSeen().length
      const count = totalCount()
      const { lines } = yield* withLog(() =>
        Effect.sync(() => {
          const sink = Drift.sinkFor("9.4.0-clean")
          assert.isTrue(Either.isRight(Dialect.decodeBidiAppendFrame(bidiAppendBody("clean", 1, clientHeartbeat()), sink)))
          assert.isTrue(Either.isRight(Dialect.decodeBidiAppendFrame(bidiAppendBody("clean", 0, runRequestMessage({ conversationId: "c", text: "hello" })), sink)))
          assert.isTrue(Either.isRight(Dialect.decodeRunSseRequest(toBinary(BidiRequestIdSchema, create(BidiRequestIdSchema, { requestId: "clean" })), sink)))
        })
      )
      assert.strictEqual(Drift.kindsSeen().length, kinds)
      assert.strictEqual(totalCount(), count)
      assert.deepStrictEqual(lines.filter((line) => line.includes("9.4.0-clean")), [])
      assert.isUndefined(Drift.kindsSeen().find((k) => k.clientVersion === "9.4.0-clean"))
    }))

  it.effect("a side RPC's binary request: its unknown fields are counted under the call's client version", () =>
    Effect.gen(function*() {
      const procedure = unary("/aiserver.v1.AiService/GetDefaultModelNudgeData", GetDefaultModelNudgeDataRequestSchema, GetDefaultModelNudgeDataRequestSchema, (_o, _t, message) => Effect.succeed(message))
      assert.strictEqual(procedure.kind, "rpc")
      if (procedure.kind !== "rpc") return
      const serve = procedure.serve({} as never)
      const message = new BinaryWriter().tag(77, WireType.LengthDelimited).string("new").finish()
      yield* serve({ message, codec: "proto", timeoutMs: undefined, receivedAtMs: 0, clientVersion: "9.5.0-side" })
      const kind = kindOf(GetDefaultModelNudgeDataRequestSchema.typeName, 77, "9.5.0-side")
      assert.strictEqual(kind?.count, 1)
    }))
})
