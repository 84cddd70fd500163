/**
 * A provider's stream events decoded without the Schema interpreter on the common path. Every
 * chunk of every answer is decoded (`Common.decoderFor`), and in a CPU profile of 50 paced
 * streams `ParseResult`'s generic walk over the chunk's AST (an `Either` per field, the
 * excess-property bookkeeping) was ~5% of the server's busy time.
 *
 * `compile` turns a schema's AST into a plain function once, for the shapes the wire schemas
 * are made of: keywords (string, number, boolean, unknown, undefined), literals, structs with
 * optional and required fields, records of string keys, arrays, and unions in which at most
 * one member is a structure. It returns what `Schema.decodeUnknownEither(schema, {
 * onExcessProperty: "ignore" })` returns (the same fields, in the same order, excess fields
 * dropped), or `REFUSED` where Schema would fail; anything else in the AST (a refinement, a
 * transformation, a declaration, a union of structures whose order would matter) makes
 * `compile` return undefined, and the Schema decodes alone. A refused input is decoded by the
 * Schema again, which says why (and decides, should the two ever differ). The schema stays the
 * one description of the wire; `test/llm/FastDecode.test.ts` checks, on the wire schemas of
 * all four adapters, that both give the same answer for arbitrary and mutated inputs.
 */
import { SchemaAST } from "effect"

/** What a compiled decoder returns where the Schema would fail. */
export const REFUSED: unique symbol = Symbol("cursor-byok/FastDecode/refused")

export type FastDecoder = (input: unknown) => unknown

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const hasOwn = (o: object, key: string) => Object.prototype.hasOwnProperty.call(o, key)

/** Whether values of this AST decode to themselves and only primitives pass (a union may hold any number of these). */
const isPrimitive = (ast: SchemaAST.AST): boolean =>
  ast._tag === "StringKeyword" || ast._tag === "NumberKeyword" || ast._tag === "BooleanKeyword" ||
  ast._tag === "UndefinedKeyword" || ast._tag === "Literal"

/** The decoder of `ast`, or undefined when its AST holds a node this module does not decode. */
export const compile = (ast: SchemaAST.AST): FastDecoder | undefined => {
  switch (ast._tag) {
    case "StringKeyword":
      return (u) => (typeof u === "string" ? u : REFUSED)
    case "NumberKeyword":
      return (u) => (typeof u === "number" ? u : REFUSED)
    case "BooleanKeyword":
      return (u) => (typeof u === "boolean" ? u : REFUSED)
    case "UndefinedKeyword":
      return (u) => (u === undefined ? u : REFUSED)
    case "UnknownKeyword":
    case "AnyKeyword":
      return (u) => u
    case "Literal": {
      const literal = ast.literal
      return (u) => (u === literal ? u : REFUSED)
    }
    case "Union":
      return compileUnion(ast)
    case "TupleType":
      return compileArray(ast)
    case "TypeLiteral":
      return compileStruct(ast)
    default:
      return undefined
  }
}

/** A union: its members in order, the first that accepts. Only when at most one member is not a primitive (so at most one can accept a given input with an output of its own). */
const compileUnion = (ast: SchemaAST.Union): FastDecoder | undefined => {
  if (ast.types.filter((member) => !isPrimitive(member)).length > 1) return undefined
  const members: Array<FastDecoder> = []
  for (const member of ast.types) {
    const decoder = compile(member)
    if (decoder === undefined) return undefined
    members.push(decoder)
  }
  return (u) => {
    for (let i = 0; i < members.length; i++) {
      const out = members[i]!(u)
      if (out !== REFUSED) return out
    }
    return REFUSED
  }
}

/** `Schema.Array(item)`: a new array of the decoded items. */
const compileArray = (ast: SchemaAST.TupleType): FastDecoder | undefined => {
  if (ast.elements.length !== 0 || ast.rest.length !== 1) return undefined
  const item = compile(ast.rest[0]!.type)
  if (item === undefined) return undefined
  return (u) => {
    if (!Array.isArray(u)) return REFUSED
    const out = new Array<unknown>(u.length)
    for (let i = 0; i < u.length; i++) {
      const value = item(u[i])
      if (value === REFUSED) return REFUSED
      out[i] = value
    }
    return out
  }
}

interface Field {
  readonly name: string
  readonly optional: boolean
  readonly decode: FastDecoder
}

/**
 * A struct (its fields in the schema's order, excess ones dropped) or a record of string keys
 * (`Schema.Record({ key: Schema.String, value })`: every own key, in the input's order).
 * A required field that is missing is decoded as undefined, as the Schema does.
 */
const compileStruct = (ast: SchemaAST.TypeLiteral): FastDecoder | undefined => {
  if (ast.propertySignatures.length === 0 && ast.indexSignatures.length === 0) return (u) => (u === null || u === undefined ? REFUSED : u)
  if (ast.indexSignatures.length > 0) {
    const index = ast.indexSignatures[0]!
    if (ast.propertySignatures.length > 0 || ast.indexSignatures.length > 1 || index.parameter._tag !== "StringKeyword") return undefined
    const value = compile(index.type)
    if (value === undefined) return undefined
    return (u) => {
      if (!isRecord(u)) return REFUSED
      const out: Record<string, unknown> = {}
      for (const key of Object.keys(u)) {
        const decoded = value(u[key])
        if (decoded === REFUSED) return REFUSED
        out[key] = decoded
      }
      return out
    }
  }
  const fields: Array<Field> = []
  for (const signature of ast.propertySignatures) {
    if (typeof signature.name !== "string") return undefined
    const decode = compile(signature.type)
    if (decode === undefined) return undefined
    fields.push({ name: signature.name, optional: signature.isOptional, decode })
  }
  return (u) => {
    if (!isRecord(u)) return REFUSED
    const out: Record<string, unknown> = {}
    for (let i = 0; i < fields.length; i++) {
      const field = fields[i]!
      const present = hasOwn(u, field.name)
      if (!present && field.optional) continue
      const value = field.decode(present ? u[field.name] : undefined)
      if (value === REFUSED) return REFUSED
      out[field.name] = value
    }
    return out
  }
}
