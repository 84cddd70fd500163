/**
 * Protocol drift made visible: the fields of client messages this server's schema does not know
 * (a newer Cursor's), found by `dialect/Unknowns.ts` as the messages are decoded, kept per kind
 * (protobuf type name, field number, client version from `x-cursor-client-version`) for the
 * process's life. Each kind is counted in `byok_client_unknown_fields_total`, listed in the
 * console (`kindsSeen`), and logged once, a warning, the first time it is seen (`layerLog`
 * writes the line: the decoders run outside any fiber).
 *
 * Nothing here runs when a message has no unknown fields. The kinds are bounded (`MAX_KINDS`):
 * past it, new kinds are counted together as one `(other)` kind, so a client sending made-up
 * field numbers or versions cannot grow the metric's series without end.
 */
import type { UnknownField } from "@bufbuild/protobuf"
import { Chunk, Effect, Layer, MetricLabel, Queue } from "effect"
import type { UnknownSink } from "./dialect/Unknowns.js"
import { clientUnknownFields } from "./Metrics.js"

export const CLIENT_VERSION_HEADER = "x-cursor-client-version"
/** The version of a client that sent no `x-cursor-client-version`. */
export const NO_VERSION = "unknown"
/** Kinds kept apart; past them, one `(other)` kind. */
export const MAX_KINDS = 200
const OTHER = "(other)"
const MAX_VERSION_CHARS = 64

/** One kind of unknown field seen, as the console lists it. */
export interface DriftKind {
  /** The protobuf type name of the message holding it (`agent.v1.AgentClientMessage`). */
  readonly type: string
  readonly field: number
  readonly clientVersion: string
  /** Its wire type when first seen (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit, 3/4 group). */
  readonly wireType: number
  /** A oneof of the message that was unset when first seen: the field may be a new case of it. */
  readonly unsetOneof: string | undefined
  /** Occurrences (one per unknown field record of a decoded message). */
  readonly count: number
  readonly firstSeenMs: number
  readonly lastSeenMs: number
}

interface Kind extends DriftKind {
  count: number
  lastSeenMs: number
  readonly labels: ReadonlyArray<MetricLabel.MetricLabel>
}

const kinds = new Map<string, Kind>()
/** New kinds not yet handed to a logger (none is running yet, or it stopped). */
let unlogged: Array<DriftKind> = []
let announce: ((kind: DriftKind) => void) | undefined

const newKind = (type: string, field: number, clientVersion: string, wireType: number, unsetOneof: string | undefined, nowMs: number): Kind => {
  const kind: Kind = {
    type,
    field,
    clientVersion,
    wireType,
    unsetOneof,
    count: 0,
    firstSeenMs: nowMs,
    lastSeenMs: nowMs,
    labels: [MetricLabel.make("type", type), MetricLabel.make("field", String(field)), MetricLabel.make("client_version", clientVersion)]
  }
  if (announce === undefined) unlogged.push(kind)
  else announce(kind)
  return kind
}

const record = (clientVersion: string, typeName: string, field: UnknownField, unsetOneof: string | undefined): void => {
  const key = `${typeName}#${field.no}#${clientVersion}`
  const nowMs = Date.now()
  let kind = kinds.get(key)
  if (kind === undefined) {
    if (kinds.size < MAX_KINDS) {
      kind = newKind(typeName, field.no, clientVersion, field.wireType, unsetOneof, nowMs)
      kinds.set(key, kind)
    } else {
      kind = kinds.get(OTHER) ?? newKind(OTHER, 0, OTHER, field.wireType, undefined, nowMs)
      kinds.set(OTHER, kind)
    }
  }
  kind.count++
  kind.lastSeenMs = nowMs
  clientUnknownFields.unsafeUpdate(1, kind.labels)
}

/** A header value as a version label: trimmed, at most 64 characters of `[A-Za-z0-9_.+-]` (others become `_`). */
export const normalizeVersion = (raw: string | undefined): string => {
  const trimmed = (raw ?? "").trim().slice(0, MAX_VERSION_CHARS)
  return trimmed === "" ? NO_VERSION : trimmed.replace(/[^\w.+-]/g, "_")
}

/** The raw `x-cursor-client-version` of a request's headers (Node's header record), undefined when absent. */
export const clientVersionOf = (headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>): string | undefined => {
  const value = headers[CLIENT_VERSION_HEADER]
  return typeof value === "string" ? value : value?.[0]
}

const sinks = new Map<string | undefined, UnknownSink>()

/** What the decoders tell each unknown field of a client whose `x-cursor-client-version` is `rawVersion` (one per version, made once). */
export const sinkFor = (rawVersion: string | undefined): UnknownSink => {
  let sink = sinks.get(rawVersion)
  if (sink === undefined) {
    const version = normalizeVersion(rawVersion)
    sink = (typeName, field, unsetOneof) => record(version, typeName, field, unsetOneof)
    if (sinks.size < MAX_KINDS) sinks.set(rawVersion, sink)
  }
  return sink
}

/** The kinds seen since the process started, first seen first. */
export const kindsSeen = (): ReadonlyArray<DriftKind> =>
  [...kinds.values()].map(({ labels: _, ...kind }): DriftKind => kind).sort((a, b) => a.firstSeenMs - b.firstSeenMs)

/** The warning for a kind seen for the first time. */
export const logLineOf = (kind: DriftKind): string =>
  kind.type === OTHER
    ? `client drift: more than ${MAX_KINDS} kinds of unknown fields seen; further kinds are counted together as type ${OTHER}`
    : `client drift: ${kind.type} carries field ${kind.field} (wire type ${kind.wireType}), which this server's schema does not know, ` +
      `from client version ${kind.clientVersion}${kind.unsetOneof === undefined ? "" : `; its oneof ${kind.unsetOneof} is unset (a new case?)`}` +
      `; counted in byok_client_unknown_fields_total and listed in the console (logged once)`

/**
 * Writes the warning of each new kind, once per process: the kinds seen before it started first.
 * One logger at a time takes them; when it stops, the kinds it had not written wait for the next.
 */
export const layerLog: Layer.Layer<never> = Layer.scopedDiscard(Effect.gen(function*() {
  const queue = yield* Queue.unbounded<DriftKind>()
  const own = (kind: DriftKind) => void Queue.unsafeOffer(queue, kind)
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      for (const kind of unlogged) own(kind)
      unlogged = []
      announce = own
    }),
    () =>
      Effect.map(Queue.takeAll(queue), (left) => {
        if (announce === own) announce = undefined
        unlogged.push(...Chunk.toReadonlyArray(left))
      })
  )
  yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(queue), (kind) => Effect.logWarning(logLineOf(kind)))))
}))
