/**
 * The console's access rule and its escaping, as pure functions (the HTTP behaviour is
 * `test/e2e/Console.test.ts`).
 */
import { assert, describe, it } from "@effect/vitest"
import { Redacted } from "effect"
import * as Access from "../../src/console/Access.js"
import { html, raw } from "../../src/console/Html.js"

const TOKEN = Redacted.make("console-token-0123456789")
const request = (overrides: Partial<Access.AccessRequest> = {}): Access.AccessRequest => ({
  remoteAddress: "127.0.0.1",
  hostHeader: "127.0.0.1:8787",
  authorization: undefined,
  queryToken: undefined,
  ...overrides
})

describe("Console access", () => {
  it("loopback host: open to a loopback Host header, closed to any other name", () => {
    for (const host of ["127.0.0.1:8787", "localhost:8787", "[::1]:8787", "127.3.4.5"]) {
      assert.strictEqual(Access.decide({ host: "127.0.0.1", token: undefined }, request({ hostHeader: host }))._tag, "Allowed", host)
    }
    for (const host of ["evil.example", "evil.example:8787", "192.168.1.2:8787", "127.0.0.1.nip.io:8787", "127.evil.example", "app.localhost", undefined]) {
      const access = Access.decide({ host: "127.0.0.1", token: TOKEN }, request({ hostHeader: host }))
      assert.strictEqual(access._tag === "Denied" ? access.status : 0, 403, String(host))
    }
  })

  it("non-loopback host: 403 without a configured token, 401 without the right one, allowed with it", () => {
    const none = Access.decide({ host: "0.0.0.0", token: undefined }, request({ queryToken: "anything-at-all-123" }))
    assert.strictEqual(none._tag === "Denied" ? none.status : 0, 403)
    assert.include(none._tag === "Denied" ? none.message : "", "BYOK_CONSOLE_TOKEN")
    for (const r of [request(), request({ queryToken: "wrong" }), request({ authorization: "Bearer wrong" }), request({ authorization: "Basic x" })]) {
      const access = Access.decide({ host: "0.0.0.0", token: TOKEN }, r)
      assert.strictEqual(access._tag === "Denied" ? access.status : 0, 401)
    }
    const byQuery = Access.decide({ host: "0.0.0.0", token: TOKEN }, request({ queryToken: Redacted.value(TOKEN), remoteAddress: "10.0.0.5" }))
    assert.deepStrictEqual(byQuery, { _tag: "Allowed", loopbackClient: false, linkToken: Redacted.value(TOKEN) })
    const byHeader = Access.decide({ host: "0.0.0.0", token: TOKEN }, request({ authorization: `Bearer ${Redacted.value(TOKEN)}`, remoteAddress: "::ffff:127.0.0.1" }))
    assert.deepStrictEqual(byHeader, { _tag: "Allowed", loopbackClient: true, linkToken: undefined })
  })

  it("loopback client addresses", () => {
    for (const address of ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"]) assert.isTrue(Access.isLoopbackAddress(address), address)
    for (const address of ["10.0.0.1", "::ffff:10.0.0.1", "fe80::1", "", undefined]) assert.isFalse(Access.isLoopbackAddress(address), String(address))
  })

  it("html escapes every interpolation, in text and attributes, but not markup it built", () => {
    const evil = `<script>alert("x")</script>&'`
    assert.strictEqual(
      html`<a title="${evil}">${evil}</a>${html`<b>${1}</b>`}${[evil, null, undefined, false]}`.value,
      `<a title="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;</a><b>1</b>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;`
    )
    assert.strictEqual(html`${raw("<i>")}`.value, "<i>")
  })
})
