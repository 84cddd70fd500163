/**
 * The server's own work for approved tool calls, over the `Web` service: which web tools this
 * server can offer now (fetch when enabled, search when a backend is configured), and the work
 * itself, whose failures become a sentence for the model, never a failed turn.
 */
import { Effect } from "effect"
import * as Tools from "../Tools.js"
import type { WebService } from "../Web.js"
import type { ServerWorker, WebWork } from "./InputEnv.js"

export const workerOf = (web: WebService): ServerWorker => ({
  capabilities: () => ({ search: web.searchBackend() !== undefined, fetch: web.fetchEnabled() }),
  perform: (work: WebWork) =>
    work._tag === "Search"
      ? web.search(work.query).pipe(
        Effect.map((references) => Tools.WorkResult.Searched({ references })),
        Effect.catchAll((error) => Effect.succeed(Tools.WorkResult.Failed({ error: error.message, refused: false })))
      )
      : web.fetch(work.url).pipe(
        Effect.map((page) => Tools.WorkResult.Fetched({ url: page.url, markdown: page.markdown, truncated: page.truncated })),
        Effect.catchAll((error) => Effect.succeed(Tools.WorkResult.Failed({ error: error.message, refused: error.kind === "Refused" })))
      )
})
