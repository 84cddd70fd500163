/**
 * One tool call as a small pure state machine: `startTool` says which exec to send to the
 * client (or finishes at once, for TodoWrite and for invalid arguments), `onExecReply` takes
 * each exec result and says the next exec, a streamed chunk to show, or the final outcome, and
 * `onExecThrow` ends a call the client could not run.
 */
import { create } from "@bufbuild/protobuf"
import { Either } from "effect"
import {
  BackgroundShellSpawnArgsSchema,
  DeleteArgsSchema,
  DeleteToolCallSchema,
  EditArgsSchema,
  EditToolCallSchema,
  GlobToolArgsSchema,
  GlobToolCallSchema,
  GlobToolResultSchema,
  GrepArgsSchema,
  GrepToolCallSchema,
  LsArgsSchema,
  LsToolCallSchema,
  McpToolCallSchema,
  ReadToolCallSchema,
  ShellArgsSchema,
  ShellToolCallSchema,
  TimeoutBehavior,
  ToolCallSchema
} from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import {
  DeleteInput,
  EditInput,
  GlobInput,
  grepArgs,
  GrepInput,
  LsInput,
  mcpArgs,
  McpInput,
  parseArgs,
  readArgs,
  ReadInput,
  ReadLintsInput,
  readToolArgs,
  ShellInput,
  TodoInput,
  WriteInput,
  WriteShellStdinInput
} from "./Arguments.js"
import { offers } from "./Catalog.js"
import { onEdit } from "./Edit.js"
import { findMcp, kindOf } from "./Kinds.js"
import { onLints, startLints } from "./Lints.js"
import { ToolRun, ToolStep } from "./Model.js"
import type { EditChange, ExecReply, ExecRequest, ToolContext, ToolStart } from "./Model.js"
import { filesOf, formatGrep, formatTree, mcpOutcome, readOutcome } from "./Outcomes.js"
import { failed, startedOf, unexpected } from "./Cards.js"
import { describeFailure, done, partialCursorToolCall, resultMessage, withId } from "./Results.js"
import { isQueryRun, startQuery } from "./Queries.js"
import { onSubagentReply, startTask, taskCard } from "./Task.js"
import { onAwaitReply, startAwait } from "./Await.js"
import { onShell } from "./Shell.js"
import { onStdin, startStdin } from "./Stdin.js"
import { todoWrite } from "./Todo.js"

const SHELL_DEFAULT_TIMEOUT_MS = 30_000
const SHELL_HARD_TIMEOUT_MS = 86_400_000
const SHELL_FILE_OUTPUT_THRESHOLD = 40_000n

/** A Shell call: streamed, or spawned in the background when the model asks. */
const startShell = (call: ToolCall, input: typeof ShellInput.Type): ToolStart => {
  const args = create(ShellArgsSchema, {
    command: input.command,
    workingDirectory: input.working_directory ?? "",
    timeout: input.block_until_ms ?? SHELL_DEFAULT_TIMEOUT_MS,
    toolCallId: call.id,
    timeoutBehavior: TimeoutBehavior.BACKGROUND,
    hardTimeout: SHELL_HARD_TIMEOUT_MS,
    fileOutputThresholdBytes: SHELL_FILE_OUTPUT_THRESHOLD,
    closeStdin: true,
    ...(input.description !== undefined ? { description: input.description } : {})
  })
  const description = input.description ?? input.command
  const run = ToolRun.Shell({
    call,
    command: input.command,
    workingDirectory: input.working_directory ?? "",
    description,
    output: { stdout: "", stderr: "", interleaved: "" }
  })
  const exec: ExecRequest = input.run_in_background === true
    ? {
      case: "backgroundShellSpawnArgs",
      value: create(BackgroundShellSpawnArgsSchema, {
        command: input.command,
        workingDirectory: input.working_directory ?? "",
        toolCallId: call.id,
        enableWriteShellStdinTool: true,
        ...(input.description !== undefined ? { description: input.description } : {})
      })
    }
    : { case: "shellStreamArgs", value: args }
  return { started: withId(call, { case: "shellToolCall", value: create(ShellToolCallSchema, { args, description }) }), step: ToolStep.Exec({ run, exec }) }
}

