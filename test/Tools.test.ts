/**
 * The tool catalog per mode and each tool's state machine: what exec is asked for, how every
 * reply moves it on, and the two views of the result (text for the model, typed for Cursor).
 */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import {
  DeleteResultSchema,
  ExecClientMessageSchema,
  GrepResultSchema,
  LsResultSchema,
  McpResultSchema,
  ReadResultSchema,
  ShellStreamSchema,
  TimeoutBehavior,
  TodoStatus,
  WriteResultSchema
} from "../src/gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../src/Llm.js"
import * as Prompt from "../src/Prompt.js"
import {
  applyChange,
  isIdempotent,
  kindOf,
  LINTS_HINT,
  mcpArgsJson,
  mcpModelName,
  onExecReply,
  offers,
  onExecThrow,
  startTool,
  toolCatalog,
  unifiedDiff
} from "../src/Tools.js"
import type { CursorMode, ExecReply, McpToolDescriptor, ToolContext, ToolOutcome, ToolRun, ToolStep } from "../src/Tools.js"

const mcp: McpToolDescriptor = {
  name: "github-search",
  description: "Search GitHub issues",
  providerIdentifier: "github",
  toolName: "search_issues",
  inputSchema: { type: "object", properties: { query: { type: "string" } }, required: ["query"] }
}
const context: ToolContext = { mcpTools: [mcp], todos: [] }
const call = (name: string, args: unknown, id = "call_1"): ToolCall => ({
  type: "toolCall",
  id,
  name,
  arguments: typeof args === "string" ? args : JSON.stringify(args)
})

const expectExec = (step: ToolStep): { run: ToolRun; exec: Extract<ToolStep, { _tag: "Exec" }>["exec"] } => {
  assert.strictEqual(step._tag, "Exec")
  return step as Extract<ToolStep, { _tag: "Exec" }>
}
const expectDone = (step: ToolStep): ToolOutcome => {
  assert.strictEqual(step._tag, "Done")
  return (step as Extract<ToolStep, { _tag: "Done" }>).outcome
}
const textOf = (outcome: ToolOutcome): string => {
  const block = outcome.message.content[0]
  assert.isDefined(block)
  return block!.type === "text" ? block!.text : ""
}
const reply = (init: NonNullable<MessageInitShape<typeof ExecClientMessageSchema>["message"]>): ExecReply =>
  create(ExecClientMessageSchema, { id: 1, message: init }).message as ExecReply
const shellEvent = (event: NonNullable<MessageInitShape<typeof ShellStreamSchema>["event"]>): ExecReply =>
  reply({ case: "shellStream", value: create(ShellStreamSchema, { event }) })

