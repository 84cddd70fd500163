/**
 * Configuration: an optional JSON file (`BYOK_CONFIG`, default `./byok.config.json` when it
 * exists) validated with Schema, then environment overrides (`BYOK_HOST`, `BYOK_PORT`,
 * `BYOK_DB`). Provider keys are read from the environment variable each provider names and
 * stay `Redacted`: they never reach a log, the database or the client. With no providers
 * configured, the well-known key variables (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`,
 * `GEMINI_API_KEY`, `DEEPSEEK_API_KEY`) yield a default catalogue. `Config.ts` is its facade.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Config, Effect, Option, Redacted, Schema } from "effect"
import { homedir } from "node:os"
import { join } from "node:path"
import { isLoopback, parseNoProxy } from "./Hosts.js"
import { issueLines, jsonPosition } from "./Issues.js"
import { CaptureConfig } from "./CaptureConfig.js"
import { Bytes, httpUrl } from "./Fields.js"
import { TabFileConfig, tabOf, tabProblems } from "./Tab.js"
import { WebFileConfig, webOf, webSearchOverride } from "./Web.js"
import type { WebConfig } from "./Web.js"
import type { TabSettings } from "../tab/Service.js"
import { catalogue } from "./Catalogue.js"
import { referenceProblems } from "./References.js"
import * as FaultInjection from "../FaultInjection.js"
import { defaultRetrySettings } from "../llm/Http.js"
import { ApiKind, ModelConfig, RetryConfig, routingProblem } from "../llm/Router.js"
import type { ProviderConfig, RouterConfig } from "../llm/Router.js"

export { isLoopback, parseNoProxy } from "./Hosts.js"
export * from "./Web.js"

/** The shortest token the server takes (from the file or `BYOK_CONSOLE_TOKEN`). */
const MIN_TOKEN_LENGTH = 16

// =============================================================================
// The file
// =============================================================================


export const ProviderEntry = Schema.Struct({
  id: Schema.String,
  api: ApiKind,
  baseUrl: httpUrl("an http or https URL with the API's version segment, e.g. \"https://api.openai.com/v1\""),
  /** The environment variable holding the key; omit for servers that need none (local vLLM, Ollama). */
  apiKeyEnv: Schema.optional(Schema.String),
  headers: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.String }), { default: () => ({}) }),
  /** Names of `headers` (any case) whose values are secrets: kept out of logs, the store and the client like the key. */
  secretHeaders: Schema.optional(Schema.Array(Schema.String)),
  extraBody: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) }),
  compat: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) })
}).pipe(Schema.filter((provider) => {
  const names = Object.keys(provider.headers).map((name) => name.toLowerCase())
  const missing = (provider.secretHeaders ?? []).find((name) => !names.includes(name.toLowerCase()))
  return missing === undefined || { path: ["secretHeaders"], message: `names header ${JSON.stringify(missing)}, which is not one of this provider's headers` }
}))
export type ProviderEntry = typeof ProviderEntry.Type

export const ModelEntry = Schema.Struct({
  ...ModelConfig.fields,
  /** The name Cursor shows; defaults to the id. */
  displayName: Schema.optional(Schema.String),
  supportsImages: Schema.optionalWith(Schema.Boolean, { default: () => false })
})
export type ModelEntry = typeof ModelEntry.Type

const Port = Schema.Int.pipe(Schema.between(0, 65535))

/** The web console (`/console`): on a non-loopback host it answers only requests carrying this token. */
export const ConsoleConfig = Schema.Struct({
  token: Schema.optional(Schema.String.pipe(Schema.minLength(MIN_TOKEN_LENGTH, { message: () => `a console token of at least ${MIN_TOKEN_LENGTH} characters` })))
})

/** A host name or `name:port`, as a Host header names it (no scheme, path or user). */
const HostName = Schema.String.pipe(Schema.pattern(/^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)(?::\d{1,5})?$/, {
  message: (issue) => `expected a host name or name:port (no scheme, path or user), got ${JSON.stringify(issue.actual)}`
}))

