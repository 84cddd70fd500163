/**
 * A loopback fake LLM provider: a `node:http` server on 127.0.0.1 (ephemeral port) that answers
 * every POST with the next scripted response and records every request. It speaks whatever the
 * script says, and `sse` helpers build well-formed OpenAI Chat, Anthropic and Gemini streams.
 *
 * Scripts cover what real providers do to clients: status codes with JSON error bodies and
 * `Retry-After`, streams with pauses, streams that stall forever, and connections dropped before
 * or after the first byte. Used by the adapter HTTP tests and by end-to-end server tests.
 * (`make` is scoped for Effect tests; `start` returns a Promise with `close` for the others.)
 *
 *   const provider = yield* FakeProvider.make            // scoped: closed with the scope
 *   provider.enqueue(FakeProvider.status(429, { error: { message: "slow down" } }, { "retry-after": "0" }))
 *   provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("Hello")))
 *   provider.baseUrl                                     // http://127.0.0.1:PORT/v1
 *   provider.requests                                    // [{ method, path, headers, body }, ...]
 *   provider.peakOpen()                                  // most requests being answered at once
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, type Scope } from "effect"

/** One step of a streamed body: bytes to write, or a pause. */
export type Step = string | Uint8Array | { readonly delayMs: number }

export type Scripted =
  /** A 2xx (or any status) streamed body; `end` says how it finishes. */
  | {
    readonly _tag: "Stream"
    readonly status: number
    readonly headers: Readonly<Record<string, string>>
    readonly steps: ReadonlyArray<Step>
    readonly end: "close" | "drop" | "stall"
  }
  /** A complete (usually error) response with a JSON or text body. */
  | { readonly _tag: "Status"; readonly status: number; readonly headers: Readonly<Record<string, string>>; readonly body: string }
  /** Destroy the connection before any byte of the response. */
  | { readonly _tag: "Drop" }
  /** Never answer (until the server closes). */
  | { readonly _tag: "Stall" }

export interface RecordedRequest {
  readonly method: string
  /** Path and query, e.g. `/v1/chat/completions` or `/v1beta/models/m:streamGenerateContent?alt=sse`. */
  readonly path: string
  readonly headers: Readonly<Record<string, string | Array<string> | undefined>>
  /** The exact request body as received. */
  readonly body: string
}

/**
 * One request's life on the provider, from its arrival (head received) to its response's close
 * (answered in full, or the client aborted it), in the provider's own order of events: `openedAt`
 * and `closedAt` count the provider's arrivals and closes, so two lives overlap exactly when one
 * opened before the other closed.
 */
export interface StreamLife {
  /** The request's position in `requests`, once its body was read (-1 until then). */
  index: number
  readonly openedAt: number
  closedAt: number | undefined
}

export interface FakeProvider {
  /** `http://127.0.0.1:PORT` */
  readonly url: string
  /** `url + "/v1"`, the usual base URL shape for the adapters. */
  readonly baseUrl: string
  /** Every request received, in arrival order. */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Adds responses to the FIFO script. */
  readonly enqueue: (...responses: ReadonlyArray<Scripted>) => void
  /** Answers requests when the script is empty (default: 500 "no scripted response"). */
  readonly setFallback: (respond: (request: RecordedRequest) => Scripted) => void
  /** Responses still queued. */
  readonly pending: () => number
  /** Every request's life (arrival to close), in arrival order. */
  readonly lives: ReadonlyArray<StreamLife>
  /** The most requests that were open (arrived, response not closed) at once. */
  readonly peakOpen: () => number
}

// =============================================================================
// Script constructors
// =============================================================================

export const sse = (
  steps: ReadonlyArray<Step>,
  options?: { readonly status?: number; readonly headers?: Readonly<Record<string, string>>; readonly end?: "close" | "drop" | "stall" }
): Scripted => ({
  _tag: "Stream",
  status: options?.status ?? 200,
  headers: { "content-type": "text/event-stream", ...options?.headers },
  steps,
  end: options?.end ?? "close"
})

export const status = (code: number, body: unknown, headers?: Readonly<Record<string, string>>): Scripted => ({
  _tag: "Status",
  status: code,
  headers: { "content-type": typeof body === "string" ? "text/plain" : "application/json", ...headers },
  body: typeof body === "string" ? body : JSON.stringify(body)
})

export const drop: Scripted = { _tag: "Drop" }
export const stall: Scripted = { _tag: "Stall" }

/** `data: <json>\n\n`, with an `event:` line when named. */
export const event = (data: unknown, name?: string): string =>
  (name !== undefined ? `event: ${name}\n` : "") + `data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`

// =============================================================================
// Stream builders per wire shape
// =============================================================================

