/**
 * What the model reads of the tools that only look (Read, Grep, Glob, Ls) and of an MCP tool:
 * the client's reply as text (line-numbered, clipped), and as Cursor's typed result.
 */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { McpToolCallSchema, McpToolResultSchema, ReadToolCallSchema, ReadToolResultSchema } from "../gen/agent/v1/agent_pb.js"
import type { GrepResult, GrepUnionResult, LsDirectoryTreeNode, McpResult } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import { readToolArgs } from "./Arguments.js"
import type { ToolOutcome, ToolRunOf } from "./Model.js"
import { clip, describeFailure, resultMessage, withId } from "./Results.js"

const numbered = (content: string, firstLine: number): string => {
  const lines = content.split("\n")
  if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop()
  return lines.map((line, i) => `${String(firstLine + i).padStart(6)}|${line}`).join("\n")
}

export const readOutcome = (read: ToolRunOf<"Read">, result: import("../gen/agent/v1/agent_pb.js").ReadResult["result"]): ToolOutcome => {
  const { call, path } = read
  const args = readToolArgs(read)
  if (result.case === "success") {
    const success = result.value
    const content = success.output.case === "content" ? success.output.value : ""
    const firstLine = read.offset !== undefined && read.offset > 0 ? read.offset : 1
    const readRange = success.rangeApplied || read.offset !== undefined || read.limit !== undefined
      ? { startLine: firstLine, endLine: firstLine + Math.max(0, content.split("\n").length - 1) }
      : undefined
    const cursor = withId(call, {
      case: "readToolCall",
      value: create(ReadToolCallSchema, {
        args,
        result: create(ReadToolResultSchema, {
          result: {
            case: "success",
            value: {
              output: success.output.case === "data" ? { case: "data", value: success.output.value } : { case: "content", value: content },
              isEmpty: content === "" && success.output.case !== "data",
              exceededLimit: success.truncated,
              totalLines: Math.max(0, success.totalLines),
              fileSize: Number(success.fileSize),
              path: success.path || path,
              ...(readRange !== undefined ? { readRange } : {})
            }
          }
        })
      })
    })
    const text = success.output.case === "data"
      ? `${path} is a binary file (${success.fileSize} bytes).`
      : content === ""
      ? `${path} is empty.`
      : clip(numbered(content, firstLine)) + (success.truncated ? `\n(truncated: the file has ${success.totalLines} lines; read on with offset)` : "")
    return { message: resultMessage(call, text, false), cursor }
  }
  const text = result.case === "fileNotFound" ? `File not found: ${path}` : `Could not read ${path}: ${describeFailure(result)}`
  const cursor = withId(call, {
    case: "readToolCall",
    value: create(ReadToolCallSchema, { args, result: create(ReadToolResultSchema, { result: { case: "error", value: { errorMessage: text } } }) })
  })
  return { message: resultMessage(call, text, true), cursor }
}

/** Files named by a grep result, across the workspace roots it covers. */
export const filesOf = (result: GrepResult): Array<string> => {
  if (result.result.case !== "success") return []
  const unions: Array<GrepUnionResult> = Object.values(result.result.value.workspaceResults)
  const files: Array<string> = []
  for (const union of unions) {
    if (union.result.case === "files") files.push(...union.result.value.files)
    else if (union.result.case === "content") files.push(...union.result.value.matches.map((match) => match.file))
  }
  return files
}

export const formatGrep = (result: GrepResult): string => {
  if (result.result.case !== "success") return ""
  const lines: Array<string> = []
  for (const union of Object.values(result.result.value.workspaceResults)) {
    switch (union.result.case) {
      case "files":
        lines.push(...union.result.value.files)
        break
      case "count":
        lines.push(`${union.result.value.totalMatches} matches in ${union.result.value.totalFiles} files`)
        break
      case "content":
        for (const file of union.result.value.matches) {
          lines.push(`${file.file}:`)
          for (const match of file.matches) lines.push(`${match.lineNumber}${match.isContextLine ? "-" : ":"}${match.content}`)
        }
        break
      case undefined:
        break
    }
  }
  return lines.length === 0 ? "No matches." : clip(lines.join("\n"))
}

export const formatTree = (root: LsDirectoryTreeNode): string => {
  const lines: Array<string> = [`${root.absPath}/`]
  const walk = (node: LsDirectoryTreeNode, indent: string) => {
    for (const dir of node.childrenDirs) {
      const name = dir.absPath.startsWith(node.absPath) ? dir.absPath.slice(node.absPath.length).replace(/^\//, "") : dir.absPath
      lines.push(`${indent}- ${name}/`)
      walk(dir, indent + "  ")
    }
    for (const file of node.childrenFiles) lines.push(`${indent}- ${file.name}`)
  }
  walk(root, "  ")
  return clip(lines.join("\n"))
}

export const mcpOutcome = (call: ToolCall, args: import("../gen/agent/v1/agent_pb.js").McpArgs, reply: McpResult): ToolOutcome => {
  const result = reply.result
  if (result.case === "success") {
    const text = result.value.content
      .map((item) => (item.content.case === "text" ? item.content.value.text : "[non-text content]"))
      .join("\n")
    const structured = result.value.structuredContent
    const body = text !== "" ? text : structured !== undefined ? JSON.stringify(structured) : "(no content)"
    const cursor = withId(call, {
      case: "mcpToolCall",
      value: create(McpToolCallSchema, { args, result: create(McpToolResultSchema, { result: { case: "success", value: result.value } }) })
    })
    return { message: resultMessage(call, clip(body), result.value.isError), cursor }
  }
  const text = `The MCP tool failed: ${describeFailure(result)}`
  const typed: MessageInitShape<typeof McpToolResultSchema>["result"] = result.case === "rejected"
    ? { case: "rejected", value: {} }
    : result.case === "permissionDenied"
    ? { case: "permissionDenied", value: {} }
    : { case: "error", value: { error: text } }
  const cursor = withId(call, { case: "mcpToolCall", value: create(McpToolCallSchema, { args, result: create(McpToolResultSchema, { result: typed }) }) })
  return { message: resultMessage(call, text, true), cursor }
}
