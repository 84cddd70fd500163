/**
 * Write and StrReplace: the file is read from the client, the change applied on the server
 * (`applyChange`), and the new content written back; the outcome carries the diff, and the
 * model is reminded that ReadLints can check the file.
 */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { Either } from "effect"
import { EditArgsSchema, EditResultSchema, EditToolCallSchema, WriteArgsSchema } from "../gen/agent/v1/agent_pb.js"
import { unifiedDiff } from "./Diff.js"
import { ToolRun, ToolStep } from "./Model.js"
import type { ExecReply, ToolRunOf } from "./Model.js"
import { describeFailure, done, resultMessage, withId } from "./Results.js"
import { unexpected } from "./Cards.js"

/** Ends an edit's success text where the mode offers ReadLints: one fixed sentence, so the bytes stay the same. */
export const LINTS_HINT = "Run ReadLints on it to see any problems the change introduced."

export const onEdit = (edit: ToolRunOf<"Edit">, reply: ExecReply): ToolStep => {
  const { call, change, path } = edit
  const editFailure = (text: string, result: NonNullable<MessageInitShape<typeof EditResultSchema>["result"]>): ToolStep =>
    done({
      message: resultMessage(call, text, true),
      cursor: withId(call, {
        case: "editToolCall",
        value: create(EditToolCallSchema, { args: create(EditArgsSchema, { path }), result: create(EditResultSchema, { result }) })
      })
    })
  if (edit.phase === "reading") {
    if (reply.case !== "readResult") return unexpected(edit, reply)
    const result = reply.value.result
    let before: string | undefined
    if (result.case === "success") {
      // Writing back a truncated read would cut the file: refuse instead.
      if (result.value.truncated) {
        const text = `Cannot edit ${path}: the client returned only part of the file (${result.value.totalLines} lines).`
        return editFailure(text, { case: "error", value: { path, error: text, modelVisibleError: text } })
      }
      if (result.value.output.case === "content") before = result.value.output.value
      else if (change.kind === "write") before = undefined
      else return editFailure(`Cannot edit ${path}: it is not a text file.`, { case: "error", value: { path, error: "binary file" } })
    } else if (result.case === "fileNotFound") {
      before = undefined
    } else if (result.case === "permissionDenied") {
      return editFailure(`Cannot read ${path}: permission denied.`, { case: "readPermissionDenied", value: {} })
    } else if (result.case === "rejected") {
      return editFailure(`The user rejected reading ${path}.`, { case: "rejected", value: {} })
    } else {
      const text = `Cannot read ${path}: ${describeFailure(result)}`
      return editFailure(text, { case: "error", value: { path, error: text } })
    }
    const applied = applyChange(change, before)
    if (Either.isLeft(applied)) {
      if (before === undefined) return editFailure(`File not found: ${path}`, { case: "fileNotFound", value: {} })
      return editFailure(applied.left, { case: "error", value: { path, error: applied.left, modelVisibleError: applied.left } })
    }
    const after = applied.right
    return ToolStep.Exec({
      run: ToolRun.Edit({ ...edit, phase: "writing", before, after }),
      exec: {
        case: "writeArgs",
        value: create(WriteArgsSchema, { path, fileText: after, toolCallId: call.id, returnFileContentAfterWrite: true })
      }
    })
  }
  if (reply.case !== "writeResult") return unexpected(edit, reply)
  const result = reply.value.result
  if (result.case !== "success") {
    const text = `Could not write ${path}: ${describeFailure(result)}`
    return result.case === "permissionDenied"
      ? editFailure(text, { case: "writePermissionDenied", value: {} })
      : result.case === "rejected"
      ? editFailure(`The user rejected the change to ${path}.`, { case: "rejected", value: {} })
      : editFailure(text, { case: "error", value: { path, error: text } })
  }
  const after = result.value.fileContentAfterWrite ?? edit.after
  const diff = unifiedDiff(path, edit.before ?? "", after)
  const cursor = withId(call, {
    case: "editToolCall",
    value: create(EditToolCallSchema, {
      args: create(EditArgsSchema, { path }),
      result: create(EditResultSchema, {
        result: {
          case: "success",
          value: {
            path: result.value.path || path,
            linesAdded: diff.added,
            linesRemoved: diff.removed,
            diffString: diff.text,
            ...(edit.before !== undefined ? { beforeFullFileContent: edit.before } : {}),
            afterFullFileContent: after
          }
        }
      })
    })
  })
  const verb = edit.before === undefined ? "Created" : "Edited"
  const text = `${verb} ${path} (+${diff.added} -${diff.removed}).${edit.suggestLints ? ` ${LINTS_HINT}` : ""}`
  return done({ message: resultMessage(call, text, false), cursor })
}

/** Applies a Write or StrReplace to the current content (undefined: the file does not exist). */
export const applyChange = (
  change: ToolRunOf<"Edit">["change"],
  before: string | undefined
): Either.Either<string, string> => {
  if (change.kind === "write") return Either.right(change.contents)
  if (before === undefined) return Either.left("the file does not exist")
  if (change.oldString === "") return Either.left("old_string is empty; use Write to create or replace a whole file")
  const count = before.split(change.oldString).length - 1
  if (count === 0) return Either.left("old_string was not found in the file; read it again and copy the text exactly")
  if (count > 1 && !change.replaceAll) {
    return Either.left(`old_string occurs ${count} times; add surrounding lines to make it unique, or set replace_all`)
  }
  return Either.right(
    change.replaceAll ? before.split(change.oldString).join(change.newString) : before.replace(change.oldString, () => change.newString)
  )
}