/** `retry`: the router's retry settings, each defaulting to `defaultRetrySettings`'s value. */
export const RetryEntry = Schema.Struct({
  maxRetries: Schema.optionalWith(RetryConfig.fields.maxRetries, { default: () => defaultRetrySettings.maxRetries }),
  initialDelayMs: Schema.optionalWith(RetryConfig.fields.initialDelayMs, { default: () => defaultRetrySettings.initialDelayMs }),
  maxDelayMs: Schema.optionalWith(RetryConfig.fields.maxDelayMs, { default: () => defaultRetrySettings.maxDelayMs }),
  maxRetryAfterMs: Schema.optionalWith(RetryConfig.fields.maxRetryAfterMs, { default: () => defaultRetrySettings.maxRetryAfterMs }),
  jitter: Schema.optionalWith(RetryConfig.fields.jitter, { default: () => defaultRetrySettings.jitter }),
  idleTimeoutMs: Schema.optionalWith(RetryConfig.fields.idleTimeoutMs, { default: () => defaultRetrySettings.idleTimeoutMs })
})

export const Limits = Schema.Struct({
  /** Largest BidiAppend body accepted (after gzip inflation). */
  bidiAppendBytes: Schema.optionalWith(Bytes, { default: () => 16 * 1024 * 1024 }),
  /** Largest RunSSE request body accepted. */
  runSseRequestBytes: Schema.optionalWith(Bytes, { default: () => 64 * 1024 }),
  /** How far ahead of the next expected seqno a BidiAppend may be held. */
  appendWindow: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 1024 }),
  /** Open connections one listener keeps; past it a new one is answered 503 and closed. */
  maxConnections: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 4096 }),
  /** How long a client has to send a request's headers (from the connection's start, or the previous request's end). */
  headersTimeoutMs: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 20_000 }),
  /** How long an idle keep-alive connection (HTTP/1.1, or HTTP/2 without streams) is kept open. */
  idleTimeoutMs: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 65_000 }),
  /** HTTP/2: streams one connection may have open at once (Cursor keeps its turns on one connection). */
  http2MaxConcurrentStreams: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 1000 })
})

const Share = Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThan(1))

/** When and how a long conversation is compacted (a summary, then the latest messages verbatim). */
export const CompactionConfig = Schema.Struct({
  /** Compact before a model call whose estimated prompt passes `threshold` of the model's context window. */
  auto: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  /** Share of the context window at which the history is compacted first (the rest is left for the answer). */
  threshold: Schema.optionalWith(Share, { default: () => 0.8 }),
  /** Share of the context window the verbatim tail after the summary may take. */
  tailShare: Schema.optionalWith(Share, { default: () => 0.15 }),
  /** The summary call's output limit, in tokens. */
  summaryMaxTokens: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 4096 }),
  /** After a context-overflow error, tool results longer than this (characters) before the tail are elided for the summary call. */
  elideToolResultChars: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 2048 })
})

export const TlsConfig = Schema.Struct({
  port: Schema.optionalWith(Port, { default: () => 8790 }),
  /** PEM files: the certificate (chain) and its private key; without them, a loopback leaf from the installation's CA. */
  certFile: Schema.optional(Schema.String),
  keyFile: Schema.optional(Schema.String)
})

export const Http2Config = Schema.Struct({
  /** Cleartext HTTP/2 with prior knowledge (h2c), for the CLI and tests; null turns it off. */
  cleartextPort: Schema.optionalWith(Schema.NullOr(Port), { default: () => 8789 }),
  /** TLS with ALPN h2 (for the IDE, whose HTTP/2 client does not use the proxy); null turns it off. */
  tls: Schema.optionalWith(Schema.NullOr(TlsConfig), { default: () => Schema.decodeSync(TlsConfig)({}) })
})

