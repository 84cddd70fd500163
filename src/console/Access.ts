/**
 * Who may read the console (pure).
 *
 * - On a loopback host (the default `127.0.0.1`), anyone who can connect may: that is the
 *   machine's own users. The `Host` header must name a loopback host exactly (the front door,
 *   `transport/Door.ts`, has refused every other already), so that a web page on another site
 *   cannot read the console through a DNS name rebound to 127.0.0.1.
 * - On any other host, every console request must carry the configured token, as `?token=` or
 *   `Authorization: Bearer`; without a configured token the console answers 403 and says how
 *   to set one.
 * - Messages are revealed (`?messages=1`) only to a client connected from a loopback address,
 *   whatever the host and the token.
 * - A user's own page on a team's server (`/console/me`) takes the door's word instead
 *   (`passedByTheDoor`): the door found the user's token, and no other page opens to it.
 */
import { Redacted } from "effect"
import { isLoopback } from "../Config.js"
import { headerTokenOf, sameToken } from "../transport/Policy.js"

export type Access =
  | {
    readonly _tag: "Allowed"
    /** The client connected from a loopback address (may reveal messages). */
    readonly loopbackClient: boolean
    /** The token as the query carried it, for the page's links and its script (a header is not repeated by links). */
    readonly linkToken: string | undefined
  }
  | { readonly _tag: "Denied"; readonly status: 401 | 403; readonly message: string }

export interface AccessRequest {
  readonly remoteAddress: string | undefined
  readonly hostHeader: string | undefined
  readonly authorization: string | undefined
  /** `x-byok-token`, as a reverse proxy may add it. */
  readonly tokenHeader?: string | undefined
  readonly queryToken: string | undefined
}

/** `127.0.0.1`, `::1` and IPv4-mapped `::ffff:127.x.y.z`. */
export const isLoopbackAddress = (address: string | undefined): boolean =>
  address !== undefined && (address === "::1" || /^(::ffff:)?127\./.test(address))

/** The host name of a `Host` header (`[::1]:8787` → `::1`, `localhost:8787` → `localhost`). */
export const hostNameOf = (header: string): string => {
  const value = header.trim().toLowerCase()
  if (value.startsWith("[")) return value.slice(1, value.indexOf("]") < 0 ? undefined : value.indexOf("]"))
  const colon = value.lastIndexOf(":")
  return colon < 0 ? value : value.slice(0, colon)
}


export const TOKEN_HELP =
  "set console.token in the configuration file (at least 16 characters) or BYOK_CONSOLE_TOKEN, then open /console?token=<token> " +
  "or send Authorization: Bearer <token>"

export const decide = (
  config: { readonly host: string; readonly token: Redacted.Redacted<string> | undefined },
  request: AccessRequest
): Access => {
  const loopbackClient = isLoopbackAddress(request.remoteAddress)
  if (isLoopback(config.host)) {
    const name = request.hostHeader === undefined ? undefined : hostNameOf(request.hostHeader)
    if (name === undefined || !isLoopback(name)) {
      return { _tag: "Denied", status: 403, message: "The console answers only requests addressed to a loopback host name (localhost, 127.0.0.1, [::1])." }
    }
    return { _tag: "Allowed", loopbackClient, linkToken: undefined }
  }
  if (config.token === undefined) {
    return { _tag: "Denied", status: 403, message: `The server listens on ${config.host}, not a loopback address: the console needs a token. To open it, ${TOKEN_HELP}.` }
  }
  const given = headerTokenOf(request.authorization, request.tokenHeader) ?? request.queryToken
  if (given === undefined || !sameToken(given, Redacted.value(config.token))) {
    return { _tag: "Denied", status: 401, message: "The console needs the configured token: open /console?token=<token> or send Authorization: Bearer <token>." }
  }
  return passedByTheDoor(request)
}

/**
 * A request let through on its caller as the door found it (a user's own page on a team's
 * server): the token goes on in the page's links only when the query carried it.
 */
export const passedByTheDoor = (request: AccessRequest): Extract<Access, { _tag: "Allowed" }> => ({
  _tag: "Allowed",
  loopbackClient: isLoopbackAddress(request.remoteAddress),
  linkToken: headerTokenOf(request.authorization, request.tokenHeader) === undefined ? request.queryToken : undefined
})