export const openAiChat = {
  chunk: (delta: Record<string, unknown>, finishReason: string | null = null, extra: Record<string, unknown> = {}): string =>
    event({ id: "chatcmpl-fake", model: "fake-model", choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra }),
  /** A complete text answer split into `pieces` deltas. */
  text: (text: string, pieces = 3): Array<string> => [
    openAiChat.chunk({ role: "assistant", content: "" }),
    ...split(text, pieces).map((piece) => openAiChat.chunk({ content: piece })),
    openAiChat.chunk({}, "stop"),
    event({ id: "chatcmpl-fake", model: "fake-model", choices: [], usage: { prompt_tokens: 10, completion_tokens: pieces } }),
    "data: [DONE]\n\n"
  ],
  /** A text answer with a pause of `delayMs` before each piece (a model streaming tokens). */
  pacedText: (pieces: ReadonlyArray<string>, delayMs: number): Array<Step> => [
    openAiChat.chunk({ role: "assistant", content: "" }),
    ...pieces.flatMap((piece): Array<Step> => [{ delayMs }, openAiChat.chunk({ content: piece })]),
    openAiChat.chunk({}, "stop"),
    event({ id: "chatcmpl-fake", model: "fake-model", choices: [], usage: { prompt_tokens: 10, completion_tokens: pieces.length } }),
    "data: [DONE]\n\n"
  ],
  toolCall: (id: string, name: string, args: string): Array<string> => [
    openAiChat.chunk({ role: "assistant", tool_calls: [{ index: 0, id, type: "function", function: { name, arguments: "" } }] }),
    openAiChat.chunk({ tool_calls: [{ index: 0, function: { arguments: args } }] }),
    openAiChat.chunk({}, "tool_calls", { usage: { prompt_tokens: 10, completion_tokens: 5 } }),
    "data: [DONE]\n\n"
  ]
}

export const anthropic = {
  start: (): string =>
    event({ type: "message_start", message: { id: "msg_fake", model: "fake-model", usage: { input_tokens: 10, output_tokens: 1 } } }, "message_start"),
  text: (text: string, pieces = 3): Array<string> => [
    anthropic.start(),
    event({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }, "content_block_start"),
    ...split(text, pieces).map((piece) => event({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: piece } }, "content_block_delta")),
    event({ type: "content_block_stop", index: 0 }, "content_block_stop"),
    event({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: pieces } }, "message_delta"),
    event({ type: "message_stop" }, "message_stop")
  ],
  error: (type: string, message: string): string => event({ type: "error", error: { type, message } }, "error")
}

export const gemini = {
  chunk: (parts: Array<Record<string, unknown>>, finishReason?: string): string =>
    event({
      candidates: [{ content: { role: "model", parts }, ...(finishReason !== undefined ? { finishReason } : {}) }],
      usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 3 },
      modelVersion: "fake-model",
      responseId: "fake-response"
    }),
  text: (text: string, pieces = 3): Array<string> => {
    const parts = split(text, pieces)
    return parts.map((piece, i) => gemini.chunk([{ text: piece }], i === parts.length - 1 ? "STOP" : undefined))
  }
}

export const openAiResponses = {
  text: (text: string, pieces = 3): Array<string> => [
    event({ type: "response.created", response: { id: "resp_fake", model: "fake-model" } }, "response.created"),
    ...split(text, pieces).map((piece) => event({ type: "response.output_text.delta", item_id: "msg_fake", output_index: 0, delta: piece }, "response.output_text.delta")),
    event({ type: "response.output_item.done", output_index: 0, item: { id: "msg_fake", type: "message", content: [{ type: "output_text", text }] } }, "response.output_item.done"),
    event({ type: "response.completed", response: { id: "resp_fake", usage: { input_tokens: 10, output_tokens: pieces } } }, "response.completed")
  ]
}

/** Usage a FIM stream reports at its end; `null` for none. */
export interface FimUsage {
  readonly input: number
  readonly output: number
}

