/** For a test file that runs commands in process: no `BYOK_*` variable of the developer's own steers them, and the environment is restored after each test. */
import { afterEach, beforeEach } from "@effect/vitest"

export const isolateByokEnv = (): void => {
  const saved = { ...process.env }
  beforeEach(() => {
    for (const name of Object.keys(process.env)) if (name.startsWith("BYOK_")) delete process.env[name]
  })
  afterEach(() => {
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name]
    Object.assign(process.env, saved)
  })
}
