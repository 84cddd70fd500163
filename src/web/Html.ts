/**
 * HTML to readable Markdown for the model: the page is parsed with domino (turndown's own DOM
 * for Node), the chrome is removed (scripts, styles, navigation, site header and footer, forms,
 * embedded media), the main content is preferred when the page marks it (`<main>`, `<article>`,
 * `role="main"`), links and images are made absolute, and turndown with the GFM plugin writes
 * headings, lists, code blocks and tables. The page's title leads as a top heading.
 */
import type * as Gfm from "@joplin/turndown-plugin-gfm"
import type Domino from "@mixmark-io/domino"
import { createRequire } from "node:module"
import type TurndownService from "turndown"

// Loaded on the first page fetched, not at start: only web fetch and search need them (a few
// MB of memory the server does not spend until then).
const load = createRequire(import.meta.url)
let libraries: { readonly Turndown: typeof TurndownService; readonly gfm: TurndownService.Plugin; readonly domino: typeof Domino } | undefined
const libs = () =>
  libraries ??= {
    Turndown: load("turndown") as typeof TurndownService,
    gfm: (load("@joplin/turndown-plugin-gfm") as typeof Gfm).gfm,
    domino: load("@mixmark-io/domino") as typeof Domino
  }

// The project compiles without the DOM library: these are the few members used here.
interface DomElement {
  readonly nodeName: string
  readonly parentNode: DomElement | null
  readonly children: ArrayLike<DomElement>
  readonly nextSibling: unknown
  readonly textContent: string | null
  getAttribute(name: string): string | null
  setAttribute(name: string, value: string): void
  // domino answers undefined, not null, when nothing matches.
  querySelector(selectors: string): DomElement | null | undefined
  querySelectorAll(selectors: string): ArrayLike<DomElement>
  closest(selectors: string): DomElement | null | undefined
  remove(): void
}
interface DomDocument {
  readonly title: string
  readonly body: DomElement | null
  querySelector(selectors: string): DomElement | null | undefined
  querySelectorAll(selectors: string): ArrayLike<DomElement>
}
const parseDocument = (html: string): DomDocument => libs().domino.createDocument(html, true) as DomDocument

/** Never content: code, styling, embedded media and widgets. */
const alwaysDropped = [
  "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed", "video", "audio",
  "form", "button", "input", "select", "textarea", "dialog", "link", "meta",
  "nav", "[role=navigation]", "[role=banner]", "[role=contentinfo]", "[role=search]", "[aria-hidden=true]", "[hidden]"
].join(",")

/** Site chrome, unless it belongs to the content (an article's own header holds its title). */
const chrome = ["header", "footer", "aside"].join(",")

const contentRoots = ["main", "[role=main]", "article"]

const absolute = (value: string, base: string): string | undefined => {
  try {
    return new URL(value, base).href
  } catch {
    return undefined
  }
}

const makeTurndown = (): TurndownService => {
  const { gfm, Turndown } = libs()
  const service = new Turndown({ headingStyle: "atx", codeBlockStyle: "fenced", bulletListMarker: "-", emDelimiter: "_", hr: "---" })
  service.use(gfm)
  // One space after the marker (turndown's default is three): fewer tokens, the same Markdown.
  service.addRule("listItem", {
    filter: "li",
    replacement: (content, node) => {
      const item = node as unknown as DomElement
      const parent = item.parentNode
      let prefix = "- "
      if (parent?.nodeName === "OL") {
        const start = Number(parent.getAttribute("start") ?? "1")
        const index = Array.prototype.indexOf.call(parent.children, item)
        prefix = `${(Number.isFinite(start) ? start : 1) + index}. `
      }
      const body = content.replace(/^\n+/, "").replace(/\n+$/, "\n").replace(/\n/gm, `\n${" ".repeat(prefix.length)}`)
      return prefix + body + (item.nextSibling !== null && !/\n$/.test(body) ? "\n" : "")
    }
  })
  // Inline images only when they are ordinary web URLs (a data: URI can be megabytes of base64).
  service.addRule("image", {
    filter: "img",
    replacement: (_content, node) => {
      const image = node as unknown as DomElement
      const alt = (image.getAttribute("alt") ?? "").replace(/\s+/g, " ").trim()
      const src = image.getAttribute("src") ?? ""
      return /^https?:/i.test(src) ? `![${alt}](${src})` : alt
    }
  })
  return service
}

const collapseBlankLines = (markdown: string) => markdown.replace(/\n{3,}/g, "\n\n").trim()

/** The readable Markdown of an HTML page fetched from `baseUrl` (which resolves its relative links). */
export const htmlToMarkdown = (html: string, baseUrl: string): string => {
  const document = parseDocument(html)
  const title = document.title.replace(/\s+/g, " ").trim()
  const base = absolute(document.querySelector("base[href]")?.getAttribute("href") ?? "", baseUrl) ?? baseUrl
  for (const element of Array.from(document.querySelectorAll(alwaysDropped))) element.remove()
  for (const element of Array.from(document.querySelectorAll(chrome))) {
    if (element.parentNode !== null && element.closest("main, article, [role=main]") == null) element.remove()
  }
  for (const [selector, attribute] of [["a[href]", "href"], ["img[src]", "src"]] as const) {
    for (const element of Array.from(document.querySelectorAll(selector))) {
      const value = element.getAttribute(attribute) ?? ""
      if (value.startsWith("#") || /^javascript:/i.test(value)) continue
      const resolved = absolute(value, base)
      if (resolved !== undefined) element.setAttribute(attribute, resolved)
    }
  }
  const root = contentRoots.map((selector) => document.querySelector(selector)).find((element) => element != null) ?? document.body
  const body = root == null ? "" : collapseBlankLines(makeTurndown().turndown(root as unknown as TurndownService.Node))
  if (title === "") return body
  // The content's own first heading often repeats the title.
  const firstLine = body.split("\n", 1)[0] ?? ""
  if (/^#{1,2} /.test(firstLine) && firstLine.replace(/^#+ /, "").trim() === title) return body
  return body === "" ? `# ${title}` : `# ${title}\n\n${body}`
}

/** The text of an HTML fragment (a search result's snippet with `<strong>` marks and entities). */
export const htmlFragmentText = (fragment: string): string => {
  if (!/[<&]/.test(fragment)) return fragment.replace(/\s+/g, " ").trim()
  const document = parseDocument(`<body>${fragment}</body>`)
  return (document.body?.textContent ?? "").replace(/\s+/g, " ").trim()
}
