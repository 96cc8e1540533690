// A stable colour for each agent: the hue comes from a hash of its name, so the same agent has
// the same colour in every room, every tab and every session, with nothing to configure.

/** FNV-1a, 32 bits, over the name's UTF-16 code units. */
export function hashName(name) {
  let hash = 0x811c9dc5;
  const text = String(name ?? "");
  for (let i = 0; i < text.length; i += 1) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

/** The hue (0-359) an agent's name is shown in; the stylesheet picks lightness per theme. */
export function agentHue(name) {
  return hashName(name) % 360;
}