/** Fill-in-the-middle streams (`src/tab/Fim.ts`): one delta per text, then the end with its usage. */
export const fim = {
  /** OpenAI Completions: `choices[0].text` deltas, `finish_reason`, usage in a last chunk with empty `choices`, `[DONE]`. */
  openAiCompletions: (
    texts: ReadonlyArray<string>,
    options?: { readonly finishReason?: string; readonly usage?: FimUsage | null; readonly done?: boolean }
  ): Array<string> => {
    const chunk = (text: string, finishReason: string | null) =>
      event({ id: "cmpl-fake", object: "text_completion", model: "fake-model", choices: [{ index: 0, text, finish_reason: finishReason }] })
    const usage = options?.usage === undefined ? { input: 10, output: texts.length } : options.usage
    return [
      ...texts.map((text) => chunk(text, null)),
      chunk("", options?.finishReason ?? "stop"),
      ...(usage === null ? [] : [event({ id: "cmpl-fake", object: "text_completion", model: "fake-model", choices: [], usage: { prompt_tokens: usage.input, completion_tokens: usage.output } })]),
      ...(options?.done === false ? [] : ["data: [DONE]\n\n"])
    ]
  },
  /** Mistral FIM: chat-like `choices[0].delta.content` chunks, usage on the last one, `[DONE]`. */
  mistral: (texts: ReadonlyArray<string>, options?: { readonly finishReason?: string; readonly usage?: FimUsage }): Array<string> => {
    const chunk = (delta: Record<string, unknown>, finishReason: string | null, extra: Record<string, unknown> = {}) =>
      event({ id: "fim-fake", object: "chat.completion.chunk", model: "codestral-fake", choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra })
    const usage = options?.usage ?? { input: 10, output: texts.length }
    return [
      chunk({ role: "assistant", content: "" }, null),
      ...texts.map((text) => chunk({ content: text }, null)),
      chunk({ content: "" }, options?.finishReason ?? "stop", {
        usage: { prompt_tokens: usage.input, completion_tokens: usage.output, total_tokens: usage.input + usage.output }
      }),
      "data: [DONE]\n\n"
    ]
  },
  /** llama.cpp `/infill`: `{content, stop:false}` per text, then `stop:true` with token counts and timings (no `[DONE]`). */
  llamaCpp: (
    texts: ReadonlyArray<string>,
    options?: { readonly stopType?: string; readonly usage?: FimUsage; readonly countsIn?: "tokens" | "timings"; readonly final?: boolean }
  ): Array<string> => {
    const usage = options?.usage ?? { input: 10, output: texts.length }
    const counts = options?.countsIn === "timings"
      ? { timings: { prompt_n: usage.input, predicted_n: usage.output, predicted_ms: 12.5 } }
      : { tokens_evaluated: usage.input, tokens_predicted: usage.output, timings: { prompt_n: 1, predicted_n: usage.output } }
    return [
      ...texts.map((text, index) => event({ index: 0, content: text, tokens: [index], stop: false, id_slot: 0 })),
      ...(options?.final === false ? [] : [event({ index: 0, content: "", stop: true, stop_type: options?.stopType ?? "eos", model: "fake.gguf", ...counts })])
    ]
  }
}

const split = (text: string, pieces: number): Array<string> => {
  const size = Math.max(1, Math.ceil(text.length / Math.max(1, pieces)))
  const out: Array<string> = []
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out.length > 0 ? out : [""]
}

// =============================================================================
// Server
// =============================================================================

const serve = (response: Http.ServerResponse, scripted: Scripted, closing: () => boolean): void => {
  switch (scripted._tag) {
    case "Drop":
      response.socket?.destroy()
      return
    case "Stall":
      return
    case "Status":
      response.writeHead(scripted.status, scripted.headers)
      response.end(scripted.body)
      return
    case "Stream": {
      response.writeHead(scripted.status, scripted.headers)
      response.flushHeaders()
      const steps = [...scripted.steps]
      const next = (): void => {
        if (closing() || response.destroyed) return
        const step = steps.shift()
        if (step === undefined) {
          if (scripted.end === "close") response.end()
          else if (scripted.end === "drop") response.socket?.destroy()
          return
        }
        if (typeof step === "object" && "delayMs" in step) {
          setTimeout(next, step.delayMs)
          return
        }
        response.write(step, () => setImmediate(next))
      }
      next()
    }
  }
}

interface Running {
  readonly provider: FakeProvider
  readonly close: () => Promise<void>
}

const listen = (): Promise<Running> =>
  new Promise((resolve) => {
    const queue: Array<Scripted> = []
    const requests: Array<RecordedRequest> = []
    const lives: Array<StreamLife> = []
    let clock = 0
    let open = 0
    let peak = 0
    let closing = false
    let fallback = (_request: RecordedRequest): Scripted => status(500, { error: { message: "no scripted response" } })
    const server = Http.createServer((request, response) => {
      const life: StreamLife = { index: -1, openedAt: ++clock, closedAt: undefined }
      lives.push(life)
      open++
      peak = Math.max(peak, open)
      response.once("close", () => {
        life.closedAt = ++clock
        open--
      })
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        const recorded: RecordedRequest = {
          method: request.method ?? "",
          path: request.url ?? "",
          headers: { ...request.headers },
          body: Buffer.concat(chunks).toString("utf8")
        }
        life.index = requests.length
        requests.push(recorded)
        serve(response, queue.shift() ?? fallback(recorded), () => closing)
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      const url = `http://127.0.0.1:${port}`
      resolve({
        provider: {
          url,
          baseUrl: `${url}/v1`,
          requests,
          enqueue: (...responses) => {
            queue.push(...responses)
          },
          setFallback: (respond) => {
            fallback = respond
          },
          pending: () => queue.length,
          lives,
          peakOpen: () => peak
        },
        close: () =>
          new Promise<void>((done) => {
            closing = true
            server.close(() => done())
            // Stalled and streaming responses would otherwise keep the server open.
            server.closeAllConnections()
          })
      })
    })
  })

/** Starts a fake provider for the life of the current scope. */
export const make: Effect.Effect<FakeProvider, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(listen),
  (running) => Effect.promise(running.close)
).pipe(Effect.map((running) => running.provider))

/** Promise form for tests that manage lifetimes with beforeAll/afterAll. */
export const start = (): Promise<FakeProvider & { readonly close: () => Promise<void> }> =>
  listen().then((running) => Object.assign(running.provider, { close: running.close }))
