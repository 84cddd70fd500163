/** The console's users page, rendered from rows: limits reached and near marked, the empty server explained. */
import { assert, describe, it } from "@effect/vitest"
import { budgetState, usersPage } from "../../src/console/UsersPage.js"
import { linksOf } from "../../src/console/Pages.js"

const links = linksOf(undefined)
const user = (name: string, limits: { dailyUsd?: number; monthlyUsd?: number } = {}, models?: ReadonlyArray<string>) => ({
  userId: `user_${name}`,
  name,
  models,
  dailyUsd: limits.dailyUsd,
  monthlyUsd: limits.monthlyUsd,
  createdAtMs: Date.UTC(2026, 11, 1)
})

describe("the users page", () => {
  it("a limit is reached at its amount and near from 80%; no limit says nothing", () => {
    assert.strictEqual(budgetState(5, 5), "reached")
    assert.strictEqual(budgetState(4, 5), "near")
    assert.strictEqual(budgetState(3.99, 5), undefined)
    assert.strictEqual(budgetState(1000, undefined), undefined)
  })

  it("each user's models, spend against limits, escaped names; none: how to make a team's server", () => {
    const page = usersPage([
      { user: user("alice"), spend: { todayUsd: 0.5, monthUsd: 3 } },
      { user: user("bob<script>", { dailyUsd: 1, monthlyUsd: 10 }, ["gpt-5", "claude"]), spend: { todayUsd: 1.2, monthUsd: 8.5 } }
    ], links, "nonce")
    assert.include(page, `data-user="alice"`)
    assert.include(page, "every model")
    assert.notInclude(page, "bob<script>")
    assert.include(page, "bob&lt;script&gt;")
    assert.include(page, "gpt-5, claude")
    assert.match(page, /data-col="today" data-state="reached"[^>]*>\$1\.20/)
    assert.match(page, /data-col="month" data-state="near"/)
    const empty = usersPage([], links, "nonce")
    assert.include(empty, "No users")
    assert.include(empty, "cursor-byok users add NAME")
  })
})
