/**
 * The JSON text of an immutable JSON value, made once per object: a cache key for what is
 * derived from a value that comes back equal but as a new object (a run request's MCP tools,
 * decoded afresh each turn and kept by the turn's settings from call to call).
 */
const texts = new WeakMap<object, string>()

export const jsonKeyOf = (value: object): string => {
  let text = texts.get(value)
  if (text === undefined) {
    text = JSON.stringify(value)
    texts.set(value, text)
  }
  return text
}

/** A map that keeps its `capacity` most recently used entries (a read counts as a use). */
export interface RecentMap<K, V> {
  readonly get: (key: K) => V | undefined
  readonly set: (key: K, value: V) => void
  readonly size: number
}

export const recentMap = <K, V>(capacity: number): RecentMap<K, V> => {
  const entries = new Map<K, V>()
  return {
    get: (key: K): V | undefined => {
      const value = entries.get(key)
      if (value !== undefined) {
        // The most recently used last, so that the oldest goes first.
        entries.delete(key)
        entries.set(key, value)
      }
      return value
    },
    set: (key: K, value: V): void => {
      entries.set(key, value)
      if (entries.size > capacity) entries.delete(entries.keys().next().value!)
    },
    get size() {
      return entries.size
    }
  }
}
