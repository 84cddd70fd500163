/** What `setup` could not do, in one line with the fix. */
import { Schema } from "effect"

export class SetupError extends Schema.TaggedError<SetupError>("cursor-byok/SetupError")("SetupError", {
  message: Schema.String
}) {}
