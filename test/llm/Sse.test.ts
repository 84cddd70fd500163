import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { decodeAll, makeSseDecoder, type SseEvent } from "../../src/llm/Sse.js"

const feedPieces = (pieces: ReadonlyArray<string>): Array<SseEvent> => {
  const decoder = makeSseDecoder()
  return pieces.flatMap((piece) => decoder.feedText(piece))
}

describe("Sse decoder", () => {
  it("splits events on LF, CRLF and CR blank lines", () => {
    expect(decodeAll("data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: d\n\n").map((event) => event.data)).toEqual(["a", "b", "c", "d"])
  })

  it("a CRLF split across two chunks is one line end (the event name that follows is kept)", () => {
    const events = feedPieces(["data: a\r", "\n\r", "\nevent: named\r", "\ndata: b\r\n\r\n"])
    expect(events).toEqual([
      { event: "message", data: "a", id: undefined },
      { event: "named", data: "b", id: undefined }
    ])
  })

  it("skips comment lines, keeps named events, joins multi-line data with LF, strips one leading space only", () => {
    const events = decodeAll(": OPENROUTER PROCESSING\n\nevent: error\ndata: line1\ndata:  line2\ndata\nid: 7\n\n")
    expect(events).toEqual([{ event: "error", data: "line1\n line2\n", id: "7" }])
  })

  it("ignores a leading BOM and events without data; an unterminated event at EOF is not dispatched", () => {
    const decoder = makeSseDecoder()
    expect(decoder.feedText("\uFEFFevent: ping\n\ndata: x\n\ndata: partial")).toEqual([{ event: "message", data: "x", id: undefined }])
    expect(decoder.end()).toEqual({ pendingBytes: true })
  })

  it("decodes UTF-8 characters split across byte chunks", () => {
    const bytes = new TextEncoder().encode("data: héllo ✓ 😊\n\n")
    const decoder = makeSseDecoder()
    const events = Array.from(bytes).flatMap((byte) => decoder.feedBytes(new Uint8Array([byte])))
    expect(events.map((event) => event.data)).toEqual(["héllo ✓ 😊"])
  })

  it("refuses an event larger than the configured maximum", () => {
    const decoder = makeSseDecoder({ maxEventSize: 10 })
    expect(() => decoder.feedText("data: 0123456789abcdef")).toThrow(/maximum size/)
  })

  it.prop("the events do not depend on where the input is cut", [FastCheck.array(FastCheck.integer({ min: 1, max: 40 }), { maxLength: 20 })], ([cuts]) => {
    const body = ": c\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\ndata: é\ndata: 2\n\nevent: b\rdata: y\r\r"
    const pieces: Array<string> = []
    let offset = 0
    for (const cut of cuts) {
      if (offset >= body.length) break
      pieces.push(body.slice(offset, offset + cut))
      offset += cut
    }
    pieces.push(body.slice(offset))
    expect(feedPieces(pieces)).toEqual(decodeAll(body))
    expect(decodeAll(body).map((event) => event.event)).toEqual(["a", "message", "b"])
  })
})
