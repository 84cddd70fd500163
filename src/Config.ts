/**
 * Configuration: an optional JSON file (`BYOK_CONFIG`, default `./byok.config.json` when it
 * exists) validated with Schema, then environment overrides (`BYOK_HOST`, `BYOK_PORT`,
 * `BYOK_DB`). Provider keys are read from the environment variable each provider names and
 * stay `Redacted`: they never reach a log, the database or the client. The file's schema and
 * loading are `config/File.ts`; its hosts, error texts and default catalogue beside it; the live
 * configuration and its reload `config/Live.ts`.
 */
export * from "./config/File.js"
export * from "./config/CaptureConfig.js"
