/**
 * The markup attachments are written in: XML-ish elements (`<tag name="value">` then the body on
 * its own lines, or `<tag name="value" />` without one) and bracketed notes for what could not be
 * shown. Byte-stable on purpose: the provider's prompt cache keys on exact prefixes.
 */

/** An attribute value with `&`, `"`, `<` and line breaks escaped, so a tag stays on one line and unambiguous. */
export const escapeAttribute = (value: string): string =>
  value.replace(/[&"<\r\n]/g, (c) => (c === "&" ? "&amp;" : c === "\"" ? "&quot;" : c === "<" ? "&lt;" : c === "\r" ? "&#13;" : "&#10;"))

/** Attributes in the given order; empty (or missing) values are left out. */
export type Attributes = ReadonlyArray<readonly [name: string, value: string | number | undefined]>

const attributesText = (attributes: Attributes): string =>
  attributes
    .filter(([, value]) => value !== undefined && value !== "")
    .map(([name, value]) => ` ${name}="${escapeAttribute(String(value))}"`)
    .join("")

/** `<tag a="1">\nbody\n</tag>`, or `<tag a="1" />` when the body is empty. */
export const element = (tag: string, attributes: Attributes, body = ""): string =>
  body === "" ? `<${tag}${attributesText(attributes)} />` : `<${tag}${attributesText(attributes)}>\n${body}\n</${tag}>`

/** A note in brackets, for what is attached but cannot be shown as itself. */
export const note = (text: string): string => `[${text}]`

/** The non-empty parts, joined by `separator`. */
export const joinPresent = (parts: ReadonlyArray<string | undefined>, separator = "\n"): string =>
  parts.filter((part): part is string => part !== undefined && part !== "").join(separator)

/** `label: value`, or nothing when the value is empty (a multi-line value starts on the next line). */
export const labelled = (label: string, value: string | undefined): string | undefined =>
  value === undefined || value === "" ? undefined : value.includes("\n") ? `${label}:\n${value}` : `${label}: ${value}`

/** The path to show: the relative one when the client gave it. */
export const displayPath = (item: { readonly path?: string | undefined; readonly relativePath?: string | undefined }): string =>
  item.relativePath !== undefined && item.relativePath !== "" ? item.relativePath : item.path ?? ""
