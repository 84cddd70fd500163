/**
 * Builds the server bundle (`npm run build`: `dist/main.js`) once before any test file runs,
 * so that the tests that start the server as a child process run what `npm start` runs.
 */
import { execFileSync } from "node:child_process"

export default function setup(): void {
  execFileSync(process.platform === "win32" ? "npm.cmd" : "npm", ["run", "--silent", "build"], { stdio: "inherit" })
}
