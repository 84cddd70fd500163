import { Command, FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Trust from "../../src/hookup/Trust.js"

const ca = "/home/ann/.cursor-byok/ca.pem"
const options = { commonName: "cursor-byok CA (box)", home: "/home/ann" }
const argvs = (commands: ReadonlyArray<Trust.TrustCommand>) => commands.map((c) => c.command.join(" "))

/** A throwaway self-signed certificate, made by a real openssl in a temp folder. */
const makeCertificate = (directory: string, name: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const exitCode = yield* Command.make(
      "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
      "-subj", `/CN=${name}`, "-days", "1", "-keyout", `${name}.key`, "-out", `${name}.pem`
    ).pipe(Command.workingDirectory(directory), Command.exitCode)
    assert.strictEqual(exitCode, 0)
    return yield* fs.readFileString(`${directory}/${name}.pem`)
  })

const noProbes: Trust.Probes = { readFile: () => Effect.succeed(undefined), exitCode: () => Effect.succeed(undefined) }

describe("Trust commands", () => {
  it("macOS trusts in the login keychain without sudo and removes by common name", () => {
    const trust = Trust.trustCommands("darwin", ca, { ...options, home: "/Users/ann" })
    assert.deepStrictEqual(argvs(trust), [`security add-trusted-cert -r trustRoot -p ssl -k /Users/ann/Library/Keychains/login.keychain-db ${ca}`])
    assert.isFalse(trust[0]!.needsAdmin)
    const untrust = Trust.untrustCommands("darwin", ca, { ...options, home: "/Users/ann" })
    assert.deepStrictEqual(untrust[1]!.command, ["security", "delete-certificate", "-c", "cursor-byok CA (box)", "/Users/ann/Library/Keychains/login.keychain-db"])
  })

  it("Windows uses the user's Root store", () => {
    assert.deepStrictEqual(Trust.trustCommands("win32", "C:\\ca.pem", options).map((c) => c.command), [["certutil", "-user", "-addstore", "Root", "C:\\ca.pem"]])
    assert.deepStrictEqual(Trust.untrustCommands("win32", "C:\\ca.pem", options).map((c) => c.command), [["certutil", "-user", "-delstore", "Root", "cursor-byok CA (box)"]])
  })

  it("Linux adds to NSS, and to the system store that exists with admin", () => {
    const nssOnly = Trust.trustCommands("linux", ca, options)
    assert.deepStrictEqual(nssOnly.map((c) => c.command), [["certutil", "-d", "sql:/home/ann/.pki/nssdb", "-A", "-t", "C,,", "-n", "cursor-byok CA (box)", "-i", ca]])
    assert.deepStrictEqual(Trust.trustCommands("linux", ca, { ...options, nssDb: "/x/nss" })[0]!.command[2], "sql:/x/nss")
    const debian = Trust.trustCommands("linux", ca, { ...options, systemStore: "debian" })
    assert.deepStrictEqual(argvs(debian).slice(1), [`cp ${ca} /usr/local/share/ca-certificates/cursor-byok.crt`, "update-ca-certificates"])
    assert.deepStrictEqual(debian.map((c) => c.needsAdmin), [false, true, true])
    const fedora = Trust.trustCommands("linux", ca, { ...options, systemStore: "fedora" })
    assert.deepStrictEqual(argvs(fedora).slice(1), [`cp ${ca} /etc/pki/ca-trust/source/anchors/cursor-byok.pem`, "update-ca-trust extract"])
    const undo = Trust.untrustCommands("linux", ca, { ...options, systemStore: "debian" })
    assert.deepStrictEqual(argvs(undo), [
      "certutil -d sql:/home/ann/.pki/nssdb -D -n cursor-byok CA (box)",
      "rm -f /usr/local/share/ca-certificates/cursor-byok.crt",
      "update-ca-certificates"
    ])
  })

  it("the system store is picked by which anchors folder exists", () => {
    assert.strictEqual(Trust.detectSystemStore((f) => f === "/usr/local/share/ca-certificates"), "debian")
    assert.strictEqual(Trust.detectSystemStore((f) => f === "/etc/pki/ca-trust/source/anchors"), "fedora")
    assert.strictEqual(Trust.detectSystemStore(() => false), "none")
  })

  it("formatCommand quotes arguments a shell would split, and NODE_EXTRA_CA_CERTS has a line per OS", () => {
    assert.strictEqual(Trust.formatCommand(["certutil", "-n", "cursor-byok CA (box)", "-t", "C,,"]), "certutil -n 'cursor-byok CA (box)' -t C,,")
    assert.strictEqual(Trust.formatCommand(["echo", "it's"]), "echo 'it'\\''s'")
    assert.strictEqual(Trust.formatCommand(["setx", "X", "C:\\Users\\A B\\ca.pem"], "win32"), "setx X \"C:\\Users\\A B\\ca.pem\"")
    assert.strictEqual(Trust.nodeExtraCaCerts("darwin", "/Users/a b/ca.pem").line, "launchctl setenv NODE_EXTRA_CA_CERTS '/Users/a b/ca.pem'")
    assert.strictEqual(Trust.nodeExtraCaCerts("win32", "C:\\ca.pem").line, "setx NODE_EXTRA_CA_CERTS C:\\ca.pem")
    assert.strictEqual(Trust.nodeExtraCaCerts("linux", ca).line, `export NODE_EXTRA_CA_CERTS=${ca}`)
  })
})

