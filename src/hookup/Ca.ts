/**
 * The installation's certificate authority: made once per installation in `BYOK_HOME`, its key
 * readable by the user only, and constrained (a critical X.509 Name Constraints extension) to
 * `cursor.sh` and the loopback names the local HTTP/2 listener uses. A stolen key therefore
 * cannot impersonate any other site: TLS clients reject a leaf outside the permitted subtrees.
 *
 * Certificates are made with @peculiar/x509 (WebCrypto-based, typed, maintained with its ASN.1
 * schemas in @peculiar/asn1-x509, which carries the NameConstraints structure that Node's own
 * `X509Certificate` can read but not write). Keys are ECDSA P-256: fast to make, accepted by
 * every TLS stack Cursor runs on.
 */
import "reflect-metadata"
import { AsnConvert } from "@peculiar/asn1-schema"
import { GeneralName, GeneralSubtree, GeneralSubtrees, id_ce_nameConstraints, NameConstraints } from "@peculiar/asn1-x509"
import * as X509 from "@peculiar/x509"
import * as FileSystem from "@effect/platform/FileSystem"
import { Effect, Schema } from "effect"
import { createPrivateKey, randomBytes, webcrypto, X509Certificate } from "node:crypto"

type CryptoKey = webcrypto.CryptoKey
type CryptoKeyPair = webcrypto.CryptoKeyPair
import * as Os from "node:os"
import * as Path from "node:path"

X509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof X509.cryptoProvider.set>[0])

/** What the CA may sign: RFC 5280 name constraints, so `cursor.sh` covers every host under it. */
export const permitted = {
  dns: ["cursor.sh", "localhost"],
  ip: ["127.0.0.0/8", "::1/128"]
} as const

export const CA_FILE = "ca.pem"
export const CA_KEY_FILE = "ca-key.pem"

const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const
const DAY_MS = 86_400_000
const CA_VALIDITY_DAYS = 3650
export const LEAF_VALIDITY_DAYS = 30

export class CaError extends Schema.TaggedError<CaError>("cursor-byok/CaError")("CaError", {
  reason: Schema.Literal("missing", "unreadable", "corrupt", "foreign", "expired"),
  path: Schema.String,
  message: Schema.String
}) {}

/** The loaded authority: its certificate and key, and what `doctor` shows of it. */
export interface Authority {
  readonly certPem: string
  readonly keyPem: string
  readonly certPath: string
  readonly commonName: string
  readonly fingerprint256: string
  readonly serialNumber: string
  readonly notAfter: Date
  readonly signingKey: CryptoKey
  readonly certificate: X509.X509Certificate
}

/** A leaf certificate for a set of host names or addresses, with its key (PEM). */
export interface Leaf {
  readonly certPem: string
  readonly keyPem: string
  readonly names: ReadonlyArray<string>
  readonly notAfter: Date
}

const renewHint = (home: string) =>
  `run \`cursor-byok ca renew\` to make a new one (the old files are kept beside it as .bak; BYOK_HOME=${home}), then trust the new one again (\`cursor-byok setup --trust\`)`

const toPem = (der: ArrayBuffer, label: string) => X509.PemConverter.encode(der, label)

const serial = () => {
  const bytes = randomBytes(16)
  bytes[0] = bytes[0]! & 0x7f // a positive INTEGER
  return bytes.toString("hex")
}

const nameConstraintsExtension = () => {
  const subtree = (base: GeneralName) => new GeneralSubtree({ base })
  const value = new NameConstraints({
    permittedSubtrees: new GeneralSubtrees([
      ...permitted.dns.map((dNSName) => subtree(new GeneralName({ dNSName }))),
      ...permitted.ip.map((iPAddress) => subtree(new GeneralName({ iPAddress })))
    ])
  })
  return new X509.Extension(id_ce_nameConstraints, true, AsnConvert.serialize(value))
}

/** The permitted subtrees of a certificate's name constraints, as text, or undefined without a critical extension. */
export const constraintsOf = (certificate: X509.X509Certificate): ReadonlyArray<string> | undefined => {
  const extension = certificate.getExtension(id_ce_nameConstraints)
  if (extension === null || !extension.critical) return undefined
  const parsed = AsnConvert.parse(extension.value, NameConstraints)
  if (parsed.excludedSubtrees !== undefined && parsed.excludedSubtrees.length > 0) return undefined
  return (parsed.permittedSubtrees ?? []).map((tree) =>
    tree.base.dNSName !== undefined ? `dns:${tree.base.dNSName}` : tree.base.iPAddress !== undefined ? `ip:${tree.base.iPAddress}` : "other"
  )
}

const expectedConstraints = [...permitted.dns.map((name) => `dns:${name}`), ...permitted.ip.map((range) => `ip:${range}`)]

