/**
 * The command line of capture mode: `cursor-byok capture on|off` sets `capture.enabled` in the
 * configuration file the server reads (as JSONC: comments, other keys and indentation kept; the
 * file is made when there is none), which a running server picks up by its reload; and
 * `cursor-byok replay FILE` (`Replay.ts`), whose exit status is 1 when the replay diverged.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as FileSystem from "@effect/platform/FileSystem"
import { Console, Data, Effect } from "effect"
import * as Jsonc from "jsonc-parser"
import { join } from "node:path"
import * as Config from "../Config.js"
import { replayFile } from "./Replay.js"

export class CaptureCommandError extends Data.TaggedError("CaptureCommandError")<{ readonly message: string }> {}

/** `text` (a configuration file, JSONC) with `capture.enabled` set. */
export const withCapture = (text: string, enabled: boolean): string => {
  const source = text.trim() === "" ? "{}\n" : text
  const errors: Array<Jsonc.ParseError> = []
  const parsed: unknown = Jsonc.parse(source, errors, { allowTrailingComma: true })
  if (errors.length > 0 || parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new CaptureCommandError({ message: "the configuration file is not a JSON object; fix it first (`cursor-byok doctor` names the problem)" })
  }
  return Jsonc.applyEdits(source, Jsonc.modify(source, ["capture", "enabled"], enabled, { formattingOptions: { insertSpaces: true, tabSize: 2 } }))
}

/** Sets `capture.enabled` in the configuration file and says where captures go. */
export const setCapture = (enabled: boolean) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const source = yield* Config.locate
    const exists = yield* fs.exists(source.path).pipe(Effect.orElseSucceed(() => false))
    const text = exists ? yield* fs.readFileString(source.path) : ""
    const next = yield* Effect.try({ try: () => withCapture(text, enabled), catch: (error) => error as CaptureCommandError })
    yield* fs.writeFileString(source.path, next)
    const config = yield* Config.loadFrom(source)
    const folder = join(config.home, "captures")
    yield* Console.log(enabled
      ? [
        `capture on: set "capture.enabled": true in ${source.path} (the configuration file the server reads).`,
        `A running server picks the change up by itself (it watches that file); each agent request is written to ${folder}/, one file per request,`,
        `file contents and secrets redacted${config.capture.contents ? " (but \"capture.contents\" is true: file contents are kept)" : " (set \"capture.contents\": true to keep file contents)"}.`,
        "The console lists them (Captures) for download; `cursor-byok capture off` stops it."
      ].join("\n")
      : `capture off: set "capture.enabled": false in ${source.path} (the configuration file the server reads); a running server stops capturing at its next request. The files in ${folder}/ are kept.`)
  })

export const capture = Command.make("capture", {
  state: Args.choice([["on", true], ["off", false]] as const, { name: "on|off" })
}, ({ state }) => setCapture(state)).pipe(
  Command.withDescription("Turn capture mode on or off (edits the configuration file): each agent request written to <home>/captures/ for a bug report")
)

export const replay = Command.make("replay", {
  file: Args.file({ name: "FILE", exists: "yes" })
}, ({ file }) =>
  Effect.gen(function*() {
    const result = yield* Effect.scoped(replayFile(file))
    yield* Console.log(result.text)
    if (result.verdict._tag === "Diverged") return yield* new CaptureCommandError({ message: "the replay diverged from the capture" })
  })).pipe(
    Command.withDescription("Replay a capture on a fresh in-process server with its recorded model answers; exit status 1 when the server's messages diverge")
  )