describe("catalog", () => {
  const names = (mode: CursorMode, web = { search: false, fetch: false }) => toolCatalog(mode, [mcp], web).map((tool) => tool.name)
  const AGENT = ["Shell", "Read", "Write", "StrReplace", "Delete", "Grep", "Glob", "Ls", "ReadLints", "TodoWrite", "AskQuestion", "SwitchMode", "WriteShellStdin", "AwaitShell"]
  const WRITING = ["Shell", "Write", "StrReplace", "Delete", "WriteShellStdin", "AwaitShell"]

  it("agent, debug, multitask and custom modes offer every native tool and the run request's MCP tools", () => {
    for (const mode of ["agent", "debug", "multitask", "custom"] as const) {
      assert.deepStrictEqual(names(mode), [...AGENT, mcpModelName(mcp)], mode)
    }
  })

  it("ask, plan, project and triage are read-only: no shell, no edits, no MCP", () => {
    assert.deepStrictEqual(names("ask"), ["Read", "Grep", "Glob", "Ls", "ReadLints", "AskQuestion", "SwitchMode"])
    assert.deepStrictEqual(names("plan"), ["Read", "Grep", "Glob", "Ls", "ReadLints", "TodoWrite", "CreatePlan", "AskQuestion", "SwitchMode"])
    assert.deepStrictEqual(names("project"), names("plan"))
    assert.deepStrictEqual(names("triage"), ["Read", "Grep", "Glob", "Ls", "ReadLints", "TodoWrite", "AskQuestion", "SwitchMode"])
    for (const mode of ["ask", "plan", "project", "triage"] as const) {
      for (const name of [...WRITING, mcpModelName(mcp)]) assert.notInclude(names(mode), name, `${mode} offers ${name}`)
    }
  })

  it("the web tools are offered only where allowed, after the mode's own tools, in every mode", () => {
    for (const mode of ["agent", "ask", "plan", "debug", "triage", "project", "multitask", "custom"] as const) {
      assert.notInclude(names(mode), "WebSearch")
      assert.notInclude(names(mode), "WebFetch")
      const both = names(mode, { search: true, fetch: true })
      assert.deepStrictEqual(both.filter((name) => name.startsWith("Web")), ["WebSearch", "WebFetch"], mode)
      assert.deepStrictEqual(names(mode, { search: false, fetch: true }).filter((name) => name.startsWith("Web")), ["WebFetch"], mode)
    }
  })

  it("ReadLints is offered in every mode, right after Ls; WriteShellStdin and AwaitShell only beside Shell, after the mode's other tools and before the web tools", () => {
    for (const mode of ["agent", "ask", "plan", "debug", "triage", "project", "multitask", "custom"] as const) {
      const list = names(mode, { search: true, fetch: true })
      assert.strictEqual(list[list.indexOf("Ls") + 1], "ReadLints", mode)
      assert.strictEqual(list.includes("WriteShellStdin"), list.includes("Shell"), mode)
      assert.strictEqual(list.includes("AwaitShell"), list.includes("Shell"), mode)
      if (list.includes("Shell")) assert.deepStrictEqual(list.slice(list.indexOf("SwitchMode") + 1, list.indexOf("SwitchMode") + 5), ["WriteShellStdin", "AwaitShell", "WebSearch", "WebFetch"], mode)
      assert.isTrue(offers(mode, "readLints"), mode)
    }
  })

  it("the policy's list with Task is the same object every turn too, and a subagent's run gets neither Task nor the parent's questions", () => {
    const settings = { model: "m", mode: "agent" as const, subagents: [{ name: "reviewer", description: "reviews" }] }
    const tools = Prompt.buildTools({ conversationId: "c", turnId: "t", settings })
    assert.strictEqual(Prompt.buildTools({ conversationId: "c", turnId: "t2", settings: { ...settings } }), tools)
    assert.strictEqual(tools.at(-1)?.name, "Task")
    assert.include(tools.at(-1)?.description ?? "", "- reviewer: reviews")
    const child = Prompt.buildTools({ conversationId: "c", turnId: "t", settings: { ...settings, subagent: { type: "reviewer", instructions: "", tools: ["Read", "Grep"], readonly: false } } })
    assert.deepStrictEqual(child.map((tool) => tool.name), ["Read", "Grep"])
  })

  it("a mode's list is the same object every turn (its hash is computed once)", () => {
    assert.strictEqual(toolCatalog("plan", [], { search: true, fetch: false }), toolCatalog("plan", [], { search: true, fetch: false }))
  })

  it("with MCP tools too: the same tools brought afresh give the same list object, other tools another", () => {
    const fresh = (): McpToolDescriptor => JSON.parse(JSON.stringify(mcp))
    const first = toolCatalog("agent", [fresh()])
    assert.strictEqual(toolCatalog("agent", [fresh()]), first)
    assert.deepStrictEqual(toolCatalog("agent", [fresh()]).map((tool) => tool.name), toolCatalog("agent", []).map((tool) => tool.name).concat(mcpModelName(mcp)))
    const other = { ...fresh(), description: "another description" }
    assert.notStrictEqual(toolCatalog("agent", [other]), first)
    assert.strictEqual(toolCatalog("agent", [other]).at(-1)?.description, "another description")
    // Another mode's catalog keeps its own list; many different tool sets push the oldest out.
    assert.notStrictEqual(toolCatalog("debug", [fresh()]), first)
    for (let i = 0; i < 20; i++) toolCatalog("agent", [{ ...fresh(), name: `tool${i}` }])
    assert.notStrictEqual(toolCatalog("agent", [fresh()]), first)
    assert.deepStrictEqual(toolCatalog("agent", [fresh()]), first)
  })

  it("every definition has an object JSON schema, MCP ones keep the server's schema", () => {
    for (const tool of toolCatalog("agent", [mcp])) assert.strictEqual(tool.parameters["type"], "object")
    assert.deepStrictEqual(toolCatalog("agent", [mcp]).at(-1)?.parameters, mcp.inputSchema as Record<string, unknown>)
  })

  it("only read-only kinds and questions to the client are idempotent", () => {
    const kinds = ["Shell", "Read", "Write", "StrReplace", "Delete", "Grep", "Glob", "Ls", "ReadLints", "WriteShellStdin", "AwaitShell", "Task", mcpModelName(mcp)].map((name) => kindOf(name, [mcp])!)
    // Waiting only reads; a subagent (Task) may have changed things, so it is never run again.
    assert.deepStrictEqual(kinds.filter(isIdempotent), ["read", "grep", "glob", "ls", "readLints", "awaitShell"])
    const questions = ["CreatePlan", "AskQuestion", "SwitchMode", "WebSearch", "WebFetch"].map((name) => kindOf(name, [])!)
    assert.isTrue(questions.every(isIdempotent))
    assert.isUndefined(kindOf("rm_rf", [mcp]))
  })
})