/** Makes a new CA (certificate and key as PEM). */
export const generate = (commonName = `cursor-byok CA (${Os.hostname()})`) =>
  Effect.promise(async () => {
    const keys = await webcrypto.subtle.generateKey(algorithm, true, ["sign", "verify"]) as CryptoKeyPair
    const now = Date.now()
    const certificate = await X509.X509CertificateGenerator.createSelfSigned({
      serialNumber: serial(),
      name: `CN=${commonName}, O=cursor-byok`,
      notBefore: new Date(now - DAY_MS),
      notAfter: new Date(now + CA_VALIDITY_DAYS * DAY_MS),
      keys,
      signingAlgorithm: algorithm,
      extensions: [
        new X509.BasicConstraintsExtension(true, 0, true),
        new X509.KeyUsagesExtension(X509.KeyUsageFlags.keyCertSign | X509.KeyUsageFlags.cRLSign, true),
        nameConstraintsExtension(),
        await X509.SubjectKeyIdentifierExtension.create(keys.publicKey)
      ]
    })
    const pkcs8 = await webcrypto.subtle.exportKey("pkcs8", keys.privateKey)
    return { certPem: certificate.toString("pem"), keyPem: toPem(pkcs8, "PRIVATE KEY") }
  })

/** Checks a CA's certificate and key and loads them; a file that is not our CA is an error, never replaced. */
export const parse = (certPem: string, keyPem: string, certPath: string, home: string, nowMs = Date.now()) =>
  Effect.gen(function*() {
    const fail = (reason: CaError["reason"], what: string) =>
      new CaError({ reason, path: certPath, message: `the CA at ${certPath} ${what}: ${renewHint(home)}` })
    const loaded = yield* Effect.try({
      try: () => ({ node: new X509Certificate(certPem), peculiar: new X509.X509Certificate(certPem), key: createPrivateKey(keyPem) }),
      catch: (error) => fail("corrupt", `cannot be read as a certificate and key (${String(error)})`)
    })
    if (!loaded.node.ca) return yield* fail("foreign", "is not a CA certificate")
    if (!loaded.node.checkPrivateKey(loaded.key)) return yield* fail("foreign", `does not match its key ${CA_KEY_FILE}`)
    const constraints = constraintsOf(loaded.peculiar)
    if (constraints === undefined || constraints.join(",") !== expectedConstraints.join(",")) {
      return yield* fail("foreign", `is not cursor-byok's name-constrained CA (constraints: ${constraints?.join(", ") ?? "none"})`)
    }
    if (Date.parse(loaded.node.validTo) <= nowMs) return yield* fail("expired", `expired on ${loaded.node.validTo}`)
    const signingKey = yield* Effect.promise(() =>
      webcrypto.subtle.importKey("pkcs8", loaded.key.export({ format: "der", type: "pkcs8" }), algorithm, false, ["sign"])
    )
    const authority: Authority = {
      certPem,
      keyPem,
      certPath,
      commonName: /CN=([^,\n]+)/.exec(loaded.node.subject)?.[1] ?? loaded.node.subject,
      fingerprint256: loaded.node.fingerprint256,
      serialNumber: loaded.node.serialNumber,
      notAfter: new Date(loaded.node.validTo),
      signingKey,
      certificate: loaded.peculiar
    }
    return authority
  })

const pathsOf = (home: string) => ({ cert: Path.join(home, CA_FILE), key: Path.join(home, CA_KEY_FILE) })

/** Loads the CA in `home`: `missing` when there is none yet. */
export const load = (home: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const paths = pathsOf(home)
    const certExists = yield* fs.exists(paths.cert).pipe(Effect.orElseSucceed(() => false))
    const keyExists = yield* fs.exists(paths.key).pipe(Effect.orElseSucceed(() => false))
    if (!certExists && !keyExists) {
      return yield* new CaError({ reason: "missing", path: paths.cert, message: `no CA at ${paths.cert} yet: \`cursor-byok setup\` (or \`cursor-byok ca create\`) makes one` })
    }
    if (!certExists || !keyExists) {
      return yield* new CaError({
        reason: "corrupt",
        path: paths.cert,
        message: `the CA in ${home} is incomplete (${certExists ? CA_KEY_FILE : CA_FILE} is missing): ${renewHint(home)}`
      })
    }
    const read = (path: string) =>
      fs.readFileString(path).pipe(Effect.mapError((error) =>
        new CaError({ reason: "unreadable", path, message: `cannot read ${path} (${error.message})` })
      ))
    return yield* parse(yield* read(paths.cert), yield* read(paths.key), paths.cert, home)
  })

const writeNew = (home: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const paths = pathsOf(home)
    const made = yield* generate()
    const failed = (error: { readonly message: string }) => new CaError({ reason: "unreadable", path: home, message: `cannot write the CA into ${home} (${error.message})` })
    yield* fs.makeDirectory(home, { recursive: true, mode: 0o700 }).pipe(Effect.mapError(failed))
    yield* fs.writeFileString(paths.key, made.keyPem, { mode: 0o600 }).pipe(Effect.mapError(failed))
    yield* fs.chmod(paths.key, 0o600).pipe(Effect.mapError(failed))
    yield* fs.writeFileString(paths.cert, made.certPem, { mode: 0o644 }).pipe(Effect.mapError(failed))
    return yield* load(home)
  })

