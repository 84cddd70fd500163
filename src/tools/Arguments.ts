/**
 * A tool call's arguments: the schema each tool's arguments are parsed against (the error text
 * is for the model), and the exec and typed args Cursor gets, built from them.
 */
import { create, fromJson, toJson } from "@bufbuild/protobuf"
import type { JsonValue } from "@bufbuild/protobuf"
import { ValueSchema } from "@bufbuild/protobuf/wkt"
import type { Value } from "@bufbuild/protobuf/wkt"
import { Either, Schema } from "effect"
import { GrepArgsSchema, McpArgsSchema, ReadArgsSchema, ReadToolArgsSchema } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import type { McpToolDescriptor } from "./Kinds.js"

const OptInt = Schema.optional(Schema.Int)
const OptString = Schema.optional(Schema.String)
const OptBool = Schema.optional(Schema.Boolean)

export const ShellInput = Schema.Struct({
  command: Schema.String,
  working_directory: OptString,
  block_until_ms: OptInt,
  description: OptString,
  run_in_background: OptBool
})
export const ReadInput = Schema.Struct({ path: Schema.String, offset: OptInt, limit: OptInt })
export const WriteInput = Schema.Struct({ path: Schema.String, contents: Schema.String })
export const EditInput = Schema.Struct({
  path: Schema.String,
  old_string: Schema.String,
  new_string: Schema.String,
  replace_all: OptBool
})
export const DeleteInput = Schema.Struct({ path: Schema.String })
export const GrepInput = Schema.Struct({
  pattern: Schema.String,
  path: OptString,
  glob: OptString,
  output_mode: Schema.optional(Schema.Literal("content", "files_with_matches", "count")),
  case_insensitive: OptBool,
  context_before: OptInt,
  context_after: OptInt,
  context: OptInt,
  type: OptString,
  head_limit: OptInt,
  multiline: OptBool
})
export const GlobInput = Schema.Struct({ glob_pattern: Schema.String, target_directory: OptString })
export const LsInput = Schema.Struct({ path: Schema.String, ignore: Schema.optional(Schema.Array(Schema.String)) })
/** At most this many files per ReadLints call: one exec each, one at a time. */
export const READ_LINTS_MAX_PATHS = 20
export const ReadLintsInput = Schema.Struct({
  paths: Schema.Array(Schema.String.pipe(Schema.minLength(1, { message: () => "a path must not be empty" }))).pipe(
    Schema.minItems(1, { message: () => "paths must name at least one file" }),
    Schema.maxItems(READ_LINTS_MAX_PATHS, { message: () => `paths may name at most ${READ_LINTS_MAX_PATHS} files; check the rest in another call` })
  )
})
export const WriteShellStdinInput = Schema.Struct({
  shell_id: Schema.Int.pipe(Schema.between(0, 0xffff_ffff, { message: () => "shell_id must be the shell id a Shell result gave" })),
  chars: Schema.String.pipe(Schema.minLength(1, { message: () => "chars must not be empty" }))
})
export const TodoStatusInput = Schema.Literal("pending", "in_progress", "completed", "cancelled")
export const TodoInput = Schema.Struct({
  todos: Schema.Array(Schema.Struct({ id: Schema.String, content: Schema.String, status: TodoStatusInput })),
  merge: OptBool
})
export const McpInput = Schema.Record({ key: Schema.String, value: Schema.Unknown })
const NonEmpty = Schema.String.pipe(Schema.minLength(1, { message: () => "must not be empty" }))
export const CreatePlanInput = Schema.Struct({
  name: NonEmpty,
  overview: OptString,
  plan: NonEmpty,
  todos: Schema.optional(Schema.Array(Schema.Struct({ id: Schema.String, content: Schema.String })))
})
export const AskQuestionInput = Schema.Struct({
  title: OptString,
  questions: Schema.Array(Schema.Struct({
    id: Schema.String,
    prompt: NonEmpty,
    options: Schema.Array(Schema.Struct({ id: Schema.String, label: Schema.String })),
    allow_multiple: OptBool
  })).pipe(Schema.minItems(1)),
  run_async: OptBool
})
export const SwitchModeInput = Schema.Struct({ target_mode_id: Schema.String, explanation: OptString })
export const WebSearchInput = Schema.Struct({ search_term: NonEmpty })
export const WebFetchInput = Schema.Struct({ url: NonEmpty })

export type GrepInput = typeof GrepInput.Type

/** Parses the model's raw argument text against a schema; the error text is meant for the model. */
export const parseArgs = <A, I>(schema: Schema.Schema<A, I>, text: string): Either.Either<A, string> => {
  let json: unknown
  try {
    json = text.trim() === "" ? {} : JSON.parse(text)
  } catch (error) {
    return Either.left(`the arguments are not valid JSON (${error instanceof Error ? error.message : String(error)})`)
  }
  return Schema.decodeUnknownEither(schema, { onExcessProperty: "ignore" })(json).pipe(
    Either.mapLeft((error) => error.message)
  )
}

export const readArgs = (call: ToolCall, path: string, offset: number | undefined, limit: number | undefined) =>
  create(ReadArgsSchema, {
    path,
    toolCallId: call.id,
    ...(offset !== undefined ? { offset } : {}),
    ...(limit !== undefined ? { limit } : {})
  })

export const readToolArgs = (read: { readonly path: string; readonly offset: number | undefined; readonly limit: number | undefined }) =>
  create(ReadToolArgsSchema, {
    path: read.path,
    ...(read.offset !== undefined ? { offset: read.offset } : {}),
    ...(read.limit !== undefined ? { limit: read.limit } : {})
  })

export const grepArgs = (call: ToolCall, input: GrepInput) =>
  create(GrepArgsSchema, {
    pattern: input.pattern,
    toolCallId: call.id,
    outputMode: input.output_mode ?? "content",
    ...(input.path !== undefined ? { path: input.path } : {}),
    ...(input.glob !== undefined ? { glob: input.glob } : {}),
    ...(input.case_insensitive !== undefined ? { caseInsensitive: input.case_insensitive } : {}),
    ...(input.context_before !== undefined ? { contextBefore: input.context_before } : {}),
    ...(input.context_after !== undefined ? { contextAfter: input.context_after } : {}),
    ...(input.context !== undefined ? { context: input.context } : {}),
    ...(input.type !== undefined ? { type: input.type } : {}),
    ...(input.head_limit !== undefined ? { headLimit: input.head_limit } : {}),
    ...(input.multiline !== undefined ? { multiline: input.multiline } : {})
  })

const toValue = (json: unknown): Value => {
  try {
    return fromJson(ValueSchema, json as JsonValue)
  } catch {
    return fromJson(ValueSchema, null)
  }
}

export const mcpArgs = (call: ToolCall, tool: McpToolDescriptor, args: Record<string, unknown>) =>
  create(McpArgsSchema, {
    name: tool.name,
    args: Object.fromEntries(Object.entries(args).map(([key, value]) => [key, toValue(value)])),
    toolCallId: call.id,
    providerIdentifier: tool.providerIdentifier,
    toolName: tool.toolName
  })

/** JSON of an MCP argument value as the client sent it back (for tests and logs). */
export const mcpArgsJson = (args: { readonly [key: string]: Value }): Record<string, unknown> =>
  Object.fromEntries(Object.entries(args).map(([key, value]) => [key, toJson(ValueSchema, value)]))