/** A Write or an Edit (StrReplace): read the file first, then apply and write (`Edit.ts`). */
const startEdit = (kind: "write" | "edit", call: ToolCall, context: ToolContext, invalid: (reason: string) => ToolStart): ToolStart => {
  const change: Either.Either<{ readonly path: string; readonly change: EditChange }, string> = kind === "write"
    ? Either.map(parseArgs(WriteInput, call.arguments), (input) => ({ path: input.path, change: { kind: "write" as const, contents: input.contents } }))
    : Either.map(parseArgs(EditInput, call.arguments), (input) => ({
      path: input.path,
      change: { kind: "replace" as const, oldString: input.old_string, newString: input.new_string, replaceAll: input.replace_all ?? false }
    }))
  if (Either.isLeft(change)) return invalid(change.left)
  const { path } = change.right
  if (change.right.change.kind === "replace" && change.right.change.oldString === change.right.change.newString) {
    return invalid("old_string and new_string are identical")
  }
  const suggestLints = offers(context.mode ?? "agent", "readLints")
  const run = ToolRun.Edit({ call, path, change: change.right.change, phase: "reading", before: undefined, after: "", suggestLints })
  const streamContent = change.right.change.kind === "write" ? change.right.change.contents : change.right.change.newString
  return {
    started: withId(call, { case: "editToolCall", value: create(EditToolCallSchema, { args: create(EditArgsSchema, { path, streamContent }) }) }),
    step: ToolStep.Exec({ run, exec: { case: "readArgs", value: readArgs(call, path, undefined, undefined) } })
  }
}

/**
 * Starts one tool call: returns the typed call for `tool_call_started` and the first step
 * (an exec to send, or the final outcome for server-side tools and invalid arguments).
 */
