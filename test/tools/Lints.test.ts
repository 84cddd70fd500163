/**
 * ReadLints as a machine: one diagnostics exec per path, in order; the model's lines (1-based
 * positions, errors first, at most LINTS_LIMIT with a note) and the typed ReadLintsToolCall;
 * every way a file can fail to be checked, a reply of the wrong kind, and bad arguments.
 */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { DiagnosticSeverity, DiagnosticsResultSchema, ReadResultSchema, WriteResultSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { DiagnosticSchema, ReadLintsToolCall } from "../../src/gen/agent/v1/agent_pb.js"
import { isIdempotent, kindOf, LINTS_HINT, LINTS_LIMIT, offers, onExecReply, onExecThrow, partialCursorToolCall, startTool } from "../../src/Tools.js"
import type { ToolOutcome, ToolRun, ToolStep } from "../../src/Tools.js"
import { call, context, expectDone, expectExec, reply, textOf } from "./Steps.js"

type DiagnosticInit = MessageInitShape<typeof DiagnosticSchema>
type ResultInit = NonNullable<MessageInitShape<typeof DiagnosticsResultSchema>["result"]>

const { ERROR, HINT, INFORMATION, UNSPECIFIED, WARNING } = DiagnosticSeverity

const at = (line: number, column: number) => ({ start: { line, column }, end: { line, column: column + 1 } })
const diagnostic = (severity: DiagnosticSeverity, line: number, message: string): DiagnosticInit => ({ severity, range: at(line, 0), message })
const success = (path: string, diagnostics: ReadonlyArray<DiagnosticInit>, totalDiagnostics = diagnostics.length): ResultInit => ({
  case: "success",
  value: { path, diagnostics: [...diagnostics], totalDiagnostics }
})
const answer = (result: ResultInit) => reply({ case: "diagnosticsResult", value: create(DiagnosticsResultSchema, { result }) })

/** Runs ReadLints on `paths`, answering each exec with the next of `results`; checks each exec asks for the next path. */
const runLints = (paths: ReadonlyArray<string>, results: ReadonlyArray<ResultInit>): ToolOutcome => {
  const start = startTool(call("ReadLints", { paths }), context)
  let step: ToolStep = start.step
  for (const [index, result] of results.entries()) {
    const { exec, run } = expectExec(step)
    if (exec.case !== "diagnosticsArgs") return assert.fail(`expected diagnostics_args, got ${exec.case}`)
    assert.strictEqual(exec.value.path, paths[index])
    step = onExecReply(run, answer(result))
  }
  return expectDone(step)
}

const typedOf = (outcome: ToolOutcome): ReadLintsToolCall => {
  const tool = outcome.cursor.tool
  if (tool.case !== "readLintsToolCall") return assert.fail(`expected a ReadLints call, got ${tool.case}`)
  assert.strictEqual(outcome.cursor.toolCallId, "call_1")
  return tool.value
}

describe("ReadLints", () => {
  it("asks for one file's diagnostics at a time, in the order given, each once; the typed call carries the paths", () => {
    const start = startTool(call("ReadLints", { paths: ["src/a.ts", "/w/b.ts", "src/a.ts"] }), context)
    assert.strictEqual(start.started.tool.case, "readLintsToolCall")
    if (start.started.tool.case === "readLintsToolCall") {
      assert.deepStrictEqual(start.started.tool.value.args?.paths, ["src/a.ts", "/w/b.ts"])
      assert.isUndefined(start.started.tool.value.result)
    }
    assert.strictEqual(start.started.toolCallId, "call_1")
    const first = expectExec(start.step)
    assert.deepStrictEqual(first.exec.case === "diagnosticsArgs" ? [first.exec.value.path, first.exec.value.toolCallId] : [], ["src/a.ts", "call_1"])
    const second = expectExec(onExecReply(first.run, answer(success("src/a.ts", []))))
    assert.deepStrictEqual(second.exec.case === "diagnosticsArgs" ? [second.exec.value.path, second.exec.value.toolCallId] : [], ["/w/b.ts", "call_1"])
    const outcome = expectDone(onExecReply(second.run, answer(success("/w/b.ts", []))))
    assert.strictEqual(textOf(outcome), "No problems in src/a.ts.\nNo problems in /w/b.ts.")
    assert.isFalse(outcome.message.isError)
    assert.strictEqual(outcome.message.toolName, "ReadLints")
  })

  it("one line per problem, positions 1-based, errors first, then warnings, then the rest, each in the client's order", () => {
    const outcome = runLints(["src/a.ts", "b.ts"], [
      success("src/a.ts", [
        { severity: WARNING, range: at(2, 4), message: "'x' is declared but never used.", source: "ts", code: "6133" },
        { severity: ERROR, range: at(9, 0), message: "Cannot find name 'foo'.", source: "ts", code: "2304" },
        { severity: HINT, range: at(0, 0), message: "Prefer const.", source: "eslint" },
        { severity: INFORMATION, message: "Type 'A' is not assignable:\n  property 'b' is missing." },
        { severity: ERROR, range: at(11, 2), message: "Type 'string' is not assignable to type 'number'.", source: "ts", code: "2322", isStale: true },
        { severity: UNSPECIFIED, range: at(3, 1), message: "odd", code: "X1" }
      ]),
      success("b.ts", [])
    ])
    assert.strictEqual(
      textOf(outcome),
      [
        "src/a.ts:10:1 error Cannot find name 'foo'. (ts 2304)",
        "src/a.ts:12:3 error Type 'string' is not assignable to type 'number'. (ts 2322) [stale]",
        "src/a.ts:3:5 warning 'x' is declared but never used. (ts 6133)",
        "src/a.ts:1:1 hint Prefer const. (eslint)",
        "src/a.ts info Type 'A' is not assignable: property 'b' is missing.",
        "src/a.ts:4:2 problem odd (X1)",
        "No problems in b.ts."
      ].join("\n")
    )
    assert.isFalse(outcome.message.isError)
    const typed = typedOf(outcome)
    assert.deepStrictEqual(typed.args?.paths, ["src/a.ts", "b.ts"])
    const result = typed.result?.result
    if (result?.case !== "success") return assert.fail("expected a typed success")
    assert.strictEqual(result.value.totalFiles, 2)
    assert.strictEqual(result.value.totalDiagnostics, 6)
    const [a, b] = result.value.fileDiagnostics
    assert.deepStrictEqual([a?.path, a?.diagnosticsCount, b?.path, b?.diagnosticsCount, b?.diagnostics.length], ["src/a.ts", 6, "b.ts", 0, 0])
    // The typed items keep the IDE's own (0-based) positions, sorted as the model reads them.
    assert.deepStrictEqual(a?.diagnostics.map((item) => [item.severity, item.range?.start?.line, item.range?.start?.column, item.code, item.isStale]), [
      [ERROR, 9, 0, "2304", false],
      [ERROR, 11, 2, "2322", true],
      [WARNING, 2, 4, "6133", false],
      [HINT, 0, 0, "", false],
      [INFORMATION, undefined, undefined, "", false],
      [UNSPECIFIED, 3, 1, "X1", false]
    ])
    assert.strictEqual(a?.diagnostics[0]?.source, "ts")
    assert.strictEqual(a?.diagnostics[0]?.message, "Cannot find name 'foo'.")
  })

  it("a file that could not be checked gets its own line, in place; the others are still told and typed", () => {
    const paths = ["gone.ts", "secret.ts", "no.ts", "why.ts", "blank.ts", "broken.ts", "empty.ts", "ok.ts"]
    const outcome = runLints(paths, [
      { case: "fileNotFound", value: { path: "gone.ts" } },
      { case: "permissionDenied", value: { path: "secret.ts" } },
      { case: "rejected", value: { path: "no.ts", reason: "" } },
      { case: "rejected", value: { path: "why.ts", reason: "not now" } },
      { case: "error", value: { path: "blank.ts", error: "" } },
      { case: "error", value: { path: "broken.ts", error: "Request timed out after 10 seconds" } },
      { case: undefined },
      success("ok.ts", [diagnostic(WARNING, 0, "unused")])
    ])
    assert.strictEqual(
      textOf(outcome),
      [
        "File not found: gone.ts",
        "Permission denied: secret.ts",
        "The user rejected reading the problems of no.ts.",
        "The user rejected reading the problems of why.ts: not now",
        "Could not read the problems of blank.ts: the client gave no reason",
        "Could not read the problems of broken.ts: Request timed out after 10 seconds",
        "Could not read the problems of empty.ts: the client sent no result",
        "ok.ts:1:1 warning unused"
      ].join("\n")
    )
    // One file was checked: the model got something, and the card shows that file.
    assert.isFalse(outcome.message.isError)
    const result = typedOf(outcome).result?.result
    if (result?.case !== "success") return assert.fail("expected a typed success")
    assert.deepStrictEqual(result.value.fileDiagnostics.map((file) => file.path), ["ok.ts"])
    assert.deepStrictEqual([result.value.totalFiles, result.value.totalDiagnostics], [1, 1])
  })

  it("when no file could be checked, the result is an error for the model and a typed error for the card", () => {
    const outcome = runLints(["gone.ts"], [{ case: "fileNotFound", value: { path: "gone.ts" } }])
    assert.strictEqual(textOf(outcome), "File not found: gone.ts")
    assert.isTrue(outcome.message.isError)
    const result = typedOf(outcome).result?.result
    assert.deepStrictEqual(result?.case === "error" ? result.value.errorMessage : undefined, "File not found: gone.ts")
  })

  it(`at most ${LINTS_LIMIT} problems are told, the errors of every file before any warning, with a note naming what was left out`, () => {
    const warnings = Array.from({ length: 150 }, (_, i) => diagnostic(WARNING, i, `w${i}`))
    const errors = Array.from({ length: 100 }, (_, i) => diagnostic(ERROR, i, `e${i}`))
    const outcome = runLints(["a.ts", "b.ts"], [success("a.ts", warnings), success("b.ts", errors)])
    const lines = textOf(outcome).split("\n")
    assert.strictEqual(lines.length, LINTS_LIMIT + 1)
    assert.deepStrictEqual(lines.slice(0, 2), ["a.ts:1:1 warning w0", "a.ts:2:1 warning w1"])
    assert.strictEqual(lines[99], "a.ts:100:1 warning w99")
    assert.deepStrictEqual(lines.slice(100, 101), ["b.ts:1:1 error e0"])
    assert.strictEqual(lines[199], "b.ts:100:1 error e99")
    assert.strictEqual(lines[200], "(Showing 200 of 250 problems, errors first. Not shown: a.ts (50).)")
    const result = typedOf(outcome).result?.result
    if (result?.case !== "success") return assert.fail("expected a typed success")
    assert.deepStrictEqual(result.value.fileDiagnostics.map((file) => [file.diagnostics.length, file.diagnosticsCount]), [[100, 150], [100, 100]])
    assert.strictEqual(result.value.totalDiagnostics, 250)
  })

  it("exactly the limit needs no note; one more, or a client that counted more than it sent, does", () => {
    const many = (n: number) => Array.from({ length: n }, (_, i) => diagnostic(ERROR, i, `e${i}`))
    const exact = textOf(runLints(["a.ts"], [success("a.ts", many(LINTS_LIMIT))]))
    assert.notInclude(exact, "Showing")
    assert.strictEqual(exact.split("\n").length, LINTS_LIMIT)
    const over = textOf(runLints(["a.ts"], [success("a.ts", many(LINTS_LIMIT + 1))]))
    assert.isTrue(over.endsWith("\n(Showing 200 of 201 problems, errors first. Not shown: a.ts (1).)"))
    assert.notInclude(over, "e200")
    const counted = runLints(["a.ts", "b.ts"], [success("a.ts", many(2), 5), success("b.ts", [], 3)])
    assert.strictEqual(textOf(counted), "a.ts:1:1 error e0\na.ts:2:1 error e1\n(Showing 2 of 8 problems, errors first. Not shown: a.ts (3), b.ts (3).)")
  })

  it("a reply of another kind, or a client throw, ends the call with a typed error; nothing more is asked", () => {
    const first = expectExec(startTool(call("ReadLints", { paths: ["a.ts", "b.ts"] }), context).step)
    const second: ToolRun = expectExec(onExecReply(first.run, answer(success("a.ts", [])))).run
    const wrong = expectDone(onExecReply(second, reply({ case: "readResult", value: create(ReadResultSchema, {}) })))
    assert.strictEqual(textOf(wrong), "The client answered ReadLints with an unexpected readResult.")
    assert.isTrue(wrong.message.isError)
    const typed = typedOf(wrong)
    assert.deepStrictEqual(typed.args?.paths, ["a.ts", "b.ts"])
    assert.strictEqual(typed.result?.result.case, "error")
    const thrown = expectDone(onExecThrow(second, "diagnostics unsupported"))
    assert.strictEqual(textOf(thrown), "The client failed to run ReadLints: diagnostics unsupported")
    assert.strictEqual(typedOf(thrown).result?.result.case, "error")
  })

  it("bad arguments end the call at once with a typed error: no paths, more than 20, an empty path, not a list", () => {
    for (const args of [{ paths: [] }, { paths: Array.from({ length: 21 }, (_, i) => `f${i}.ts`) }, { paths: [""] }, { paths: "a.ts" }, {}]) {
      const start = startTool(call("ReadLints", args), context)
      const outcome = expectDone(start.step)
      assert.isTrue(outcome.message.isError)
      assert.include(textOf(outcome), "Invalid arguments for ReadLints")
      assert.strictEqual(typedOf(outcome).result?.result.case, "error")
    }
    assert.include(textOf(expectDone(startTool(call("ReadLints", { paths: [] }), context).step)), "at least one file")
    assert.include(textOf(expectDone(startTool(call("ReadLints", { paths: Array.from({ length: 21 }, (_, i) => `f${i}`) }), context).step)), "at most 20")
    assert.strictEqual(expectExec(startTool(call("ReadLints", { paths: Array.from({ length: 20 }, (_, i) => `f${i}`) }), context).step).exec.case, "diagnosticsArgs")
  })

  it("offered after edits: in every mode that edits, a successful Write or StrReplace ends with the one fixed ReadLints hint", () => {
    for (const mode of ["agent", "debug", "multitask", "custom"] as const) {
      assert.isTrue(offers(mode, "readLints"), mode)
      const { run } = expectExec(startTool(call("StrReplace", { path: "n.ts", old_string: "a", new_string: "b" }), { ...context, mode }).step)
      const write = expectExec(onExecReply(run, reply({ case: "readResult", value: create(ReadResultSchema, { result: { case: "success", value: { output: { case: "content", value: "a\n" } } } }) })))
      const outcome = expectDone(onExecReply(write.run, reply({ case: "writeResult", value: create(WriteResultSchema, { result: { case: "success", value: { path: "n.ts" } } }) })))
      assert.strictEqual(textOf(outcome), `Edited n.ts (+1 -1). ${LINTS_HINT}`, mode)
    }
  })

  it("is read-only, so a restart may send it again; its card is known from the name alone", () => {
    assert.strictEqual(kindOf("ReadLints", []), "readLints")
    assert.isTrue(isIdempotent("readLints"))
    assert.strictEqual(partialCursorToolCall("ReadLints", []).tool.case, "readLintsToolCall")
  })
})
