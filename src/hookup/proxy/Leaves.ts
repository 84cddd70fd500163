/**
 * The proxy's TLS endpoints for intercepted hosts, one per canonical name (lower-case, no
 * trailing dot), each holding that name's leaf: made on the name's first CONNECT, made again
 * before its leaf expires, and kept for the most recently used names only. Dropping an endpoint
 * from the cache closes nothing: connections already handed to it keep it until they end.
 */

/**
 * Endpoints kept. Cursor uses a handful of API hosts (api2, api3, a few agent hosts under
 * api5); a name past this many is made again, with a new leaf, on its next CONNECT.
 */
export const ENDPOINTS_KEPT = 32

/** The name a leaf is issued for and an endpoint is kept under: `API2.Cursor.sh.` is `api2.cursor.sh`. */
export const canonicalName = (host: string) => host.toLowerCase().replace(/\.$/, "")

export interface EndpointCache<A> {
  /** The endpoint for a canonical name: the kept one while it is fresh, else a new one. */
  readonly get: (name: string) => Promise<A>
  /** Endpoints kept now (made or being made). */
  readonly size: () => number
}

export const makeEndpointCache = <A>(options: {
  readonly make: (name: string) => Promise<A>
  /** How long an endpoint is used after it was made (its leaf's validity, less a margin). */
  readonly renewAfterMs: number
  readonly capacity?: number
  readonly now?: () => number
}): EndpointCache<A> => {
  const capacity = Math.max(1, options.capacity ?? ENDPOINTS_KEPT)
  const now = options.now ?? Date.now
  // A Map iterates in insertion order: re-inserting on use keeps the least recently used first.
  const entries = new Map<string, { readonly endpoint: Promise<A>; readonly renewAt: number }>()
  const get = (name: string) => {
    const current = entries.get(name)
    entries.delete(name)
    if (current !== undefined && current.renewAt > now()) {
      entries.set(name, current)
      return current.endpoint
    }
    const entry = { endpoint: options.make(name), renewAt: now() + options.renewAfterMs }
    entries.set(name, entry)
    while (entries.size > capacity) entries.delete(entries.keys().next().value!)
    // A failed endpoint is not kept: the next CONNECT tries again.
    entry.endpoint.catch(() => {
      if (entries.get(name) === entry) entries.delete(name)
    })
    return entry.endpoint
  }
  return { get, size: () => entries.size }
}