/** The CA, made on first use; a broken or foreign one is reported, not replaced. */
export const ensure = (home: string) =>
  load(home).pipe(Effect.catchIf((error) => error.reason === "missing", () => writeNew(home)))

/** Replaces the CA on the user's word: the old files are moved aside (`.bak`), not deleted. */
export const renew = (home: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const paths = pathsOf(home)
    const stamp = new Date().toISOString().replace(/[:.]/g, "-")
    for (const path of [paths.cert, paths.key]) {
      if (yield* fs.exists(path).pipe(Effect.orElseSucceed(() => false))) {
        yield* fs.rename(path, `${path}.${stamp}.bak`).pipe(Effect.mapError((error) =>
          new CaError({ reason: "unreadable", path, message: `cannot move ${path} aside (${error.message})` })
        ))
      }
    }
    return yield* writeNew(home)
  })

const isIp = (name: string) => /^[\d.]+$/.test(name) || name.includes(":")

/** Whether a name falls inside the CA's permitted subtrees. */
export const isPermitted = (name: string) => {
  const lower = name.toLowerCase()
  if (lower === "::1") return true
  if (isIp(lower)) return lower.startsWith("127.") && lower.split(".").length === 4
  return permitted.dns.some((base) => lower === base || lower.endsWith(`.${base}`))
}

let leafKeys: Promise<{ readonly pair: CryptoKeyPair; readonly pem: string }> | undefined

/** One leaf key per process: every leaf shares it (each certificate is still its own). */
const leafKeyPair = () =>
  leafKeys ??= (async () => {
    const pair = await webcrypto.subtle.generateKey(algorithm, true, ["sign", "verify"]) as CryptoKeyPair
    return { pair, pem: toPem(await webcrypto.subtle.exportKey("pkcs8", pair.privateKey), "PRIVATE KEY") }
  })()

/** Signs a leaf for `names` without checking them against the constraints (tests use it to prove they hold). */
export const signLeaf = (authority: Authority, names: ReadonlyArray<string>, options: { readonly nowMs?: number; readonly validityDays?: number } = {}) =>
  Effect.promise(async () => {
    const keys = await leafKeyPair()
    const nowMs = options.nowMs ?? Date.now()
    const notAfter = new Date(nowMs + (options.validityDays ?? LEAF_VALIDITY_DAYS) * DAY_MS)
    const certificate = await X509.X509CertificateGenerator.create({
      serialNumber: serial(),
      subject: `CN=${names[0] ?? "localhost"}`,
      issuer: authority.certificate.subject,
      notBefore: new Date(nowMs - 3_600_000),
      notAfter,
      publicKey: keys.pair.publicKey,
      signingKey: authority.signingKey,
      signingAlgorithm: algorithm,
      extensions: [
        new X509.BasicConstraintsExtension(false, undefined, true),
        new X509.KeyUsagesExtension(X509.KeyUsageFlags.digitalSignature, true),
        new X509.ExtendedKeyUsageExtension([X509.ExtendedKeyUsage.serverAuth]),
        new X509.SubjectAlternativeNameExtension(names.map((name) => isIp(name) ? { type: "ip" as const, value: name } : { type: "dns" as const, value: name })),
        await X509.AuthorityKeyIdentifierExtension.create(authority.certificate),
        await X509.SubjectKeyIdentifierExtension.create(keys.pair.publicKey)
      ]
    })
    const leaf: Leaf = { certPem: `${certificate.toString("pem")}\n${authority.certPem}`, keyPem: keys.pem, names, notAfter }
    return leaf
  })

export class LeafRefused extends Schema.TaggedError<LeafRefused>("cursor-byok/LeafRefused")("LeafRefused", {
  name: Schema.String,
  message: Schema.String
}) {}

/** A leaf for names the CA may sign; anything else is refused before signing. */
export const issueLeaf = (authority: Authority, names: ReadonlyArray<string>, validityDays = LEAF_VALIDITY_DAYS): Effect.Effect<Leaf, LeafRefused> => {
  const outside = names.find((name) => !isPermitted(name))
  return outside === undefined
    ? signLeaf(authority, names, { validityDays })
    : Effect.fail(new LeafRefused({ name: outside, message: `${outside} is outside the CA's name constraints (${expectedConstraints.join(", ")})` }))
}

/** The names the local TLS listener answers to. */
export const loopbackNames = ["127.0.0.1", "localhost", "::1"] as const

/**
 * The TLS listener's leaf is issued once per start and not renewed while it runs, so it is
 * valid for a year (the proxy's leaves, renewed as they near their end, for a month). Browsers'
 * 398-day cap applies to publicly trusted CAs, not to a root the user installed.
 */
export const LISTENER_LEAF_VALIDITY_DAYS = 365