export const ProxyConfig = Schema.Struct({
  /** The intercepting proxy Cursor's `http.proxy` points at; null turns it off. */
  port: Schema.optionalWith(Schema.NullOr(Port), { default: () => 8788 }),
  /** No Cursor account: every Cursor procedure is answered here, the account calls by a local identity. */
  offline: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  /** The user's own proxy (`http://[user:pass@]host:port`) for the proxy's outgoing connections; else HTTPS_PROXY. */
  upstream: Schema.optional(Schema.String),
  /** Hosts the proxy reaches directly, not through `upstream` (NO_PROXY's syntax); else NO_PROXY. */
  noProxy: Schema.optional(Schema.String),
  /** A team's server (`https://team.example`): Cursor's agent traffic goes there instead of this server. */
  upstreamServer: Schema.optional(Schema.String),
  /** This developer's token on `upstreamServer` (from its operator's `cursor-byok users add`). */
  upstreamToken: Schema.optional(Schema.String)
})

export const FileConfig = Schema.Struct({
  /** Where the CA, its key and the settings journal live (BYOK_HOME); default ~/.cursor-byok. */
  home: Schema.optional(Schema.String),
  proxy: Schema.optionalWith(ProxyConfig, { default: () => Schema.decodeSync(ProxyConfig)({}) }),
  host: Schema.optionalWith(Schema.String, { default: () => "127.0.0.1" }),
  /** Host names (`name` or `name:port`) requests may be addressed to besides loopback ones (a reverse proxy's name). */
  allowedHosts: Schema.optionalWith(Schema.Array(HostName), { default: () => [] }),
  port: Schema.optionalWith(Port, { default: () => 8787 }),
  database: Schema.optionalWith(Schema.String, { default: () => "./data/byok.sqlite" }),
  /**
   * Where the other instances of a team's server reach this one (`http://host:port`) when several
   * share a PostgreSQL database (BYOK_ADVERTISE); default `http://<host>:<port>`.
   */
  advertise: Schema.optional(Schema.String),
  heartbeatMs: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 5000 }),
  /** How long a stop waits for requests in flight (a commit, an append's answer) before it closes their connections. */
  drainMs: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 5000 }),
  /** A RunSSE for a request the server has no turn for (e.g. after a restart) is ended after this long. */
  orphanTimeoutMs: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 30_000 }),
  /**
   * How long, after turn_ended, the server waits for the client to acknowledge the set_blob
   * messages of the turn's checkpoint; past it the turn ends without the checkpoint.
   */
  blobAckTimeoutMs: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 30_000 }),
  /**
   * How long a stream stays open after a turn's end for a message the user queued meanwhile
   * (Cursor sends it on the same request right after turn_ended; it runs as the next turn there).
   */
  queuedMessageGraceMs: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 1500 }),
  /** The HTTP/2 listeners that serve `Run`. */
  http2: Schema.optionalWith(Http2Config, { default: () => Schema.decodeSync(Http2Config)({}) }),
  maxLlmCallsPerTurn: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 50 }),
  limits: Schema.optionalWith(Limits, { default: () => Schema.decodeSync(Limits)({}) }),
  compaction: Schema.optionalWith(CompactionConfig, { default: () => Schema.decodeSync(CompactionConfig)({}) }),
  /** Capture mode (`capture/`): each agent request written to `<home>/captures/`, for a bug report and `cursor-byok replay`. */
  capture: Schema.optionalWith(CaptureConfig, { default: () => Schema.decodeSync(CaptureConfig)({}) }),
  web: Schema.optionalWith(WebFileConfig, { default: () => Schema.decodeSync(WebFileConfig)({}) }),
  /** Tab (Cursor's completions) on the user's own FIM model; off when absent (Cursor answers Tab). */
  tab: Schema.optional(TabFileConfig),
  console: Schema.optionalWith(ConsoleConfig, { default: () => ({}) }),
  /** Each field defaults on its own (`defaultRetrySettings`): `{ "maxRetries": 1 }` keeps the other five. */
  retry: Schema.optional(RetryEntry),
  providers: Schema.optionalWith(Schema.Array(ProviderEntry), { default: () => [] }),
  models: Schema.optionalWith(Schema.Array(ModelEntry), { default: () => [] }),
  /** The model Cursor selects by default; defaults to the first model. */
  defaultModel: Schema.optional(Schema.String),
  /** The model subagents (the Task tool's child runs) run on; defaults to the parent turn's model. */
  subagentModel: Schema.optional(Schema.String),
  /** Model ids Cursor may ask for (Auto, subagents, its own models) → a configured model; `*` for any other id. */
  aliases: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String }))
})
export type FileConfig = typeof FileConfig.Type

