/**
 * HTML to Markdown: the main content is preferred, chrome is dropped, links become absolute and
 * the title leads without being repeated.
 */
import { assert, describe, it } from "@effect/vitest"
import { htmlFragmentText, htmlToMarkdown } from "../../src/web/Html.js"

describe("HTML to Markdown", () => {
  it("an <article> is preferred over the page around it; its own header (the title) is kept, the title not repeated", () => {
    const html = `<html><head><title>Release notes</title></head><body>
      <div class="sidebar"><a href="/x">Sidebar link</a></div>
      <article><header><h1>Release notes</h1></header><p>Version <em>2</em> is out.</p><footer>Share this</footer></article>
    </body></html>`
    assert.strictEqual(htmlToMarkdown(html, "https://example.com/notes"), "# Release notes\n\nVersion _2_ is out.\n\nShare this")
  })

  it("without a main element the body is used; relative links and images resolve against the page (or its <base>), data: images keep only their alt text", () => {
    const html = `<html><head><base href="https://cdn.example.com/docs/"></head><body>
      <p><a href="guide.html">Guide</a> and <img src="logo.png" alt="Logo"> and <img src="data:image/png;base64,AAAA" alt="Inline"></p>
      <ol start="3"><li>three</li><li>four</li></ol></body></html>`
    assert.strictEqual(
      htmlToMarkdown(html, "https://example.com/page"),
      "[Guide](https://cdn.example.com/docs/guide.html) and ![Logo](https://cdn.example.com/docs/logo.png) and Inline\n\n3. three\n4. four"
    )
  })

  it("hidden elements, forms, iframes and svg are dropped", () => {
    const html = `<body><main><p>Keep</p><div hidden>Hidden</div><div aria-hidden="true">Aria</div>
      <form><input value="q"><button>Search</button></form><iframe src="https://ads.example"></iframe><svg><text>Icon</text></svg></main></body>`
    assert.strictEqual(htmlToMarkdown(html, "https://example.com/"), "Keep")
  })

  it("a search snippet's tags and entities become plain text", () => {
    assert.strictEqual(htmlFragmentText("The <strong>Effect</strong> &amp; <em>Schema</em>  docs&#39; index"), "The Effect & Schema docs' index")
    assert.strictEqual(htmlFragmentText("  plain   text "), "plain text")
  })
})
