/**
 * The web console at `/console`: server-rendered pages over the store, the turn sessions and the
 * running configuration, for the operator.
 *
 * - `GET /console`: the turns running now (updated live by a small script polling
 *   `GET /console/api/running` once a second), the conversations (title, model, turns, tokens,
 *   cost, cache-read share, last activity), the models and providers with their recent errors
 *   and median time to first delta, and charts of tokens, cost and cache-read share per hour
 *   (`?range=48h`, the default) or per day (`?range=14d`).
 * - `GET /console/conversations/:id`: the conversation's turns and model calls (request size,
 *   tokens, cache read and write, cost, time to first delta, duration, attempts, the target that
 *   answered) with each call's prefix status: it extends the previous request, is a summary
 *   call, opens an intended segment (compaction, rewind, fork), or breaks the prefix, with the
 *   first differing byte and the part it falls in. `?messages=1` shows the messages, to a client
 *   on a loopback address only.
 *
 * - `GET /console/calls`: the call log, every conversation's model calls newest first, filtered
 *   (conversation, model, provider, outcome, time range) and paged; `GET /console/calls/:id`: one
 *   call, its attempts (each failed one with its target, HTTP status or network error, error and
 *   time) and, with `?messages=1` to a loopback client, the request it sent and its answer.
 *
 * - `GET /console/captures`: the capture files (capture mode), with a download link
 *   (`/console/captures/:name`, to a client on a loopback address only, as the messages).
 *
 * - `GET /console/users`: a team's users, their models, limits and spend today and this month
 *   (`console/UsersPage.ts`).
 * - `GET /console/me`: a user's own page on a team's server, opened with their token (the only
 *   page the door lets a user's token open): their limits, spend and conversations
 *   (`console/MePage.ts`).
 * - `GET /console/tab`: Tab (Cursor's completions from the user's FIM model): on or off, the model,
 *   provider and FIM wire it answers from, and per model its requests, calls, time to the first
 *   suggestion, tokens, cost and acceptance rate since the server started (`console/TabPage.ts`).
 *
 * Only GET routes, and nothing here writes. Who may read is `console/Access.ts` (a non-loopback
 * host requires the configured token; a user's own page goes by the door's caller). No page
 * shows a key: of the configuration only model and provider ids, wire APIs and base URLs are
 * rendered, and each response is redacted of the configuration's secrets besides
 * (`internal/Secrets.ts`).
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Clock, Effect, Option } from "effect"
import type { Context, Layer } from "effect"
import { randomBytes } from "node:crypto"
import type { ServerConfig } from "./Config.js"
import { LiveConfig } from "./config/Live.js"
import * as Access from "./console/Access.js"
import * as CallLog from "./console/CallLog.js"
import * as CallPage from "./console/CallPage.js"
import * as Captures from "./console/Captures.js"
import { rangeOf } from "./console/Charts.js"
import * as Data from "./console/Data.js"
import * as Pages from "./console/Pages.js"
import * as TabPage from "./console/TabPage.js"
import * as MePage from "./console/MePage.js"
import * as UsersPage from "./console/UsersPage.js"
import { LOCAL, Users } from "./Users.js"
import { redact } from "./internal/Secrets.js"
import { Store } from "./Store.js"
import { Tab } from "./tab/Service.js"
import { callerOf } from "./transport/Door.js"
import { USER_PAGE_PATH } from "./transport/Policy.js"
import { Sessions } from "./transport/Sessions.js"

const SECURITY_HEADERS = {
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer"
}

const csp = (nonce: string) =>
  `default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}'; connect-src 'self'; img-src 'self' data:; ` +
  `base-uri 'none'; form-action 'none'; frame-ancestors 'none'`

interface Services {
  readonly live: Context.Tag.Service<LiveConfig>
  readonly store: Context.Tag.Service<Store>
  readonly sessions: Context.Tag.Service<Sessions>
  readonly tab: Context.Tag.Service<Tab>
  /** The team's users, when the server has the service (none in tests that build the console alone). */
  readonly users: Context.Tag.Service<Users> | undefined
}

interface RequestContext {
  readonly config: ServerConfig
  readonly access: Extract<Access.Access, { _tag: "Allowed" }>
  readonly params: URLSearchParams
  readonly links: Pages.Links
  readonly nonce: string
}

// Every secret replaced, wherever it would appear (belt and braces: no page renders one).
const htmlResponse = (context: Pick<RequestContext, "config" | "nonce">, body: string, status = 200) =>
  HttpServerResponse.text(redact(body), {
    status,
    contentType: "text/html; charset=utf-8",
    headers: { ...SECURITY_HEADERS, "content-security-policy": csp(context.nonce) }
  })

type Handler<E, R> = (context: RequestContext) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>

