/**
 * `doctor`: one table of checks of the hookup, each failing one with its fix. The server and the
 * proxy are checked from outside, as Cursor reaches them (the proxy by a real CONNECT, TLS with
 * only our CA trusted, and a procedure it must answer locally); the CA, the OS's trust in it
 * and Cursor's settings from their files (with the agent path they select: HTTP/1.1 through the
 * proxy, or HTTP/2 on the TLS listener); the provider keys and each configured model by a
 * one-token request (`doctor/Models.ts`), and Tab's FIM model, when configured, by one
 * completion (`doctor/Tab.ts`). A server that is not running is one line, and nothing is
 * printed before the table.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Console, Duration, Effect, Either, Option, Schema } from "effect"
import * as Http from "node:http"
import * as Tls from "node:tls"
import * as Config from "../Config.js"
import type { ServerConfig } from "../Config.js"
import * as Ca from "./Ca.js"
import * as CursorSettings from "./CursorSettings.js"
import type { Check, Status } from "./doctor/Check.js"
import * as Models from "./doctor/Models.js"
import * as TabCheck from "./doctor/Tab.js"
import { describePath, proxyUrlFor, settingsPathOf } from "./Setup.js"
import { openTcp } from "./proxy/Upstream.js"
import * as Trust from "./Trust.js"


export type { Check, Status } from "./doctor/Check.js"

export class DoctorFailed extends Schema.TaggedError<DoctorFailed>("cursor-byok/DoctorFailed")("DoctorFailed", {
  message: Schema.String
}) {}

const TIMEOUT_MS = 5_000

const check = (name: string, status: Status, detail: string, fix = ""): Check => ({ name, status, detail, fix })

const attempt = <A>(run: () => Promise<A>) =>
  Effect.tryPromise({ try: run, catch: (error) => error instanceof Error ? error : new Error(String(error)) }).pipe(
    Effect.timeoutFail({ duration: Duration.millis(TIMEOUT_MS), onTimeout: () => new Error(`no answer within ${TIMEOUT_MS} ms`) })
  )

const healthz = (host: string, port: number) =>
  attempt(() =>
    new Promise<number>((resolve, reject) => {
      const request = Http.get({ host, port, path: "/healthz", timeout: TIMEOUT_MS }, (response) => {
        response.resume()
        resolve(response.statusCode ?? 0)
      })
      request.on("error", reject)
    })
  )

/** CONNECT api2.cursor.sh:443 through the proxy (as an upstream proxy is reached), TLS trusting only our CA, then ServerTime (answered locally). */
const throughProxy = (host: string, port: number, caPem: string) =>
  attempt(async () => {
    const socket = await openTcp({ host: "api2.cursor.sh", port: 443 }, { host, port, authorization: undefined, url: `http://${host}:${port}` }, { timeoutMs: TIMEOUT_MS })
    return new Promise<number>((resolve, reject) => {
      const secure = Tls.connect({ socket, servername: "api2.cursor.sh", ca: [caPem], ALPNProtocols: ["http/1.1"] })
      secure.on("error", (error) => reject(new Error(`TLS through the proxy: ${error.message}`)))
      secure.once("secureConnect", () => {
        const request = Http.request({
          createConnection: () => secure,
          method: "POST",
          path: "/aiserver.v1.AiService/ServerTime",
          headers: { host: "api2.cursor.sh", "content-type": "application/proto", "content-length": "0" }
        }, (response) => {
          response.resume()
          resolve(response.statusCode ?? 0)
          secure.destroy()
        })
        request.on("error", reject)
        request.end()
      })
    })
  })

const h2Listener = (host: string, port: number, caPem: string | undefined) =>
  attempt(() =>
    new Promise<string>((resolve, reject) => {
      const socket = Tls.connect({ host, port, servername: "localhost", ALPNProtocols: ["h2"], ...(caPem === undefined ? {} : { ca: [caPem] }) })
      socket.once("secureConnect", () => {
        resolve(String(socket.alpnProtocol))
        socket.destroy()
      })
      socket.on("error", reject)
    })
  )

const show = (value: unknown) => value === undefined ? "absent" : JSON.stringify(value)

/** Which agent path Cursor's settings select, and whether this configuration serves it there. */
const pathCheck = (config: ServerConfig, values: Readonly<Record<string, unknown>>): Check => {
  const name = "Cursor agent path"
  const path = CursorSettings.agentPathOf(values)
  const detail = `${describePath(config, path)}; ${CursorSettings.DISABLE_HTTP2} ${show(values[CursorSettings.DISABLE_HTTP2])}`
  if (path === "http1") {
    return config.proxy.port === undefined
      ? check(name, "FAIL", `${detail}, but the proxy is off: Cursor's calls miss this server`, "turn proxy.port on (default 8788)")
      : check(name, "ok", detail)
  }
  return config.http2.tls === undefined
    ? check(name, "FAIL", `${detail}: Cursor's HTTP/2 agent client ignores http.proxy, so its agent calls miss this server`, "`cursor-byok setup` (HTTP/1.1 through the proxy), or turn http2.tls on")
    : check(name, "ok", `${detail} (\`setup --http2\`; \`setup\` for HTTP/1.1, the path verified with live Cursor builds)`)
}

