/**
 * TodoWrite: the one tool the server runs itself. The conversation keeps the list; the call
 * finishes at once with the new list and its typed result.
 */
import { create } from "@bufbuild/protobuf"
import {
  TodoItemSchema,
  TodoStatus,
  UpdateTodosArgsSchema,
  UpdateTodosResultSchema,
  UpdateTodosToolCallSchema
} from "../gen/agent/v1/agent_pb.js"
import type { TodoItem } from "../gen/agent/v1/agent_pb.js"
import type { ToolCall } from "../Llm.js"
import type { TodoInput, TodoStatusInput } from "./Arguments.js"
import type { ToolStart } from "./Model.js"
import { done, resultMessage, withId } from "./Results.js"

const TODO_STATUS: Record<typeof TodoStatusInput.Type, TodoStatus> = {
  pending: TodoStatus.PENDING,
  in_progress: TodoStatus.IN_PROGRESS,
  completed: TodoStatus.COMPLETED,
  cancelled: TodoStatus.CANCELLED
}
const TODO_LABEL: Record<number, string> = { 1: "pending", 2: "in_progress", 3: "completed", 4: "cancelled" }

/** TodoWrite never leaves the server: the list lives in the conversation and the UI gets the typed result. */
export const todoWrite = (call: ToolCall, input: typeof TodoInput.Type, current: ReadonlyArray<TodoItem>): ToolStart => {
  const merge = input.merge ?? false
  const incoming = input.todos.map((todo) => create(TodoItemSchema, { id: todo.id, content: todo.content, status: TODO_STATUS[todo.status] }))
  let todos: Array<TodoItem>
  if (merge) {
    todos = current.map((item) => incoming.find((next) => next.id === item.id) ?? item)
    for (const item of incoming) if (!current.some((old) => old.id === item.id)) todos.push(item)
  } else {
    todos = incoming
  }
  const args = create(UpdateTodosArgsSchema, { todos: incoming, merge })
  const cursor = withId(call, {
    case: "updateTodosToolCall",
    value: create(UpdateTodosToolCallSchema, {
      args,
      result: create(UpdateTodosResultSchema, { result: { case: "success", value: { todos, totalCount: todos.length, wasMerge: merge } } })
    })
  })
  const text = `Todo list updated:\n${todos.map((todo) => `- [${TODO_LABEL[todo.status] ?? "pending"}] ${todo.content} (${todo.id})`).join("\n")}`
  return {
    started: withId(call, { case: "updateTodosToolCall", value: create(UpdateTodosToolCallSchema, { args }) }),
    step: done({ message: resultMessage(call, text, false), cursor, todos })
  }
}
