// Building elements without ever parsing HTML: strings become text nodes, properties are set
// as properties, and handlers are functions attached with addEventListener (the page's
// Content-Security-Policy forbids inline handlers anyway).

const ATTRIBUTES = new Set(["aria-label", "aria-live", "aria-expanded", "aria-controls", "aria-current", "aria-pressed",
  "aria-hidden", "role", "for", "list", "autocomplete", "enterkeyhint", "inputmode", "title", "placeholder", "accept",
  "type", "name", "id", "tabindex", "spellcheck", "rows", "maxlength", "datetime"]);

/** h("button", {class: "primary", onclick: fn, dataset: {id}}, "Send") */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (ATTRIBUTES.has(key) || key.startsWith("aria-")) el.setAttribute(key, value === true ? "" : String(value));
    else el[key] = value;
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/**
 * Show `items` ({key, sig}) in `container`, in order, building only the ones whose signature
 * changed (`build(item)` makes its element): a long conversation does not redraw for each
 * streamed word.
 */
export function keyed(container, items, build) {
  const cache = container._keyed ?? new Map();
  const next = new Map();
  let position = 0;
  for (const item of items) {
    let entry = cache.get(item.key);
    if (!entry || entry.sig !== item.sig) {
      const el = build(item);
      if (entry) entry.el.replaceWith(el);
      entry = { sig: item.sig, el };
    }
    next.set(item.key, entry);
    const here = container.children[position];
    if (here !== entry.el) container.insertBefore(entry.el, here ?? null);
    position += 1;
  }
  for (const [key, entry] of cache) if (!next.has(key)) entry.el.remove();
  container._keyed = next;
}

/** "14:05", or a date and time when not today. */
export function when(seconds) {
  if (!seconds) return "";
  const date = new Date(seconds * 1000);
  const today = new Date();
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return date.toDateString() === today.toDateString() ? time : `${date.toLocaleDateString()} ${time}`;
}

export function humanSize(bytes) {
  if (!Number.isFinite(bytes)) return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${Math.round(bytes / 1024)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
