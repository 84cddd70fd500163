#!/usr/bin/env node
// The `cursor-byok` command: the bundle `npm run build` makes (npm install runs it, via `prepare`).
process.setSourceMapsEnabled(true)
await import("../dist/main.js")
