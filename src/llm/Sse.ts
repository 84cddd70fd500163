/**
 * An incremental Server-Sent Events decoder (WHATWG "event stream interpretation").
 *
 * Written here instead of using `@effect/experimental/Sse` because that parser (0.61.1) keeps
 * its "skip the LF after a CR" flag per `feed` call, so a CRLF split across two network chunks
 * becomes two line breaks and dispatches an event early (it drops the `event:` name of the
 * event that follows); it also turns a `retry:` field into a sleep-and-restart of the channel,
 * which is wrong for a one-shot HTTP response. This decoder is a plain synchronous object, so
 * the adapters' pure state machines, the tests and the benchmark can drive it with bytes alone.
 *
 * Handles: LF, CR and CRLF line ends (also split across chunks), comment lines, `event:`
 * names, multi-line `data:`, a leading BOM, UTF-8 split across chunk boundaries, and a maximum
 * event size.
 */

/** One dispatched event. `event` is `"message"` when the stream named none. */
export interface SseEvent {
  readonly event: string
  readonly data: string
  readonly id: string | undefined
}

export class SseEventTooLarge extends Error {
  constructor(readonly maxEventSize: number) {
    super(`SSE event exceeded the maximum size of ${maxEventSize} characters`)
  }
}

export interface SseDecoder {
  /** Decodes the next piece of text; returns the events completed by it. */
  readonly feedText: (text: string) => Array<SseEvent>
  /** Decodes the next bytes (UTF-8, possibly cut inside a character). */
  readonly feedBytes: (bytes: Uint8Array) => Array<SseEvent>
  /** End of input: per the spec an unterminated event at EOF is discarded, so this returns nothing
   * dispatched; it reports whether unterminated bytes were pending (a truncated stream). */
  readonly end: () => { readonly pendingBytes: boolean }
}

const defaultMaxEventSize = 16 * 1024 * 1024

export const makeSseDecoder = (options?: { readonly maxEventSize?: number }): SseDecoder => {
  const maxEventSize = options?.maxEventSize ?? defaultMaxEventSize
  const utf8 = new TextDecoder("utf-8")
  let buffer = ""
  let first = true
  // Carried across feeds: a chunk that ended in CR means a leading LF of the next is the same line end.
  let skipLeadingLf = false
  let data: Array<string> = []
  let hasData = false
  let eventName: string | undefined
  let lastId: string | undefined
  let pendingSize = 0

  const processLine = (line: string, out: Array<SseEvent>): void => {
    if (line.length === 0) {
      if (hasData) out.push({ event: eventName ?? "message", data: data.join("\n"), id: lastId })
      data = []
      hasData = false
      eventName = undefined
      pendingSize = 0
      return
    }
    if (line.charCodeAt(0) === 58 /* ':' */) return // comment
    const colon = line.indexOf(":")
    let field: string
    let value: string
    if (colon < 0) {
      field = line
      value = ""
    } else {
      field = line.slice(0, colon)
      value = line.charCodeAt(colon + 1) === 32 ? line.slice(colon + 2) : line.slice(colon + 1)
    }
    switch (field) {
      case "data":
        data.push(value)
        hasData = true
        pendingSize += value.length
        if (pendingSize > maxEventSize) throw new SseEventTooLarge(maxEventSize)
        return
      case "event":
        eventName = value
        return
      case "id":
        if (!value.includes("\u0000")) lastId = value
        return
      default:
        // `retry:` and unknown fields carry nothing an HTTP-response consumer needs.
        return
    }
  }

  const feedText = (text: string): Array<SseEvent> => {
    const out: Array<SseEvent> = []
    if (text.length === 0) return out
    if (first) {
      first = false
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    let start = 0
    if (skipLeadingLf && text.charCodeAt(0) === 10) start = 1
    skipLeadingLf = false
    let source = buffer.length > 0 ? buffer + text.slice(start) : text
    if (buffer.length > 0) start = 0
    buffer = ""
    let lineStart = start
    const length = source.length
    if (source.indexOf("\r", start) < 0) {
      // Fast path for LF-only input (almost every provider): jump from line end to line end.
      let end = source.indexOf("\n", start)
      while (end >= 0) {
        processLine(source.slice(lineStart, end), out)
        lineStart = end + 1
        end = source.indexOf("\n", lineStart)
      }
      if (lineStart < length) {
        buffer = source.slice(lineStart)
        if (buffer.length + pendingSize > maxEventSize) throw new SseEventTooLarge(maxEventSize)
      }
      return out
    }
    for (let i = start; i < length; i++) {
      const c = source.charCodeAt(i)
      if (c === 10 || c === 13) {
        processLine(source.slice(lineStart, i), out)
        if (c === 13) {
          if (i + 1 < length) {
            if (source.charCodeAt(i + 1) === 10) i++
          } else {
            skipLeadingLf = true
          }
        }
        lineStart = i + 1
      }
    }
    if (lineStart < length) {
      buffer = source.slice(lineStart)
      if (buffer.length + pendingSize > maxEventSize) throw new SseEventTooLarge(maxEventSize)
    }
    source = ""
    return out
  }

  return {
    feedText,
    feedBytes: (bytes) => feedText(utf8.decode(bytes, { stream: true })),
    end: () => {
      const tail = utf8.decode()
      return { pendingBytes: tail.length > 0 || buffer.length > 0 || hasData }
    }
  }
}

/** Decodes a whole body at once (tests, benchmarks). */
export const decodeAll = (body: string | Uint8Array): Array<SseEvent> => {
  const decoder = makeSseDecoder()
  return typeof body === "string" ? decoder.feedText(body) : decoder.feedBytes(body)
}
