/**
 * The installation's CA: name-constrained, path length 0, its key the user's only; a leaf inside
 * the constraints verifies, one outside them (signed with the CA's own key) fails in Node's TLS
 * and in `openssl verify`; a corrupt, incomplete or foreign CA is reported and never replaced.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync, spawnSync } from "node:child_process"
import { X509Certificate } from "node:crypto"
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import * as Tls from "node:tls"
import * as Ca from "../../src/hookup/Ca.js"
import { tempDirectory } from "../support/Transcripts.js"

const provided = <A, E>(effect: Effect.Effect<A, E, import("@effect/platform/FileSystem").FileSystem>) => effect.pipe(Effect.provide(NodeContext.layer))

/** A TLS handshake with a server presenting `leaf`, the client trusting only `caPem`: "verified", or the error. */
const handshake = (leaf: Ca.Leaf, caPem: string, servername: string) =>
  Effect.promise(() =>
    new Promise<string>((resolve) => {
      const server = Tls.createServer({ cert: leaf.certPem, key: leaf.keyPem }, (socket) => socket.end())
      server.listen(0, "127.0.0.1", () => {
        const socket = Tls.connect({ host: "127.0.0.1", port: (server.address() as AddressInfo).port, servername, ca: [caPem] })
        const done = (outcome: string) => {
          socket.destroy()
          server.close()
          resolve(outcome)
        }
        socket.once("secureConnect", () => done("verified"))
        socket.once("error", (error: NodeJS.ErrnoException) => done(`${error.code}: ${error.message}`))
      })
    })
  )

const opensslVerify = (dir: string, caPem: string, leaf: Ca.Leaf) => {
  writeFileSync(join(dir, "verify-ca.pem"), caPem)
  writeFileSync(join(dir, "verify-leaf.pem"), leaf.certPem.split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n")
  const result = spawnSync("openssl", ["verify", "-CAfile", join(dir, "verify-ca.pem"), join(dir, "verify-leaf.pem")], { encoding: "utf8" })
  return { status: result.status, output: `${result.stdout}${result.stderr}` }
}

describe("the installation's CA", () => {
  it.scoped("is a CA with path length 0 and critical name constraints (cursor.sh and loopback only); its key is 0600", () =>
    Effect.gen(function*() {
      const home = yield* tempDirectory("cursor-byok-ca-")
      const authority = yield* provided(Ca.ensure(home))
      const text = execFileSync("openssl", ["x509", "-in", authority.certPath, "-noout", "-text"], { encoding: "utf8" })
      assert.match(text, /X509v3 Basic Constraints: critical\s+CA:TRUE, pathlen:0/)
      assert.match(text, /X509v3 Name Constraints: critical\s+Permitted:\s+DNS:cursor\.sh\s+DNS:localhost\s+IP:127\.0\.0\.0\/255\.0\.0\.0/)
      assert.strictEqual(statSync(join(home, Ca.CA_KEY_FILE)).mode & 0o777, 0o600)
      // Made once: a second ensure loads the same CA.
      const again = yield* provided(Ca.ensure(home))
      assert.strictEqual(again.fingerprint256, authority.fingerprint256)
    }))

  it.scoped("a leaf inside the constraints verifies; one outside them, signed with the CA's key, fails in Node's TLS and in openssl verify", () =>
    Effect.gen(function*() {
      const home = yield* tempDirectory("cursor-byok-ca-")
      const authority = yield* provided(Ca.ensure(home))
      const inside = yield* Ca.issueLeaf(authority, ["api2.cursor.sh"])
      assert.strictEqual(yield* handshake(inside, authority.certPem, "api2.cursor.sh"), "verified")
      assert.strictEqual(opensslVerify(home, authority.certPem, inside).status, 0)
      const loopback = yield* Ca.issueLeaf(authority, Ca.loopbackNames)
      assert.strictEqual(yield* handshake(loopback, authority.certPem, "localhost"), "verified")

      const outside = yield* Ca.signLeaf(authority, ["www.example.com"])
      const refusedHandshake = yield* handshake(outside, authority.certPem, "www.example.com")
      // Node's code for this verification error is UNSPECIFIED; the message is OpenSSL's.
      assert.include(refusedHandshake, "permitted subtree violation")
      const verified = opensslVerify(home, authority.certPem, outside)
      assert.notStrictEqual(verified.status, 0)
      assert.include(verified.output, "permitted subtree violation")
      // issueLeaf refuses to sign such a name at all.
      const refused = yield* Effect.flip(Ca.issueLeaf(authority, ["www.example.com"]))
      assert.strictEqual(refused._tag, "LeafRefused")
      assert.isTrue(new X509Certificate(outside.certPem).checkIssued(new X509Certificate(authority.certPem)))
    }))

  it.scoped("a corrupt, incomplete or foreign CA is reported with the fix, and nothing is overwritten", () =>
    Effect.gen(function*() {
      const home = yield* tempDirectory("cursor-byok-ca-")
      writeFileSync(join(home, Ca.CA_FILE), "not a certificate")
      writeFileSync(join(home, Ca.CA_KEY_FILE), "not a key")
      const corrupt = yield* Effect.flip(provided(Ca.ensure(home)))
      assert.strictEqual(corrupt.reason, "corrupt")
      assert.include(corrupt.message, "cursor-byok ca renew")
      assert.strictEqual(readFileSync(join(home, Ca.CA_FILE), "utf8"), "not a certificate")

      // A CA of someone else's: valid, but without our name constraints.
      execFileSync("openssl", [
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=another CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-keyout", join(home, Ca.CA_KEY_FILE), "-out", join(home, Ca.CA_FILE)
      ], { stdio: "ignore" })
      const foreignBytes = readFileSync(join(home, Ca.CA_FILE))
      const foreign = yield* Effect.flip(provided(Ca.ensure(home)))
      assert.strictEqual(foreign.reason, "foreign")
      assert.isTrue(readFileSync(join(home, Ca.CA_FILE)).equals(foreignBytes))

      // Ours, but the key of another.
      const other = yield* tempDirectory("cursor-byok-ca-")
      const ours = yield* provided(Ca.ensure(other))
      writeFileSync(join(home, Ca.CA_FILE), ours.certPem)
      const mismatched = yield* Effect.flip(provided(Ca.ensure(home)))
      assert.strictEqual(mismatched.reason, "foreign")
      assert.include(mismatched.message, "does not match its key")

      const incomplete = yield* tempDirectory("cursor-byok-ca-")
      writeFileSync(join(incomplete, Ca.CA_FILE), ours.certPem)
      const half = yield* Effect.flip(provided(Ca.ensure(incomplete)))
      assert.strictEqual(half.reason, "corrupt")
      assert.isFalse(existsSync(join(incomplete, Ca.CA_KEY_FILE)))
    }))

  it.scoped("renew moves the old files aside and makes a new CA", () =>
    Effect.gen(function*() {
      const home = yield* tempDirectory("cursor-byok-ca-")
      writeFileSync(join(home, Ca.CA_FILE), "broken")
      writeFileSync(join(home, Ca.CA_KEY_FILE), "broken")
      const renewed = yield* provided(Ca.renew(home))
      assert.strictEqual(yield* provided(Ca.load(home)).pipe(Effect.map((a) => a.fingerprint256)), renewed.fingerprint256)
      const kept = readdirSync(home).filter((name) => name.endsWith(".bak"))
      assert.strictEqual(kept.length, 2)
      assert.isTrue(kept.every((name) => readFileSync(join(home, name), "utf8") === "broken"))
    }))
})
