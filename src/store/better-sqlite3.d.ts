// The part of better-sqlite3's API that `Connection.ts` uses (the package ships no types of its
// own, and @types/better-sqlite3 is not a dependency).
declare module "better-sqlite3" {
  namespace Database {
    interface Statement {
      readonly reader: boolean
      all(...params: ReadonlyArray<unknown>): Array<any>
      run(...params: ReadonlyArray<unknown>): { readonly changes: number; readonly lastInsertRowid: number | bigint }
      raw(toggle?: boolean): Statement
    }
  }
  interface Database {
    readonly inTransaction: boolean
    prepare(sql: string): Database.Statement
    exec(sql: string): Database
    pragma(source: string): unknown
    serialize(): Uint8Array
    backup(destination: string): Promise<{ readonly totalPages: number; readonly remainingPages: number }>
    loadExtension(path: string): Database
    close(): Database
  }
  const Database: new(filename: string, options?: { readonly readonly?: boolean }) => Database
  export default Database
}