describe("Read", () => {
  it("asks for read_args and numbers the lines for the model", () => {
    const start = startTool(call("Read", { path: "src/a.ts", offset: 10, limit: 2 }), context)
    assert.strictEqual(start.started.tool.case, "readToolCall")
    const { exec, run } = expectExec(start.step)
    assert.strictEqual(exec.case, "readArgs")
    if (exec.case !== "readArgs") return
    assert.strictEqual(exec.value.path, "src/a.ts")
    assert.strictEqual(exec.value.offset, 10)
    assert.strictEqual(exec.value.limit, 2)
    assert.strictEqual(exec.value.toolCallId, "call_1")
    const outcome = expectDone(onExecReply(run, reply({
      case: "readResult",
      value: create(ReadResultSchema, { result: { case: "success", value: { path: "src/a.ts", output: { case: "content", value: "x\ny\n" }, totalLines: 40, rangeApplied: true } } })
    })))
    assert.strictEqual(textOf(outcome), "    10|x\n    11|y")
    assert.isFalse(outcome.message.isError)
    assert.strictEqual(outcome.message.toolCallId, "call_1")
    const typed = outcome.cursor.tool
    assert.strictEqual(typed.case, "readToolCall")
    if (typed.case !== "readToolCall") return
    assert.strictEqual(typed.value.result?.result.case, "success")
    assert.strictEqual(outcome.cursor.toolCallId, "call_1")
  })

  it("a missing file is an error result for the model and a typed error for the UI", () => {
    const { run } = expectExec(startTool(call("Read", { path: "nope.ts" }), context).step)
    const outcome = expectDone(onExecReply(run, reply({ case: "readResult", value: create(ReadResultSchema, { result: { case: "fileNotFound", value: {} } }) })))
    assert.isTrue(outcome.message.isError)
    assert.include(textOf(outcome), "nope.ts")
    const typed = outcome.cursor.tool
    assert.strictEqual(typed.case === "readToolCall" ? typed.value.result?.result.case : undefined, "error")
  })
})

