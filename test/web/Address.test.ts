/**
 * The address policy alone: which addresses are refused and why, the allowHosts matching, and
 * that every address a name resolves to is checked.
 */
import { assert, describe, it } from "@effect/vitest"
import { addressRefusal, AddressRefused, hostRefusal, isAllowed, resolveChecked } from "../../src/web/Address.js"

describe("Address policy", () => {
  it("global unicast addresses pass; every special-purpose range is refused with its class", () => {
    for (const address of ["93.184.216.34", "1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "[2001:4860:4860::8888]"]) {
      assert.isUndefined(addressRefusal(address), address)
    }
    const refused: ReadonlyArray<readonly [string, string]> = [
      ["127.0.0.1", "a loopback address"],
      ["127.255.255.254", "a loopback address"],
      ["::1", "a loopback address"],
      ["10.255.0.1", "a private network address"],
      ["172.31.255.255", "a private network address"],
      ["192.168.0.1", "a private network address"],
      ["fc00::1", "a private network address (IPv6 unique local)"],
      ["169.254.169.254", "the cloud metadata address (link-local)"],
      ["169.254.1.1", "a link-local address"],
      ["fe80::abcd", "a link-local address"],
      ["0.0.0.0", "an unspecified address"],
      ["::", "an unspecified address"],
      ["100.127.255.255", "a carrier-grade NAT (shared) address"],
      ["239.1.1.1", "a multicast address"],
      ["ff02::1", "a multicast address"],
      ["255.255.255.255", "the broadcast address"],
      ["240.0.0.1", "a reserved address"],
      ["::ffff:127.0.0.1", "a loopback address (IPv4-mapped 127.0.0.1)"],
      ["::ffff:7f00:1", "a loopback address (IPv4-mapped 127.0.0.1)"],
      ["::ffff:169.254.169.254", "the cloud metadata address (link-local) (IPv4-mapped 169.254.169.254)"],
      // How the URL parser writes [::127.0.0.1].
      ["::7f00:1", "an IPv4-compatible IPv6 address"],
      ["64:ff9b::a00:1", "a NAT64 address embedding an IPv4 address"],
      ["2002:a00:1::", "a 6to4 address embedding an IPv4 address"]
    ]
    for (const [address, reason] of refused) assert.strictEqual(addressRefusal(address), reason, address)
    assert.isUndefined(addressRefusal("::ffff:8.8.8.8"), "a mapped public address is public")
  })

  it("host names: loopback and metadata names are refused before any DNS; other names wait for their addresses", () => {
    assert.strictEqual(hostRefusal("localhost"), "a loopback host name")
    assert.strictEqual(hostRefusal("app.localhost"), "a loopback host name")
    assert.strictEqual(hostRefusal("METADATA.google.internal."), "a cloud metadata host name")
    assert.strictEqual(hostRefusal("[::1]"), "a loopback address")
    assert.isUndefined(hostRefusal("docs.example.com"))
  })

  it("allowHosts: `host` matches any port, `host:port` that port only, IPv6 in brackets or bare; no suffix matching", () => {
    assert.isTrue(isAllowed(["127.0.0.1:8080"], "127.0.0.1", 8080))
    assert.isFalse(isAllowed(["127.0.0.1:8080"], "127.0.0.1", 8081))
    assert.isTrue(isAllowed(["wiki.corp"], "WIKI.corp.", 443))
    assert.isFalse(isAllowed(["corp"], "wiki.corp", 443))
    assert.isFalse(isAllowed(["wiki.corp"], "evil-wiki.corp", 443))
    assert.isTrue(isAllowed(["[::1]:9000"], "[::1]", 9000))
    assert.isTrue(isAllowed(["::1"], "[0:0::1]", 1234))
    assert.isFalse(isAllowed([], "127.0.0.1", 80))
  })

  it("a name is refused if any of its addresses is, and resolves to its first address otherwise", async () => {
    const lookup = (addresses: ReadonlyArray<string>) => () => Promise.resolve(addresses.map((address) => ({ address, family: 4 as const })))
    assert.strictEqual(await resolveChecked("public.example", lookup(["93.184.216.34", "93.184.216.35"])), "93.184.216.34")
    const error = await resolveChecked("mixed.example", lookup(["93.184.216.34", "192.168.1.10"])).catch((e: unknown) => e)
    assert.instanceOf(error, AddressRefused)
    assert.strictEqual((error as AddressRefused).reason, "mixed.example resolves to 192.168.1.10, which is a private network address")
    const literal = await resolveChecked("10.0.0.1", lookup(["93.184.216.34"])).catch((e: unknown) => e)
    assert.instanceOf(literal, AddressRefused)
  })
})
