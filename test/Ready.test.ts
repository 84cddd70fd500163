/** The start's lines say where Tab is answered: by Cursor, or here from which model and wire. */
import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { FileConfig, resolve } from "../src/Config.js"
import { readyLines } from "../src/Ready.js"

const configOf = (file: unknown) => resolve(Schema.decodeUnknownSync(FileConfig)(file), {})
const providers = [
  { id: "ollama", api: "openai-chat", baseUrl: "http://127.0.0.1:11434/v1" },
  { id: "claude", api: "anthropic", baseUrl: "https://api.anthropic.com/v1" }
]
const ports = { main: 8787, cleartext: undefined, tls: undefined, proxy: undefined }

describe("the start's Tab line", () => {
  it("off: answered by Cursor, and how to answer it here", () => {
    const lines = readyLines(configOf({ providers }), ports, true)
    expect(lines.find((line) => line.startsWith("Tab: "))).toBe("Tab: answered by Cursor (a `tab` section in the configuration answers it from your own model: see the README)")
  })
  it("on a FIM wire: the model, the wire and where", () => {
    const lines = readyLines(configOf({ providers, tab: { provider: "ollama", model: "qwen2.5-coder:7b" } }), ports, true)
    expect(lines).toContain("Tab: ollama/qwen2.5-coder:7b (openai-completions at http://127.0.0.1:11434/v1), answered here")
  })
  it("on a chat model: the model and chat", () => {
    const lines = readyLines(configOf({ providers, tab: { provider: "claude", model: "claude-haiku" } }), ports, true)
    expect(lines).toContain("Tab: claude/claude-haiku (chat), answered here")
  })
})
