/**
 * The names users give their chats (Cursor's `UpdateConversationMetadata`), kept beside the
 * journal: a name may arrive before the conversation's first turn is committed, so the table
 * does not refer to `conversations`. The console lists a chat under its name when it has one.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect, Option } from "effect"
import { storeError } from "./Env.js"
import type { StoreEnv } from "./Env.js"

/**
 * Sets (or, for an empty name, clears) a conversation's name; with `onlyIfEmpty`, only when it
 * has none. Whether the name changed.
 */
export const nameConversation = ({ sql }: StoreEnv) =>
  Effect.fn("Store.nameConversation")(function*(conversationId: string, name: string, onlyIfEmpty: boolean) {
    const now = yield* Clock.currentTimeMillis
    const change: Effect.Effect<ReadonlyArray<unknown>, SqlError> = name === ""
      ? onlyIfEmpty
        ? Effect.succeed([])
        : sql<{ conversation_id: string }>`DELETE FROM conversation_names WHERE conversation_id = ${conversationId} RETURNING conversation_id`
      : onlyIfEmpty
      ? sql<{ conversation_id: string }>`
          INSERT INTO conversation_names (conversation_id, name, updated_at_ms) VALUES (${conversationId}, ${name}, ${now})
          ON CONFLICT (conversation_id) DO NOTHING RETURNING conversation_id`
      : sql<{ conversation_id: string }>`
          INSERT INTO conversation_names (conversation_id, name, updated_at_ms) VALUES (${conversationId}, ${name}, ${now})
          ON CONFLICT (conversation_id) DO UPDATE SET name = excluded.name, updated_at_ms = excluded.updated_at_ms
          RETURNING conversation_id`
    const changed = yield* change.pipe(Effect.catchTag("SqlError", (e) => Effect.fail(storeError("nameConversation")(e))))
    return changed.length > 0
  })

/** The name a conversation was given, if any. */
export const conversationName = ({ sql }: StoreEnv) =>
  Effect.fn("Store.conversationName")(function*(conversationId: string) {
    const rows = yield* sql<{ name: string }>`SELECT name FROM conversation_names WHERE conversation_id = ${conversationId}`.pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(storeError("conversationName")(e)))
    )
    return Option.fromNullable(rows[0]?.name)
  })
