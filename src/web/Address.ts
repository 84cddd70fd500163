/**
 * The address policy of web fetches: which URLs may be fetched at all (http and https, no
 * userinfo) and which addresses may be connected to. Only global unicast addresses are
 * reachable; loopback, private, link-local (the cloud metadata address among them), CGNAT,
 * multicast, broadcast, reserved ranges and IPv6 forms that embed an IPv4 address (mapped,
 * compatible, NAT64, 6to4, Teredo) are refused, so a prompt-injected page cannot make the server
 * read the user's own network. Hosts the operator lists in `web.fetch.allowHosts` are exempt.
 *
 * Pure apart from `resolveChecked`, which asks DNS (or the injected lookup) and checks every
 * address it gets: the fetch connects to the address checked here, never to a second answer.
 */
import ipaddr from "ipaddr.js"
import { lookup as dnsLookup } from "node:dns/promises"
import { isIP } from "node:net"

/** Resolves a host name to all its addresses (DNS by default; tests inject their own). */
export type Lookup = (hostname: string) => Promise<ReadonlyArray<{ readonly address: string; readonly family: 4 | 6 }>>

export const systemLookup: Lookup = (hostname) =>
  dnsLookup(hostname, { all: true, verbatim: true }).then((addresses) =>
    addresses.map((entry) => ({ address: entry.address, family: entry.family === 6 ? 6 as const : 4 as const })))

/** Names that reach the machine itself or a cloud's metadata service whatever DNS says. */
const refusedNames: ReadonlyMap<string, string> = new Map([
  ["localhost", "a loopback host name"],
  ["metadata", "a cloud metadata host name"],
  ["metadata.google.internal", "a cloud metadata host name"],
  ["metadata.goog", "a cloud metadata host name"],
  ["instance-data", "a cloud metadata host name"],
  ["instance-data.ec2.internal", "a cloud metadata host name"]
])

const ipv4Classes: Readonly<Record<string, string>> = {
  loopback: "a loopback address",
  private: "a private network address",
  linkLocal: "a link-local address",
  unspecified: "an unspecified address",
  carrierGradeNat: "a carrier-grade NAT (shared) address",
  multicast: "a multicast address",
  broadcast: "the broadcast address",
  reserved: "a reserved address"
}
// as112 and amt are public anycast services, not special-purpose networks.
const ipv4Allowed = new Set(["unicast", "as112", "amt"])

const ipv6Classes: Readonly<Record<string, string>> = {
  loopback: "a loopback address",
  uniqueLocal: "a private network address (IPv6 unique local)",
  linkLocal: "a link-local address",
  unspecified: "an unspecified address",
  multicast: "a multicast address",
  rfc6052: "a NAT64 address embedding an IPv4 address",
  rfc6145: "an IPv4-translated address",
  "6to4": "a 6to4 address embedding an IPv4 address",
  teredo: "a Teredo address embedding an IPv4 address"
}
const ipv6Allowed = new Set(["unicast", "as112v6", "amt"])

/** Strips the brackets of an IPv6 host and a trailing dot of a name, lower-cased. */
export const bareHost = (hostname: string): string => {
  const unbracketed = hostname.startsWith("[") && hostname.endsWith("]") ? hostname.slice(1, -1) : hostname
  return unbracketed.toLowerCase().replace(/\.$/, "")
}

/**
 * Why an IP address may not be connected to ("a loopback address"), or undefined when it is a
 * global unicast address. An address that does not parse is refused too.
 */
export const addressRefusal = (address: string): string | undefined => {
  const bare = bareHost(address)
  if (!ipaddr.isValid(bare)) return "not a valid IP address"
  const parsed = ipaddr.parse(bare)
  if (parsed.kind() === "ipv4") {
    const v4 = parsed as ipaddr.IPv4
    if (v4.toString() === "169.254.169.254") return "the cloud metadata address (link-local)"
    const range = v4.range()
    return ipv4Allowed.has(range) ? undefined : ipv4Classes[range] ?? "a special-purpose address"
  }
  const v6 = parsed as ipaddr.IPv6
  if (v6.isIPv4MappedAddress()) {
    const v4 = v6.toIPv4Address().toString()
    const inner = addressRefusal(v4)
    return inner === undefined ? undefined : `${inner} (IPv4-mapped ${v4})`
  }
  // ::/96 other than :: and ::1 is the deprecated IPv4-compatible form.
  if (v6.parts.slice(0, 6).every((part) => part === 0) && !["unspecified", "loopback"].includes(v6.range())) {
    return "an IPv4-compatible IPv6 address"
  }
  const range = v6.range()
  return ipv6Allowed.has(range) ? undefined : ipv6Classes[range] ?? "a reserved or special-purpose IPv6 address"
}

