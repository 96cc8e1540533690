// Markdown that cannot become HTML: what a model or a person wrote is parsed into a small
// tree (paragraphs, headings, lists, quotes, code, emphasis, links) and built with
// createElement and text nodes only. Nothing is ever parsed as HTML, so `<script>` or
// `<img onerror=...>` in a message is shown as the characters it is.
//
// Links keep only http, https and mailto addresses (no `javascript:`, no `data:`), open in a
// new tab and send no referrer. Very long texts are shown as plain text.

export const MAX_MARKDOWN_CHARS = 100_000;
const MAX_DEPTH = 4;
const SAFE_HREF = /^(https?:\/\/|mailto:)[^\s\u0000-\u001f]+$/i;

/** Whether an address may become a link. */
export function safeHref(href) {
  return SAFE_HREF.test(href);
}

/** The block tree of a text. */
export function parse(text, depth = 0) {
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s{0,3}(```|~~~)\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end)
      blocks.push({ type: "code", lang: fence[2], text: body.join("\n") });
      continue;
    }
    if (line.trim() === "") {
      i += 1;
      continue;
    }
    const heading = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      blocks.push({ type: "heading", level: heading[1].length, children: inline(heading[2]) });
      i += 1;
      continue;
    }
    if (/^\s{0,3}>/.test(line) && depth < MAX_DEPTH) {
      const body = [];
      while (i < lines.length && /^\s{0,3}>/.test(lines[i])) body.push(lines[i++].replace(/^\s{0,3}>\s?/, ""));
      blocks.push({ type: "quote", children: parse(body.join("\n"), depth + 1) });
      continue;
    }
    const item = listItem(line);
    if (item) {
      const items = [];
      while (i < lines.length) {
        const next = listItem(lines[i]);
        if (next && next.ordered === item.ordered) {
          items.push([next.text]);
        } else if (items.length && lines[i].trim() !== "" && /^\s+/.test(lines[i])) {
          items[items.length - 1].push(lines[i].trim()); // a continuation line
        } else {
          break;
        }
        i += 1;
      }
      blocks.push({
        type: "list",
        ordered: item.ordered,
        start: item.start,
        items: items.map((parts) => inline(parts.join("\n"))),
      });
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() !== "" && !startsBlock(lines[i])) para.push(lines[i++]);
    if (para.length === 0) para.push(lines[i++]); // a line that looked like a block and was not one
    blocks.push({ type: "paragraph", children: inline(para.join("\n")) });
  }
  return blocks;
}

function listItem(line) {
  const bullet = /^\s{0,3}[-*+]\s+(.*)$/.exec(line);
  if (bullet) return { ordered: false, start: 1, text: bullet[1] };
  const numbered = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/.exec(line);
  if (numbered) return { ordered: true, start: Number(numbered[1]), text: numbered[2] };
  return null;
}

function startsBlock(line) {
  return /^\s{0,3}(```|~~~|#{1,6}\s|>)/.test(line) || listItem(line) !== null;
}

// Inline marks, tried at each position in this order: the earliest match wins.
const INLINE = [
  { type: "code", re: /`([^`\n]+)`/y },
  { type: "link", re: /\[([^\]\n]{1,500})\]\(([^)\s]{1,2000})\)/y },
  { type: "strong", re: /\*\*(?=\S)([\s\S]*?\S)\*\*/y },
  { type: "strong", re: /__(?=\S)([\s\S]*?\S)__(?![\w])/y },
  { type: "em", re: /\*(?=[^\s*])([^*\n]*?[^\s*])\*/y },
  { type: "em", re: /(?<![\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?![\w])/y },
  { type: "autolink", re: /https?:\/\/[^\s<>"`]+/y },
];
const INLINE_START = /[`[*_h]/g;

/** The inline nodes of a text: text, br, code, strong, em and link. */
export function inline(text, depth = 0) {
  const nodes = [];
  let plain = "";
  const flush = () => {
    if (plain === "") return;
    const parts = plain.split("\n");
    parts.forEach((part, n) => {
      if (n > 0) nodes.push({ type: "br" });
      if (part !== "") nodes.push({ type: "text", text: part });
    });
    plain = "";
  };
  let pos = 0;
  while (pos < text.length) {
    INLINE_START.lastIndex = pos;
    const found = INLINE_START.exec(text);
    if (found === null) break;
    plain += text.slice(pos, found.index);
    pos = found.index;
    const node = depth < MAX_DEPTH ? matchAt(text, pos, depth) : null;
    if (node === null) {
      plain += text[pos];
      pos += 1;
      continue;
    }
    flush();
    nodes.push(node.node);
    pos = node.end;
  }
  plain += text.slice(pos);
  flush();
  return nodes;
}

const TRAILING = /[.,;:!?'*_~]$/;
const CLOSERS = { ")": "(", "]": "[", "}": "{" };

function count(text, ch) {
  let n = 0;
  for (const c of text) if (c === ch) n += 1;
  return n;
}

/**
 * A bare address as people mean it: without the punctuation of the sentence or markup around
 * it (`"https://example.com"}` is `https://example.com`). Trailing sentence marks go, and so
 * does a closing bracket the address did not open (`(see https://x.test/a_(b))` keeps its
 * own pair).
 */
