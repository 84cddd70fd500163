/** Host names as the configuration reads them: loopback ones, and `NO_PROXY` lists (pure). */

/** A `127.x.y.z` literal, each part 0-255 in plain decimal (`127.0.0.1.nip.io` and `127.evil.example` are not). */
const isLoopbackV4 = (name: string) => {
  const match = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(name)
  return match !== null && match.slice(1).every((part) => Number(part) <= 255 && (part.length === 1 || part[0] !== "0"))
}

/** Exactly a loopback name or literal: `localhost`, a `127.x.y.z` literal, `::1` (or `[::1]`). */
export const isLoopback = (host: string): boolean => {
  const name = host.toLowerCase()
  return name === "localhost" || name === "::1" || name === "[::1]" || isLoopbackV4(name)
}

/** `NO_PROXY`'s comma- or space-separated entries, lower-cased, ports dropped. */
export const parseNoProxy = (text: string | undefined): ReadonlyArray<string> =>
  (text ?? "").split(/[\s,]+/).map((entry) => entry.trim().toLowerCase().replace(/^\*\./, ".").replace(/:\d+$/, "")).filter((entry) => entry !== "")
