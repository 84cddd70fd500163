/**
 * SHA-256 (FIPS 180-4) over UTF-8 text, returning lowercase hex.
 *
 * Written by hand so that `Llm.ts` and `Loop.ts` stay free of platform imports (no
 * `node:crypto`, no async WebCrypto): the pure loop must hash message histories
 * synchronously and deterministically. A property test checks it against node:crypto.
 */

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
])

const encoder = new TextEncoder()
const W = new Int32Array(64)
const H = new Int32Array(8)
const INITIAL = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
const HEX: Array<string> = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"))

/**
 * Runs the compression function over the 64-byte blocks of `data` below `end`, updating `H`.
 * Words are read straight from the bytes (big-endian), so a large input is not copied.
 */
const compress = (data: Uint8Array, end: number): void => {
  let h0 = H[0]!, h1 = H[1]!, h2 = H[2]!, h3 = H[3]!, h4 = H[4]!, h5 = H[5]!, h6 = H[6]!, h7 = H[7]!
  for (let offset = 0; offset < end; offset += 64) {
    for (let t = 0, i = offset; t < 16; t++, i += 4) W[t] = (data[i]! << 24) | (data[i + 1]! << 16) | (data[i + 2]! << 8) | data[i + 3]!
    for (let t = 16; t < 64; t++) {
      const w15 = W[t - 15]!, w2 = W[t - 2]!
      const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3)
      const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10)
      W[t] = (W[t - 16]! + s0 + W[t - 7]! + s1) | 0
    }
    let a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7
    for (let t = 0; t < 64; t++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))
      const ch = (e & f) ^ (~e & g)
      const temp1 = (h + S1 + ch + K[t]! + W[t]!) | 0
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))
      const maj = (a & b) ^ (a & c) ^ (b & c)
      h = g; g = f; f = e; e = (d + temp1) | 0
      d = c; c = b; b = a; a = (temp1 + S0 + maj) | 0
    }
    h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0
    h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0
  }
  H[0] = h0; H[1] = h1; H[2] = h2; H[3] = h3; H[4] = h4; H[5] = h5; H[6] = h6; H[7] = h7
}

/** Runs SHA-256 over `bytes`, leaving the digest in `H`. */
const digest = (bytes: Uint8Array): void => {
  H.set(INITIAL)
  // The whole blocks in place, then the last bytes with the padding and the bit length.
  const whole = bytes.length - (bytes.length % 64)
  compress(bytes, whole)
  const rest = bytes.length - whole
  const tail = new Uint8Array(rest + 9 > 64 ? 128 : 64)
  tail.set(bytes.subarray(whole))
  tail[rest] = 0x80
  const bitLength = bytes.length * 8
  const view = new DataView(tail.buffer)
  view.setUint32(tail.length - 8, Math.floor(bitLength / 0x100000000))
  view.setUint32(tail.length - 4, bitLength >>> 0)
  compress(tail, tail.length)
}

/** SHA-256 of `bytes`, as 64 lowercase hex characters. */
export const sha256Bytes = (bytes: Uint8Array): string => {
  digest(bytes)
  let out = ""
  for (let i = 0; i < 8; i++) {
    const word = H[i]!
    out += HEX[(word >>> 24) & 0xff]! + HEX[(word >>> 16) & 0xff]! + HEX[(word >>> 8) & 0xff]! + HEX[word & 0xff]!
  }
  return out
}

/** SHA-256 of `bytes`, as its 32 bytes. */
export const sha256Digest = (bytes: Uint8Array): Uint8Array => {
  digest(bytes)
  const out = new Uint8Array(32)
  for (let i = 0; i < 8; i++) {
    const word = H[i]!
    out[i * 4] = word >>> 24
    out[i * 4 + 1] = (word >>> 16) & 0xff
    out[i * 4 + 2] = (word >>> 8) & 0xff
    out[i * 4 + 3] = word & 0xff
  }
  return out
}

/** SHA-256 of the UTF-8 encoding of `text`, as 64 lowercase hex characters. */
export const sha256 = (text: string): string => sha256Bytes(encoder.encode(text))
