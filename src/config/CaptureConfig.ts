/**
 * The `capture` key of the configuration file (`capture/`): off by default; `contents` keeps
 * file contents and long texts in the capture files instead of redacting them. Read at each
 * request, so a reload (or `cursor-byok capture on|off`) applies to the next request.
 */
import { Schema } from "effect"

export const CaptureConfig = Schema.Struct({
  enabled: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  contents: Schema.optionalWith(Schema.Boolean, { default: () => false })
})
export type CaptureConfig = typeof CaptureConfig.Type
