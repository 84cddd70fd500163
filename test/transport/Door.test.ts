/**
 * The door around the policy: the hop mark (ours passes and is removed, a forged one is
 * refused), the answer a refused request gets, and the log: one line per cause a minute, with
 * how many more were refused meanwhile.
 */
import { LOCAL } from "../../src/Users.js"
import { assert, describe, it } from "@effect/vitest"
import type * as Http from "node:http"
import * as Door from "../../src/transport/Door.js"

const PORT = 8787

interface Answered {
  status: number
  headers: Record<string, unknown>
  body: string
}

/** A request and a response as far as the door reads and writes them. */
const exchange = (headers: Record<string, string>, method = "POST", url = "/aiserver.v1.BidiService/BidiAppend") => {
  const answered: Answered = { status: 0, headers: {}, body: "" }
  const request = { method, url, headers: { ...headers }, socket: { localPort: PORT }, resume: () => undefined } as unknown as Http.IncomingMessage
  const response = {
    headersSent: false,
    writeHead: (status: number, head: Record<string, unknown>) => {
      answered.status = status
      answered.headers = head
    },
    end: (body: string) => {
      answered.body = body
    }
  } as unknown as Http.ServerResponse
  return { request, response, answered }
}

const make = () => {
  const lines: Array<string> = []
  let now = 0
  const door = Door.make(() => ({ bindHost: "127.0.0.1", allowedHosts: [], token: undefined }), (line) => lines.push(line), () => now)
  return { door, lines, advance: (ms: number) => (now += ms) }
}

const good = { host: `127.0.0.1:${PORT}`, "content-type": "application/proto" }

describe("The door", () => {
  it("lets a request through, and takes off a hop mark of ours, which lets Cursor's names in", () => {
    const { door } = make()
    const plain = exchange(good)
    assert.deepStrictEqual(door.http1(plain.request, plain.response), LOCAL)
    const marked = exchange({ ...good, host: "api2.cursor.sh", [Door.HOP_HEADER]: Door.hopMark("proxy") })
    assert.deepStrictEqual(door.http1(marked.request, marked.response), LOCAL)
    assert.notProperty(marked.request.headers, Door.HOP_HEADER)
    const direct = exchange({ ...good, host: "api2.cursor.sh" })
    assert.isFalse(door.http1(direct.request, direct.response))
    assert.strictEqual(direct.answered.status, 403)
  })

  it("refuses a forged hop mark, whatever it claims", () => {
    const { door } = make()
    for (const mark of ["guess proxy", `${Door.hopMark("proxy").split(" ")[0]}x proxy`, `${Door.hopMark("tls").split(" ")[0]} elsewhere`, ""]) {
      const forged = exchange({ ...good, [Door.HOP_HEADER]: mark })
      assert.isFalse(door.http1(forged.request, forged.response), mark)
      assert.strictEqual(forged.answered.status, 403, mark)
      assert.include(forged.answered.body, "hop mark")
    }
  })

  it("answers readable JSON with the Connect code of its status, and logs one line per cause a minute", () => {
    const { advance, door, lines } = make()
    for (let n = 0; n < 5; n++) {
      const simple = exchange({ ...good, "content-type": "text/plain" })
      assert.isFalse(door.http1(simple.request, simple.response))
      assert.strictEqual(simple.answered.status, 415)
      assert.deepInclude(JSON.parse(simple.answered.body), { code: "invalid_argument" })
    }
    const rebound = exchange({ ...good, host: `127.0.0.1.nip.io:${PORT}` })
    door.http1(rebound.request, rebound.response)
    assert.deepInclude(JSON.parse(rebound.answered.body), { code: "permission_denied" })
    assert.strictEqual(lines.length, 2)
    assert.match(lines[0]!, /^request refused \(content-type\): POST \/aiserver\.v1\.BidiService\/BidiAppend: /)
    assert.match(lines[1]!, /^request refused \(host\)/)
    advance(59_000)
    const again = exchange({ ...good, "content-type": "text/plain" })
    door.http1(again.request, again.response)
    assert.strictEqual(lines.length, 2)
    advance(2_000)
    const later = exchange({ ...good, "content-type": "text/plain" })
    door.http1(later.request, later.response)
    assert.strictEqual(lines.length, 3)
    assert.include(lines[2]!, "(5 more refused for this cause in the last minute)")
  })
})
