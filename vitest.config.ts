import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/recorded/**", "node_modules/**"],
    setupFiles: ["test/setup.ts"],
    globalSetup: ["test/globalSetup.ts"],
    testTimeout: 30_000
  }
})
