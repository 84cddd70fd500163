/**
 * What counting the client's unknown fields (`src/dialect/Unknowns.ts`, `src/Drift.ts`) costs on
 * the decode of what a client sends most: a heartbeat BidiAppend (one a second per turn), and,
 * for scale, a run request (once a turn). Each message is decoded as the transport decodes it
 * (`decodeBidiAppendFrame`: the `BidiAppendRequest`, the hex, the `AgentClientMessage`, the
 * dialect's mapping), without the walk and with it, in alternating rounds of `N` decodes; the
 * walk alone (on an already parsed message) is timed too. Medians of the rounds' per-decode
 * times, in this process.
 *
 *   node_modules/.bin/tsx bench/drift.ts
 */
import { fromBinary } from "@bufbuild/protobuf"
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import * as Dialect from "../src/Dialect.js"
import * as Drift from "../src/Drift.js"
import { AgentClientMessageSchema } from "../src/gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema } from "../src/gen/aiserver/v1/aiserver_pb.js"
import { bidiAppendBody, clientHeartbeat, runRequestMessage } from "../test/support/CursorClient.js"
import { median } from "./support/stats.js"

const ROUNDS = 11
const N = 50_000

/** µs per call of `f`, over `n` calls. */
const timeOf = (n: number, f: () => unknown): number => {
  const start = performance.now()
  for (let i = 0; i < n; i++) f()
  return ((performance.now() - start) * 1000) / n
}

const compare = (body: Uint8Array, n: number) => {
  const sink = Drift.sinkFor("bench")
  const without: Array<number> = []
  const withWalk: Array<number> = []
  const walkOnly: Array<number> = []
  const request = fromBinary(BidiAppendRequestSchema, body)
  const message = fromBinary(AgentClientMessageSchema, Buffer.from(request.data, "hex"))
  const walk = () => {
    Dialect.walkUnknown(BidiAppendRequestSchema, request, sink)
    Dialect.walkUnknown(AgentClientMessageSchema, message, sink)
  }
  // Warm up both paths (and the walk's plans) before timing.
  timeOf(n, () => Dialect.decodeBidiAppendFrame(body))
  timeOf(n, () => Dialect.decodeBidiAppendFrame(body, sink))
  for (let round = 0; round < ROUNDS; round++) {
    without.push(timeOf(n, () => Dialect.decodeBidiAppendFrame(body)))
    withWalk.push(timeOf(n, () => Dialect.decodeBidiAppendFrame(body, sink)))
    walkOnly.push(timeOf(n * 10, walk))
  }
  return { without: median(without), with: median(withWalk), walk: median(walkOnly) }
}

export const run = (): { readonly markdown: string } => {
  const heartbeat = bidiAppendBody("bench-request", 7, clientHeartbeat())
  const runRequest = bidiAppendBody("bench-request", 0, runRequestMessage({ conversationId: "bench", text: "hello ".repeat(200) }))
  const before = Drift.kindsSeen().length
  const rows = [["heartbeat append", heartbeat, N], ["run request append", runRequest, N / 10]] as const
  const lines = rows.map(([name, body, n]) => {
    const figures = compare(body, n)
    return `| ${name} | ${body.length} B | ${figures.without.toFixed(3)} | ${figures.with.toFixed(3)} | ${(figures.with - figures.without).toFixed(3)} | ${figures.walk.toFixed(3)} |`
  })
  if (Drift.kindsSeen().length !== before) throw new Error("a known message was counted as drift")
  const markdown = [
    `Decoding a BidiAppend without and with the unknown-field walk: µs per decode, median of ${ROUNDS} alternating rounds (Node ${process.version}).`,
    "",
    "| message | body | decode (µs) | decode + walk (µs) | difference (µs) | walk alone (µs) |",
    "| --- | ---: | ---: | ---: | ---: | ---: |",
    ...lines
  ].join("\n")
  return { markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(run().markdown)
}