const accessRequestOf = (request: HttpServerRequest.HttpServerRequest, params: URLSearchParams): Access.AccessRequest => ({
  remoteAddress: Option.getOrUndefined(request.remoteAddress),
  hostHeader: request.headers["host"],
  authorization: request.headers["authorization"],
  tokenHeader: request.headers["x-byok-token"],
  queryToken: params.get("token") ?? undefined
})

/** Runs `handle` for an allowed request; a failure (the store could not be read) is answered with a message page. */
const answered = <E, R>(context: RequestContext, handle: Handler<E, R>) =>
  handle(context).pipe(
    Effect.catchAll((error) =>
      Effect.gen(function*() {
        yield* Effect.logWarning("console: a page failed", error)
        const message = error instanceof Error ? error.message : String(error)
        return htmlResponse(context, Pages.messagePage("Error", `The console could not read the store: ${message}`, context.links, context.nonce), 500)
      })
    )
  )

/** Runs `handle` for a request the access rule lets through; answers the refusal otherwise. */
const guarded = <E, R>(live: Services["live"], handle: Handler<E, R>) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const config = live.current()
    const params = new URL(request.url, "http://console.invalid").searchParams
    const access = Access.decide({ host: config.host, token: config.console.token }, accessRequestOf(request, params))
    const nonce = randomBytes(16).toString("base64")
    if (access._tag === "Denied") {
      return htmlResponse({ config, nonce }, Pages.messagePage(access.status === 401 ? "Token required" : "Forbidden", access.message, Pages.linksOf(undefined), nonce), access.status).pipe(
        access.status === 401 ? HttpServerResponse.setHeader("www-authenticate", "Bearer") : (response) => response
      )
    }
    return yield* answered({ config, access, params, links: Pages.linksOf(access.linkToken), nonce }, handle)
  })

const overviewRoute = ({ live, sessions, store }: Services) => guarded(live, (context) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const overview = yield* Data.overview(store, sessions, context.config, rangeOf(context.params.get("range") ?? undefined), now)
    return htmlResponse(context, Pages.overviewPage(overview, context.links, context.nonce))
  })
)

const conversationRoute = ({ live, store }: Services) => guarded(live, (context) =>
  Effect.gen(function*() {
    const { id } = yield* HttpLayerRouter.params
    const now = yield* Clock.currentTimeMillis
    const asked = context.params.get("messages") === "1"
    const reveal = asked && context.access.loopbackClient
    const view = yield* Data.conversation(store, id ?? "", reveal, now)
    if (Option.isNone(view)) {
      return htmlResponse(context, Pages.messagePage("Not found", `No conversation ${id ?? ""} in the store.`, context.links, context.nonce), 404)
    }
    return htmlResponse(context, Pages.conversationPage(view.value, context.links, context.nonce, context.access.loopbackClient, asked && !reveal))
  })
)

const runningRoute = ({ live, sessions }: Services) => guarded(live, () =>
  Effect.gen(function*() {
    const nowMs = yield* Clock.currentTimeMillis
    const body = JSON.stringify({ nowMs, turns: Data.runningTurns(sessions) })
    return HttpServerResponse.text(redact(body), { contentType: "application/json", headers: SECURITY_HEADERS })
  })
)

const capturesRoute = ({ live }: Services) => guarded(live, (context) =>
  Effect.sync(() => {
    const folder = Captures.capturesFolder(context.config.home)
    const options = { enabled: context.config.capture.enabled, folder, loopbackClient: context.access.loopbackClient }
    return htmlResponse(context, Captures.capturesPage(Captures.listCaptures(folder), options, context.links, context.nonce))
  })
)

/** One capture, as a download: a loopback client's only (it holds the conversation's messages, as `?messages=1` does). */
const captureFileRoute = ({ live }: Services) => guarded(live, (context) =>
  Effect.gen(function*() {
    const { name } = yield* HttpLayerRouter.params
    if (!context.access.loopbackClient) {
      return htmlResponse(context, Pages.messagePage("Forbidden", "A capture holds the conversation's messages: it is downloaded from a loopback address only.", context.links, context.nonce), 403)
    }
    const text = Captures.readCapture(Captures.capturesFolder(context.config.home), name ?? "")
    if (text === undefined) return htmlResponse(context, Pages.messagePage("Not found", `No capture ${name ?? ""}.`, context.links, context.nonce), 404)
    return HttpServerResponse.text(redact(text), {
      contentType: "application/x-ndjson",
      headers: { ...SECURITY_HEADERS, "content-disposition": `attachment; filename="${name}"` }
    })
  })
)