// =============================================================================
// The resolved configuration
// =============================================================================

export interface ServerConfig {
  readonly host: string
  /** Names requests may be addressed to besides loopback ones, lower case (`allowedHosts`, `BYOK_ALLOWED_HOSTS`). */
  readonly allowedHosts: ReadonlyArray<string>
  readonly port: number
  readonly database: string
  /** Where the other instances sharing the database reach this one (`advertise`, `BYOK_ADVERTISE`); undefined: `advertiseAddress`'s default. */
  readonly advertise: string | undefined
  readonly heartbeatMs: number
  readonly drainMs: number
  readonly orphanTimeoutMs: number
  readonly blobAckTimeoutMs: number
  readonly queuedMessageGraceMs: number
  /** Where `Run` is served over HTTP/2: h2c on `cleartextPort`, TLS on `tls.port`; each undefined when off. */
  readonly http2: {
    readonly cleartextPort: number | undefined
    /** Without files, the listener's leaf comes from the installation's CA. */
    readonly tls: { readonly port: number; readonly certFile: string | undefined; readonly keyFile: string | undefined } | undefined
  }
  readonly home: string
  readonly proxy: {
    readonly port: number | undefined
    readonly offline: boolean
    readonly upstream: string | undefined
    /** Hosts reached directly, never through `upstream`. */
    readonly noProxy: ReadonlyArray<string>
    /** A team's server the agent traffic goes to, with this developer's token; undefined: this server answers it. */
    readonly upstreamServer: { readonly url: string; readonly token: Redacted.Redacted<string> | undefined } | undefined
  }
  readonly maxLlmCallsPerTurn: number
  readonly limits: typeof Limits.Type
  readonly compaction: typeof CompactionConfig.Type
  /** Capture mode: on or off, and whether file contents are kept (else redacted). */
  readonly capture: typeof CaptureConfig.Type
  /** Server-side web fetch and search (`web`, `BYOK_WEB_SEARCH`). */
  readonly web: WebConfig
  /** Tab on the user's FIM model (`tab`); undefined: off. */
  readonly tab: TabSettings | undefined
  /** The web console: the token a non-loopback host requires (`console.token`, `BYOK_CONSOLE_TOKEN`). */
  readonly console: { readonly token: Redacted.Redacted<string> | undefined }
  /** What the `Llm` router is built from: providers with their keys resolved. */
  readonly router: RouterConfig
  /** The models Cursor lists. */
  readonly models: ReadonlyArray<ModelEntry>
  readonly defaultModel: string | undefined
  /** The model a Task's subagent runs on (undefined: the parent's). */
  readonly subagentModel: string | undefined
  /** Things worth telling the operator at startup (a missing key, a non-loopback bind...). */
  readonly notices: ReadonlyArray<string>
  /** What the start says of the configuration that is no problem (the default catalogue in use). */
  readonly infos: ReadonlyArray<string>
  /** Crash-test faults (`BYOK_FAULT_*`); empty in normal use. */
  readonly faults: FaultInjection.FaultOptions
}

export class ConfigError extends Schema.TaggedError<ConfigError>("cursor-byok/ConfigError")("ConfigError", {
  message: Schema.String
}) {}

/** The providers and models used when no file configures any, by which key variables are set. */
export const defaultCatalogue: ReadonlyArray<{
  readonly env: string
  readonly provider: ProviderEntry
  readonly models: ReadonlyArray<typeof ModelEntry.Encoded>
}> = catalogue