/** Cursor's settings: the proxy keys as setup writes them, and the agent path they select. */
export const settingsChecks = (config: ServerConfig, settingsPath: string, text: string | undefined): ReadonlyArray<Check> => {
  const values = CursorSettings.parseSettings(settingsPath, text ?? "")
  if (values._tag === "Left") return [check("Cursor settings applied", "FAIL", values.left.message, `fix ${settingsPath}`)]
  const status = Either.getOrThrow(CursorSettings.status(text, CursorSettings.proxyKeys(proxyUrlFor(config)), settingsPath))
  const wrong = status.filter((key) => key.state !== "applied")
  return [
    wrong.length === 0
      ? check("Cursor settings applied", "ok", settingsPath)
      : check("Cursor settings applied", "FAIL", `${settingsPath}: ${wrong.map((key) => `${key.key} ${key.state}`).join(", ")}`, "`cursor-byok setup`"),
    pathCheck(config, values.right)
  ]
}

export interface CheckOptions {
  readonly config: ServerConfig
  /** Cursor's settings.json (resolved). */
  readonly settingsPath: string
  /** How the OS's trust in the CA is looked at (`Trust.liveProbes` for real). */
  readonly probes: Trust.Probes
  readonly platform: NodeJS.Platform
  /** Each provider's key variable (`apiKeyEnv`), by provider id, from the configuration file: one not set fails. */
  readonly keyVariables?: Readonly<Record<string, string>>
}

/** Nothing listens on the server's port: connection refused (a `localhost` pair of attempts fails as an AggregateError). */
const refused = (error: Error) => /ECONNREFUSED/.test(error.message) || (error as { code?: unknown }).code === "ECONNREFUSED"

/** The configuration line: no models is a failure (every turn would fail). */
const configurationCheck = (config: ServerConfig) =>
  config.models.length === 0
    ? check("configuration", "FAIL", `0 models (home ${config.home}): every turn fails with "no provider configured"`, "add providers and models to the configuration file, or set OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or DEEPSEEK_API_KEY for the default ones")
    : check("configuration", "ok", `${config.models.length} models, home ${config.home}`)

/** The proxy, by a real CONNECT and TLS trusting only our CA. */
const proxyCheck = (config: ServerConfig, ca: Option.Option<Ca.Authority>) =>
  Effect.gen(function*() {
    if (config.proxy.port === undefined) return check("proxy listening", "off", "proxy.port is off", "set proxy.port (default 8788) for the IDE")
    if (Option.isNone(ca)) return check("proxy listening", "FAIL", "cannot check without the CA", "fix the CA first")
    const proxied = yield* throughProxy(config.host, config.proxy.port, ca.value.certPem).pipe(Effect.either)
    return proxied._tag === "Right" && proxied.right === 200
      ? check("proxy listening", "ok", `http://${config.host}:${config.proxy.port} intercepts api2.cursor.sh with our CA${config.proxy.offline ? " (offline)" : ""}`)
      : check("proxy listening", "FAIL", proxied._tag === "Left" ? proxied.left.message : `ServerTime through the proxy: HTTP ${proxied.right}`, "start the server (`cursor-byok serve`); if it runs, the proxy port may be taken by another program")
  })

/** The TLS listener negotiates h2. */
const h2Check = (config: ServerConfig, ca: Option.Option<Ca.Authority>) =>
  Effect.gen(function*() {
    const tls = config.http2.tls
    if (tls === undefined) return check("HTTP/2 listener (Run)", "off", "http2.tls is null", "optional: turn http2.tls on for Cursor's HTTP/2 mode (`cursor-byok setup --http2`)")
    const h2 = yield* h2Listener(config.host, tls.port, tls.certFile === undefined ? Option.getOrUndefined(Option.map(ca, (a) => a.certPem)) : undefined).pipe(Effect.either)
    return h2._tag === "Right" && h2.right === "h2"
      ? check("HTTP/2 listener (Run)", "ok", `https://${config.host}:${tls.port} (ALPN h2)`)
      : check("HTTP/2 listener (Run)", "FAIL", `https://${config.host}:${tls.port}: ${h2._tag === "Left" ? h2.left.message : `ALPN ${h2.right}`}`, "start the server; or set http2.tls to null (then `cursor-byok setup` again)")
  })

const readSettings = (settingsPath: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    return (yield* fs.exists(settingsPath).pipe(Effect.orElseSucceed(() => false)))
      ? yield* fs.readFileString(settingsPath).pipe(Effect.option, Effect.map(Option.getOrUndefined))
      : undefined
  })

/**
 * Every check, in the order a user fixes them. A server that is not running is one line (with
 * how to start it): the proxy and the HTTP/2 listener it serves are not checked then.
 */
