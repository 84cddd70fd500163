/**
 * A conversation's `state_json`: the state's fields that are neither history nor a column of
 * their own, rewritten at each commit as one canonical JSON value.
 *
 * The turn's settings are among them, and two of their lists can be large and come back
 * unchanged turn after turn: the MCP tools, each with its JSON Schema (~120 KB for 60 tools),
 * and the rules with their text. `state_json` is rewritten at every commit of a conversation,
 * so each of these lists is stored once as a content-addressed request part and `state_json`
 * names it by hash (`mcpToolsPart`, `rulesPart`); loading a conversation reads the parts back,
 * checked against their hashes. A list's part (its canonical JSON and SHA-256) is made once
 * for the same list: the runner commits the same settings object at every step of a turn, and
 * the stored form of a settings object is remembered.
 *
 * Rows written before hold the lists inline, and still decode as they are.
 */
import { Either, ParseResult, Schema } from "effect"
import { jsonKeyOf, recentMap } from "../internal/JsonKey.js"
import { canonicalJson } from "../Llm.js"
import { ConversationState, TurnMcpTool, TurnRule, TurnSettings } from "../Loop.js"
import { UpgradedTurnSettings } from "./LegacyRows.js"
import { CorruptRow } from "./Model.js"
import { decodeJson, rowHash } from "./Rows.js"

/** Today's stored settings: `TurnSettings`, with either list inline or named by its part. */
export const SettingsWithParts = Schema.Struct({
  ...TurnSettings.fields,
  mcpToolsPart: Schema.optional(Schema.String),
  rulesPart: Schema.optional(Schema.String)
})
export type SettingsWithParts = typeof SettingsWithParts.Type

/**
 * Settings as a stored row may hold them: today's shape, or the untyped one of earlier releases.
 * The untyped member comes first: today's struct ignores unknown keys, so it would otherwise
 * accept an old row as settings with nothing but the model. Both members end in today's type:
 * the state's struct checks its decoded fields against the union's type side, and a member
 * typed `TurnSettings` there would take today's settings and drop the names of their parts.
 */
export const StoredSettings = Schema.Union(
  Schema.compose(UpgradedTurnSettings, Schema.typeSchema(SettingsWithParts), { strict: false }),
  SettingsWithParts
)

/**
 * The state's fields as stored. Derived from the schema, so a field the loop adds is stored
 * without a change here (rows written before it existed then fail to decode until the field
 * gets a default).
 */
export const StateFields = Schema.Struct({
  ...ConversationState.omit("conversationId", "status", "turnId", "messages", "messagesHash", "waiting").fields,
  settings: Schema.NullOr(StoredSettings)
})
export type StateFields = typeof StateFields.Type

export const decodeStateFields = Schema.decodeUnknownEither(StateFields)

export interface SettingsPart {
  readonly hash: string
  readonly body: string
}

const decodeMcpTools = Schema.decodeUnknownEither(Schema.Array(TurnMcpTool))
const decodeRules = Schema.decodeUnknownEither(Schema.Array(TurnRule))

/**
 * Parts by their list's JSON, the 16 most recent: a run request brings its lists afresh each turn,
 * and their canonical JSON (keys sorted at every depth, ~3 ms for 60 MCP tools) is made once.
 */
const parts = recentMap<string, SettingsPart>(16)

/** A settings part's name: its text's SHA-256, in a namespace of its own among the request parts. */
const partNameOf = (body: string): string => `settings:${rowHash(body)}`

/** Whether stored settings name parts (rows written before hold their lists inline). */
const namesParts = (settings: SettingsWithParts | TurnSettings): settings is SettingsWithParts =>
  "mcpToolsPart" in settings || "rulesPart" in settings

const partOf = (list: ReadonlyArray<unknown>): SettingsPart => {
  const key = jsonKeyOf(list)
  let part = parts.get(key)
  if (part === undefined) {
    const body = canonicalJson(list)
    part = { hash: partNameOf(body), body }
    parts.set(key, part)
  }
  return part
}

export interface StoredForm {
  readonly settings: SettingsWithParts
  /** The parts the stored settings name. */
  readonly parts: ReadonlyArray<SettingsPart>
}

const forms = new WeakMap<TurnSettings, StoredForm>()

/** The settings as `state_json` holds them, and the parts they name (remembered per settings object). */
export const storedFormOf = (settings: TurnSettings): StoredForm => {
  let form = forms.get(settings)
  if (form !== undefined) return form
  const { mcpTools, rules, ...rest } = settings
  const named: Array<SettingsPart> = []
  const stored: { -readonly [K in keyof SettingsWithParts]: SettingsWithParts[K] } = rest
  if (mcpTools !== undefined && mcpTools.length > 0) {
    const part = partOf(mcpTools)
    stored.mcpToolsPart = part.hash
    named.push(part)
  } else if (mcpTools !== undefined) stored.mcpTools = mcpTools
  if (rules !== undefined && rules.length > 0) {
    const part = partOf(rules)
    stored.rulesPart = part.hash
    named.push(part)
  } else if (rules !== undefined) stored.rules = rules
  form = { settings: stored, parts: named }
  forms.set(settings, form)
  return form
}

/** The part hashes stored settings name (none for a row that holds its lists inline). */
export const partHashesOf = (settings: SettingsWithParts | TurnSettings | null): ReadonlyArray<string> => {
  if (settings === null || !namesParts(settings)) return []
  return [settings.mcpToolsPart, settings.rulesPart].filter((hash): hash is string => hash !== undefined)
}

/**
 * The stored settings with their lists read back from `bodies` (the named parts' stored text by
 * hash): each body must hash to its name and decode as its list, or the row is corrupt.
 */
export const resolveSettings = (
  conversationId: string,
  settings: SettingsWithParts | TurnSettings,
  bodies: ReadonlyMap<string, string>
): Either.Either<TurnSettings, CorruptRow> => {
  if (!namesParts(settings)) return Either.right(settings)
  const { mcpToolsPart, rulesPart, ...rest } = settings
  const read = <A>(hash: string, decode: (u: unknown) => Either.Either<A, ParseResult.ParseError>) => {
    const corrupt = (reason: string) => new CorruptRow({ conversationId, table: "request_parts", seq: null, key: hash, reason })
    const body = bodies.get(hash)
    if (body === undefined) return Either.left(corrupt("the settings name a part that is not stored"))
    if (partNameOf(body) !== hash) return Either.left(corrupt("the part's text does not hash to its name"))
    return Either.mapLeft(decodeJson(body, decode), corrupt)
  }
  const resolved: { -readonly [K in keyof TurnSettings]: TurnSettings[K] } = rest
  if (mcpToolsPart !== undefined) {
    const mcpTools = read(mcpToolsPart, decodeMcpTools)
    if (Either.isLeft(mcpTools)) return Either.left(mcpTools.left)
    resolved.mcpTools = mcpTools.right
  }
  if (rulesPart !== undefined) {
    const rules = read(rulesPart, decodeRules)
    if (Either.isLeft(rules)) return Either.left(rules.left)
    resolved.rules = rules.right
  }
  return Either.right(resolved)
}
