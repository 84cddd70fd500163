/**
 * What the instances' registry (`src/cluster/Registry.ts`) says, read straight from the
 * database, for tests and benches of several instances.
 */
import { connect } from "./Postgres.js"

/** The `advertise` address of the instance holding `requestId` (undefined: none holds it). */
export const holderAddress = async (database: string, requestId: string): Promise<string | undefined> => {
  const client = await connect(database)
  try {
    const result = await client.query(
      "SELECT i.address FROM request_holders h JOIN instances i ON i.instance_key = h.instance_key WHERE h.request_id = $1",
      [requestId]
    )
    return (result.rows[0] as { address: string } | undefined)?.address
  } finally {
    await client.end()
  }
}
