/**
 * The loop's invariants (DESIGN.md §4), each as a property over generated conversations:
 * arbitrary text and thinking, 0-5 tool calls per message, arbitrary delta splits, duplicated
 * and late events, tool results in any order, stream errors, cancels and follow-ups at random
 * inputs.
 */
import { assert, describe, it } from "@effect/vitest"
import { makeTransition } from "../src/Loop.js"
import {
  checkAppendOnly,
  checkDeterminism,
  checkErrorsNeverCommit,
  checkLengthNeverRunsTools,
  checkOneAssistantPerCall,
  checkPrefix,
  checkRepeatedDone,
  checkToolResultOrder,
  scenarioArb,
  simulate,
  testPolicy
} from "./support/LoopScenario.js"

export const RUNS = 300
const transition = makeTransition(testPolicy)
const options = { fastCheck: { numRuns: RUNS } }

describe("Loop invariants", () => {
  it.prop("determinism: equal state and input give a byte-equal transition", [scenarioArb], ([scenario]) => {
    assert.isNull(checkDeterminism(transition, simulate(transition, scenario)))
  }, options)

  it.prop("prefix: each request's serialized messages strictly extend the previous request's", [scenarioArb], ([scenario]) => {
    assert.isNull(checkPrefix(simulate(transition, scenario)))
  }, options)

  it.prop("exactly one assistant message per model call, whatever the delta count", [scenarioArb], ([scenario]) => {
    assert.isNull(checkOneAssistantPerCall(simulate(transition, scenario)))
  }, options)

  it.prop("a repeated Done changes nothing", [scenarioArb], ([scenario]) => {
    assert.isNull(checkRepeatedDone(simulate(transition, scenario)))
  }, options)

  it.prop("tool results arriving in any order are appended in tool-call order", [scenarioArb], ([scenario]) => {
    assert.isNull(checkToolResultOrder(simulate(transition, scenario)))
  }, options)

  it.prop("committed messages never change", [scenarioArb], ([scenario]) => {
    assert.isNull(checkAppendOnly(simulate(transition, scenario)))
  }, options)

  it.prop("a length stop never yields CallClient", [scenarioArb], ([scenario]) => {
    assert.isNull(checkLengthNeverRunsTools(simulate(transition, scenario)))
  }, options)

  it.prop("an error or abort never appends an assistant message", [scenarioArb], ([scenario]) => {
    assert.isNull(checkErrorsNeverCommit(simulate(transition, scenario)))
  }, options)
})