/**
 * Builds the server configuration from a decoded file and an environment (a plain record, so
 * it is testable without touching `process.env`). Pure apart from its inputs.
 */
export const resolve = (file: FileConfig, env: Readonly<Record<string, string | undefined>>): ServerConfig => {
  const notices: Array<string> = []
  const infos: Array<string> = []
  let providers = file.providers
  let models: ReadonlyArray<ModelEntry> = file.models
  if (providers.length === 0) {
    const available = defaultCatalogue.filter((entry) => (env[entry.env] ?? "") !== "")
    providers = available.map((entry) => entry.provider)
    // The file's own models, when it lists any, name the catalogue's providers (validate refuses any other).
    if (models.length === 0) models = available.flatMap((entry) => entry.models.map((model) => Schema.decodeSync(ModelEntry)(model)))
    if (available.length > 0) infos.push(`no providers configured: using the default catalogue for ${available.map((e) => e.env).join(", ")}`)
    else notices.push("no provider is configured and no OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or DEEPSEEK_API_KEY is set: turns will fail until one is")
  }
  const routed: Array<ProviderConfig> = []
  for (const provider of providers) {
    const key = provider.apiKeyEnv === undefined ? "" : env[provider.apiKeyEnv] ?? ""
    if (provider.apiKeyEnv !== undefined && key === "") notices.push(`provider ${provider.id}: ${provider.apiKeyEnv} is not set; its calls will fail with an authentication error`)
    routed.push({
      id: provider.id,
      api: provider.api,
      baseUrl: provider.baseUrl,
      apiKey: Redacted.make(key),
      headers: provider.headers,
      ...(provider.secretHeaders === undefined ? {} : { secretHeaders: provider.secretHeaders }),
      extraBody: provider.extraBody,
      compat: provider.compat
    })
  }
  const host = env["BYOK_HOST"] ?? file.host
  const portText = env["BYOK_PORT"]
  const port = portText === undefined ? file.port : Number(portText)
  const defaultModel = file.defaultModel ?? models[0]?.id
  const consoleToken = env["BYOK_CONSOLE_TOKEN"] ?? file.console.token
  const advertise = env["BYOK_ADVERTISE"] ?? file.advertise
  if (!isLoopback(host)) {
    notices.push(`listening on ${host}, which is not a loopback address: every request but /healthz needs the token`)
  }
  if (!isLoopback(host) && consoleToken === undefined) {
    notices.push(`no token is set (console.token or BYOK_CONSOLE_TOKEN): every request to ${host} but /healthz is refused until one is`)
  }
  return {
    host,
    allowedHosts: allowedHostsOf(file, env, advertise),
    port,
    database: env["BYOK_DB"] ?? file.database,
    advertise,
    heartbeatMs: file.heartbeatMs,
    drainMs: file.drainMs,
    orphanTimeoutMs: file.orphanTimeoutMs,
    blobAckTimeoutMs: file.blobAckTimeoutMs,
    queuedMessageGraceMs: file.queuedMessageGraceMs,
    http2: http2Of(file, env),
    home: env["BYOK_HOME"] ?? file.home ?? join(homedir(), ".cursor-byok"),
    proxy: proxyOf(file, env),
    maxLlmCallsPerTurn: file.maxLlmCallsPerTurn,
    limits: file.limits,
    compaction: { ...file.compaction, auto: compactionAutoOf(env) ?? file.compaction.auto },
    capture: file.capture,
    web: webOf(file.web, env),
    tab: tabOf(file.tab, routed),
    console: { token: consoleToken === undefined || consoleToken === "" ? undefined : Redacted.make(consoleToken) },
    router: {
      providers: routed,
      models,
      ...(file.aliases === undefined ? {} : { aliases: file.aliases }),
      ...(defaultModel === undefined ? {} : { defaultModel }),
      ...(file.retry === undefined ? {} : { retry: file.retry })
    },
    models,
    defaultModel,
    subagentModel: file.subagentModel,
    notices,
    infos,
    faults: FaultInjection.fromEnvironment(env)
  }
}