/**
 * Why a host, before any DNS, may not be fetched: an address literal that is refused, or a name
 * that is loopback or a metadata service. Names that pass still have their addresses checked.
 */
export const hostRefusal = (hostname: string): string | undefined => {
  const host = bareHost(hostname)
  if (isIP(host) !== 0) return addressRefusal(host)
  if (host.endsWith(".localhost")) return "a loopback host name"
  return refusedNames.get(host)
}

/** An address that resolution or the policy refused; the fetch maps it to a `Refused` error. */
export class AddressRefused extends Error {
  constructor(readonly host: string, readonly reason: string) {
    super(`${host}: ${reason}`)
    this.name = "AddressRefused"
  }
}

/**
 * The address to connect to for `hostname`: the literal itself, or the first address DNS gives,
 * after checking every address (one private answer among public ones refuses the host, since a
 * later connection could use it). Fails with `AddressRefused`, or DNS's own error.
 */
export const resolveChecked = async (hostname: string, lookup: Lookup): Promise<string> => {
  const host = bareHost(hostname)
  const refusal = hostRefusal(host)
  if (refusal !== undefined) throw new AddressRefused(host, `${host} is ${refusal}`)
  if (isIP(host) !== 0) return host
  const addresses = await lookup(host)
  if (addresses.length === 0) throw Object.assign(new Error(`${host} has no address`), { code: "ENOTFOUND" })
  for (const { address } of addresses) {
    const why = addressRefusal(address)
    if (why !== undefined) throw new AddressRefused(host, `${host} resolves to ${address}, which is ${why}`)
  }
  return addresses[0]!.address
}

/** The host, or host and port, an `allowHosts` entry names; IP literals in their canonical form. */
interface AllowEntry {
  readonly host: string
  readonly port: number | undefined
}

const canonicalHost = (host: string): string => {
  const bare = bareHost(host)
  return isIP(bare) !== 0 ? ipaddr.parse(bare).toString() : bare
}

const parseAllowEntry = (entry: string): AllowEntry => {
  const text = entry.trim()
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(text)
  if (bracketed !== null) return { host: canonicalHost(bracketed[1]!), port: bracketed[2] === undefined ? undefined : Number(bracketed[2]) }
  // Several colons without brackets: a bare IPv6 address.
  if (text.split(":").length > 2) return { host: canonicalHost(text), port: undefined }
  const [host, port] = text.split(":")
  return { host: canonicalHost(host!), port: port === undefined ? undefined : Number(port) }
}

/**
 * Whether `allowHosts` exempts `hostname` on `port`: an entry `host` matches that host on any
 * port, `host:port` on that port only. Exact matches (no wildcards, no subdomains).
 */
export const isAllowed = (allowHosts: ReadonlyArray<string>, hostname: string, port: number): boolean => {
  if (allowHosts.length === 0) return false
  const host = canonicalHost(hostname)
  return allowHosts.some((text) => {
    const entry = parseAllowEntry(text)
    return entry.host === host && (entry.port === undefined || entry.port === port)
  })
}

/** The port a URL connects to (its default when it names none). */
export const portOf = (url: URL): number => url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80

/** Why a URL may not be fetched at all (scheme, userinfo), as a sentence; undefined when it may. */
export const urlProblem = (url: URL): string | undefined => {
  if (url.protocol !== "http:" && url.protocol !== "https:") return `${url.href} is not an http or https URL; only web pages can be fetched.`
  if (url.username !== "" || url.password !== "") return `${redactUserinfo(url)} carries a user name or password; URLs with credentials are not fetched.`
  if (url.hostname === "") return `${url.href} names no host.`
  return undefined
}

/** The URL with any userinfo replaced, for messages. */
export const redactUserinfo = (url: URL): string => {
  if (url.username === "" && url.password === "") return url.href
  const copy = new URL(url.href)
  copy.username = "…"
  copy.password = ""
  return copy.href
}