const callLogRoute = ({ live, store }: Services) => guarded(live, (context) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const filters = CallLog.filtersOf(context.params)
    const log = yield* store.callLog(CallLog.queryOf(filters, now))
    return htmlResponse(context, CallLog.callLogPage(context.config, filters, log, now, context.links, context.nonce))
  })
)

const callRoute = ({ live, store }: Services) => guarded(live, (context) =>
  Effect.gen(function*() {
    const { id } = yield* HttpLayerRouter.params
    const now = yield* Clock.currentTimeMillis
    const asked = context.params.get("messages") === "1"
    const reveal = asked && context.access.loopbackClient
    const view = yield* CallPage.callPageView(store, id ?? "", reveal, now)
    if (Option.isNone(view)) {
      return htmlResponse(context, Pages.messagePage("Not found", `No model call ${id ?? ""} in the store.`, context.links, context.nonce), 404)
    }
    return htmlResponse(context, CallPage.callPage(view.value, context.links, context.nonce, context.access.loopbackClient, asked && !reveal))
  })
)

/** Tab: whether it is on, on what, and its figures per model since the server started (in memory, not the store). */
const tabRoute = ({ live, tab }: Services) => guarded(live, (context) =>
  Effect.sync(() => htmlResponse(context, TabPage.tabPage(TabPage.tabView(tab.settings(), tab.stats.snapshot()), context.links, context.nonce)))
)

/** The team's users with what each spent (the operator's page on a team's server). */
const usersRoute = ({ live, users }: Services) => guarded(live, (context) =>
  Effect.gen(function*() {
    if (users === undefined) return htmlResponse(context, UsersPage.usersPage(undefined, context.links, context.nonce))
    const now = yield* Clock.currentTimeMillis
    const listed = yield* users.list
    const rows = yield* Effect.forEach(listed, (user) => Effect.map(users.spend(user.userId, now), (spend) => ({ user, spend })))
    return htmlResponse(context, UsersPage.usersPage(rows, context.links, context.nonce))
  }).pipe(Effect.catchTag("UserError", (error) =>
    Effect.succeed(HttpServerResponse.text(`the users could not be read: ${error.message}`, { status: 503, headers: SECURITY_HEADERS }))))
)

/**
 * A user's own page: the caller is the one the door found for this very request (Node's request
 * under Effect's, `Door.callerOf`), never anything the request says of itself. Anyone else (the
 * operator, one person's server) gets a pointer, behind the console's access rule.
 */
const meRoute = ({ live, store, users }: Services) => {
  const pointer = guarded(live, (context) =>
    Effect.sync(() => htmlResponse(context, MePage.notAUserPage(users?.teamMode() === true, context.links, context.nonce))))
  return Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const caller = typeof request.source === "object" && request.source !== null ? callerOf(request.source) : LOCAL
    if (caller._tag !== "User" || users === undefined) return yield* pointer
    const params = new URL(request.url, "http://console.invalid").searchParams
    const access = Access.passedByTheDoor(accessRequestOf(request, params))
    const context: RequestContext = { config: live.current(), access, params, links: Pages.linksOf(access.linkToken), nonce: randomBytes(16).toString("base64") }
    return yield* answered(context, () =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const spend = yield* users.spend(caller.user.userId, now)
        const conversations = yield* store.conversations(MePage.ME_CONVERSATIONS, undefined, caller.user.userId)
        return htmlResponse(context, MePage.mePage({ user: caller.user, spend, conversations }, context.links, context.nonce))
      }))
  })
}

/** The console's GET routes (they need the store, the sessions, Tab and the running configuration). */
export const layerRoutes: Layer.Layer<never, never, HttpLayerRouter.HttpRouter | Store | Sessions | Tab | LiveConfig> = HttpLayerRouter.use((router) =>
  Effect.gen(function*() {
    const services: Services = {
      live: yield* LiveConfig,
      store: yield* Store,
      sessions: yield* Sessions,
      tab: yield* Tab,
      users: Option.getOrUndefined(yield* Effect.serviceOption(Users))
    }
    const overview = overviewRoute(services)
    yield* router.add("GET", "/console", overview)
    yield* router.add("GET", "/console/conversations/:id", conversationRoute(services))
    yield* router.add("GET", "/console/api/running", runningRoute(services))
    yield* router.add("GET", "/console/calls", callLogRoute(services))
    yield* router.add("GET", "/console/calls/:id", callRoute(services))
    yield* router.add("GET", "/console/captures", capturesRoute(services))
    yield* router.add("GET", "/console/captures/:name", captureFileRoute(services))
    yield* router.add("GET", TabPage.TAB_PATH, tabRoute(services))
    yield* router.add("GET", UsersPage.USERS_PATH, usersRoute(services))
    yield* router.add("GET", USER_PAGE_PATH, meRoute(services))
  })
)
