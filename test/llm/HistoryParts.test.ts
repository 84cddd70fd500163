/**
 * The remembered history parts (`src/llm/common/HistoryParts.ts`): a body built call after call
 * of one conversation, the memo warm, has the bytes of a body built from nothing, whatever the
 * history and whichever model each call goes to; and the memo is really used (a message object
 * is serialized once per conversation and target) and bounded. The head's tool list, made once
 * per list object and wire shape (`toolsOnWire`), is checked the same way.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import type { Message, RequestMessages } from "../../src/Llm.js"
import { emptyUsage } from "../../src/Llm.js"
import { transformForReplay } from "../../src/llm/Common.js"
import { CONVERSATIONS, itemsOf, partsMemo } from "../../src/llm/common/HistoryParts.js"
import { adapters, withoutImages } from "../../src/llm/Router.js"
import { apis, history, requestOf, settingsFor } from "../support/Histories.js"

let conversations = 0

describe("remembered history parts", () => {
  for (const api of apis) {
    const adapter = adapters[api]

    it.prop(
      `${api}: call after call of a conversation (the model and the compat settings switching at times), each body's history has the bytes of one built from nothing`,
      [
        history,
        FastCheck.array(FastCheck.constantFrom("model-a", "model-b", "gemini-3-pro"), { minLength: 12, maxLength: 12 }),
        FastCheck.array(FastCheck.constantFrom({}, { replayReasoning: "always" }, { replayReasoning: "never" }, { cacheControl: false }), { minLength: 7, maxLength: 7 })
      ],
      ([messages, models, compats]) => {
        const conversation = `conversation-${conversations++}`
        for (let n = 1; n <= messages.length; n++) {
          const model = models[n % models.length]!
          const compat = compats[n % compats.length]!
          // The same message objects from call to call, as the runner keeps them.
          const request = requestOf(messages.slice(0, n))
          const warm = adapter.buildBody(request, settingsFor(adapter, { model, compat, promptCacheKey: conversation }))
          // A clone shares no object with what the memos hold: everything in it is made afresh.
          const cold = adapter.buildBody(structuredClone(request), settingsFor(adapter, { model, compat, promptCacheKey: conversation }))
          // The head too: the tool list's JSON is remembered by the list object and the wire shape.
          expect(warm.head).toBe(cold.head)
          expect(warm.history).toBe(cold.history)
          expect(warm.tail).toBe(cold.tail)
        }
      },
      { fastCheck: { numRuns: 60 } }
    )
  }

  it("a message object is made once per conversation and target; another target, or a conversation pushed out, makes it again", () => {
    const message: Message = { role: "user", content: [{ type: "text", text: "hello" }] }
    let made = 0
    const make = () => {
      made++
      return itemsOf([`{"n":${made}}`])
    }
    const first = partsMemo("memo-a", "target-1").partsOf(message, make)
    expect(partsMemo("memo-a", "target-1").partsOf(message, make)).toBe(first)
    expect(made).toBe(1)
    // A structurally equal message is another object: made again.
    partsMemo("memo-a", "target-1").partsOf(structuredClone(message), make)
    expect(made).toBe(2)
    partsMemo("memo-a", "target-2").partsOf(message, make)
    expect(made).toBe(3)
    // The memo of target-2 replaced target-1's for that conversation.
    partsMemo("memo-a", "target-1").partsOf(message, make)
    expect(made).toBe(4)
    for (let i = 0; i < CONVERSATIONS; i++) partsMemo(`memo-other-${i}`, "target-1")
    partsMemo("memo-a", "target-1").partsOf(message, make)
    expect(made).toBe(5)
    // No conversation: nothing remembered.
    partsMemo(undefined, "target-1").partsOf(message, make)
    partsMemo(undefined, "target-1").partsOf(message, make)
    expect(made).toBe(7)
    const memo = partsMemo("memo-b", "target-1")
    expect(memo.systemOf("prompt", (text) => `${text}-${made++}`)).toBe("prompt-7")
    expect(memo.systemOf("prompt", (text) => `${text}-${made++}`)).toBe("prompt-7")
    expect(memo.systemOf("other", (text) => `${text}-${made++}`)).toBe("other-8")
  })

  it("a history the target replays as it is keeps its message objects, so the memo finds them", () => {
    const user: Message = { role: "user", content: [{ type: "text", text: "read a.ts" }] }
    const answer: Message = {
      role: "assistant",
      api: "openai-chat",
      provider: "p1",
      model: "model-a",
      usage: emptyUsage,
      stopReason: "toolUse",
      content: [{ type: "text", text: "reading" }, { type: "toolCall", id: "call_1", name: "read", arguments: "{}" }]
    }
    const result: Message = { role: "toolResult", toolCallId: "call_1", toolName: "read", content: [{ type: "text", text: "x" }], isError: false }
    const same = transformForReplay([user, answer, result], { api: "openai-chat", provider: "p1", model: "model-a", normalizeToolCallId: (id) => id })
    expect(same[0]).toBe(user)
    expect(same[1]).toBe(answer)
    expect(same[2]).toBe(result)
    // Another model's answer is rewritten (a new object); a renamed call id rewrites its result too.
    const other = transformForReplay([user, answer, result], { api: "anthropic", provider: "p2", model: "claude", normalizeToolCallId: (id) => `n_${id}` })
    expect(other[1]).not.toBe(answer)
    expect(other[2]).not.toBe(result)
    // Without images to strip, a model that takes none gets the same messages; with one, only that message is new.
    const image: Message = { role: "user", content: [{ type: "image", data: "AAAA", mimeType: "image/png" }] }
    const request: RequestMessages = { systemPrompt: "", tools: [], messages: [user, answer, result, image] }
    const stripped = withoutImages(request, "text-only")
    expect(stripped.messages.slice(0, 3)).toEqual([user, answer, result])
    stripped.messages.slice(0, 3).forEach((message, i) => expect(message).toBe(request.messages[i]))
    expect(stripped.messages[3]).not.toBe(image)
  })
})
