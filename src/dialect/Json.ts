/**
 * The agent calls' messages in protobuf's JSON form, for clients that speak a JSON codec
 * (Connect `application/json`, `grpc+json`, `grpc-web+json`): each is turned into the binary
 * message the transport reads, and the server's messages back into JSON. Only such calls pay
 * for it; binary calls never come here.
 */
import { fromBinary, fromJsonString, toBinary, toJsonString } from "@bufbuild/protobuf"
import type { DescMessage } from "@bufbuild/protobuf"
import { AgentServerMessageSchema } from "../gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiAppendResponseSchema, BidiRequestIdSchema } from "../gen/aiserver/v1/aiserver_pb.js"

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** A JSON message of `schema` as binary, or the reason it is not one. */
const binaryOf = (schema: DescMessage) => (json: Uint8Array): Uint8Array | string => {
  try {
    const text = decoder.decode(json)
    return toBinary(schema, fromJsonString(schema, text === "" ? "{}" : text, { ignoreUnknownFields: true }))
  } catch (cause) {
    return `not a valid ${schema.typeName} in JSON: ${cause instanceof Error ? cause.message : String(cause)}`
  }
}

/** A binary message of `schema` as JSON (the server's own messages: always decodable). */
const jsonOf = (schema: DescMessage) => (binary: Uint8Array): Uint8Array => encoder.encode(toJsonString(schema, fromBinary(schema, binary)))

/** The JSON forms of each agent call: its request in, its answers out. */
export const agentJson = {
  BidiAppend: { request: binaryOf(BidiAppendRequestSchema), answer: jsonOf(BidiAppendResponseSchema) },
  RunSSE: { request: binaryOf(BidiRequestIdSchema), answer: jsonOf(AgentServerMessageSchema) }
} as const
