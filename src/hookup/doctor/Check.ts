/** One line of `doctor`'s table: what was checked, how it stands, what was seen, and the fix. */
export type Status = "ok" | "FAIL" | "WARN" | "off"

export interface Check {
  readonly name: string
  readonly status: Status
  readonly detail: string
  readonly fix: string
}
