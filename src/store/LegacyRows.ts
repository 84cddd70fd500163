/**
 * The shapes of stored state that earlier releases wrote and this one no longer writes, and how
 * each decodes into today's. A row is never rewritten for an upgrade: it is read in its old shape
 * and stored in the new one at its conversation's next commit (state_json is rewritten at every
 * commit). Once released, an old shape here is never edited.
 */
import { Either, ParseResult, Schema } from "effect"
import { TurnSettings } from "../Loop.js"

/** Turn settings up to the typed `TurnSettings`: the model and an untyped record of options. */
const UntypedTurnSettings = Schema.Struct({
  model: Schema.String,
  options: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})

const decodeSettings = Schema.decodeUnknownEither(TurnSettings)

/**
 * Each option that names a `TurnSettings` field (they kept their names) becomes that field when
 * its value decodes as one, and is left out when it does not: the old readers took a value of
 * the wrong type as absent too (no mode meant `agent`, no rules meant none), so the prompt and
 * tools built from an upgraded row are those the old code built from it. Any other key is
 * dropped: no release read one, and the typed settings keep no untyped bag to grow back.
 */
const upgradeUntypedSettings = (untyped: typeof UntypedTurnSettings.Type): Either.Either<TurnSettings, ParseResult.ParseIssue> => {
  const known: Record<string, unknown> = {}
  for (const key of Object.keys(TurnSettings.fields)) {
    if (key === "model" || !Object.hasOwn(untyped.options, key)) continue
    const one = decodeSettings({ model: untyped.model, [key]: untyped.options[key] })
    if (Either.isRight(one)) known[key] = (one.right as Record<string, unknown>)[key]
  }
  return Either.mapLeft(decodeSettings({ ...known, model: untyped.model }), (error) => error.issue)
}

/** `{model, options}` settings decoded into `TurnSettings`; decode only (this shape is never written). */
export const UpgradedTurnSettings = Schema.transformOrFail(UntypedTurnSettings, Schema.typeSchema(TurnSettings), {
  strict: true,
  decode: upgradeUntypedSettings,
  encode: (settings, _, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, settings, "settings are never stored untyped again"))
})
