/**
 * `AgentService/GetPromptContextUsage`: the client's context usage panel, answered from the
 * conversation's last model request (`ContextUsage.ts`). A conversation this server has no
 * request of gets an empty tree (the panel then shows nothing), never an error.
 */
import { create } from "@bufbuild/protobuf"
import { Effect } from "effect"
import {
  GetPromptContextUsageRequestSchema,
  GetPromptContextUsageResponseSchema,
  PromptContextNodeSchema
} from "../../gen/agent/v1/agent_pb.js"
import type { UsageNode } from "../../ContextUsage.js"
import { unary } from "./Procedure.js"

/** The tree's layout version, as the client's schema numbers it. */
const SCHEMA_VERSION = 1

const nodeOf = (node: UsageNode) =>
  create(PromptContextNodeSchema, {
    id: node.id,
    ...(node.parentId !== undefined ? { parentId: node.parentId } : {}),
    kind: node.kind,
    label: node.label,
    categoryId: node.categoryId,
    estimatedTokens: node.estimatedTokens,
    characterCount: node.characterCount,
    contentAvailable: false
  })

export const promptContextUsageRpc = unary(
  "/agent.v1.AgentService/GetPromptContextUsage",
  GetPromptContextUsageRequestSchema,
  GetPromptContextUsageResponseSchema,
  (options, _, message) =>
    Effect.map(
      options.contextUsage?.snapshotOf(message.conversationId) ?? Effect.succeed(undefined),
      (nodes) =>
        create(GetPromptContextUsageResponseSchema, {
          snapshot: { promptContextUsageTree: { schemaVersion: SCHEMA_VERSION, nodes: (nodes ?? []).map(nodeOf) } }
        })
    )
)