export function trimUrl(candidate) {
  let url = candidate;
  for (;;) {
    const last = url.at(-1);
    if (last !== undefined && TRAILING.test(last)) {
      url = url.slice(0, -1);
    } else if (last !== undefined && last in CLOSERS && count(url, last) > count(url, CLOSERS[last])) {
      url = url.slice(0, -1);
    } else {
      return url;
    }
  }
}

function matchAt(text, pos, depth) {
  for (const { type, re } of INLINE) {
    re.lastIndex = pos;
    const m = re.exec(text);
    if (m === null) continue;
    const end = re.lastIndex;
    if (type === "code") return { end, node: { type: "code", text: m[1] } };
    if (type === "link") {
      if (!safeHref(m[2])) continue;
      return { end, node: { type: "link", href: m[2], children: inline(m[1], depth + 1) } };
    }
    if (type === "autolink") {
      const href = trimUrl(m[0]);
      if (!safeHref(href) || !/^https?:\/\/[^/?#]/i.test(href)) continue;
      return { end: pos + href.length, node: { type: "link", href, children: [{ type: "text", text: href }] } };
    }
    return { end, node: { type, children: inline(m[1], depth + 1) } };
  }
  return null;
}

// --- building the DOM -----------------------------------------------------------------------

/** A fragment showing `text` as Markdown (or plain text, past MAX_MARKDOWN_CHARS). */
export function renderMarkdown(doc, text) {
  const fragment = doc.createDocumentFragment();
  const source = String(text ?? "");
  if (source.length > MAX_MARKDOWN_CHARS) {
    const p = doc.createElement("p");
    p.className = "plain";
    p.textContent = source;
    fragment.append(p);
    return fragment;
  }
  for (const block of parse(source)) fragment.append(renderBlock(doc, block));
  return fragment;
}

function renderBlock(doc, block) {
  switch (block.type) {
    case "code": {
      const pre = doc.createElement("pre");
      const code = doc.createElement("code");
      code.textContent = block.text;
      pre.append(code);
      return pre;
    }
    case "heading": {
      // Headings inside a message are emphasis, not the page's outline.
      const h = doc.createElement("p");
      h.className = `md-h md-h${block.level}`;
      appendInline(doc, h, block.children);
      return h;
    }
    case "quote": {
      const q = doc.createElement("blockquote");
      for (const child of block.children) q.append(renderBlock(doc, child));
      return q;
    }
    case "list": {
      const list = doc.createElement(block.ordered ? "ol" : "ul");
      if (block.ordered && block.start !== 1) list.start = block.start;
      for (const item of block.items) {
        const li = doc.createElement("li");
        appendInline(doc, li, item);
        list.append(li);
      }
      return list;
    }
    default: {
      const p = doc.createElement("p");
      appendInline(doc, p, block.children);
      return p;
    }
  }
}

function appendInline(doc, parent, nodes) {
  for (const node of nodes) {
    switch (node.type) {
      case "text":
        parent.append(doc.createTextNode(node.text));
        break;
      case "br":
        parent.append(doc.createElement("br"));
        break;
      case "code": {
        const code = doc.createElement("code");
        code.textContent = node.text;
        parent.append(code);
        break;
      }
      case "link": {
        const a = doc.createElement("a");
        a.href = node.href;
        a.target = "_blank";
        a.rel = "noopener noreferrer nofollow";
        appendInline(doc, a, node.children);
        parent.append(a);
        break;
      }
      default: {
        const el = doc.createElement(node.type === "strong" ? "strong" : "em");
        appendInline(doc, el, node.children);
        parent.append(el);
      }
    }
  }
}
