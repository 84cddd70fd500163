/**
 * A capture's messages as protobuf JSON, both ways: the bytes a wire carried decoded to JSON
 * (`toJson`, redacted by `Redact.ts`), and a captured client message back to the bytes a replay
 * sends (`fromJson`, after `restoreMarkers` turned a redacted bytes field into bytes). The side
 * calls' messages are found by their path in the generated services.
 */
import { fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf"
import type { DescField, DescMessage, DescMethod, JsonValue } from "@bufbuild/protobuf"
import { ScalarType } from "@bufbuild/protobuf"
import { file_agent_v1_agent } from "../gen/agent/v1/agent_pb.js"
import { file_aiserver_v1_account } from "../gen/aiserver/v1/account_pb.js"
import { file_aiserver_v1_aiserver } from "../gen/aiserver/v1/aiserver_pb.js"
import { file_aiserver_v1_telemetry } from "../gen/aiserver/v1/telemetry_pb.js"

export type Json = JsonValue

const OPTIONS = { alwaysEmitImplicit: false } as const

/** A message's bytes as protobuf JSON, or undefined when they do not decode. */
export const decodeJson = (schema: DescMessage, bytes: Uint8Array): Json | undefined => {
  try {
    return toJson(schema, fromBinary(schema, bytes), OPTIONS)
  } catch {
    return undefined
  }
}

/** A message's JSON (its redaction markers restored as bytes) back to its bytes. */
export const encodeJson = (schema: DescMessage, json: Json): Uint8Array =>
  toBinary(schema, fromJson(schema, restoreMarkers(schema, json), { ignoreUnknownFields: true }))

/** Text (JSON codec bodies) as JSON, or undefined. */
export const parseText = (bytes: Uint8Array): Json | undefined => {
  try {
    return JSON.parse(Buffer.from(bytes).toString("utf8")) as Json
  } catch {
    return undefined
  }
}

/** The unary procedures of the generated services by path (`/aiserver.v1.AiService/ServerTime`). */
const methods: ReadonlyMap<string, DescMethod> = new Map(
  [file_agent_v1_agent, file_aiserver_v1_aiserver, file_aiserver_v1_account, file_aiserver_v1_telemetry].flatMap((file) =>
    file.services.flatMap((service) => service.methods.map((method) => [`/${service.typeName}/${method.name}`, method] as const)))
)

export const methodOf = (path: string): DescMethod | undefined => methods.get(path)

/** The field of `schema` a JSON key names (its JSON name or its proto name). */
export const fieldOf = (schema: DescMessage, key: string): DescField | undefined =>
  schema.fields.find((field) => field.jsonName === key || field.name === key)

/** The message type a field holds (a message, a list or a map of messages), if any. */
export const messageOfField = (field: DescField): DescMessage | undefined =>
  field.fieldKind === "message" ? field.message
    : field.fieldKind === "list" && field.listKind === "message" ? field.message
    : field.fieldKind === "map" && field.mapKind === "message" ? field.message
    : undefined

/** Whether a field holds bytes (a bytes field, or a list or map of them). */
export const isBytesField = (field: DescField): boolean =>
  (field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar") || (field.fieldKind === "map" && field.mapKind === "scalar")) &&
  field.scalar === ScalarType.BYTES

/** A redaction marker (`[redacted 12 chars]`, `[redacted 40 bytes]`): never redacted again, and sent as its own text. */
export const MARKER = /^\[redacted \d+ (chars|bytes)\]$/

/** `json` with every marker in a bytes field made the base64 of its own text, so `fromJson` reads it. */
export const restoreMarkers = (schema: DescMessage, json: Json): Json => {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return json
  const out: Record<string, Json> = {}
  for (const [key, value] of Object.entries(json)) {
    const field = fieldOf(schema, key)
    if (field === undefined || value === null) {
      out[key] = value
      continue
    }
    const nested = messageOfField(field)
    const fix = (item: Json): Json =>
      nested !== undefined ? restoreMarkers(nested, item)
        : isBytesField(field) && typeof item === "string" && MARKER.test(item) ? Buffer.from(item).toString("base64")
        : item
    out[key] = Array.isArray(value) ? value.map(fix)
      : field.fieldKind === "map" && typeof value === "object" ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fix(v)]))
      : fix(value)
  }
  return out
}
