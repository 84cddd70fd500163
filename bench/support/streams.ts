/**
 * One benchmark stream end to end, through the real server or through the relay, with the
 * latency of every text delta: its arrival at the client minus its send time at the fake
 * provider (both `performance.now()` in this process).
 *
 * Through the server the client is the reference `CursorClient` on RunSSE + BidiAppend (blob
 * acknowledgements, every frame decoded); the HTTP/2 `Run` wire has its own lean client in
 * `run.ts`, returning the same `StreamResult`. Through the relay it is a plain SSE reader that
 * parses each event's JSON, which is what any consumer of the raw stream does.
 */
import { randomUUID } from "node:crypto"
import * as http from "node:http"
import { performance } from "node:perf_hooks"
import { CursorClient } from "../../test/support/CursorClient.js"
import type { AppendRecord, TurnOptions } from "../../test/support/CursorClient.js"
import { marker, stampsIn } from "./provider.js"
import type { StampedProvider } from "./provider.js"

export interface StreamSpec {
  readonly id: string
  readonly deltas: number
  readonly minMs: number
  readonly maxMs: number
  /** Delta 0 leaves in the provider's first write (headers and role chunk): time to first delta. */
  readonly lead?: boolean
  /**
   * A probe of the server's reaction time: once this many text deltas arrived, the client sends
   * `conversation_action.cancel_action` and times the end-stream (`canceled`) that answers it.
   */
  readonly cancelAfterDeltas?: number
}

/** How long the server took to react to a client message, from the client's side (ms; undefined: not measured on this stream). */
export interface Reactions {
  /** Just before the cancel is written (Run) or its BidiAppend POST is started (RunSSE) → the read of the end-stream. */
  readonly cancelToEndMs: number | undefined
  /** The end-stream's code on a probe (`canceled` expected; `ok` when the turn ended first). */
  readonly cancelEnd: string | undefined
  /** The last `set_blob` acknowledgement written / POSTed → the checkpoint frame read. */
  readonly blobAckToCheckpointMs: number | undefined
}

export const noReactions: Reactions = { cancelToEndMs: undefined, cancelEnd: undefined, blobAckToCheckpointMs: undefined }

export interface StreamResult {
  /** arrival − send of each text delta, ms. */
  readonly latencies: Array<number>
  readonly deltas: number
  /** Text deltas that arrived in the same socket read (`data` event) as another text delta. */
  readonly batched: number
  readonly firstAt: number
  readonly lastAt: number
  readonly appends: ReadonlyArray<AppendRecord>
  readonly reactions: Reactions
  readonly problems: ReadonlyArray<string>
}

/** Arrival stamps → latencies; `at` is the time of the read that completed the frame, so frames of one read share it. */
export const latenciesOf = (provider: StampedProvider, id: string, arrivals: ReadonlyArray<{ readonly at: number; readonly text: string }>) => {
  const sent = provider.sendTimes(id)
  const latencies: Array<number> = []
  const perRead = new Map<number, number>()
  let firstAt = Number.NaN
  let lastAt = Number.NaN
  for (const { at, text } of arrivals) {
    for (const k of stampsIn(text)) {
      const t = sent?.[k]
      if (t === undefined || Number.isNaN(t)) continue
      latencies.push(at - t)
      perRead.set(at, (perRead.get(at) ?? 0) + 1)
      if (Number.isNaN(firstAt)) firstAt = at
      lastAt = at
    }
  }
  let batched = 0
  for (const count of perRead.values()) if (count > 1) batched += count
  return { latencies, batched, firstAt, lastAt }
}

/** What is wrong with a stream's delta count and end, given whether it was a cancel probe. */
export const countProblems = (spec: StreamSpec, arrived: number, end: string | undefined): Array<string> => {
  const problems: Array<string> = []
  if (spec.cancelAfterDeltas === undefined) {
    if (end !== "ok") problems.push(`turn ended with ${end ?? "no end-stream"}`)
    if (arrived !== spec.deltas) problems.push(`${arrived} of ${spec.deltas} deltas arrived`)
  } else if (end !== "canceled") {
    problems.push(`cancel probe ended with ${end ?? "no end-stream"}, not canceled`)
  }
  return problems
}

/** A client as the benches drive the server: generous timeouts, its own keep-alive agent. */
export const benchClient = (baseUrl: string, options: { readonly heartbeatMs?: number } = {}): CursorClient =>
  new CursorClient({ baseUrl, turnTimeoutMs: 120_000, requestTimeoutMs: 60_000, ...options })

/** `count` clients that keep their connections from turn to turn, as Cursor does (`serverStream`'s `client`); close them after. */
export const keptClients = (baseUrl: string, count: number): Array<CursorClient> => Array.from({ length: count }, () => benchClient(baseUrl))

/**
 * One turn through the server on RunSSE + BidiAppend; `heartbeatMs` makes the client send client
 * heartbeats (appends). A probe (`spec.cancelAfterDeltas`) sends a cancel append once that many
 * deltas arrived.
 */