/** The host other instances dial for this one: a wildcard address is not one, so loopback stands in. */
const advertisedHost = (host: string): string =>
  host === "0.0.0.0" || host === "::" || host === "" ? "127.0.0.1" : host.includes(":") && !host.startsWith("[") ? `[${host}]` : host

/** Where the other instances on a shared database reach this one: `advertise`, or `http://<host>:<port>`. */
export const advertiseAddress = (config: Pick<ServerConfig, "advertise" | "host" | "port">): string =>
  config.advertise ?? `http://${advertisedHost(config.host)}:${config.port}`

/**
 * `allowedHosts`, or `BYOK_ALLOWED_HOSTS` (comma-separated) in its place; lower case, brackets
 * kept off IPv6; and the host of an `advertise` set, which the other instances address this one by
 * (the default's host, this server's own, is allowed already).
 */
const allowedHostsOf = (file: FileConfig, env: Readonly<Record<string, string | undefined>>, advertise: string | undefined): ReadonlyArray<string> => {
  const text = env["BYOK_ALLOWED_HOSTS"]
  const names = text === undefined ? file.allowedHosts : text.split(",").map((name) => name.trim()).filter((name) => name !== "")
  const advertised = advertise !== undefined && URL.canParse(advertise) ? new URL(advertise).host : undefined
  return [...names, ...(advertised === undefined || advertised === "" ? [] : [advertised])].map((name) => name.toLowerCase().replace(/^\[([^\]]+)\]/, "$1"))
}

/**
 * The HTTP/2 listeners: the file's, then `BYOK_H2C_PORT` (a port, or `off`), `BYOK_TLS_PORT`
 * (a port, or `off`), `BYOK_TLS_CERT` and `BYOK_TLS_KEY` (PEM files instead of the CA's leaf).
 */
const http2Of = (file: FileConfig, env: Readonly<Record<string, string | undefined>>): ServerConfig["http2"] => {
  const h2c = env["BYOK_H2C_PORT"]
  const cleartextPort = h2c === undefined ? file.http2.cleartextPort ?? undefined : h2c === "off" ? undefined : Number(h2c)
  const tlsText = env["BYOK_TLS_PORT"]
  const certFile = env["BYOK_TLS_CERT"] ?? file.http2.tls?.certFile
  const keyFile = env["BYOK_TLS_KEY"] ?? file.http2.tls?.keyFile
  const off = tlsText === "off" || (tlsText === undefined && file.http2.tls === null && certFile === undefined)
  const tlsPort = tlsText !== undefined && tlsText !== "off" ? Number(tlsText) : file.http2.tls?.port ?? 8790
  return { cleartextPort, tls: off ? undefined : { port: tlsPort, certFile, keyFile } }
}

/** The proxy: the file's, then `BYOK_PROXY_PORT` (a port, or `off`), `BYOK_OFFLINE`, `BYOK_UPSTREAM_PROXY` or `HTTPS_PROXY`. */
const proxyOf = (file: FileConfig, env: Readonly<Record<string, string | undefined>>): ServerConfig["proxy"] => {
  const portText = env["BYOK_PROXY_PORT"]
  const offlineText = env["BYOK_OFFLINE"]
  const upstream = env["BYOK_UPSTREAM_PROXY"] ?? file.proxy.upstream ?? env["HTTPS_PROXY"] ?? env["https_proxy"]
  const server = env["BYOK_UPSTREAM_SERVER"] ?? file.proxy.upstreamServer
  const token = env["BYOK_UPSTREAM_TOKEN"] ?? file.proxy.upstreamToken
  return {
    port: portText === undefined ? file.proxy.port ?? undefined : portText === "off" ? undefined : Number(portText),
    offline: offlineText === undefined ? file.proxy.offline : offlineText === "1" || offlineText.toLowerCase() === "true",
    upstream: upstream === undefined || upstream === "" ? undefined : upstream,
    noProxy: parseNoProxy(env["BYOK_NO_PROXY"] ?? file.proxy.noProxy ?? env["NO_PROXY"] ?? env["no_proxy"]),
    upstreamServer: server === undefined || server === ""
      ? undefined
      : { url: server.replace(/\/+$/, ""), token: token === undefined || token === "" ? undefined : Redacted.make(token) }
  }
}