describe("Trust running and checking", () => {
  it.effect("runCommands reports exit codes and stderr, a missing program, and admin commands it did not run", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-trust-" })
      const marker = `${directory}/ran`
      const outcomes = yield* Trust.runCommands([
        { description: "fails", command: [process.execPath, "-e", "process.stderr.write('nope'); process.exit(3)"], needsAdmin: false },
        { description: "missing", command: ["cursor-byok-no-such-program"], needsAdmin: false },
        { description: "admin", command: [process.execPath, "-e", `require('fs').writeFileSync(${JSON.stringify(marker)}, '')`], needsAdmin: true }
      ], { admin: false })
      assert.deepStrictEqual(outcomes[0]!.result, { _tag: "Ran", exitCode: 3, stdout: "", stderr: "nope" })
      const missing = outcomes[1]!.result
      assert.strictEqual(missing._tag, "Failed")
      if (missing._tag === "Failed") assert.include(missing.message, "cursor-byok-no-such-program is not installed")
      assert.deepStrictEqual(outcomes[2]!.result, { _tag: "NeedsAdmin" })
      assert.isFalse(yield* fs.exists(marker))
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)))

  it.effect("on Linux the CA is trusted when the system bundle holds its DER", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-trust-" })
      const ours = yield* makeCertificate(directory, "ours")
      const other = yield* makeCertificate(directory, "other")
      const probes = yield* Trust.liveProbes
      const bundle = `${directory}/ca-certificates.crt`
      const check = Trust.isTrusted("linux", { path: `${directory}/ours.pem`, pem: ours }, probes, { bundles: [`${directory}/absent.crt`, bundle] })
      yield* fs.writeFileString(bundle, `# a bundle\n${other}\n`)
      assert.strictEqual(yield* check, "untrusted")
      yield* fs.writeFileString(bundle, `${other}\n${ours}`)
      assert.strictEqual(yield* check, "trusted")
      assert.strictEqual(yield* Trust.isTrusted("linux", { path: "", pem: ours }, noProbes), "unknown")
      assert.strictEqual(yield* Trust.isTrusted("linux", { path: "", pem: "not a certificate" }, probes, { bundles: [bundle] }), "unknown")
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)))

  it.effect("on macOS and Windows the verify command's exit status decides", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-trust-" })
      const pem = yield* makeCertificate(directory, "ours")
      const seen: Array<ReadonlyArray<string>> = []
      const exitingWith = (code: number | undefined): Trust.Probes => ({
        readFile: () => Effect.succeed(undefined),
        exitCode: (argv) => Effect.sync(() => (seen.push(argv), code))
      })
      assert.strictEqual(yield* Trust.isTrusted("darwin", { path: "/ca.pem", pem }, exitingWith(0)), "trusted")
      assert.deepStrictEqual(seen[0], ["security", "verify-cert", "-c", "/ca.pem", "-p", "ssl"])
      assert.strictEqual(yield* Trust.isTrusted("win32", { path: "C:\\ca.pem", pem }, exitingWith(1)), "untrusted")
      assert.deepStrictEqual(seen[1]!.slice(0, 4), ["certutil", "-user", "-verifystore", "Root"])
      assert.match(seen[1]![4]!, /^[0-9A-F]+$/)
      assert.strictEqual(yield* Trust.isTrusted("darwin", { path: "/ca.pem", pem }, exitingWith(undefined)), "unknown")
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)))
})
