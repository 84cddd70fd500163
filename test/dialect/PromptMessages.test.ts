/**
 * A history the client holds, translated: Cursor's prompt-message JSON (the shape this server
 * writes in its checkpoints, and the obvious variants: AI SDK 5's `input` / `output`, OpenAI's
 * `tool_calls` / `tool_call_id`, string content, inline JSON entries) into the neutral messages.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import * as Dialect from "../../src/Dialect.js"
import type { Message } from "../../src/Llm.js"

const encode = (json: unknown) => new TextEncoder().encode(JSON.stringify(json))

/** The checkpoint entries (blob ids) and the client's blob store for these messages. */
const held = (messages: ReadonlyArray<unknown>) => {
  const blobs = messages.map(encode)
  return {
    entries: blobs.map((blob) => Dialect.blobIdOf(blob)),
    fetched: new Map(blobs.map((blob) => [Dialect.bytesToHex(Dialect.blobIdOf(blob)), blob]))
  }
}

const importOf = (messages: ReadonlyArray<unknown>) => {
  const { entries, fetched } = held(messages)
  const imported = Dialect.importHistory(entries, fetched)
  assert.isTrue(Either.isRight(imported), Either.isLeft(imported) ? imported.left : "")
  return (imported as Either.Right<never, Dialect.Imported>).right
}

const roles = (messages: ReadonlyArray<Message>) => messages.map((m) => m.role)