describe("Shell", () => {
  it("streams stdout and stderr as tool_call_delta and ends with the exit code", () => {
    const start = startTool(call("Shell", { command: "npm test", working_directory: "/w", description: "run tests" }), context)
    const { exec, run } = expectExec(start.step)
    assert.strictEqual(exec.case, "shellStreamArgs")
    if (exec.case !== "shellStreamArgs") return
    assert.strictEqual(exec.value.command, "npm test")
    assert.strictEqual(exec.value.timeout, 30_000)
    assert.strictEqual(exec.value.timeoutBehavior, TimeoutBehavior.BACKGROUND)
    assert.strictEqual(exec.value.hardTimeout, 86_400_000)
    assert.strictEqual(exec.value.fileOutputThresholdBytes, 40_000n)
    assert.isTrue(exec.value.closeStdin)
    assert.strictEqual(start.started.tool.case === "shellToolCall" ? start.started.tool.value.description : "", "run tests")

    let step = onExecReply(run, shellEvent({ case: "start", value: {} }))
    assert.strictEqual(step._tag, "Continue")
    assert.isUndefined(step._tag === "Continue" ? step.delta : "x")
    step = onExecReply(step._tag === "Continue" ? step.run : run, shellEvent({ case: "stdout", value: { data: "ok 1\n" } }))
    assert.strictEqual(step._tag, "Continue")
    if (step._tag !== "Continue") return
    const delta = step.delta?.delta
    assert.strictEqual(delta?.case, "shellToolCallDelta")
    if (delta?.case === "shellToolCallDelta") assert.deepStrictEqual([delta.value.delta.case, delta.value.delta.value?.content], ["stdout", "ok 1\n"])
    step = onExecReply(step.run, shellEvent({ case: "stderr", value: { data: "warn\n" } }))
    if (step._tag !== "Continue") return assert.fail("expected Continue")
    const outcome = expectDone(onExecReply(step.run, shellEvent({ case: "exit", value: { code: 0, cwd: "/w" } })))
    assert.strictEqual(textOf(outcome), "Exit code: 0\nok 1\nwarn\n")
    assert.isFalse(outcome.message.isError)
    const typed = outcome.cursor.tool
    if (typed.case !== "shellToolCall") return assert.fail("expected a shell call")
    const result = typed.value.result?.result
    assert.strictEqual(result?.case, "success")
    if (result?.case === "success") {
      assert.strictEqual(result.value.stdout, "ok 1\n")
      assert.strictEqual(result.value.stderr, "warn\n")
      assert.strictEqual(result.value.exitCode, 0)
    }
  })

  it("a non-zero exit is a failure result", () => {
    const { run } = expectExec(startTool(call("Shell", { command: "false" }), context).step)
    const outcome = expectDone(onExecReply(run, shellEvent({ case: "exit", value: { code: 1 } })))
    assert.isTrue(outcome.message.isError)
    const typed = outcome.cursor.tool
    assert.strictEqual(typed.case === "shellToolCall" ? typed.value.result?.result.case : undefined, "failure")
  })

  it("a backgrounded command is done, and says that AwaitShell waits for it and WriteShellStdin types into it", () => {
    const { run } = expectExec(startTool(call("Shell", { command: "npm run dev", block_until_ms: 1000 }), context).step)
    let step = onExecReply(run, shellEvent({ case: "stdout", value: { data: "listening\n" } }))
    if (step._tag !== "Continue") return assert.fail("expected Continue")
    const outcome = expectDone(onExecReply(step.run, shellEvent({ case: "backgrounded", value: { shellId: 7, command: "npm run dev" } })))
    assert.strictEqual(
      textOf(outcome),
      "The command is still running in the background (shell id 7). AwaitShell with shell_id 7 waits for it and reads its output; WriteShellStdin with shell_id 7 types into it. Output so far:\nlistening\n"
    )
    assert.isFalse(outcome.message.isError)
  })

  it("a rejected command is an error for the model", () => {
    const { run } = expectExec(startTool(call("Shell", { command: "rm -rf /" }), context).step)
    const outcome = expectDone(onExecReply(run, shellEvent({ case: "rejected", value: { command: "rm -rf /", reason: "no" } })))
    assert.isTrue(outcome.message.isError)
  })
})

