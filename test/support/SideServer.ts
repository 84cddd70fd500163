/**
 * The side calls as a server serves them: a real front door on a loopback port with the side
 * RPCs (`Front.layerRpcs`) and the app's routes, and a fetch-style `handler` that sends a
 * `Request` there (its host ignored), in place of `HttpLayerRouter.toWebHandler` now that the
 * RPCs are the front door's.
 */
import { HttpLayerRouter, HttpServer } from "@effect/platform"
import { Effect, Layer, ManagedRuntime } from "effect"
import { layerHttp, listenOptions } from "../../src/Server.js"
import * as Front from "../../src/transport/Front.js"
import * as SideRpcs from "../../src/transport/SideRpcs.js"

export interface SideServer {
  readonly handler: (request: Request) => Promise<Response>
  readonly baseUrl: () => Promise<string>
  readonly dispose: () => Promise<void>
}

/** The side calls over `catalogue`, with `routes` (more app routes) beside them. */
export const sideServer = (
  catalogue: SideRpcs.CatalogueSource,
  routes: Layer.Layer<never, never, HttpLayerRouter.HttpRouter> = Layer.empty
): SideServer => {
  const app = Layer.mergeAll(
    HttpLayerRouter.serve(Layer.merge(SideRpcs.layerRoutes(catalogue), routes), { disableLogger: true, disableListenLog: true }),
    Front.layerRpcs(SideRpcs.rpcTable(catalogue))
  ).pipe(Layer.provideMerge(layerHttp(listenOptions(0, "127.0.0.1"))))
  const runtime = ManagedRuntime.make(app)
  let base: Promise<string> | undefined
  const baseUrl = () =>
    base ??= runtime.runPromise(Effect.map(HttpServer.HttpServer, (server) =>
      server.address._tag === "TcpAddress" ? `http://127.0.0.1:${server.address.port}` : ""))
  const handler = async (request: Request): Promise<Response> => {
    const url = new URL(request.url)
    const body = request.method === "GET" || request.method === "HEAD" ? undefined : new Uint8Array(await request.arrayBuffer())
    return fetch(`${await baseUrl()}${url.pathname}${url.search}`, { method: request.method, headers: request.headers, ...(body === undefined ? {} : { body }) })
  }
  return { handler, baseUrl, dispose: () => runtime.dispose() }
}