const isPort = (port: number | undefined) => port === undefined || (Number.isInteger(port) && port >= 0 && port <= 65535)



/** Decodes the text of a configuration file; each problem is one line naming the file, the field and what was expected. */
export const decodeFile = (path: string, text: string): Effect.Effect<FileConfig, ConfigError> =>
  Effect.try({
    try: () => JSON.parse(text) as unknown,
    catch: (cause) => new ConfigError({ message: `${path}: not valid JSON${jsonPosition(text, (cause as Error).message)}: ${(cause as Error).message}` })
  }).pipe(
    Effect.flatMap((json) => Schema.decodeUnknown(FileConfig)(json, { onExcessProperty: "error", errors: "all" })),
    Effect.mapError((error) =>
      error._tag === "ParseError" ? new ConfigError({ message: issueLines(error).map((line) => `${path}: ${line}`).join("\n") }) : error
    )
  )

const environment = Effect.sync(() => ({ ...process.env }) as Readonly<Record<string, string | undefined>>)

/**
 * The checks a resolved configuration must pass (ports, the TLS files in pairs, the model
 * table's references). The references' problems are all reported, one line each, prefixed with
 * `path` (the file's) when given.
 */
export const validate = (
  config: ServerConfig,
  env: Readonly<Record<string, string | undefined>>,
  path?: string
): Effect.Effect<ServerConfig, ConfigError> =>
  Effect.gen(function*() {
    if (!Number.isInteger(config.port) || config.port < 0 || config.port > 65535) {
      return yield* new ConfigError({ message: `BYOK_PORT must be a port number (0-65535), got ${env["BYOK_PORT"]}` })
    }
    if (!isPort(config.http2.cleartextPort)) {
      return yield* new ConfigError({ message: `BYOK_H2C_PORT must be a port number (0-65535) or off, got ${env["BYOK_H2C_PORT"]}` })
    }
    if (config.http2.tls !== undefined && !isPort(config.http2.tls.port)) {
      return yield* new ConfigError({ message: `BYOK_TLS_PORT must be a port number (0-65535) or off, got ${env["BYOK_TLS_PORT"]}` })
    }
    const token = env["BYOK_CONSOLE_TOKEN"]
    if (token !== undefined && token !== "" && token.length < MIN_TOKEN_LENGTH) {
      return yield* new ConfigError({ message: `BYOK_CONSOLE_TOKEN must be at least ${MIN_TOKEN_LENGTH} characters (it has ${token.length}): it guards the histories and your keys off loopback` })
    }
    const badHost = (env["BYOK_ALLOWED_HOSTS"] ?? "").split(",").map((name) => name.trim()).find((name) => name !== "" && !Schema.is(HostName)(name))
    if (badHost !== undefined) {
      return yield* new ConfigError({ message: `BYOK_ALLOWED_HOSTS takes host names or name:port, comma-separated; got ${JSON.stringify(badHost)}` })
    }
    if (!isPort(config.proxy.port)) {
      return yield* new ConfigError({ message: `BYOK_PROXY_PORT must be a port number (0-65535) or off, got ${env["BYOK_PROXY_PORT"]}` })
    }
    const compaction = env["BYOK_COMPACTION"]?.trim().toLowerCase()
    if (compaction !== undefined && compaction !== "" && !["on", "off", "true", "false", "1", "0"].includes(compaction)) {
      return yield* new ConfigError({ message: `BYOK_COMPACTION must be on or off, got ${env["BYOK_COMPACTION"]}` })
    }
    const webSearch = env["BYOK_WEB_SEARCH"]
    if (webSearch !== undefined && webSearchOverride(webSearch) === "invalid") {
      return yield* new ConfigError({ message: `BYOK_WEB_SEARCH must be searxng=<http(s) URL>, brave, tavily or off, got ${webSearch}` })
    }
    const search = config.web.search.backend
    if (search !== undefined && search.name !== "searxng" && Redacted.value(search.apiKey) === "") {
      return yield* new ConfigError({ message: `web search: the ${search.name} backend reads its API key from ${search.apiKeyEnv}, which is not set` })
    }
    const references = [...referenceProblems(config), ...tabProblems(config.tab, config.router.providers)]
    if (references.length > 0) {
      return yield* new ConfigError({ message: references.map((line) => (path === undefined ? line : `${path}: ${line}`)).join("\n") })
    }
    const routing = routingProblem(config.router)
    if (routing !== undefined) return yield* new ConfigError({ message: routing })
    if ((config.http2.tls?.certFile === undefined) !== (config.http2.tls?.keyFile === undefined)) {
      return yield* new ConfigError({ message: "the TLS listener takes both a certificate and a key (http2.tls.certFile and keyFile, or BYOK_TLS_CERT and BYOK_TLS_KEY), or neither (the CA's leaf)" })
    }
    return config
  })

