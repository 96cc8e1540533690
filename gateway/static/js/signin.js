// How a tab gets its token, and forgets it (or needs none: a loopback gateway with no token
// anywhere lets the person at this machine in as they are).
//
// `botweave web` prints a link whose one-time code sits in the URL fragment (#code=...): a
// fragment never leaves the browser in a request line, so no server or proxy log sees it.
// The page takes the code out of the address bar at once (history.replaceState, before
// anything else happens, so it is not kept in the history either), and exchanges it once, in
// the body of a POST, for the tab's token. The token is kept in sessionStorage: this tab
// only, gone when the tab closes, never in a URL. Signing out forgets it here and ends it at
// the gateway.

const TOKEN_KEY = "botweave.token";

/** The code in a `#code=...` fragment, or null. */
export function codeFromFragment(hash) {
  const match = /^#(?:.*&)?code=([^&]*)/.exec(hash ?? "");
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]) || null;
  } catch {
    return null;
  }
}

/** Take the sign-in code out of the address bar (and so out of the history); return it. */
export function takeCode(location, history) {
  const code = codeFromFragment(location.hash);
  if (code !== null) history.replaceState(history.state, "", location.pathname + location.search);
  return code;
}

export const tokens = {
  get(storage) {
    return storage.getItem(TOKEN_KEY);
  },
  set(storage, token) {
    storage.setItem(TOKEN_KEY, token);
  },
  forget(storage) {
    storage.removeItem(TOKEN_KEY);
  },
};

async function errorOf(response) {
  try {
    const body = await response.json();
    return body.error?.message ?? `HTTP ${response.status}`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

/**
 * Whether this gateway asks for a token (GET /session). A gateway on a loopback address with
 * no token anywhere lets the person at this machine in without one: then the page connects
 * at once instead of showing its sign-in form. When in doubt (offline, an older gateway), a
 * token is needed.
 */
export async function tokenNeeded(fetchImpl) {
  try {
    const response = await fetchImpl("/session", { credentials: "omit", cache: "no-store" });
    if (!response.ok) return true;
    const body = await response.json();
    return body.token_needed !== false;
  } catch {
    return true;
  }
}

/** Exchange a one-time code for the tab's token (POST /session). */
export async function exchangeCode(fetchImpl, code) {
  const response = await fetchImpl("/session", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code }),
    credentials: "omit",
    cache: "no-store",
  });
  if (!response.ok) throw new Error(await errorOf(response));
  const body = await response.json();
  if (typeof body.token !== "string") throw new Error("the gateway answered without a token");
  return body.token;
}

/** End the tab's session at the gateway (a token from a link stops working). */
export async function endSession(fetchImpl, token) {
  try {
    await fetchImpl("/session", {
      method: "DELETE",
      headers: { Authorization: `Bearer ${token}` },
      credentials: "omit",
      cache: "no-store",
    });
  } catch {
    // Offline: the token is forgotten here all the same, and ends with the bot process.
  }
}
