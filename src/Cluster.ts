/**
 * Several instances of a team's server on one PostgreSQL database (docs/team.md, "Several
 * instances"): which instance serves each request's session (the others forward its calls
 * there), and one instance at a time working each conversation. One person's server, on its
 * SQLite file, is always alone: every request is its own and every lease is free at once. The
 * PostgreSQL registry is `cluster/Registry.ts`; forwarding is `transport/front/Hop.ts`.
 */
import { Context, Effect, Layer, Schema } from "effect"
import type { Scope } from "effect"

export type Route =
  /** This instance serves the request; `tookOver`: its holder was an instance that is gone. */
  | { readonly _tag: "Here"; readonly tookOver: boolean }
  /** A live other instance serves it, reached at `address` (`http://host:port`). */
  | { readonly _tag: "There"; readonly instanceId: string; readonly address: string }

export const HERE: Route = { _tag: "Here", tookOver: false }

export class ClusterError extends Schema.TaggedError<ClusterError>("cursor-byok/Cluster/ClusterError")("ClusterError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

export interface ClusterService {
  /** This instance's id (`solo` when alone). */
  readonly instanceId: string
  /** Whether other instances may share the database (PostgreSQL). */
  readonly shared: boolean
  /** Whether no other instance was alive at the last heartbeat. */
  readonly alone: () => boolean
  /** Where the session of `requestId` is served: claimed here when no live instance holds it. */
  readonly route: (requestId: string) => Effect.Effect<Route, ClusterError>
  /** The same for a request that starts a turn of `conversationId`: claimed for the conversation's home (here if it has none alive). */
  readonly routeTurn: (requestId: string, conversationId: string) => Effect.Effect<Route, ClusterError>
  /** Where `requestId` is served if a live instance holds it (taken over here from a gone one); undefined: nobody yet. */
  readonly holderOf: (requestId: string) => Effect.Effect<Route | undefined, ClusterError>
  /** Makes this instance the home of a conversation it took over (when its home is gone). */
  readonly adopt: (conversationId: string) => Effect.Effect<void, ClusterError>
  /** Forgets a route to an instance that did not answer (the next `route` asks the database). */
  readonly forget: (requestId: string) => void
  /** Holds `conversationId` for this instance until the scope closes; waits while a live other instance holds it. */
  readonly lease: (conversationId: string) => Effect.Effect<void, never, Scope.Scope>
  /** Whether another instance is alive now. */
  readonly othersAlive: Effect.Effect<boolean, ClusterError>
}

export class Cluster extends Context.Tag("cursor-byok/Cluster")<Cluster, ClusterService>() {}

/** One instance alone (SQLite, and tests that build the runner without a cluster). */
export const solo: ClusterService = {
  instanceId: "solo",
  shared: false,
  alone: () => true,
  route: () => Effect.succeed(HERE),
  routeTurn: () => Effect.succeed(HERE),
  holderOf: () => Effect.succeed(HERE),
  adopt: () => Effect.void,
  forget: () => undefined,
  lease: () => Effect.void,
  othersAlive: Effect.succeed(false)
}

export const layerSolo: Layer.Layer<Cluster> = Layer.succeed(Cluster, solo)

/** The header an instance marks a forwarded call with: its receiver serves it, never forwards it again. */
export const HOP_HEADER = "x-byok-hop"