/**
 * Where the configuration comes from: the file (`BYOK_CONFIG`, else `./byok.config.json`,
 * which may not exist) and the environment read once at start-up. A reload reads the same path
 * with the same environment.
 */
export interface ConfigSource {
  readonly path: string
  /** Named by `BYOK_CONFIG` (then it must exist), rather than the default path. */
  readonly explicit: boolean
  readonly env: Readonly<Record<string, string | undefined>>
}

/** Finds the configuration file and takes the environment; a `BYOK_CONFIG` naming no file is an error. */
export const locate: Effect.Effect<ConfigSource, ConfigError, FileSystem.FileSystem> = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const explicit = yield* Config.option(Config.string("BYOK_CONFIG")).pipe(Effect.orElseSucceed(() => Option.none<string>()))
  const path = Option.getOrElse(explicit, () => "./byok.config.json")
  if (Option.isSome(explicit) && !(yield* fs.exists(path).pipe(Effect.orElseSucceed(() => false)))) {
    return yield* new ConfigError({ message: `BYOK_CONFIG names ${path}, which does not exist` })
  }
  return { path, explicit: Option.isSome(explicit), env: yield* environment }
})

/** Reads and decodes the source's file (the defaults when it does not exist), then resolves and validates it. */
export const loadFrom = (source: ConfigSource): Effect.Effect<ServerConfig, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const exists = yield* fs.exists(source.path).pipe(Effect.orElseSucceed(() => false))
    if (source.explicit && !exists) return yield* new ConfigError({ message: `${source.path} does not exist` })
    const file = exists
      ? yield* fs.readFileString(source.path).pipe(
        Effect.mapError((cause) => new ConfigError({ message: `cannot read ${source.path}: ${cause.message}` })),
        Effect.flatMap((text) => decodeFile(source.path, text))
      )
      : Schema.decodeSync(FileConfig)({})
    return yield* validate(resolve(file, source.env), source.env, exists ? source.path : undefined)
  })

/** Loads the configuration: the file if any, the environment, validated. */
export const load: Effect.Effect<ServerConfig, ConfigError, FileSystem.FileSystem> = Effect.flatMap(locate, loadFrom)


/** `BYOK_COMPACTION=off` (or `on`) overrides the file's `compaction.auto`. */
const compactionAutoOf = (env: Readonly<Record<string, string | undefined>>): boolean | undefined => {
  const value = env["BYOK_COMPACTION"]?.trim().toLowerCase()
  return value === undefined || value === "" ? undefined : value !== "off" && value !== "false" && value !== "0"
}