export const checks = (options: CheckOptions) =>
  Effect.gen(function*() {
    const config = options.config
    const results: Array<Check> = [configurationCheck(config)]

    const server = yield* healthz(config.host, config.port).pipe(Effect.either)
    const down = server._tag === "Left" && refused(server.left)
    results.push(
      server._tag === "Right" && server.right === 200
        ? check("server reachable", "ok", `http://${config.host}:${config.port}/healthz`)
        : down
        ? check("server reachable", "FAIL", `the server is not running (nothing listens on http://${config.host}:${config.port}); its proxy and listeners are checked once it runs`, "start it: `cursor-byok serve` (or `npm start`), then run `cursor-byok doctor` again")
        : check("server reachable", "FAIL", `http://${config.host}:${config.port}: ${server._tag === "Left" ? server.left.message : `HTTP ${server.right}`}`, "another program may hold the port: stop it, or set port; else start the server: `cursor-byok serve`")
    )

    const authority = yield* Ca.load(config.home).pipe(Effect.either)
    results.push(authority._tag === "Right"
      ? check("CA valid and name-constrained", "ok", `${authority.right.certPath}, sha256 ${authority.right.fingerprint256.slice(0, 23)}…, expires ${authority.right.notAfter.toISOString().slice(0, 10)}`)
      : check("CA valid and name-constrained", "FAIL", authority.left.message, authority.left.reason === "missing" ? "`cursor-byok setup`" : "`cursor-byok ca renew`, then `cursor-byok setup --trust`"))
    const ca = Option.getRight(authority)

    if (!down || config.proxy.port === undefined) results.push(yield* proxyCheck(config, ca))

    if (Option.isSome(ca)) {
      const trusted = yield* Trust.isTrusted(options.platform, { path: ca.value.certPath, pem: ca.value.certPem }, options.probes)
      results.push(
        trusted === "trusted"
          ? check("CA trusted by this OS", "ok", options.platform)
          : trusted === "untrusted"
          ? check("CA trusted by this OS", "FAIL", `${options.platform}: the system store does not hold ${ca.value.commonName}`, "`cursor-byok setup --trust` (or the commands `cursor-byok setup` prints)")
          : check("CA trusted by this OS", "WARN", "cannot tell on this OS", "see `cursor-byok setup` for the trust commands")
      )
    }

    results.push(...settingsChecks(config, options.settingsPath, yield* readSettings(options.settingsPath)))
    if (!down || config.http2.tls === undefined) results.push(yield* h2Check(config, ca))

    const keyVariables = options.keyVariables ?? {}
    results.push(...Models.keysCheck(config, keyVariables))
    results.push(...yield* Models.modelChecks(config, keyVariables))
    results.push(...yield* TabCheck.tabChecks(config, keyVariables))
    return results
  })

/** Each provider's key variable as the configuration file names it (the default catalogue's when it names no providers). */
export const keyVariablesOf = (source: Config.ConfigSource) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(source.path).pipe(Effect.option)
    const file = Option.isSome(text) ? yield* Config.decodeFile(source.path, text.value).pipe(Effect.option) : Option.none()
    const providers = Option.isSome(file) && file.value.providers.length > 0 ? file.value.providers : Config.defaultCatalogue.map((entry) => entry.provider)
    const variables: Record<string, string> = {}
    for (const provider of providers) if (provider.apiKeyEnv !== undefined) variables[provider.id] = provider.apiKeyEnv
    return variables
  })

/** Lays the checks out as a table. */
export const format = (results: ReadonlyArray<Check>) => {
  const width = Math.max(...results.map((result) => result.name.length))
  return results.map((result) =>
    `${result.status.padEnd(4)}  ${result.name.padEnd(width)}  ${result.detail}${result.fix === "" || result.status === "ok" ? "" : `\n${" ".repeat(width + 8)}fix: ${result.fix}`}`
  ).join("\n")
}

export const run = (options: { readonly settingsPath: string | undefined }) =>
  Effect.gen(function*() {
    const loaded = yield* Effect.flatMap(Config.locate, (source) => Effect.map(Config.loadFrom(source), (config) => ({ source, config }))).pipe(Effect.either)
    if (loaded._tag === "Left") {
      yield* Console.log(format([check("configuration", "FAIL", loaded.left.message, "fix the configuration file or variables named above")]))
      return yield* new DoctorFailed({ message: "the configuration does not load" })
    }
    const results = yield* checks({
      config: loaded.right.config,
      settingsPath: settingsPathOf(options.settingsPath),
      probes: yield* Trust.liveProbes,
      platform: process.platform,
      keyVariables: yield* keyVariablesOf(loaded.right.source)
    })
    yield* Console.log(format(results))
    const failed = results.filter((result) => result.status === "FAIL").length
    if (failed > 0) return yield* new DoctorFailed({ message: `${failed} of ${results.length} checks failed` })
  })
