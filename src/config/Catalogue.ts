/** The providers and models of the default catalogue, by the key variable each needs (data; `Config.defaultCatalogue` types it). */
export const catalogue = [
  {
    env: "OPENAI_API_KEY",
    provider: { id: "openai", api: "openai-responses", baseUrl: "https://api.openai.com/v1", apiKeyEnv: "OPENAI_API_KEY", headers: {}, extraBody: {}, compat: {} },
    models: [
      { id: "gpt-5", provider: "openai", upstreamModel: "gpt-5", contextWindow: 400000, thinking: { effort: "medium" }, supportsImages: true },
      { id: "gpt-4.1", provider: "openai", upstreamModel: "gpt-4.1", contextWindow: 1047576, supportsImages: true }
    ]
  },
  {
    env: "ANTHROPIC_API_KEY",
    provider: { id: "anthropic", api: "anthropic", baseUrl: "https://api.anthropic.com/v1", apiKeyEnv: "ANTHROPIC_API_KEY", headers: {}, extraBody: {}, compat: {} },
    models: [
      { id: "claude-sonnet-4-5", provider: "anthropic", upstreamModel: "claude-sonnet-4-5", contextWindow: 200000, maxOutputTokens: 32000, supportsImages: true },
      { id: "claude-sonnet-4-5-thinking", provider: "anthropic", upstreamModel: "claude-sonnet-4-5", contextWindow: 200000, maxOutputTokens: 32000, thinking: { budgetTokens: 8000 }, supportsImages: true }
    ]
  },
  {
    env: "GEMINI_API_KEY",
    provider: { id: "gemini", api: "gemini", baseUrl: "https://generativelanguage.googleapis.com/v1beta", apiKeyEnv: "GEMINI_API_KEY", headers: {}, extraBody: {}, compat: {} },
    models: [
      { id: "gemini-2.5-pro", provider: "gemini", upstreamModel: "gemini-2.5-pro", contextWindow: 1048576, supportsImages: true },
      { id: "gemini-2.5-flash", provider: "gemini", upstreamModel: "gemini-2.5-flash", contextWindow: 1048576, supportsImages: true }
    ]
  },
  {
    env: "DEEPSEEK_API_KEY",
    provider: { id: "deepseek", api: "openai-chat", baseUrl: "https://api.deepseek.com/v1", apiKeyEnv: "DEEPSEEK_API_KEY", headers: {}, extraBody: {}, compat: {} },
    models: [
      { id: "deepseek-chat", provider: "deepseek", upstreamModel: "deepseek-chat", contextWindow: 128000 },
      { id: "deepseek-reasoner", provider: "deepseek", upstreamModel: "deepseek-reasoner", contextWindow: 128000 }
    ]
  }
] as const
