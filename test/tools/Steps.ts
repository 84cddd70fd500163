/** Helpers for driving one tool machine in a unit test: a model call, the client's replies, and the step checks. */
import { create } from "@bufbuild/protobuf"
import type { MessageInitShape } from "@bufbuild/protobuf"
import { assert } from "@effect/vitest"
import { ExecClientMessageSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../../src/Llm.js"
import type { ExecReply, ToolContext, ToolOutcome, ToolRun, ToolStep } from "../../src/Tools.js"

export const context: ToolContext = { mcpTools: [], todos: [], mode: "agent" }

export const call = (name: string, args: unknown, id = "call_1"): ToolCall => ({
  type: "toolCall",
  id,
  name,
  arguments: typeof args === "string" ? args : JSON.stringify(args)
})

export type ExecStep = Extract<ToolStep, { _tag: "Exec" }>

export const expectExec = (step: ToolStep): { run: ToolRun; exec: ExecStep["exec"] } => {
  assert.strictEqual(step._tag, "Exec")
  return step as ExecStep
}

export const expectDone = (step: ToolStep): ToolOutcome => {
  assert.strictEqual(step._tag, "Done")
  return (step as Extract<ToolStep, { _tag: "Done" }>).outcome
}

export const textOf = (outcome: ToolOutcome): string => {
  const block = outcome.message.content[0]
  assert.isDefined(block)
  return block!.type === "text" ? block!.text : ""
}

/** One exec answer from the client, as the Dialect hands it to the machine. */
export const reply = (init: NonNullable<MessageInitShape<typeof ExecClientMessageSchema>["message"]>): ExecReply =>
  create(ExecClientMessageSchema, { id: 1, message: init }).message as ExecReply
