// Safe Markdown: what is parsed, and that nothing in a text can become markup or a script link.
import assert from "node:assert/strict";
import { test } from "node:test";

import { agentHue, hashName } from "../../../gateway/static/js/colour.js";
import { inline, parse, safeHref, trimUrl } from "../../../gateway/static/js/markdown.js";

function flat(nodes) {
  return nodes.map((n) => (n.type === "text" ? n.text : n.type === "br" ? "\n" : `<${n.type}${n.href ? ` ${n.href}` : ""}>${n.children ? flat(n.children) : n.text}</${n.type}>`)).join("");
}

test("HTML in a text stays text", () => {
  const source = '<img src=x onerror=alert(1)><script>alert(2)</script>';
  const blocks = parse(source);
  assert.equal(blocks.length, 1);
  assert.deepEqual(blocks[0].children, [{ type: "text", text: source }]);
});

test("emphasis, code and links", () => {
  assert.equal(flat(inline("a **b** *c* `d*e*` [f](https://x.test/p)")), "a <strong>b</strong> <em>c</em> <code>d*e*</code> <link https://x.test/p>f</link>");
  assert.equal(flat(inline("see https://example.com/a.")), "see <link https://example.com/a>https://example.com/a</link>.");
});

test("only http, https and mailto become links", () => {
  assert.equal(flat(inline("[x](javascript:alert(1))")), "[x](javascript:alert(1))");
  assert.equal(flat(inline("[x](data:text/html,hi)")), "[x](data:text/html,hi)");
  assert.equal(safeHref("JaVaScRiPt:alert(1)"), false);
  assert.equal(safeHref("https://ok.test"), true);
  assert.equal(safeHref("mailto:a@b.test"), true);
  assert.equal(safeHref("https://a.test/\u0000x"), false);
});

test("blocks: fenced code keeps its text verbatim; lists, quotes and headings", () => {
  const blocks = parse("# Title\n\n- one\n- two\n\n1. first\n2. second\n\n> quoted\n\n```js\nlet a = '<b>';\n```\nafter");
  assert.deepEqual(blocks.map((b) => b.type), ["heading", "list", "list", "quote", "code", "paragraph"]);
  assert.equal(blocks[1].items.length, 2);
  assert.equal(blocks[2].ordered, true);
  assert.equal(blocks[4].text, "let a = '<b>';");
});

test("line breaks inside a paragraph are kept", () => {
  const [p] = parse("one\ntwo");
  assert.deepEqual(p.children.map((n) => n.type), ["text", "br", "text"]);
});

test("unclosed marks are plain text", () => {
  assert.equal(flat(inline("2 * 3 and **not closed and `tick")), "2 * 3 and **not closed and `tick");
  assert.equal(flat(inline("snake_case_name")), "snake_case_name");
});

test("nesting is bounded (a pathological text does not recurse without end)", () => {
  const deep = "[".repeat(2000) + "x" + "](https://a.test)".repeat(2000);
  assert.doesNotThrow(() => parse(deep));
  const quotes = ">".repeat(5000) + " x";
  assert.doesNotThrow(() => parse(quotes));
});

test("an agent's colour comes from its name and never changes", () => {
  assert.equal(agentHue("planner"), agentHue("planner"));
  assert.notEqual(agentHue("planner"), agentHue("critic"));
  assert.equal(hashName(""), 0x811c9dc5);
  assert.ok(agentHue("anyone") >= 0 && agentHue("anyone") < 360);
});

test("a bare address leaves the punctuation around it out of the link", () => {
  const cases = [
    ['"https://example.com"}', '"<link https://example.com>https://example.com</link>"}'],
    ["{\"url\": \"https://example.com/a?b=1\"}", "{\"url\": \"<link https://example.com/a?b=1>https://example.com/a?b=1</link>\"}"],
    ["(see https://example.com/x)", "(see <link https://example.com/x>https://example.com/x</link>)"],
    ["https://en.wikipedia.org/wiki/Foo_(bar).", "<link https://en.wikipedia.org/wiki/Foo_(bar)>https://en.wikipedia.org/wiki/Foo_(bar)</link>."],
    ["[https://example.com/a]", "[<link https://example.com/a>https://example.com/a</link>]"],
    ["'https://example.com/it's'", "'<link https://example.com/it's>https://example.com/it's</link>'"],
    ["go to https://example.com/path?!", "go to <link https://example.com/path>https://example.com/path</link>?!"],
    ["<https://example.com/a>", "<<link https://example.com/a>https://example.com/a</link>>"],
    ["`https://example.com` stays code", "<code>https://example.com</code> stays code"],
    ["https://example.com/a,b;c", "<link https://example.com/a,b;c>https://example.com/a,b;c</link>"],
    ["at https://example.com:8080/x: here", "at <link https://example.com:8080/x>https://example.com:8080/x</link>: here"],
    ["http://\" is not an address", "http://\" is not an address"],
  ];
  for (const [source, shown] of cases) assert.equal(flat(inline(source)), shown, source);
});

test("trimUrl drops sentence marks and brackets it did not open, keeps its own", () => {
  assert.equal(trimUrl("https://x.test/a.)"), "https://x.test/a");
  assert.equal(trimUrl("https://x.test/a_(b)"), "https://x.test/a_(b)");
  assert.equal(trimUrl("https://x.test/a}]"), "https://x.test/a");
  assert.equal(trimUrl("https://x.test/{id}"), "https://x.test/{id}");
});
