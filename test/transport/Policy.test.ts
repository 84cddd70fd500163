/**
 * The request policy as a table of requests and verdicts, and a property: no name made by adding
 * labels around a loopback literal (a rebinding name) is ever taken for loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Option, Redacted } from "effect"
import * as fc from "effect/FastCheck"
import * as Policy from "../../src/transport/Policy.js"

const PORT = 8787
const loopback: Policy.PolicySettings = { bindHost: "127.0.0.1", allowedHosts: [], token: undefined }
const TOKEN = "a-token-of-twenty-chars"
const exposed: Policy.PolicySettings = { bindHost: "0.0.0.0", allowedHosts: ["byok.example.com"], token: Redacted.make(TOKEN) }

const facts = (overrides: Partial<Policy.RequestFacts> = {}): Policy.RequestFacts => ({
  method: "POST",
  path: "/aiserver.v1.BidiService/BidiAppend",
  query: "",
  host: `127.0.0.1:${PORT}`,
  origin: undefined,
  contentType: "application/proto",
  authorization: undefined,
  tokenHeader: undefined,
  localPort: PORT,
  secure: false,
  cursorListener: false,
  via: "direct",
  ...overrides
})

const causeOf = (verdict: Policy.Verdict) => (verdict._tag === "Pass" ? "pass" : `${verdict.status} ${verdict.cause}`)

describe("Request policy", () => {
  it("Host: exactly a loopback name or literal with the listening port; Cursor's names only when handed on or on the TLS listener", () => {
    for (const host of [`127.0.0.1:${PORT}`, `localhost:${PORT}`, `LOCALHOST:${PORT}`, `[::1]:${PORT}`, `127.1.2.3:${PORT}`, `127.255.255.255:${PORT}`]) {
      assert.strictEqual(causeOf(Policy.check(loopback, facts({ host }))), "pass", host)
    }
    const refused = [
      `127.0.0.1.nip.io:${PORT}`, `127.evil.example:${PORT}`, `localhost.evil.example:${PORT}`, `evil.example:${PORT}`, `app.localhost:${PORT}`,
      `127.1:${PORT}`, `0x7f000001:${PORT}`, `2130706433:${PORT}`, `127.0.0.01:${PORT}`, `127.0.0.256:${PORT}`, `[::ffff:127.0.0.1]:${PORT}`,
      `127.0.0.1:${PORT + 1}`, "127.0.0.1", `127.0.0.1:${PORT}@evil.example`, `127.0.0.1 :${PORT}`, "", `api2.cursor.sh`, `192.168.1.2:${PORT}`
    ]
    for (const host of refused) assert.strictEqual(causeOf(Policy.check(loopback, facts({ host }))), "403 host", host)
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ host: undefined }))), "403 host")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ host: "api2.cursor.sh", via: "proxy" }))), "pass")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ host: "agentn.api5.cursor.sh:443", via: "tls" }))), "pass")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ host: "api2.cursor.sh", secure: true, cursorListener: true }))), "pass")
    // Handed on: the Host names the port the client used on the proxy or the TLS listener.
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ host: "127.0.0.1:8790", via: "tls" }))), "pass")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ host: "evil.example", via: "proxy" }))), "403 host")
  })

  it("a configured name is accepted, with or without its port", () => {
    const settings = { ...loopback, allowedHosts: ["byok.internal", "other.internal:9000"] }
    assert.strictEqual(causeOf(Policy.check(settings, facts({ host: "BYOK.internal" }))), "pass")
    assert.strictEqual(causeOf(Policy.check(settings, facts({ host: "byok.internal:1234" }))), "pass")
    assert.strictEqual(causeOf(Policy.check(settings, facts({ host: "other.internal:9000" }))), "pass")
    assert.strictEqual(causeOf(Policy.check(settings, facts({ host: "other.internal:9001" }))), "403 host")
  })

  it("Origin: web origins refused unless the server's own; Cursor's app origins and none accepted", () => {
    for (const origin of ["https://evil.example", "http://127.0.0.1.nip.io:8787", "null", "http://localhost:9999", "not a url"]) {
      assert.strictEqual(causeOf(Policy.check(loopback, facts({ origin }))), "403 origin", origin)
    }
    for (const origin of [undefined, "", "vscode-file://vscode-app", "vscode-webview://abc", `http://127.0.0.1:${PORT}`]) {
      assert.strictEqual(causeOf(Policy.check(loopback, facts({ origin }))), "pass", String(origin))
    }
    // Cursor's web origins only where the server stands in for Cursor's hosts.
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ origin: "https://cursor.com" }))), "403 origin")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ origin: "https://www.cursor.com", host: "api2.cursor.sh", via: "proxy" }))), "pass")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ origin: "https://evil.example", host: "api2.cursor.sh", via: "proxy" }))), "403 origin")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ origin: "https://cursor.com.evil.example", host: "api2.cursor.sh", via: "proxy" }))), "403 origin")
  })

  it("content type: only Connect, gRPC and gRPC-Web media types on RPC routes; pages and GETs take none", () => {
    for (const contentType of ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", undefined, "application/grpc-web-text+json"]) {
      assert.strictEqual(causeOf(Policy.check(loopback, facts({ contentType }))), "415 content-type", String(contentType))
    }
    for (const contentType of ["application/proto", "application/json; charset=utf-8", "application/connect+proto", "application/grpc", "application/grpc-web+proto", "Application/GRPC-Web", "application/grpc-web-text"]) {
      assert.strictEqual(causeOf(Policy.check(loopback, facts({ contentType }))), "pass", contentType)
    }
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ method: "GET", path: "/console", contentType: undefined }))), "pass")
    assert.strictEqual(causeOf(Policy.check(loopback, facts({ method: "GET", path: "/metrics", contentType: "text/plain" }))), "pass")
  })

  it("off loopback every route but /healthz needs the token, from any of its three places; the proxy's requests are Cursor on this machine", () => {
    const on = (overrides: Partial<Policy.RequestFacts>) => causeOf(Policy.check(exposed, facts({ host: `10.0.0.5:${PORT}`, ...overrides })))
    assert.strictEqual(on({}), "401 token")
    assert.strictEqual(on({ method: "GET", path: "/metrics", contentType: undefined }), "401 token")
    assert.strictEqual(on({ method: "GET", path: "/healthz", contentType: undefined }), "pass")
    assert.strictEqual(on({ authorization: `Bearer ${TOKEN}` }), "pass")
    assert.strictEqual(on({ tokenHeader: TOKEN }), "pass")
    assert.strictEqual(on({ query: `token=${TOKEN}` }), "pass")
    assert.strictEqual(on({ authorization: "Bearer wrong-token-wrong-token" }), "401 token")
    assert.strictEqual(on({ host: "api2.cursor.sh", via: "proxy" }), "pass")
    assert.strictEqual(on({ host: "byok.example.com", tokenHeader: TOKEN }), "pass")
    assert.strictEqual(on({ host: "evil.example", tokenHeader: TOKEN }), "403 host")
    assert.strictEqual(causeOf(Policy.check({ ...exposed, token: undefined }, facts({ host: `10.0.0.5:${PORT}` }))), "403 no-token")
  })

  it("a path as the router reads it", () => {
    assert.strictEqual(Policy.routedPath("/console/users"), "/console/users")
    assert.strictEqual(Policy.routedPath("//Console///Users/"), "/console/users")
    assert.strictEqual(Policy.routedPath("/%63onsole;jsessionid=1"), "/console")
    assert.strictEqual(Policy.routedPath("https://evil.example/console#x"), "/console")
    // Decoded once, as the router does; reserved escapes stay; a malformed one is left as it is.
    assert.strictEqual(Policy.routedPath("/%2563onsole"), "/%63onsole")
    assert.strictEqual(Policy.routedPath("/console%2Fusers"), "/console%2fusers")
    assert.strictEqual(Policy.routedPath("/console/%E0%A4%A"), "/console/%e0%a4%a")
    assert.strictEqual(Policy.routedPath("/"), "/")
  })

  it("no name built around a loopback literal passes as loopback", () => {
    const label = fc.stringMatching(/^[a-z0-9-]{1,12}$/)
    fc.assert(fc.property(label, fc.constantFrom("127.0.0.1", "localhost", "127.9.8.7"), label, fc.boolean(), (before, literal, after, prefix) => {
      const name = prefix ? `${before}.${literal}` : `${literal}.${after}`
      return Policy.check(loopback, facts({ host: `${name}:${PORT}` }))._tag === "Refuse"
    }))
  })

  const alice = { userId: "user_a", name: "alice", models: undefined, dailyUsd: undefined, monthlyUsd: undefined }
  const users: Policy.UserLookup = { teamMode: () => true, authenticate: (token) => (token === "byok_u_alice" ? Option.some(alice) : Option.none()) }
  const team: Policy.PolicySettings = { ...loopback, token: Redacted.make(TOKEN), users }
  const verdict = (overrides: Partial<Policy.RequestFacts>) => Policy.check(team, facts(overrides))

  it("a team's server: every request but /healthz names its caller, on loopback and through the proxy too; pages are the operator's", () => {
    assert.strictEqual(causeOf(verdict({})), "401 token")
    assert.strictEqual(causeOf(verdict({ via: "proxy" })), "401 token", "the proxy's requests are not exempt")
    assert.strictEqual(causeOf(verdict({ authorization: "Bearer byok_u_bob" })), "401 token")
    assert.deepStrictEqual(verdict({ authorization: "Bearer byok_u_alice" }), { _tag: "Pass", caller: { _tag: "User", user: alice } })
    assert.deepStrictEqual(verdict({ tokenHeader: "byok_u_alice" }), { _tag: "Pass", caller: { _tag: "User", user: alice } })
    assert.deepStrictEqual(verdict({ authorization: `Bearer ${TOKEN}` }), { _tag: "Pass", caller: { _tag: "Operator" } })
    assert.strictEqual(causeOf(verdict({ method: "GET", path: "/console", authorization: "Bearer byok_u_alice" })), "403 token")
    assert.strictEqual(causeOf(verdict({ method: "GET", path: "/metrics", authorization: "Bearer byok_u_alice" })), "403 token")
    assert.strictEqual(causeOf(verdict({ method: "GET", path: "/console", authorization: `Bearer ${TOKEN}` })), "pass")
    assert.strictEqual(causeOf(verdict({ method: "GET", path: "/healthz" })), "pass")
    // The other rules still come first: a hostile Host with a user's token is refused as before.
    assert.strictEqual(causeOf(verdict({ host: "evil.example", authorization: "Bearer byok_u_alice" })), "403 host")
    // No user yet: one person's server, every caller Local.
    const single = { ...team, users: { ...users, teamMode: () => false } }
    assert.deepStrictEqual(Policy.check(single, facts({})), { _tag: "Pass", caller: { _tag: "Local" } })
  })

  it("a team's server: a user's token opens their own page (GET /console/me) and no other page", () => {
    const page = (path: string, method = "GET", query = "") => verdict({ method, path, query, contentType: undefined, authorization: query === "" ? "Bearer byok_u_alice" : undefined })
    assert.deepStrictEqual(page(Policy.USER_PAGE_PATH), { _tag: "Pass", caller: { _tag: "User", user: alice } })
    assert.deepStrictEqual(page(Policy.USER_PAGE_PATH, "GET", "token=byok_u_alice"), { _tag: "Pass", caller: { _tag: "User", user: alice } })
    // The router matches paths loosely (case, doubled slashes, escapes, `;`, a trailing slash, an absolute-form target): so does the rule.
    for (const path of ["/console/me/", "/CONSOLE/Me", "//console//me", "/console/%6De", "/console/me;x", "http://127.0.0.1:8787/console/me"]) {
      assert.deepStrictEqual(page(path), { _tag: "Pass", caller: { _tag: "User", user: alice } }, path)
    }
    const spelled = ["//console", "/Console", "/%63onsole", "/console/", "//console/users", "/CONSOLE/USERS/", "/console;x", "/metrics/", "/METRICS", "http://127.0.0.1:8787/console"]
    for (const path of ["/console", "/console/users", "/console/meta", "/console/me/calls", "/console/conversations/conv-1", "/metrics", ...spelled]) {
      const refused = page(path)
      assert.strictEqual(causeOf(refused), "403 token", path)
      assert.include(refused._tag === "Refuse" ? refused.message : "", "operator's token (console.token)", path)
    }
    for (const method of ["HEAD", "POST", "DELETE"]) assert.strictEqual(causeOf(page(Policy.USER_PAGE_PATH, method)), "403 token", method)
    // Without a token, or with one that is no user's, it is refused as every other request; the operator opens it too.
    assert.strictEqual(causeOf(verdict({ method: "GET", path: Policy.USER_PAGE_PATH, contentType: undefined })), "401 token")
    assert.strictEqual(causeOf(verdict({ method: "GET", path: Policy.USER_PAGE_PATH, contentType: undefined, authorization: "Bearer byok_u_bob" })), "401 token")
    assert.deepStrictEqual(verdict({ method: "GET", path: Policy.USER_PAGE_PATH, contentType: undefined, authorization: `Bearer ${TOKEN}` }), { _tag: "Pass", caller: { _tag: "Operator" } })
  })
})