describe("Importing the client's prompt messages", () => {
  it("reads back what this server's own checkpoints write, message for message", () => {
    const own: ReadonlyArray<Message> = [
      { role: "user", content: [{ type: "text", text: "read a.ts" }, { type: "image", data: "aGk=", mimeType: "image/png" }] },
      {
        role: "assistant",
        content: [{ type: "text", text: "Reading." }, { type: "toolCall", id: "c1", name: "Read", arguments: "{\"path\":\"a.ts\"}" }],
        api: "openai-chat", provider: "p", model: "m", usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0 }, stopReason: "toolUse"
      },
      { role: "toolResult", toolCallId: "c1", toolName: "Read", content: [{ type: "text", text: "export {}" }], isError: false }
    ]
    // Checkpoint.ts writes them; the client gives the same blobs back.
    const checkpoint = Dialect.projectCheckpoint({
      previous: undefined, requestId: "r", userMessage: undefined, turnMessages: [], transcript: own, cursorToolCalls: {},
      pendingToolCalls: [], todos: [], usedTokens: 0, maxTokens: 0, workspaceUris: [], mcpTools: []
    })
    const fetched = new Map(checkpoint.blobs.map((blob) => [Dialect.bytesToHex(blob.id), blob.data]))
    const imported = Dialect.importHistory(checkpoint.checkpoint.rootPromptMessagesJson, fetched)
    assert.isTrue(Either.isRight(imported))
    const messages = (imported as Either.Right<never, Dialect.Imported>).right.history.messages
    assert.deepStrictEqual(roles(messages), ["user", "assistant", "toolResult"])
    assert.deepStrictEqual(messages[0], own[0])
    assert.deepStrictEqual(messages[1]!.content, own[1]!.content)
    assert.deepStrictEqual(messages[2], own[2])
  })

  it("takes the leading system messages as the system prompt and the variants of each message", () => {
    const { history, notes } = importOf([
      { role: "system", content: "first rule" },
      { role: "developer", content: [{ type: "text", text: "second rule" }] },
      { role: "user", content: "plain string content" },
      { role: "assistant", content: [{ type: "reasoning", text: "hidden" }, { type: "tool-call", toolCallId: "a", toolName: "Ls", input: { path: "." } }] },
      { role: "tool", content: [{ type: "tool-result", toolCallId: "a", output: { type: "error-text", value: "denied" } }] },
      { role: "assistant", content: "", tool_calls: [{ id: "b", type: "function", function: { name: "Read", arguments: "{\"path\":\"x\"}" } }] },
      { role: "tool", tool_call_id: "b", content: "file x" },
      { role: "system", content: "a reminder later on" },
      { role: "user", content: [{ type: "file", mediaType: "image/jpeg", data: "data:image/jpeg;base64,AAAA" }, { type: "mystery" }] }
    ])
    assert.strictEqual(history.systemPrompt, "first rule\n\nsecond rule")
    assert.deepStrictEqual(roles(history.messages), ["user", "assistant", "toolResult", "assistant", "toolResult", "user", "user"])
    const [, first, denied, second, read, reminder, image] = history.messages
    assert.deepStrictEqual(first!.content, [{ type: "toolCall", id: "a", name: "Ls", arguments: "{\"path\":\".\"}" }])
    assert.deepStrictEqual([denied!.role === "toolResult" && denied!.toolName, denied!.role === "toolResult" && denied!.isError, denied!.content], ["Ls", true, [{ type: "text", text: "denied" }]])
    assert.deepStrictEqual(second!.content, [{ type: "toolCall", id: "b", name: "Read", arguments: "{\"path\":\"x\"}" }])
    assert.deepStrictEqual(read!.content, [{ type: "text", text: "file x" }])
    assert.deepStrictEqual(reminder!.content, [{ type: "text", text: "a reminder later on" }])
    assert.deepStrictEqual(image!.content, [{ type: "image", data: "AAAA", mimeType: "image/jpeg" }])
    assert.deepStrictEqual(notes, ["prompt message 9 of 9: a part of type mystery was left out"])
  })

  it("closes a tool call the history never answers and drops a result that answers none", () => {
    const { history } = importOf([
      { role: "user", content: "go" },
      { role: "tool", content: [{ type: "tool-result", toolCallId: "orphan", toolName: "Ls", result: "x" }] },
      { role: "assistant", content: [{ type: "tool-call", toolCallId: "open", toolName: "Shell", args: { command: "ls" } }] }
    ])
    assert.deepStrictEqual(roles(history.messages), ["user", "assistant", "toolResult"])
    const closing = history.messages[2]!
    assert.deepStrictEqual(closing.role === "toolResult" ? [closing.toolCallId, closing.isError, closing.content] : [], ["open", true, [{ type: "text", text: Dialect.UNANSWERED_RESULT }]])
  })

  it("accepts inline JSON entries (a peer server's checkpoints) beside blob ids", () => {
    const { entries, fetched } = held([{ role: "user", content: "by id" }])
    const imported = Dialect.importHistory([encode({ role: "system", content: "inline prompt" }), ...entries], fetched)
    assert.isTrue(Either.isRight(imported))
    const { history } = (imported as Either.Right<never, Dialect.Imported>).right
    assert.strictEqual(history.systemPrompt, "inline prompt")
    assert.deepStrictEqual(history.messages, [{ role: "user", content: [{ type: "text", text: "by id" }] }])
  })

  it("refuses, saying which and why: a blob not given back, one that does not match its id, one that is not a message", () => {
    const reasonOf = (entries: ReadonlyArray<Uint8Array>, fetched: ReadonlyMap<string, Uint8Array>) => {
      const imported = Dialect.importHistory(entries, fetched)
      assert.isTrue(Either.isLeft(imported), "imported")
      return (imported as Either.Left<string, never>).left
    }
    const { entries, fetched } = held([{ role: "user", content: "a" }, { role: "user", content: "b" }])
    const missing = new Map(fetched)
    missing.delete(Dialect.bytesToHex(entries[1]!))
    assert.match(reasonOf(entries, missing), /^prompt message 2 of 2 \(blob [0-9a-f]{12}…\) was not given back by the client$/)
    const tampered = new Map(fetched)
    tampered.set(Dialect.bytesToHex(entries[0]!), encode({ role: "user", content: "changed" }))
    assert.include(reasonOf(entries, tampered), "prompt message 1 of 2 (blob")
    assert.include(reasonOf(entries, tampered), "does not match its id")
    const narrator = held([{ role: "narrator", content: "x" }])
    assert.include(reasonOf(narrator.entries, narrator.fetched), "has a role this server does not know")
    const text = new TextEncoder().encode("{nope")
    const id = Dialect.blobIdOf(text)
    assert.strictEqual(reasonOf([id], new Map([[Dialect.bytesToHex(id), text]])), "prompt message 1 of 1 is not JSON")
  })
})
