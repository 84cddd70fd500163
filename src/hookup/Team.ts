/**
 * `setup --server URL --token TOKEN`: this machine's hookup pointed at a team's server. The token
 * is tried first (a side RPC with it must be answered), then `proxy.upstreamServer` and
 * `proxy.upstreamToken` are written into the configuration file (kept private: it holds a
 * token), so that the proxy sends Cursor's agent traffic there (`Proxy.ts`, `team`).
 */
import { FileSystem } from "@effect/platform"
import { Effect } from "effect"
import * as CursorSettings from "./CursorSettings.js"
import { SetupError } from "./SetupError.js"
import { editFile, parseFile } from "./UserProxy.js"

/** The team's server as the proxy reaches it: an `http(s)://host[:port]` without a path. */
const parseServer = (server: string): Effect.Effect<string, SetupError> => {
  let url: URL
  try {
    url = new URL(server)
  } catch {
    return Effect.fail(new SetupError({ message: `--server ${JSON.stringify(server)} is not a URL: give the team's server as https://host[:port]` }))
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return Effect.fail(new SetupError({ message: `--server must be https:// (or http:// on a trusted network), not ${url.protocol}` }))
  if (url.pathname !== "/" || url.search !== "" || url.username !== "") return Effect.fail(new SetupError({ message: `--server is the server's address alone (https://host[:port]), without a path, query or user` }))
  return Effect.succeed(url.origin)
}

/** The team's server answers a side RPC with `token`: or why not, in one line. */
const tryToken = (server: string, token: string): Effect.Effect<void, SetupError> =>
  Effect.tryPromise({
    try: () =>
      fetch(`${server}/aiserver.v1.AiService/AvailableModels`, {
        method: "POST",
        headers: { "content-type": "application/proto", "connect-protocol-version": "1", "x-byok-token": token },
        body: new Uint8Array(),
        signal: AbortSignal.timeout(10_000)
      }),
    catch: (cause) => new SetupError({ message: `cannot reach ${server}: ${cause instanceof Error ? (cause.cause as Error | undefined)?.message ?? cause.message : String(cause)}; check the address, and that the team's server runs` })
  }).pipe(Effect.flatMap((response) =>
    response.ok ? Effect.void : Effect.flatMap(
      Effect.promise(() => response.text().catch(() => "")),
      (body) => {
        const message = /"message"\s*:\s*"([^"]*)"/.exec(body)?.[1] ?? body.slice(0, 200)
        return Effect.fail(new SetupError({
          message: response.status === 401 || response.status === 403
            ? `${server} refused the token (${response.status}: ${message}): ask its operator for yours (\`cursor-byok users token <name>\`)`
            : `${server} answered ${response.status} (${message}): is it a cursor-byok server?`
        }))
      }
    )
  ))

/** Points the configuration file at the team's server; its path, and whether it was made. */
export const pointAtTeam = (options: { readonly server: string; readonly token: string; readonly configPath: string }) =>
  Effect.gen(function*() {
    const server = yield* parseServer(options.server)
    if (options.token.trim() === "") return yield* new SetupError({ message: "--token is empty: give the token the team's operator issued you" })
    yield* tryToken(server, options.token)
    const fs = yield* FileSystem.FileSystem
    const original = yield* CursorSettings.readIfExists(fs, options.configPath)
    yield* parseFile(options.configPath, original ?? "")
    const text = editFile(editFile(original ?? "", ["proxy", "upstreamServer"], server), ["proxy", "upstreamToken"], options.token)
    yield* CursorSettings.writeAtomic(fs, options.configPath, text)
    yield* fs.chmod(options.configPath, 0o600)
    return { server, configPath: options.configPath, created: original === undefined }
  })
