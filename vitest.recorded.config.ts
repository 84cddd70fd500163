import { defineConfig } from "vitest/config"

// Replays the real provider recordings in ../shared/llm-fixtures (run by .ci/run when that folder exists).
export default defineConfig({
  test: {
    include: ["test/recorded/**/*.test.ts"],
    setupFiles: ["test/setup.ts"],
    testTimeout: 30_000
  }
})
