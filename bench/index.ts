/**
 * `npm run bench` runs every benchmark and prints its table; `npm run bench -- NAME [NAME...]`
 * runs the named ones. Each prints medians over several runs: read them with the machine's
 * noise in mind (2 shared cores), and never assert them in a test.
 */
import { Effect } from "effect"
import * as Ack from "./ack.js"
import * as Body from "./body.js"
import * as Cost from "./cost.js"
import * as Drift from "./drift.js"
import * as First from "./first.js"
import * as Latency from "./latency.js"
import * as Memory from "./memory.js"
import * as Proxy from "./proxy.js"
import * as ProxyLeaves from "./proxyLeaves.js"
import * as Segments from "./segments.js"
import * as Start from "./start.js"
import * as Soak from "./soak.js"
import * as Sse from "./sse.js"
import * as Store from "./store.js"
import * as Tab from "./tab.js"
import * as Team from "./team.js"
import * as Instances from "./instances.js"
import * as Throughput from "./throughput.js"

const benches: Record<string, () => Promise<string>> = {
  store: async () => (await Store.run({ print: false })).markdown,
  segments: async () => (await Segments.run()).markdown,
  body: async () => Body.run().markdown,
  drift: async () => Drift.run().markdown,
  sse: async () => (await Effect.runPromise(Sse.run())).markdown,
  latency: async () => (await Latency.run()).markdown,
  first: async () => (await First.run()).markdown,
  throughput: async () => (await Throughput.run()).markdown,
  ack: async () => (await Ack.run()).markdown,
  memory: async () => (await Memory.run({ afterSweep: true })).markdown,
  cost: async () => (await Cost.run()).markdown,
  start: async () => (await Start.run()).markdown,
  proxy: async () => (await Proxy.run()).markdown,
  proxyLeaves: async () => (await ProxyLeaves.run()).markdown,
  tab: async () => (await Tab.run()).markdown,
  team: async () => (await Team.run()).markdown,
  instances: async () => (await Instances.run()).markdown,
  // Ten minutes: last, so the figures above come first.
  soak: async () => (await Soak.run()).markdown
}

const wanted = process.argv.slice(2)
const unknown = wanted.filter((name) => !(name in benches))
if (unknown.length > 0) {
  console.error(`unknown benchmark ${unknown.join(", ")}; known: ${Object.keys(benches).join(", ")}`)
  process.exit(2)
}
console.log(`# cursor-byok benchmarks (${new Date().toISOString().slice(0, 10)}, Node ${process.version})\n`)
for (const name of wanted.length > 0 ? wanted : Object.keys(benches)) {
  console.log(`## ${name}\n`)
  console.log(await benches[name]!())
  console.log("")
}