export const startTool = (call: ToolCall, context: ToolContext): ToolStart => {
  const kind = kindOf(call.name, context.mcpTools)
  const invalid = (reason: string): ToolStart => {
    const started = withId(call, partialCursorToolCall(call.name, context.mcpTools).tool)
    return { started, step: done(failed(call, `Invalid arguments for ${call.name}: ${reason}`, started)) }
  }
  switch (kind) {
    case undefined: {
      const started = create(ToolCallSchema, { toolCallId: call.id })
      return { started, step: done({ message: resultMessage(call, `Unknown tool: ${call.name}. Use one of the tools you were given.`, true), cursor: started }) }
    }
    case "shell": {
      const parsed = parseArgs(ShellInput, call.arguments)
      return Either.isLeft(parsed) ? invalid(parsed.left) : startShell(call, parsed.right)
    }
    case "read": {
      const parsed = parseArgs(ReadInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const { limit, offset, path } = parsed.right
      const run = ToolRun.Read({ call, path, offset, limit })
      return {
        started: withId(call, { case: "readToolCall", value: create(ReadToolCallSchema, { args: readToolArgs(run) }) }),
        step: ToolStep.Exec({ run, exec: { case: "readArgs", value: readArgs(call, path, offset, limit) } })
      }
    }
    case "write":
    case "edit":
      return startEdit(kind, call, context, invalid)
    case "delete": {
      const parsed = parseArgs(DeleteInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const args = create(DeleteArgsSchema, { path: parsed.right.path, toolCallId: call.id })
      return {
        started: withId(call, { case: "deleteToolCall", value: create(DeleteToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Delete({ call, path: parsed.right.path }), exec: { case: "deleteArgs", value: args } })
      }
    }
    case "grep": {
      const parsed = parseArgs(GrepInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const args = grepArgs(call, parsed.right)
      return {
        started: withId(call, { case: "grepToolCall", value: create(GrepToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Grep({ call, input: parsed.right }), exec: { case: "grepArgs", value: args } })
      }
    }
    case "glob": {
      const parsed = parseArgs(GlobInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const directory = parsed.right.target_directory ?? ""
      // Cursor has no glob exec: a grep with an empty pattern listing matching files is what the client runs.
      const args = create(GrepArgsSchema, {
        pattern: "",
        glob: parsed.right.glob_pattern,
        outputMode: "files_with_matches",
        toolCallId: call.id,
        ...(directory !== "" ? { path: directory } : {})
      })
      return {
        started: withId(call, {
          case: "globToolCall",
          value: create(GlobToolCallSchema, { args: create(GlobToolArgsSchema, { globPattern: parsed.right.glob_pattern, targetDirectory: directory }) })
        }),
        step: ToolStep.Exec({ run: ToolRun.Glob({ call, pattern: parsed.right.glob_pattern, directory }), exec: { case: "grepArgs", value: args } })
      }
    }
    case "ls": {
      const parsed = parseArgs(LsInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const ignore = parsed.right.ignore ?? []
      const args = create(LsArgsSchema, { path: parsed.right.path, ignore: [...ignore], toolCallId: call.id })
      return {
        started: withId(call, { case: "lsToolCall", value: create(LsToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Ls({ call, path: parsed.right.path, ignore }), exec: { case: "lsArgs", value: args } })
      }
    }
    case "readLints": {
      const parsed = parseArgs(ReadLintsInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      return startLints(call, parsed.right.paths)
    }
    case "writeShellStdin": {
      const parsed = parseArgs(WriteShellStdinInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      return startStdin(call, parsed.right.shell_id, parsed.right.chars)
    }
    case "mcp": {
      const tool = findMcp(call.name, context.mcpTools)!
      const parsed = parseArgs(McpInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      const args = mcpArgs(call, tool, parsed.right)
      return {
        started: withId(call, { case: "mcpToolCall", value: create(McpToolCallSchema, { args }) }),
        step: ToolStep.Exec({ run: ToolRun.Mcp({ call, tool, args: parsed.right }), exec: { case: "mcpArgs", value: args } })
      }
    }
    case "todoWrite": {
      const parsed = parseArgs(TodoInput, call.arguments)
      if (Either.isLeft(parsed)) return invalid(parsed.left)
      return todoWrite(call, parsed.right, context.todos)
    }
    case "createPlan":
    case "askQuestion":
    case "switchMode":
    case "webSearch":
    case "webFetch":
      return startQuery(kind, call, context)
    case "awaitShell": {
      const started = startAwait(call, context.terminalsFolder ?? "")
      return typeof started === "string" ? invalid(started) : started
    }
    case "task": {
      const started = startTask(call, context.subagents ?? { subagentModel: "", customSubagents: [], conversationId: "" })
      if (Either.isLeft(started)) return invalid(started.left)
      const run = ToolRun.Task({ call, args: started.right.args, exec: started.right.exec })
      return { started: taskCard(call, run.args), step: ToolStep.Exec({ run, exec: { case: "subagentArgs", value: run.exec } }) }
    }
  }
}

/**
 * Takes one exec reply for a running tool. A reply of the wrong kind (a newer client, or a
 * bug) ends the call with an error result rather than leaving the model waiting.
 */
export const onExecReply = (run: ToolRun, reply: ExecReply): ToolStep =>
  isQueryRun(run) ? unexpected(run, reply) : ToolRun.$match(run, {
    Shell: (shell) => onShell(shell, reply),
    Read: (read) => {
      if (reply.case !== "readResult" && reply.case !== "redactedReadResult") return unexpected(run, reply)
      return done(readOutcome(read, reply.value.result))
    },
    Edit: (edit) => onEdit(edit, reply),
    Delete: ({ call, path }) => {
      if (reply.case !== "deleteResult") return unexpected(run, reply)
      const result = reply.value.result
      const args = create(DeleteArgsSchema, { path, toolCallId: call.id })
      const cursor = withId(call, { case: "deleteToolCall", value: create(DeleteToolCallSchema, { args, result: reply.value }) })
      const text = result.case === "success"
        ? `Deleted ${result.value.path || path}.`
        : `Could not delete ${path}: ${describeFailure(result)}`
      return done({ message: resultMessage(call, text, result.case !== "success"), cursor })
    },
    Grep: ({ call, input }) => {
      if (reply.case !== "grepResult") return unexpected(run, reply)
      const cursor = withId(call, { case: "grepToolCall", value: create(GrepToolCallSchema, { args: grepArgs(call, input), result: reply.value }) })
      const result = reply.value.result
      if (result.case !== "success") {
        return done({ message: resultMessage(call, `Search failed: ${describeFailure(result)}`, true), cursor })
      }
      return done({ message: resultMessage(call, formatGrep(reply.value), false), cursor })
    },
    Glob: ({ call, directory, pattern }) => {
      if (reply.case !== "grepResult") return unexpected(run, reply)
      const args = create(GlobToolArgsSchema, { globPattern: pattern, targetDirectory: directory })
      const result = reply.value.result
      if (result.case !== "success") {
        const text = `Glob failed: ${describeFailure(result)}`
        const cursor = withId(call, {
          case: "globToolCall",
          value: create(GlobToolCallSchema, { args, result: create(GlobToolResultSchema, { result: { case: "error", value: { error: text } } }) })
        })
        return done({ message: resultMessage(call, text, true), cursor })
      }
      const files = filesOf(reply.value)
      const cursor = withId(call, {
        case: "globToolCall",
        value: create(GlobToolCallSchema, {
          args,
          result: create(GlobToolResultSchema, {
            result: { case: "success", value: { pattern, path: result.value.path || directory, files, totalFiles: files.length } }
          })
        })
      })
      const text = files.length === 0 ? `No files match ${pattern}.` : files.join("\n")
      return done({ message: resultMessage(call, text, false), cursor })
    },
    Ls: ({ call, ignore, path }) => {
      if (reply.case !== "lsResult") return unexpected(run, reply)
      const args = create(LsArgsSchema, { path, ignore: [...ignore], toolCallId: call.id })
      const cursor = withId(call, { case: "lsToolCall", value: create(LsToolCallSchema, { args, result: reply.value }) })
      const result = reply.value.result
      if (result.case !== "success") {
        return done({ message: resultMessage(call, `Could not list ${path}: ${describeFailure(result)}`, true), cursor })
      }
      const root = result.value.directoryTreeRoot
      return done({ message: resultMessage(call, root === undefined ? `${path} is empty.` : formatTree(root), false), cursor })
    },
    Mcp: ({ args, call, tool }) => {
      if (reply.case !== "mcpResult") return unexpected(run, reply)
      return done(mcpOutcome(call, mcpArgs(call, tool, args), reply.value))
    },
    ReadLints: (lints) => onLints(lints, reply),
    WriteShellStdin: (stdin) => onStdin(stdin, reply),
    AwaitShell: (waiting) => onAwaitReply(waiting, reply),
    Task: ({ args, call }) => {
      const outcome = onSubagentReply(call, args, reply)
      return outcome === undefined ? unexpected(run, reply) : done(outcome)
    },
    CreatePlan: () => unexpected(run, reply),
    AskQuestion: () => unexpected(run, reply),
    SwitchMode: () => unexpected(run, reply),
    WebSearch: () => unexpected(run, reply),
    WebFetch: () => unexpected(run, reply)
  })

/**
 * The client answered with a kind of reply this server does not know (a newer client's): the call
 * fails and the model is told, rather than waiting for an answer that will not come.
 */
export const onUnknownReply = (run: ToolRun): ToolStep =>
  done(failed(run.call, `The client answered ${run.call.name} with a kind of reply this server cannot read; the call did not complete.`, startedOf(run)))

/** The client could not run the exec at all (`exec_client_control_message.throw`). */
export const onExecThrow = (run: ToolRun, error: string): ToolStep =>
  done(failed(run.call, `The client failed to run ${run.call.name}: ${error}`, startedOf(run)))
