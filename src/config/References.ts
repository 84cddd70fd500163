/**
 * What the configuration's ids must agree on, checked before anything runs (a hole found here
 * would otherwise be a warning, or a failure at the first model call): every provider a model
 * or a fallback names is configured, model and provider ids are unique, `defaultModel`, the
 * aliases' targets and `subagentModel` name configured models, no alias shadows a model and no
 * fallback repeats a target. Every problem is one line, `field path: what is wrong: the fix`,
 * in the form of the file's decoding errors (`Issues.ts`).
 */
import type { ModelConfig, RouterConfig } from "../llm/Router.js"
import { formatPath } from "./Issues.js"

/** What the checks read: the resolved model table and the model ids the file names. */
export interface References {
  readonly router: Pick<RouterConfig, "providers" | "models" | "aliases">
  readonly defaultModel?: string | undefined
  readonly subagentModel?: string | undefined
}

/** `a, b, c`, or `none`, for the fix's list of what may be named. */
const listed = (ids: ReadonlyArray<string>): string => (ids.length === 0 ? "none" : [...new Set(ids)].join(", "))

/** `ids[i]` seen before at `ids[j]`: `kind[i].id: "x" is kind[j].id too: give each its own id`. */
const duplicates = (kind: "providers" | "models", ids: ReadonlyArray<string>): Array<string> => {
  const first = new Map<string, number>()
  const lines: Array<string> = []
  for (const [index, id] of ids.entries()) {
    const earlier = first.get(id)
    if (earlier === undefined) first.set(id, index)
    else lines.push(`${kind}[${index}].id: ${JSON.stringify(id)} is ${kind}[${earlier}].id too: give each ${kind === "models" ? "model" : "provider"} its own id`)
  }
  return lines
}

/** A model's provider and its fallbacks' providers are configured, and no fallback repeats a target. */
const targetProblems = (model: ModelConfig, index: number, providerIds: ReadonlyArray<string>): Array<string> => {
  const lines: Array<string> = []
  const unknown = (path: string, provider: string) =>
    `${path}: names provider ${JSON.stringify(provider)}, which is not configured: name one of providers[].id (${listed(providerIds)}) or add it to providers`
  if (!providerIds.includes(model.provider)) lines.push(unknown(`models[${index}].provider`, model.provider))
  const seen = new Set([`${model.provider}/${model.upstreamModel}`])
  for (const [k, target] of (model.fallback ?? []).entries()) {
    const path = `models[${index}].fallback[${k}]`
    if (!providerIds.includes(target.provider)) lines.push(unknown(`${path}.provider`, target.provider))
    const key = `${target.provider}/${target.upstreamModel}`
    if (seen.has(key)) lines.push(`${path}: repeats ${key}: a fallback loop; remove it or name another target`)
    seen.add(key)
  }
  return lines
}

/** The aliases: none shadows a model, each names a configured model (not another alias). */
const aliasProblems = (aliases: Readonly<Record<string, string>>, modelIds: ReadonlyArray<string>): Array<string> => {
  const lines: Array<string> = []
  for (const [alias, target] of Object.entries(aliases)) {
    const path = formatPath(["aliases", alias])
    if (modelIds.includes(alias)) {
      lines.push(`${path}: ${alias} is a configured model id already: remove the alias or rename the model`)
    } else if (!modelIds.includes(target)) {
      const hint = Object.hasOwn(aliases, target) ? " (it is an alias: name the model itself)" : ""
      lines.push(`${path}: names model ${JSON.stringify(target)}, which is not configured${hint}: name one of models[].id (${listed(modelIds)})`)
    }
  }
  return lines
}

/** Every problem of the model table's references, one line each, in the file's order. */
export const referenceProblems = (config: References): ReadonlyArray<string> => {
  const { providers, models, aliases = {} } = config.router
  const providerIds = providers.map((provider) => provider.id)
  const modelIds = models.map((model) => model.id)
  const lines = [...duplicates("providers", providerIds), ...duplicates("models", modelIds)]
  for (const [index, model] of models.entries()) lines.push(...targetProblems(model, index, providerIds))
  lines.push(...aliasProblems(aliases, modelIds))
  const { defaultModel, subagentModel } = config
  if (defaultModel !== undefined && !modelIds.includes(defaultModel)) {
    lines.push(`defaultModel: names model ${JSON.stringify(defaultModel)}, which is not configured: name one of models[].id (${listed(modelIds)})`)
  }
  if (subagentModel !== undefined && !modelIds.includes(subagentModel) && !Object.hasOwn(aliases, subagentModel)) {
    lines.push(`subagentModel: names model ${JSON.stringify(subagentModel)}, which is not configured: name one of models[].id (${listed(modelIds)}) or an alias`)
  }
  return lines
}
