/**
 * The unary RPCs Cursor calls besides the agent stream, as one table: the model lists (so the
 * configured models appear in Cursor's picker), the server config (which points Cursor's HTTP/2
 * agent client at the TLS listener, or keeps Cursor on HTTP/1.1 without it), the clock, the connectivity probe, the telemetry
 * sinks, the offline identity, the naming calls (chat titles, tab and chat names, commit messages,
 * branch names: `side/Naming.ts`), and the context usage panel (`side/ContextUsage.ts`). Every other procedure gets `unimplemented`, so an unknown
 * call fails fast and visibly instead of hanging. Plus `GET /healthz`.
 *
 * Each row has a scope, read by the intercepting proxy: `local` rows are answered here even
 * when the user has a Cursor account (telemetry stays on this machine, for privacy; titles and
 * commit messages come from the user's model, not Cursor's); `account` rows only in offline
 * mode, otherwise the real Cursor answers them.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Layer } from "effect"
import { ConnectError } from "./Connect.js"
import { accountRpcs, stripeProfileRpcs } from "./side/Account.js"
import type { CatalogueOptions } from "./side/Catalogue.js"
import { promptContextUsageRpc } from "./side/ContextUsage.js"
import * as Naming from "./side/Naming.js"
import type { Path, Procedure, RpcCall } from "./side/Procedure.js"
import type { RpcRoute } from "./front/Rpc.js"
import { unaryError } from "./side/Procedure.js"
import * as Startup from "./side/Startup.js"

export { availableModels, defaultIdentity, defaultModel, serverConfig, usableModels } from "./side/Catalogue.js"
export type { CatalogueOptions, Identity, ListedModel } from "./side/Catalogue.js"
export { maxSinkBytes } from "./side/Procedure.js"
export type { RpcCall } from "./side/Procedure.js"

export type Scope = "local" | "account"

const scoped = (scope: Scope, procedures: ReadonlyArray<Procedure>) => procedures.map((procedure) => ({ scope, ...procedure }))

/** The single source of the side routes and of the two path lists below. */
export const procedures: ReadonlyArray<Procedure & { readonly scope: Scope }> = [
  ...scoped("local", [
    Startup.availableModelsRpc,
    ...Startup.usableModelsRpcs,
    ...Startup.defaultModelForCliRpcs,
    ...Startup.serverConfigRpcs,
    Startup.defaultModelRpc,
    Startup.defaultModelNudgeDataRpc,
    Startup.isConnectedRpc,
    Startup.notifyConversationCloneRpc,
    Startup.serverTimeRpc,
    Startup.submitLogsRpc,
    Startup.trackEventsRpc,
    Startup.tracesRpc,
    ...Naming.nameAgentRpcs,
    Naming.chatTitleRpc,
    Naming.nameTabRpc,
    promptContextUsageRpc,
    Naming.updateConversationMetadataRpc,
    Naming.commitMessageRpc,
    Naming.branchNameRpc
  ]),
  ...scoped("account", [
    Startup.bootstrapStatsigRpc,
    Startup.firstWindowStatsigDecisionRpc,
    ...accountRpcs,
    ...stripeProfileRpcs
  ])
]

const pathsOf = (scope: Scope): ReadonlyArray<Path> => procedures.filter((p) => p.scope === scope).map((p) => p.path)

/** Answered locally even when the user has a Cursor account. */
export const localProcedures: ReadonlyArray<Path> = pathsOf("local")

/** Answered locally only in offline mode; otherwise the real Cursor answers. */
export const accountProcedures: ReadonlyArray<Path> = pathsOf("account")

/** The side procedures' options: a value, or a function read at each request (the running configuration's, which a reload replaces). */
export type CatalogueSource = CatalogueOptions | (() => CatalogueOptions)

const current = (options: CatalogueSource): CatalogueOptions => typeof options === "function" ? options() : options

/** The RPCs the front door serves in every protocol (`front/Rpc.ts`), by path. */
export const rpcTable = (options: CatalogueSource): ReadonlyMap<string, RpcRoute> =>
  new Map(procedures.flatMap((procedure) =>
    procedure.kind === "rpc"
      ? [[procedure.path, { sink: procedure.sink, serve: (call: RpcCall) => Effect.suspend(() => procedure.serve(current(options))(call)) }] as const]
      : []))

/**
 * The side routes of the Effect app (the plain HTTP ones; the RPCs are the front door's), and
 * `GET /healthz`; every other request a Connect error (`unimplemented` for what looks like a
 * procedure, else `not_found`).
 */
export const layerRoutes = (options: CatalogueSource): Layer.Layer<never, never, HttpLayerRouter.HttpRouter> =>
  HttpLayerRouter.use((router) =>
    Effect.gen(function*() {
      for (const procedure of procedures) {
        if (procedure.kind !== "http") continue
        yield* router.add(procedure.method, procedure.path, (request) => Effect.suspend(() => procedure.handle(current(options))(request)))
      }
      yield* router.add("GET", "/healthz", HttpServerResponse.unsafeJson({ status: "ok" }))
      // A browser pointed at the server's address finds the console.
      yield* router.add("GET", "/", HttpServerResponse.redirect("/console", { status: 302 }))
      yield* router.add("*", "/*", (request) =>
        Effect.succeed(unaryError(
          /^\/[\w.]+\/\w+$/.test(new URL(request.url, "http://localhost").pathname)
            ? new ConnectError("unimplemented", `${request.method} ${request.url} is not implemented by this server`)
            : new ConnectError("not_found", `no route for ${request.method} ${request.url}`)
        )))
    })
  )