describe("StrReplace and Write", () => {
  const before = "one\ntwo\nthree\n"

  it("reads, applies the replacement on the server, writes, and reports a diff", () => {
    const start = startTool(call("StrReplace", { path: "/w/f.txt", old_string: "two", new_string: "2\n2b" }), context)
    assert.strictEqual(start.started.tool.case, "editToolCall")
    const read = expectExec(start.step)
    assert.strictEqual(read.exec.case, "readArgs")
    const write = expectExec(onExecReply(read.run, reply({
      case: "readResult",
      value: create(ReadResultSchema, { result: { case: "success", value: { path: "/w/f.txt", output: { case: "content", value: before } } } })
    })))
    assert.strictEqual(write.exec.case, "writeArgs")
    if (write.exec.case !== "writeArgs") return
    assert.strictEqual(write.exec.value.fileText, "one\n2\n2b\nthree\n")
    assert.isTrue(write.exec.value.returnFileContentAfterWrite)
    const outcome = expectDone(onExecReply(write.run, reply({
      case: "writeResult",
      value: create(WriteResultSchema, { result: { case: "success", value: { path: "/w/f.txt", linesCreated: 4 } } })
    })))
    assert.strictEqual(textOf(outcome), `Edited /w/f.txt (+2 -1). ${LINTS_HINT}`)
    assert.strictEqual(LINTS_HINT, "Run ReadLints on it to see any problems the change introduced.")
    const typed = outcome.cursor.tool
    if (typed.case !== "editToolCall") return assert.fail("expected an edit call")
    const result = typed.value.result?.result
    if (result?.case !== "success") return assert.fail("expected success")
    assert.strictEqual(result.value.linesAdded, 2)
    assert.strictEqual(result.value.linesRemoved, 1)
    assert.strictEqual(result.value.beforeFullFileContent, before)
    assert.strictEqual(result.value.afterFullFileContent, "one\n2\n2b\nthree\n")
    assert.strictEqual(result.value.diffString, "--- a//w/f.txt\n+++ b//w/f.txt\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n+2b\n three\n")
  })

  it("old_string that is missing or not unique is an error and nothing is written", () => {
    for (const [text, expected] of [["zzz", "not found"], ["o", "occurs"]] as const) {
      const { run } = expectExec(startTool(call("StrReplace", { path: "f", old_string: text, new_string: "x" }), context).step)
      const outcome = expectDone(onExecReply(run, reply({
        case: "readResult",
        value: create(ReadResultSchema, { result: { case: "success", value: { output: { case: "content", value: before } } } })
      })))
      assert.isTrue(outcome.message.isError)
      assert.include(textOf(outcome), expected)
    }
  })

  it("replace_all replaces every occurrence", () => {
    const applied = applyChange({ kind: "replace", oldString: "o", newString: "0", replaceAll: true }, before)
    assert.isTrue(Either.isRight(applied) && applied.right === "0ne\ntw0\nthree\n")
  })

  it("a truncated read is never written back", () => {
    const { run } = expectExec(startTool(call("StrReplace", { path: "big.txt", old_string: "one", new_string: "1" }), context).step)
    const outcome = expectDone(onExecReply(run, reply({
      case: "readResult",
      value: create(ReadResultSchema, { result: { case: "success", value: { output: { case: "content", value: before }, truncated: true, totalLines: 90_000 } } })
    })))
    assert.isTrue(outcome.message.isError)
    assert.include(textOf(outcome), "only part of the file")
  })

  it("Write creates a missing file", () => {
    const { run } = expectExec(startTool(call("Write", { path: "new.txt", contents: "hello\n" }), context).step)
    const write = expectExec(onExecReply(run, reply({ case: "readResult", value: create(ReadResultSchema, { result: { case: "fileNotFound", value: {} } }) })))
    const outcome = expectDone(onExecReply(write.run, reply({ case: "writeResult", value: create(WriteResultSchema, { result: { case: "success", value: { path: "new.txt" } } }) })))
    assert.strictEqual(textOf(outcome), `Created new.txt (+1 -0). ${LINTS_HINT}`)
  })

  it("a write the client refuses is a typed edit error", () => {
    const { run } = expectExec(startTool(call("Write", { path: "ro.txt", contents: "x" }), context).step)
    const write = expectExec(onExecReply(run, reply({ case: "readResult", value: create(ReadResultSchema, { result: { case: "fileNotFound", value: {} } }) })))
    const outcome = expectDone(onExecReply(write.run, reply({ case: "writeResult", value: create(WriteResultSchema, { result: { case: "permissionDenied", value: {} } }) })))
    assert.isTrue(outcome.message.isError)
    const typed = outcome.cursor.tool
    assert.strictEqual(typed.case === "editToolCall" ? typed.value.result?.result.case : undefined, "writePermissionDenied")
  })
})

