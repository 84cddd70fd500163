// Declarations for the two HTML helpers whose own types do not fit: the GFM plugin ships none,
// and domino's declare a module named "domino" (and need the DOM library this project omits).
declare module "@joplin/turndown-plugin-gfm" {
  import type TurndownService from "turndown"
  export const gfm: TurndownService.Plugin
  export const tables: TurndownService.Plugin
  export const strikethrough: TurndownService.Plugin
  export const taskListItems: TurndownService.Plugin
  export const highlightedCodeBlock: TurndownService.Plugin
}

declare module "@mixmark-io/domino" {
  const domino: { readonly createDocument: (html?: string, force?: boolean) => unknown }
  export default domino
}