export const serverStream = async (
  baseUrl: string,
  provider: StampedProvider,
  spec: StreamSpec,
  options: {
    readonly heartbeatMs?: number
    readonly conversationId?: string
    readonly client?: CursorClient
    /** MCP tools the run request brings (see `mcp.ts`). */
    readonly mcpTools?: TurnOptions["mcpTools"]
  } = {}
): Promise<StreamResult> => {
  // A client of the caller's keeps its connections from turn to turn (as Cursor does); by default each turn has its own.
  const client = options.client ?? benchClient(baseUrl, options.heartbeatMs !== undefined ? { heartbeatMs: options.heartbeatMs } : {})
  try {
    const turn = client.turn({
      conversationId: options.conversationId ?? randomUUID(),
      text: `Please answer. ${marker(spec.id, spec.deltas, spec.minMs, spec.maxMs, spec.lead === true)}`,
      model: "bench-model",
      ...(options.mcpTools !== undefined ? { mcpTools: options.mcpTools } : {})
    })
    let canceledAt: number | undefined
    const cancelAfter = spec.cancelAfterDeltas
    if (cancelAfter !== undefined) {
      let seen = 0
      // Called once per frame, in arrival order.
      const enough = (frame: { readonly event: { readonly kind: string; readonly text?: string } }) =>
        frame.event.kind === "text_delta" && (seen += stampsIn(frame.event.text ?? "").length) >= cancelAfter
      void Promise.race([turn.waitFor(enough, 60_000), turn.done]).then((reached) => {
        if (!("event" in reached)) return
        canceledAt = performance.now()
        void turn.cancel()
      }, () => undefined)
    }
    const transcript = await turn.done
    const arrivals = transcript.frames.flatMap((frame) => (frame.event.kind === "text_delta" ? [{ at: frame.at, text: frame.event.text }] : []))
    const measured = latenciesOf(provider, spec.id, arrivals)
    const end = transcript.end === undefined ? undefined : transcript.end._tag === "Ok" ? "ok" : transcript.end.code
    const checkpointAt = transcript.frames.find((frame) => frame.event.kind === "checkpoint")?.at
    const blobAcks = transcript.appends.filter((a) => a.what === "kvClientMessage.setBlobResult" && (checkpointAt === undefined || a.sentAt <= checkpointAt))
    const lastBlobAck = blobAcks.length === 0 ? undefined : Math.max(...blobAcks.map((a) => a.sentAt))
    const reactions: Reactions = {
      cancelToEndMs: canceledAt !== undefined && transcript.endAt !== undefined ? transcript.endAt - canceledAt : undefined,
      cancelEnd: cancelAfter !== undefined ? end : undefined,
      blobAckToCheckpointMs: checkpointAt !== undefined && lastBlobAck !== undefined ? checkpointAt - lastBlobAck : undefined
    }
    const problems = [...transcript.problems, ...countProblems(spec, measured.latencies.length, end)]
    return { ...measured, deltas: measured.latencies.length, appends: transcript.appends, reactions, problems }
  } finally {
    if (options.client === undefined) client.close()
  }
}

/** One stream through the relay: a POST whose SSE answer is read and parsed event by event. */
export const relayStream = (baseUrl: string, provider: StampedProvider, spec: StreamSpec, agent: http.Agent): Promise<StreamResult> =>
  new Promise((resolve) => {
    const url = new URL(baseUrl)
    const body = JSON.stringify({ model: "bench-model", stream: true, messages: [{ role: "user", content: `Please answer. ${marker(spec.id, spec.deltas, spec.minMs, spec.maxMs, spec.lead === true)}` }] })
    const arrivals: Array<{ at: number; text: string }> = []
    const problems: Array<string> = []
    let settled = false
    const done = () => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      const measured = latenciesOf(provider, spec.id, arrivals)
      if (measured.latencies.length !== spec.deltas) problems.push(`${measured.latencies.length} of ${spec.deltas} deltas arrived`)
      resolve({ ...measured, deltas: measured.latencies.length, appends: [], reactions: noReactions, problems })
    }
    const timer = setTimeout(() => {
      problems.push("relay stream timed out")
      request.destroy()
      done()
    }, 120_000)
    const request = http.request({
      host: url.hostname,
      port: url.port,
      path: "/v1/chat/completions",
      method: "POST",
      agent,
      headers: { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) }
    }, (response) => {
      let buffer = ""
      response.setEncoding("utf8")
      response.on("data", (text: string) => {
        const at = performance.now()
        buffer += text
        let end: number
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ")) continue
            const data = line.slice(6)
            if (data === "[DONE]") continue
            const parsed = JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }> }
            const content = parsed.choices?.[0]?.delta?.content
            if (content !== undefined && content !== "") arrivals.push({ at, text: content })
          }
        }
      })
      response.on("end", done)
      response.on("error", (error) => {
        problems.push(`relay response failed: ${error.message}`)
        done()
      })
    })
    request.on("error", (error) => {
      problems.push(`relay request failed: ${error.message}`)
      done()
    })
    request.end(body)
  })

/** Runs `count` streams concurrently, the i-th starting after `stagger(i)` ms; resolves when all ended. */
export const concurrently = async <A>(count: number, staggerMs: number, run: (index: number) => Promise<A>): Promise<Array<A>> =>
  Promise.all(Array.from({ length: count }, (_, i) =>
    new Promise<A>((resolve, reject) => {
      setTimeout(() => run(i).then(resolve, reject), count === 1 ? 0 : (i / count) * staggerMs)
    })))