describe("invalid arguments and odd replies", () => {
  it("arguments that are not JSON end the call with an error the model can read", () => {
    const start = startTool(call("Read", "{\"path\": "), context)
    const outcome = expectDone(start.step)
    assert.isTrue(outcome.message.isError)
    assert.include(textOf(outcome), "Invalid arguments for Read")
    const typed = outcome.cursor.tool
    assert.strictEqual(typed.case === "readToolCall" ? typed.value.result?.result.case : undefined, "error")
  })

  it("a missing required field is an error, not an exec", () => {
    assert.strictEqual(startTool(call("Shell", { cmd: "ls" }), context).step._tag, "Done")
    assert.strictEqual(startTool(call("StrReplace", { path: "a", old_string: "x", new_string: "x" }), context).step._tag, "Done")
  })

  it("an unknown tool name is an error result", () => {
    const outcome = expectDone(startTool(call("Teleport", {}), context).step)
    assert.isTrue(outcome.message.isError)
    assert.include(textOf(outcome), "Unknown tool")
  })

  it("a reply of the wrong kind, or a client throw, ends the call with an error", () => {
    const { run } = expectExec(startTool(call("Read", { path: "a" }), context).step)
    assert.isTrue(expectDone(onExecReply(run, reply({ case: "lsResult", value: create(LsResultSchema, {}) }))).message.isError)
    assert.isTrue(expectDone(onExecThrow(run, "boom")).message.isError)
  })
})

describe("Grep, Glob, Ls, Delete", () => {
  it("Grep passes the options through and formats content matches", () => {
    const { exec, run } = expectExec(startTool(call("Grep", { pattern: "foo", glob: "*.ts", case_insensitive: true, head_limit: 5 }), context).step)
    if (exec.case !== "grepArgs") return assert.fail("expected grep_args")
    assert.deepStrictEqual([exec.value.pattern, exec.value.glob, exec.value.caseInsensitive, exec.value.headLimit, exec.value.outputMode], ["foo", "*.ts", true, 5, "content"])
    const outcome = expectDone(onExecReply(run, reply({
      case: "grepResult",
      value: create(GrepResultSchema, {
        result: {
          case: "success",
          value: {
            pattern: "foo",
            workspaceResults: {
              "/w": { result: { case: "content", value: { matches: [{ file: "a.ts", matches: [{ lineNumber: 3, content: "foo()" }] }] } } }
            }
          }
        }
      })
    })))
    assert.strictEqual(textOf(outcome), "a.ts:\n3:foo()")
  })

  it("Glob runs as a files_with_matches grep with an empty pattern and returns a typed glob result", () => {
    const { exec, run } = expectExec(startTool(call("Glob", { glob_pattern: "**/*.md", target_directory: "/w" }), context).step)
    if (exec.case !== "grepArgs") return assert.fail("expected grep_args")
    assert.deepStrictEqual([exec.value.pattern, exec.value.glob, exec.value.path, exec.value.outputMode], ["", "**/*.md", "/w", "files_with_matches"])
    const outcome = expectDone(onExecReply(run, reply({
      case: "grepResult",
      value: create(GrepResultSchema, { result: { case: "success", value: { workspaceResults: { "/w": { result: { case: "files", value: { files: ["/w/README.md", "/w/a.md"] } } } } } } })
    })))
    assert.strictEqual(textOf(outcome), "/w/README.md\n/w/a.md")
    const typed = outcome.cursor.tool
    if (typed.case !== "globToolCall" || typed.value.result?.result.case !== "success") return assert.fail("expected glob success")
    assert.strictEqual(typed.value.result.result.value.totalFiles, 2)
  })

  it("Ls renders the directory tree", () => {
    const { run } = expectExec(startTool(call("Ls", { path: "/w" }), context).step)
    const outcome = expectDone(onExecReply(run, reply({
      case: "lsResult",
      value: create(LsResultSchema, {
        result: { case: "success", value: { directoryTreeRoot: { absPath: "/w", childrenDirs: [{ absPath: "/w/src", childrenFiles: [{ name: "a.ts" }] }], childrenFiles: [{ name: "package.json" }] } } }
      })
    })))
    assert.strictEqual(textOf(outcome), "/w/\n  - src/\n    - a.ts\n  - package.json")
  })

  it("Delete reports success and failure", () => {
    const { exec, run } = expectExec(startTool(call("Delete", { path: "/w/x" }), context).step)
    assert.strictEqual(exec.case, "deleteArgs")
    assert.isFalse(expectDone(onExecReply(run, reply({ case: "deleteResult", value: create(DeleteResultSchema, { result: { case: "success", value: { path: "/w/x" } } }) }))).message.isError)
    assert.isTrue(expectDone(onExecReply(run, reply({ case: "deleteResult", value: create(DeleteResultSchema, { result: { case: "fileNotFound", value: {} } }) }))).message.isError)
  })
})

