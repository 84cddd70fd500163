/** Field schemas the configuration file's sections share: absolute http(s) URLs (refused readably otherwise) and byte counts. */
import { Schema } from "effect"

/** An absolute http or https URL (a scheme, a host); `what` is said in the refusal: `expected ${what}, got "..."`. */
export const httpUrl = (what: string) =>
  Schema.String.pipe(Schema.filter((text) => {
    try {
      const url = new URL(text)
      return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== ""
    } catch {
      return false
    }
  }, { message: (issue) => `expected ${what}, got ${JSON.stringify(issue.actual)}` }))

export const HttpUrl = httpUrl("an http or https URL")

/** A positive number of bytes. */
export const Bytes = Schema.Int.pipe(Schema.positive())
