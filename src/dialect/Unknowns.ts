/**
 * The unknown fields of a decoded client message, found by walking it: protobuf-es keeps the
 * fields a message's schema does not name in that message's `$unknown` (field number, wire type,
 * bytes), on each message of the tree. The walk follows a plan made once per message type: only
 * the fields that hold messages (singular, repeated, map values, oneof cases), so a message with
 * none, or a scalar-only subtree, costs one property read. Nothing is allocated when no message
 * of the tree has unknown fields.
 *
 * A message with unknown fields whose oneof is unset may be one carrying a oneof case this schema
 * does not know (a newer client's): the found field says which oneof is unset. Pure: the caller
 * says what to do with each field found (`Drift.ts` counts them).
 */
import type { DescMessage, UnknownField } from "@bufbuild/protobuf"

/** Told each unknown field found: the protobuf type name of the message holding it, the field, and the message's unset oneof (if any). */
export type UnknownSink = (typeName: string, field: UnknownField, unsetOneof: string | undefined) => void

type Child =
  | { readonly kind: "message" | "list" | "map"; readonly name: string; readonly desc: DescMessage }
  | { readonly kind: "oneof"; readonly name: string; readonly cases: ReadonlyMap<string, DescMessage> }

interface Plan {
  readonly typeName: string
  /** The local names of the message's oneofs (proto3 `optional` excluded). */
  readonly oneofs: ReadonlyArray<string>
  readonly children: ReadonlyArray<Child>
}

const plans = new WeakMap<DescMessage, Plan>()

const planOf = (desc: DescMessage): Plan => {
  const known = plans.get(desc)
  if (known !== undefined) return known
  const children: Array<Child> = []
  for (const member of desc.members) {
    if (member.kind === "oneof") {
      const cases = new Map<string, DescMessage>()
      for (const field of member.fields) if (field.fieldKind === "message") cases.set(field.localName, field.message)
      if (cases.size > 0) children.push({ kind: "oneof", name: member.localName, cases })
    } else if (member.fieldKind === "message") {
      children.push({ kind: "message", name: member.localName, desc: member.message })
    } else if (member.fieldKind === "list" && member.listKind === "message") {
      children.push({ kind: "list", name: member.localName, desc: member.message })
    } else if (member.fieldKind === "map" && member.mapKind === "message") {
      children.push({ kind: "map", name: member.localName, desc: member.message })
    }
  }
  const plan: Plan = { typeName: desc.typeName, oneofs: desc.oneofs.map((oneof) => oneof.localName), children }
  plans.set(desc, plan)
  return plan
}

type Fields = Record<string, unknown> & { readonly $unknown?: ReadonlyArray<UnknownField> | undefined }

const unsetOneofOf = (plan: Plan, message: Fields): string | undefined => {
  for (const name of plan.oneofs) if ((message[name] as { case: unknown } | undefined)?.case === undefined) return name
  return undefined
}

const walk = (plan: Plan, message: Fields, sink: UnknownSink): void => {
  const unknown = message.$unknown
  if (unknown !== undefined && unknown.length > 0) {
    const unset = plan.oneofs.length === 0 ? undefined : unsetOneofOf(plan, message)
    for (const field of unknown) sink(plan.typeName, field, unset)
  }
  const children = plan.children
  for (let i = 0; i < children.length; i++) {
    const child = children[i]!
    const value = message[child.name]
    if (value === undefined) continue
    switch (child.kind) {
      case "message":
        walk(planOf(child.desc), value as Fields, sink)
        break
      case "list":
        if ((value as ReadonlyArray<Fields>).length > 0) {
          const childPlan = planOf(child.desc)
          for (const item of value as ReadonlyArray<Fields>) walk(childPlan, item, sink)
        }
        break
      case "map": {
        const entries = value as Record<string, Fields>
        for (const key in entries) walk(planOf(child.desc), entries[key]!, sink)
        break
      }
      case "oneof": {
        const selected = value as { readonly case: string | undefined; readonly value?: unknown }
        const desc = selected.case === undefined ? undefined : child.cases.get(selected.case)
        if (desc !== undefined) walk(planOf(desc), selected.value as Fields, sink)
        break
      }
    }
  }
}

/** Tells `sink` every unknown field of `message` and of the messages it holds, outermost first. */
export const walkUnknown = (schema: DescMessage, message: object, sink: UnknownSink): void => walk(planOf(schema), message as Fields, sink)