describe("MCP and TodoWrite", () => {
  it("an MCP call goes out with the run request's names and JSON args, and its text comes back", () => {
    const { exec, run } = expectExec(startTool(call(mcpModelName(mcp), { query: "bug", page: 2, flags: [true, null] }), context).step)
    if (exec.case !== "mcpArgs") return assert.fail("expected mcp_args")
    assert.deepStrictEqual([exec.value.name, exec.value.providerIdentifier, exec.value.toolName], ["github-search", "github", "search_issues"])
    assert.deepStrictEqual(mcpArgsJson(exec.value.args), { query: "bug", page: 2, flags: [true, null] })
    const outcome = expectDone(onExecReply(run, reply({
      case: "mcpResult",
      value: create(McpResultSchema, { result: { case: "success", value: { content: [{ content: { case: "text", value: { text: "3 issues" } } }] } } })
    })))
    assert.strictEqual(textOf(outcome), "3 issues")
    assert.strictEqual(outcome.cursor.tool.case, "mcpToolCall")
  })

  it("TodoWrite is done on the server and merges by id", () => {
    const first = expectDone(startTool(call("TodoWrite", { todos: [{ id: "a", content: "A", status: "pending" }, { id: "b", content: "B", status: "pending" }] }), context).step)
    assert.deepStrictEqual(first.todos?.map((todo) => todo.id), ["a", "b"])
    const second = expectDone(startTool(call("TodoWrite", { todos: [{ id: "b", content: "B", status: "completed" }, { id: "c", content: "C", status: "in_progress" }], merge: true }), { ...context, todos: first.todos ?? [] }).step)
    assert.deepStrictEqual(second.todos?.map((todo) => [todo.id, todo.status]), [["a", TodoStatus.PENDING], ["b", TodoStatus.COMPLETED], ["c", TodoStatus.IN_PROGRESS]])
    const typed = second.cursor.tool
    if (typed.case !== "updateTodosToolCall" || typed.value.result?.result.case !== "success") return assert.fail("expected todo success")
    assert.strictEqual(typed.value.result.result.value.totalCount, 3)
    assert.isTrue(typed.value.result.result.value.wasMerge)
  })
})

describe("unifiedDiff", () => {
  it("counts lines and shows hunks with context", () => {
    const before = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`).join("\n") + "\n"
    const after = before.replace("line 2\n", "line two\n").replace("line 18\n", "")
    const diff = unifiedDiff("f", before, after)
    assert.strictEqual(diff.added, 1)
    assert.strictEqual(diff.removed, 2)
    assert.include(diff.text, "@@ -1,5 +1,5 @@\n line 1\n-line 2\n+line two\n line 3")
    assert.include(diff.text, "@@ -15,6 +15,5 @@\n line 15\n line 16\n line 17\n-line 18\n line 19\n line 20\n")
  })

  it("is empty for equal contents", () => {
    assert.deepStrictEqual(unifiedDiff("f", "a\n", "a\n"), { text: "", added: 0, removed: 0 })
  })
})
