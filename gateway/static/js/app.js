// The page: sign-in, then one connection to the gateway and the views on the model the
// reducer keeps (sessions and chat, conversations to watch, approvals, pairing, status).
// Signed in, a person who may chat lands on a new chat, its composer focused: the session is
// created when the first message is sent, so nothing is left behind by a look at the page.

import { GatewayClient } from "./client.js";
import { agentHue } from "./colour.js";
import { fill, h, humanSize, keyed, when } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import {
  addEcho, applyConnect, applyEvent, applyHistory, applySubscribed, conversation, echoFailed, echoSent,
  initialState, openApprovals, openPairing, resumeCursors, running, timeline, unsentEchoes,
} from "./reducer.js";
import { endSession, exchangeCode, takeCode, tokenNeeded, tokens } from "./signin.js";

const VIEWS = [
  { id: "chats", label: "Chats" },
  { id: "watch", label: "Watch" },
  { id: "approvals", label: "Approvals" },
  { id: "pairing", label: "Pairing" },
  { id: "status", label: "Status" },
];
const STOP_REASONS = {
  stopped: "Stopped.",
  interrupted: "Interrupted.",
  edited: "The message was edited: answering again.",
  deleted: "Cancelled: the message was deleted.",
  collected: "Answered together with a later message.",
};
const STATUS_TEXT = { connecting: "Connecting…", open: "Connected", reconnecting: "Reconnecting…", refused: "Signed out", closed: "Offline" };

function newKey() {
  return crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

function wsUrl() {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
}

class Page {
  constructor(root) {
    this.root = root;
    this.state = initialState();
    this.client = null;
    this.token = null;
    this.view = "chats";
    this.open = null; // the conversation key shown in the main pane (chat or watch)
    this.editing = null; // the id of the message being edited
    this.search = "";
    this.attachments = []; // {id, file, url, state, ref, error} waiting to be sent with the next message
    this.files = new Map(); // file_id -> Promise of an object URL
    this.health = null;
    this.rooms = [];
    this.agents = []; // what agents.list answered: the agents a new chat may talk to
    this.newAgent = ""; // the agent picked for the next new chat ("" = the default)
    this.sharing = null; // the session whose share panel is open
    this.shareSeconds = 86400;
    this.shares = new Map(); // session id -> shares made in this tab: {share_id, token, expires_at, revoked}
    this.scheduled = false;
    this.starting = false; // a new chat's session is being created for its first message
    this.status = { name: "closed", detail: {} };
  }

  // --- signing in and out -----------------------------------------------------------------

  async boot() {
    const code = takeCode(location, history);
    if (code !== null) {
      this.renderSignIn("Signing in…");
      try {
        const token = await exchangeCode(fetch, code);
        tokens.set(sessionStorage, token);
      } catch (error) {
        this.renderSignIn(`That sign-in link did not work (${error.message}). Run botweave web again for a new one, or paste a token.`);
        return;
      }
    }
    const token = tokens.get(sessionStorage);
    if (token) this.start(token);
    else if (!(await tokenNeeded(fetch))) this.start(null); // the person at this machine: no token to ask for
    else this.renderSignIn();
  }

  start(token) {
    this.token = token;
    this.state = initialState();
    this.renderShell();
    this.client = new GatewayClient({
      url: wsUrl(),
      token,
      resume: () => resumeCursors(this.state),
      onConnected: (result) => this.connected(result),
      onEvent: (frame) => this.event(frame),
      onStatus: (name, detail) => this.setStatus(name, detail),
    });
    this.client.start();
  }

  async signOut(message = "") {
    const token = this.token;
    this.client?.stop();
    this.client = null;
    this.token = null;
    tokens.forget(sessionStorage);
    for (const url of this.files.values()) url.then((u) => URL.revokeObjectURL(u), () => {});
    this.files.clear();
    if (token) await endSession(fetch, token);
    this.renderSignIn(message);
  }

  renderSignIn(message = "") {
    document.body.classList.remove("nav-open");
    const input = h("input", { id: "token", type: "password", autocomplete: "off", spellcheck: false, placeholder: "bwg_…", "aria-label": "Gateway token" });
    const form = h("form", { class: "signin card", onsubmit: (e) => {
      e.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      tokens.set(sessionStorage, token);
      this.start(token);
    } },
    h("h1", {}, "botweave"),
    h("p", { class: "muted" }, "Open the link botweave web printed, or sign in with a gateway token."),
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    message ? h("p", { class: "notice", role: "status" }, message) : null);
    fill(this.root, h("main", { class: "signin-page" }, form));
    input.focus();
  }

  // --- the connection ---------------------------------------------------------------------

  setStatus(name, detail) {
    this.status = { name, detail };
    if (name === "refused") {
      this.signOut(this.token
        ? `The gateway refused this tab's token (${detail.why}). Sign in again.`
        : "This gateway asks for a token now. Sign in with one.");
      return;
    }
    this.renderStatusPill();
  }

  async connected(result) {
    applyConnect(this.state, result);
    for (const key of Object.keys(result.refused ?? {})) conversation(this.state, key).following = false;
    this.schedule();
    if (this.can("presence")) this.call("presence").then((r) => { this.state.presence = r.connections ?? []; this.schedule(); }, () => {});
    if (this.can("rooms.list")) this.call("rooms.list").then((r) => { this.rooms = r.rooms ?? []; this.schedule(); }, () => {});
    if (this.can("agents.list")) this.call("agents.list").then((r) => { this.agents = r.agents ?? []; this.schedule(); }, () => {});
    if (this.view === "watch") this.loadListing();
    if (this.open !== null && !conversation(this.state, this.open).following) await this.follow(this.open);
    if (this.open === null && this.state.principal?.kind === "share" && this.state.sessions.size === 1) {
      this.openConversation([...this.state.sessions.values()][0].conversation); // a share reads its one chat
    }
    for (const { conversation: key, echo } of unsentEchoes(this.state)) this.sendEcho(key, echo);
  }

  event(frame) {
    const outcome = applyEvent(this.state, frame);
    if (outcome === "gap") {
      const conv = conversation(this.state, frame.conversation);
      this.call("subscribe", { conversation: conv.key, last_seq: conv.seq }).catch(() => {});
    }
    if (outcome === "applied") this.schedule();
  }

  can(method) {
    return this.state.methods.includes(method);
  }

  call(method, params = {}) {
    if (!this.client) return Promise.reject(new Error("signed out"));
    return this.client.request(method, params);
  }

  /** The Authorization header of HTTP requests: none where the gateway needs no token. */
  authHeaders() {
    return this.token ? { Authorization: `Bearer ${this.token}` } : {};
  }

  /** Whether this principal may start a chat of its own. */
  canStart() {
    return this.can("sessions.create") && this.can("chat.send");
  }

  /** Report a failed action for a few seconds. */
  complain(error) {
    const bar = document.getElementById("toast");
    if (!bar) return;
    bar.textContent = error?.message ?? String(error);
    bar.hidden = false;
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => { bar.hidden = true; }, 6000);
  }

  /** History, then every event after it: the conversation shown stays live. */
  async follow(key) {
    const conv = conversation(this.state, key);
    try {
      if (conv.seq === null) {
        const history = await this.call("chat.history", { conversation: key, limit: 100 });
        applyHistory(this.state, key, history);
      }
      const result = await this.call("subscribe", { conversation: key, last_seq: conv.seq ?? 0 });
      applySubscribed(this.state, key, result);
    } catch (error) {
      if (error.code !== "offline") this.complain(error);
    }
    this.schedule();
  }

  // --- actions ----------------------------------------------------------------------------

  openConversation(key) {
    this.open = key;
    this.editing = null;
    if (this.view !== "chats" && this.view !== "watch") this.view = this.sessionOf(key) ? "chats" : "watch";
    document.body.classList.remove("nav-open");
    this.renderMain(true);
    this.follow(key);
  }

  /** What a conversation is called: a session's title, the chat's name, else its key. */
  titleOf(key) {
    const session = this.sessionOf(key);
    if (session) return session.title || "New chat";
    return this.state.listing.find((c) => c.conversation === key)?.title || key;
  }

  sessionOf(key) {
    for (const session of this.state.sessions.values()) if (session.conversation === key) return session;
    return null;
  }

  async createSession(agent) {
    try {
      const params = agent ? { agent } : {};
      const { session } = await this.call("sessions.create", params);
      this.state.sessions.set(session.id, session);
      this.view = "chats";
      this.openConversation(session.conversation);
    } catch (error) {
      this.complain(error);
    }
  }

  /** The first message of a new chat: its session is made now, then the message sent in it. */
  async startChat(text) {
    const ready = this.attachments.some((a) => a.state === "ready");
    if ((!text.trim() && !ready) || this.starting) return;
    if (this.attachments.some((a) => a.state === "uploading")) {
      this.complain(new Error("wait for the attachments to finish uploading"));
      return;
    }
    this.starting = true;
    try {
      const { session } = await this.call("sessions.create", this.newAgent ? { agent: this.newAgent } : {});
      this.state.sessions.set(session.id, session);
      this.view = "chats";
      this.openConversation(session.conversation);
      this.send(session, text);
      document.getElementById("composer")?.focus();
    } catch (error) {
      this.complain(error);
    } finally {
      this.starting = false;
    }
  }

  async renameSession(session, title) {
    try {
      const result = await this.call("sessions.rename", { session: session.id, title });
      this.state.sessions.set(session.id, result.session);
    } catch (error) {
      this.complain(error);
    }
    this.renderAll();
  }

  async deleteSession(session) {
    try {
      await this.call("sessions.delete", { session: session.id });
      this.state.sessions.delete(session.id);
      this.state.conversations.delete(session.conversation);
      if (this.open === session.conversation) this.open = null;
    } catch (error) {
      this.complain(error);
    }
    this.renderAll();
  }

  send(session, text) {
    const ready = this.attachments.filter((a) => a.state === "ready");
    if (!text.trim() && ready.length === 0) return false;
    if (this.attachments.some((a) => a.state === "uploading")) {
      this.complain(new Error("wait for the attachments to finish uploading"));
      return false;
    }
    const echo = addEcho(this.state, session.conversation, {
      key: newKey(),
      session: session.id,
      text,
      attachments: ready.map((a) => ({ file_id: a.ref.file_id, filename: a.file.name, mime: a.file.type, size: a.file.size, local: a.url })),
    });
    this.attachments = [];
    this.sendEcho(session.conversation, echo);
    this.schedule();
    return true;
  }

  async sendEcho(key, echo) {
    echo.state = "sending";
    try {
      const result = await this.call("chat.send", {
        session: echo.session,
        text: echo.text,
        attachments: echo.attachments.map((a) => a.file_id),
        idempotency_key: echo.key,
      });
      echoSent(this.state, key, echo.key, result);
    } catch (error) {
      echoFailed(this.state, key, echo.key, error);
    }
    this.schedule();
  }

  async upload(file) {
    const item = { id: newKey(), file, url: file.type.startsWith("image/") ? URL.createObjectURL(file) : null, state: "uploading" };
    this.attachments.push(item);
    this.renderComposerFiles();
    try {
      const form = new FormData();
      form.append("file", file, file.name);
      const response = await fetch("/uploads", { method: "POST", body: form, headers: this.authHeaders(), credentials: "omit" });
      const body = await response.json().catch(() => ({}));
      if (!response.ok) throw new Error(body.error?.message ?? `upload failed (HTTP ${response.status})`);
      item.ref = body;
      item.state = "ready";
    } catch (error) {
      item.state = "failed";
      item.error = error.message;
      this.complain(new Error(`${file.name}: ${error.message}`));
    }
    this.renderComposerFiles();
  }

  /** A file of a message, fetched with the tab's token and shown from a blob URL. */
  fileUrl(fileId) {
    if (!this.files.has(fileId)) {
      const url = fetch(`/files/${encodeURIComponent(fileId)}`, { headers: this.authHeaders(), credentials: "omit" })
        .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(`HTTP ${r.status}`))))
        .then((blob) => URL.createObjectURL(blob));
      url.catch(() => this.files.delete(fileId));
      this.files.set(fileId, url);
    }
    return this.files.get(fileId);
  }

  async deleteMessage(session, message) {
    try {
      await this.call("chat.delete", { session: session.id, message_id: message.id });
    } catch (error) {
      this.complain(error);
    }
  }

  /** A read-only token for one session; shown in this tab only, for the person to pass on. */
  async createShare(session) {
    try {
      const share = await this.call("shares.create", { session: session.id, expires_seconds: this.shareSeconds });
      this.shares.set(session.id, [...(this.shares.get(session.id) ?? []), share]);
    } catch (error) {
      this.complain(error);
    }
    this.renderMain();
  }

  async revokeShare(share) {
    try {
      await this.call("shares.revoke", { share_id: share.share_id });
      share.revoked = true;
    } catch (error) {
      this.complain(error);
    }
    this.renderMain();
  }

  async resolveApproval(id, decision) {
    try {
      await this.call("approvals.resolve", { id, decision });
    } catch (error) {
      this.complain(error);
    }
  }

  async answerPairing(request, decision) {
    try {
      await this.call(decision === "approve" ? "pairing.approve" : "pairing.deny", { platform: request.platform, user_id: request.user_id });
      const key = `${request.platform}:${request.user_id}`;
      this.state.pairing.set(key, { ...request, outcome: decision === "approve" ? "approved" : "denied" });
    } catch (error) {
      this.complain(error);
    }
    this.renderAll();
  }

  async loadListing() {
    try {
      const result = await this.call("conversations.list", { limit: 200 });
      this.state.listing = result.conversations ?? [];
    } catch (error) {
      if (error.code !== "offline") this.complain(error);
    }
    this.renderSidebar();
  }

  async loadHealth() {
    try {
      const [health, presence] = await Promise.all([this.call("health"), this.call("presence")]);
      this.health = health;
      this.state.presence = presence.connections ?? [];
    } catch (error) {
      if (error.code !== "offline") this.complain(error);
    }
    this.renderMain();
  }

  setView(view) {
    this.view = view;
    if (view === "watch") this.loadListing();
    if (view === "status") this.loadHealth();
    if (view === "approvals" && this.can("approvals.list")) {
      this.call("approvals.list").then((r) => {
        for (const a of r.approvals ?? []) if (!this.state.approvals.has(a.id)) this.state.approvals.set(a.id, a);
        this.schedule();
      }, () => {});
    }
    if (view === "approvals" || view === "pairing" || view === "status") document.body.classList.remove("nav-open");
    this.renderAll();
  }

  // --- drawing ----------------------------------------------------------------------------

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.renderAll();
    });
  }

  renderShell() {
    const menu = h("button", { class: "icon menu", "aria-label": "Menu", "aria-controls": "sidebar", onclick: () => document.body.classList.toggle("nav-open") }, "☰");
    const header = h("header", { class: "topbar" },
      menu,
      h("span", { class: "brand" }, "botweave"),
      h("span", { id: "conn", class: "conn", role: "status", "aria-live": "polite" }),
      h("span", { class: "spacer" }),
      h("span", { id: "who", class: "who muted" }),
      // Without a token (the person at this machine) there is nothing to sign out of.
      this.token ? h("button", { id: "signout", class: "quiet", onclick: () => this.signOut("Signed out.") }, "Sign out") : null);
    const sidebar = h("aside", { id: "sidebar", class: "sidebar" });
    const main = h("main", { id: "main", class: "main" });
    const shade = h("div", { class: "shade", onclick: () => document.body.classList.remove("nav-open") });
    const toast = h("div", { id: "toast", class: "toast", role: "alert", hidden: true });
    fill(this.root, header, h("div", { class: "layout" }, sidebar, shade, main), toast);
    this.renderAll();
  }

  renderAll() {
    if (!this.client) return;
    this.renderStatusPill();
    const who = document.getElementById("who");
    if (who) who.textContent = this.state.principal?.name ?? "";
    this.renderSidebar();
    this.renderMain();
  }

  renderStatusPill() {
    const pill = document.getElementById("conn");
    if (!pill) return;
    const { name, detail } = this.status;
    pill.dataset.state = name;
    pill.dataset.opened = String(detail.opened ?? 0);
    let text = STATUS_TEXT[name] ?? name;
    if (name === "reconnecting" && detail.wait_ms) text = `Reconnecting in ${Math.max(1, Math.round(detail.wait_ms / 1000))} s`;
    pill.textContent = text;
  }

  renderSidebar() {
    const sidebar = document.getElementById("sidebar");
    if (!sidebar) return;
    const approvals = openApprovals(this.state).length;
    const pairing = openPairing(this.state).length;
    const badges = { approvals, pairing };
    const views = VIEWS.filter((v) => v.id !== "status" || this.can("health")); // a share has no status to see
    const tabs = h("nav", { class: "tabs", "aria-label": "Views" }, views.map((v) => h("button", {
      class: "tab",
      dataset: { view: v.id },
      "aria-current": this.view === v.id ? "page" : null,
      onclick: () => this.setView(v.id),
    }, v.label, badges[v.id] ? h("span", { class: "badge", "aria-label": `${badges[v.id]} waiting` }, String(badges[v.id])) : null)));
    let panel = null;
    if (this.view === "chats") panel = this.sessionsPanel();
    else if (this.view === "watch") panel = this.watchPanel();
    const focused = document.activeElement?.id;
    fill(sidebar, tabs, panel);
    if (focused === "search") {
      const search = document.getElementById("search");
      search.focus();
      search.setSelectionRange(search.value.length, search.value.length);
    }
    if (focused === "new-agent") document.getElementById("new-agent")?.focus();
  }

  sessionsPanel() {
    // The agents come from the gateway (agents.list): a person picks one, never types a name.
    const picker = h("select", { id: "new-agent", "aria-label": "Agent for a new chat", onchange: (e) => { this.newAgent = e.target.value; this.renderMain(); } },
      h("option", { value: "" }, "Default agent"),
      this.agents.map((a) => h("option", { value: a.name }, a.name)));
    picker.value = this.agents.some((a) => a.name === this.newAgent) ? this.newAgent : "";
    const create = this.can("sessions.create")
      ? h("form", { class: "new-session", onsubmit: (e) => { e.preventDefault(); this.createSession(picker.value); } },
        picker, h("button", { type: "submit", class: "primary" }, "New chat"))
      : null;
    const search = h("input", { id: "search", type: "search", value: this.search, placeholder: "Search chats", "aria-label": "Search chats", oninput: (e) => { this.search = e.target.value; this.renderSidebar(); } });
    const needle = this.search.toLowerCase();
    const sessions = [...this.state.sessions.values()]
      .filter((s) => !needle || (s.title ?? "").toLowerCase().includes(needle) || (s.agent ?? "").toLowerCase().includes(needle))
      .sort((a, b) => (b.updated ?? 0) - (a.updated ?? 0));
    const list = h("ul", { class: "list", "aria-label": "Chats" }, sessions.map((s) => h("li", {},
      h("button", { class: "item", dataset: { session: s.id }, "aria-current": this.open === s.conversation ? "true" : null, onclick: () => this.openConversation(s.conversation) },
        h("span", { class: "item-title" }, s.title || "New chat"),
        h("span", { class: "item-sub muted" }, [s.agent, when(s.updated)].filter(Boolean).join(" · "))))));
    return h("section", { class: "panel" }, create, search, sessions.length ? list : h("p", { class: "muted empty" }, needle ? "No chat matches." : "No chats yet."));
  }

  watchPanel() {
    const refresh = h("button", { class: "quiet", onclick: () => this.loadListing() }, "Refresh");
    const items = this.state.listing.map((c) => h("li", {},
      h("button", { class: "item", dataset: { conversation: c.conversation }, "aria-current": this.open === c.conversation ? "true" : null, onclick: () => this.openConversation(c.conversation) },
        h("span", { class: "item-title" }, h("span", { class: "platform" }, c.platform), " ", this.titleOf(c.conversation)),
        h("span", { class: "item-sub muted" }, [c.last_text, when(c.last_at)].filter(Boolean).join(" · ")))));
    return h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Conversations"), refresh),
      items.length ? h("ul", { class: "list", "aria-label": "Conversations" }, items) : h("p", { class: "muted empty" }, "Nothing to watch yet."));
  }

  renderMain(fresh = false) {
    const main = document.getElementById("main");
    if (!main) return;
    const kind = this.view === "approvals" || this.view === "pairing" || this.view === "status" ? this.view
      : this.open ? "conversation" : this.view === "chats" && this.canStart() ? "draft" : "empty";
    const shown = kind === "conversation" ? `conversation:${this.open}` : kind;
    if (fresh || main.dataset.shown !== shown) {
      main.dataset.shown = shown;
      fill(main);
      main._parts = null;
    }
    if (kind === "approvals") this.approvalsView(main);
    else if (kind === "pairing") this.pairingView(main);
    else if (kind === "status") this.statusView(main);
    else if (kind === "conversation") this.conversationView(main);
    else if (kind === "draft") this.draftView(main);
    else fill(main, h("div", { class: "empty-main muted" }, h("p", {}, "Pick a chat, or start a new one.")));
  }

  // A conversation: its header, its timeline and (in one's own session) the composer. The
  // parts are built once per conversation shown; the timeline is then updated in place.
  conversationView(main) {
    const key = this.open;
    const session = this.sessionOf(key);
    if (!main._parts) {
      const head = h("div", { class: "conv-head" });
      const log = h("div", { class: "timeline", role: "log", "aria-live": "polite", "aria-label": "Messages" });
      main._parts = { head, log, composer: session && this.can("chat.send") ? this.composer(session) : null };
      main.append(head, log);
      if (main._parts.composer) main.append(main._parts.composer);
      if (main._parts.composer) this.dropZone(main);
    }
    const { head, log } = main._parts;
    this.conversationHead(head, key, session);
    const nearBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
    const approvals = openApprovals(this.state, key);
    const items = timeline(this.state, key).map((item) => ({ ...item, sig: this.signature(item, approvals) }));
    if (approvals.length) {
      const placed = new Set(items.filter((i) => i.kind === "run").flatMap((i) => this.cardsFor(i.run, approvals).map((a) => a.id)));
      for (const approval of approvals) if (!placed.has(approval.id)) items.push({ kind: "approval", key: `a:${approval.id}`, approval, sig: JSON.stringify(approval) });
    }
    keyed(log, items, (item) => this.timelineItem(item, session, approvals));
    if (!items.length) log.dataset.empty = "true";
    else delete log.dataset.empty;
    if (nearBottom) log.scrollTop = log.scrollHeight;
    const stop = main.querySelector("#stop");
    if (stop) stop.hidden = !running(this.state, key);
  }

  // A new chat not yet started: a composer, focused, and (with several agents) whom to talk
  // to. Its first message creates the session (startChat).
  draftView(main) {
    if (!main._parts) {
      const head = h("div", { class: "conv-head" });
      const log = h("div", { class: "timeline", role: "log", "aria-label": "Messages" },
        h("p", { class: "muted draft-hint" }, "Say something to start a new chat."));
      const composer = this.composer(null);
      main._parts = { head, log, composer };
      main.append(head, log, composer);
      this.dropZone(main);
      if (!document.body.classList.contains("nav-open")) composer.querySelector("#composer").focus();
    }
    const { head } = main._parts;
    const names = this.agents.map((a) => a.name);
    const sig = JSON.stringify(["draft", names, this.newAgent]);
    if (head.dataset.sig === sig) return;
    head.dataset.sig = sig;
    const picker = names.length > 1
      ? h("select", { id: "draft-agent", "aria-label": "Agent for this chat", onchange: (e) => { this.newAgent = e.target.value; this.renderSidebar(); } },
        h("option", { value: "" }, "Default agent"), names.map((name) => h("option", { value: name }, name)))
      : null;
    if (picker) picker.value = names.includes(this.newAgent) ? this.newAgent : "";
    fill(head, h("div", { class: "conv-title" },
      h("h2", { id: "conv-title" }, "New chat"),
      names.length === 1 ? h("span", { class: "muted conv-sub" }, names[0]) : picker));
  }

  signature(item, approvals) {
    if (item.kind === "message") return `${item.message._rev}:${this.editing === item.message.id}:${item.live?.length ?? -1}`;
    if (item.kind === "run") return `${item.run.rev}:${item.showText}:${item.replied}:${this.cardsFor(item.run, approvals).map((a) => a.id).join(",")}`;
    return `${item.echo.state}:${item.echo.error ?? ""}`;
  }

  /** Approval cards shown inside a run: those for the tools it is waiting on. */
  cardsFor(run, approvals) {
    const waiting = new Set([...run.tools.values()].filter((t) => t.status === "awaiting_approval").map((t) => t.name));
    return approvals.filter((a) => waiting.has(a.tool));
  }

  conversationHead(head, key, session) {
    if (head.dataset.editing === "true") return;
    const room = this.rooms.find((r) => (r.conversations ?? []).includes(key));
    const title = this.titleOf(key);
    // Drawn again only when it changed: a streamed answer must not reset a token being copied.
    const shares = (this.shares.get(session?.id) ?? []).map((s) => `${s.share_id}:${Boolean(s.revoked)}`);
    const sig = JSON.stringify([key, title, session?.agent, room?.name, room?.members?.length, this.sharing, shares, this.state.methods]);
    if (head.dataset.sig === sig) return;
    head.dataset.sig = sig;
    const actions = [];
    if (session && this.can("shares.create")) {
      const open = this.sharing === session.id;
      actions.push(h("button", { class: "quiet", "aria-expanded": String(open), "aria-controls": "share-panel",
        onclick: () => { this.sharing = open ? null : session.id; this.renderMain(); } }, "Share"));
    }
    if (session && this.can("sessions.rename")) actions.push(h("button", { class: "quiet", onclick: () => this.startRename(head, session) }, "Rename"));
    if (session && this.can("sessions.delete")) actions.push(this.confirmButton("Delete", "Delete this chat?", () => this.deleteSession(session)));
    fill(head,
      h("div", { class: "conv-title" },
        h("h2", { id: "conv-title" }, title),
        h("span", { class: "muted conv-sub" }, session
          ? [session.agent, this.can("chat.send") ? null : "read-only"].filter(Boolean).join(" · ")
          : [room ? `room ${room.name}` : null, title !== key ? key : null].filter(Boolean).join(" · ")),
        room ? h("span", { class: "members" }, room.members.map((m) => this.agentChip(m.name, m.icon_emoji))) : null),
      h("div", { class: "conv-actions" }, actions),
      session && this.sharing === session.id ? this.sharePanel(session) : null);
  }

  /** Read-only tokens for a chat: made here, shown once (in this tab only), revocable. */
  sharePanel(session) {
    const choices = [[3600, "1 hour"], [86400, "1 day"], [604800, "7 days"]];
    const expiry = h("select", { id: "share-expiry", "aria-label": "The token works for", onchange: (e) => { this.shareSeconds = Number(e.target.value); } },
      choices.map(([seconds, label]) => h("option", { value: String(seconds) }, label)));
    expiry.value = String(this.shareSeconds);
    const made = (this.shares.get(session.id) ?? []).map((share) => {
      const token = h("input", { class: "share-token", readOnly: true, value: share.token, "aria-label": "Read-only token", spellcheck: false });
      const copy = h("button", { type: "button", class: "quiet small", onclick: () => {
        token.select();
        navigator.clipboard?.writeText(share.token).catch(() => {});
      } }, "Copy");
      return h("li", { class: "share", dataset: { share: share.share_id, revoked: String(Boolean(share.revoked)) } },
        share.revoked ? h("span", { class: "muted" }, "revoked") : [token, copy],
        h("span", { class: "muted small-text" }, share.revoked ? "" : `until ${when(share.expires_at)}`),
        share.revoked ? null : h("button", { type: "button", class: "quiet danger small", onclick: () => this.revokeShare(share) }, "Revoke"));
    });
    return h("section", { id: "share-panel", class: "share-panel", "aria-label": "Share this chat read-only" },
      h("p", { class: "small-text" }, "A read-only token: whoever signs in with it on this page follows this chat live and can do nothing else. It is shown only here, once."),
      h("div", { class: "row" }, expiry, h("button", { type: "button", class: "primary small", onclick: () => this.createShare(session) }, "Create token")),
      made.length ? h("ul", { class: "shares" }, made) : null);
  }

  startRename(head, session) {
    head.dataset.editing = "true";
    delete head.dataset.sig;
    const input = h("input", { value: session.title ?? "", "aria-label": "Chat title", maxlength: 200 });
    const done = (save) => {
      delete head.dataset.editing;
      if (save && input.value.trim()) this.renameSession(session, input.value.trim());
      else this.renderMain();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); done(true); }
      if (e.key === "Escape") done(false);
    });
    fill(head, h("form", { class: "rename", onsubmit: (e) => { e.preventDefault(); done(true); } }, input,
      h("button", { type: "submit", class: "primary" }, "Save"), h("button", { type: "button", class: "quiet", onclick: () => done(false) }, "Cancel")));
    input.focus();
    input.select();
  }

  /** A button that asks once more in its own label instead of opening a dialog. */
  confirmButton(label, question, action, look = "quiet danger") {
    const button = h("button", { class: look }, label);
    let armed = null;
    button.addEventListener("click", () => {
      if (armed) {
        clearTimeout(armed);
        action();
        return;
      }
      button.textContent = question;
      armed = setTimeout(() => { armed = null; button.textContent = label; }, 4000);
    });
    return button;
  }

  agentChip(name, emoji) {
    const chip = h("span", { class: "agent" }, emoji ? `${emoji} ` : "", name);
    chip.style.setProperty("--hue", String(agentHue(name)));
    return chip;
  }

  timelineItem(item, session, approvals) {
    if (item.kind === "message") return this.messageEl(item.live === undefined ? item.message : { ...item.message, text: item.live, _live: true }, session);
    if (item.kind === "run") return this.runEl(item, approvals);
    if (item.kind === "approval") return this.approvalCard(item.approval, true);
    return this.echoEl(item.echo, session);
  }

  messageEl(message, session) {
    const kind = message.author?.kind ?? "bot";
    const el = h("article", { class: `msg msg-${kind}${message._live ? " live" : ""}`, dataset: { id: message.id, kind } });
    const name = message.agent?.name ?? message.author?.name ?? kind;
    if (kind === "agent") el.style.setProperty("--hue", String(agentHue(name)));
    const author = kind === "agent" ? this.agentChip(name, message.agent?.icon_emoji) : h("span", { class: "author" }, name);
    const own = kind === "user" && session && !message.deleted && this.editing !== message.id;
    const tools = [];
    if (own && this.can("chat.edit")) tools.push(h("button", { class: "link edit", "aria-label": "Edit this message", onclick: () => { this.editing = message.id; this.renderMain(); } }, "Edit"));
    if (own && this.can("chat.delete")) tools.push(this.confirmButton("Delete", "Delete it?", () => this.deleteMessage(session, message), "link delete"));
    el.append(h("div", { class: "meta" }, author, h("time", { class: "muted" }, when(message.at)),
      message.edited ? h("span", { class: "muted" }, "edited") : null,
      tools.length ? h("span", { class: "msg-tools" }, tools) : null));
    if (message.deleted) {
      el.append(h("p", { class: "muted deleted" }, "message deleted"));
      return el;
    }
    if (this.editing === message.id) {
      el.append(this.editor(message, session));
      return el;
    }
    const body = h("div", { class: "body" });
    body.append(renderMarkdown(document, message.text ?? ""));
    el.append(body);
    if (message.attachments?.length) el.append(this.filesEl(message.attachments));
    if (message.buttons?.length) el.append(h("div", { class: "msg-buttons" }, message.buttons.map((b) => h("span", { class: "chip" }, b.label))));
    if (message.reactions?.length) el.append(h("div", { class: "reactions" }, message.reactions.join(" ")));
    return el;
  }

  editor(message, session) {
    const area = h("textarea", { class: "edit-text", rows: 3, "aria-label": "Edit message", value: message.text ?? "" });
    const save = async () => {
      const text = area.value;
      this.editing = null;
      this.renderMain();
      if (text === message.text) return;
      try {
        await this.call("chat.edit", { session: session.id, message_id: message.id, text });
      } catch (error) {
        this.complain(error);
      }
    };
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); save(); }
      if (e.key === "Escape") { this.editing = null; this.renderMain(); }
    });
    queueMicrotask(() => area.focus());
    return h("div", { class: "editor" }, area, h("div", { class: "row" },
      h("button", { class: "primary small", onclick: save }, "Save and re-run"),
      h("button", { class: "quiet small", onclick: () => { this.editing = null; this.renderMain(); } }, "Cancel")));
  }

  filesEl(files) {
    return h("div", { class: "files" }, files.map((f) => {
      if (f.mime?.startsWith("image/") && (f.file_id || f.local)) {
        const img = h("img", { class: "thumb", alt: f.filename ?? "image" });
        if (f.local) img.src = f.local;
        else this.fileUrl(f.file_id).then((url) => { img.src = url; }, () => { img.alt = `${f.filename ?? "image"} (not available)`; });
        return img;
      }
      const label = `${f.filename ?? "file"}${f.size ? ` (${humanSize(f.size)})` : ""}`;
      if (!f.file_id) return h("span", { class: "chip" }, label);
      return h("button", { class: "chip", onclick: () => this.download(f) }, `Download ${label}`);
    }));
  }

  async download(file) {
    try {
      const url = await this.fileUrl(file.file_id);
      const a = h("a", { href: url, download: file.filename ?? "file" });
      document.body.append(a);
      a.click();
      a.remove();
    } catch (error) {
      this.complain(error);
    }
  }

  runEl(item, approvals) {
    const { run } = item;
    const el = h("div", { class: `run run-${run.status}`, dataset: { run: run.run_id, status: run.status } });
    for (const tool of run.tools.values()) {
      el.append(h("details", { class: `tool tool-${tool.status}`, dataset: { tool: tool.name, status: tool.status } },
        h("summary", {}, h("span", { class: "tool-label muted" }, "tool"), h("span", { class: "tool-name" }, tool.name), h("span", { class: `state state-${tool.status}` }, tool.status.replace("_", " "))),
        h("pre", { class: "args" }, JSON.stringify(tool.arguments ?? {}, null, 2))));
    }
    for (const approval of this.cardsFor(run, approvals)) el.append(this.approvalCard(approval, true));
    if (item.showText) {
      const bubble = h("article", { class: "msg msg-bot live", dataset: { kind: "live" } });
      const body = h("div", { class: "body" });
      body.append(renderMarkdown(document, run.text));
      bubble.append(body);
      el.append(bubble);
    }
    if (run.status === "running" && !item.showText && run.tools.size === 0) el.append(h("p", { class: "muted typing" }, "Thinking…"));
    if (run.status === "stopped" && !item.replied) el.append(h("p", { class: "muted run-note" }, STOP_REASONS[run.reason] ?? "Stopped."));
    if (run.status === "error") el.append(h("p", { class: "run-note error-text" }, `The answer failed: ${run.error}`));
    return el;
  }

  echoEl(echo) {
    const el = h("article", { class: "msg msg-user echo", dataset: { kind: "echo", state: echo.state } });
    const meta = { sending: "sending…", sent: "sent", queued: "waiting for the connection", failed: `not sent: ${echo.error}` };
    el.append(h("div", { class: "meta" }, h("span", { class: "author" }, "you"), h("span", { class: "muted" }, meta[echo.state] ?? echo.state)));
    const body = h("div", { class: "body" });
    body.append(renderMarkdown(document, echo.text));
    el.append(body);
    if (echo.attachments?.length) el.append(this.filesEl(echo.attachments));
    if (echo.state === "failed") {
      el.append(h("div", { class: "msg-actions" }, h("button", { class: "quiet small", onclick: () => this.sendEcho(echo.conversation ?? this.open, echo) }, "Send again")));
    }
    return el;
  }

  /** An approval's card; `inline` when shown inside its own conversation. */
  approvalCard(approval, inline = false) {
    const card = h("section", { class: "approval card", dataset: { approval: approval.id }, "aria-label": `Approval for ${approval.tool}` });
    card.append(h("div", { class: "approval-head" }, h("span", { class: "tool-label muted" }, "approval needed"), h("strong", { class: "tool-name" }, approval.tool), approval.agent ? h("span", { class: "muted" }, ` asked by ${approval.agent}`) : null));
    card.append(h("pre", { class: "args" }, JSON.stringify(approval.arguments ?? {}, null, 2)));
    const facts = [];
    if (approval.approver?.name) facts.push(`approver: ${approval.approver.name}`);
    if (approval.deadline) facts.push(`until ${when(approval.deadline)}`);
    card.append(h("p", { class: "muted small-text" }, facts.join(" · ")));
    if (approval.conversation && !inline) {
      card.append(h("p", { class: "small-text" }, "in ",
        h("button", { class: "link", onclick: () => { this.view = this.sessionOf(approval.conversation) ? "chats" : "watch"; this.openConversation(approval.conversation); } },
          this.titleOf(approval.conversation))));
    }
    if (approval.outcome) {
      card.append(h("p", { class: "outcome" }, `${approval.outcome}${approval.by ? ` by ${approval.by.name ?? approval.by}` : ""}`));
      return card;
    }
    const buttons = h("div", { class: "row" },
      h("button", { class: "primary", onclick: (e) => { e.target.disabled = true; this.resolveApproval(approval.id, "approve"); } }, "Approve"),
      h("button", { class: "danger", onclick: (e) => { e.target.disabled = true; this.resolveApproval(approval.id, "deny"); } }, "Deny"));
    if (!this.can("approvals.resolve")) for (const b of buttons.children) b.disabled = true;
    card.append(buttons);
    return card;
  }

  composer(session) {
    const area = h("textarea", { id: "composer", rows: 1, placeholder: "Message", "aria-label": "Message", enterkeyhint: "send" });
    const grow = () => { area.style.height = "auto"; area.style.height = `${Math.min(area.scrollHeight, 200)}px`; };
    const submit = () => {
      if (!session) {
        this.startChat(area.value); // the new chat's view replaces this composer
        return;
      }
      if (this.send(session, area.value)) {
        area.value = "";
        grow();
      }
    };
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        submit();
      }
    });
    area.addEventListener("input", grow);
    const picker = h("input", { id: "picker", type: "file", multiple: true, hidden: true, onchange: (e) => { for (const f of e.target.files) this.upload(f); e.target.value = ""; } });
    const attach = h("button", { type: "button", class: "icon attach", "aria-label": "Attach files", title: "Attach files", onclick: () => picker.click() }, h("span", { class: "glyph", "aria-hidden": "true" }));
    const stop = h("button", { id: "stop", type: "button", class: "danger", hidden: true, onclick: () => this.call("chat.stop", { session: session.id }).catch((e) => this.complain(e)) }, "Stop");
    const sendButton = h("button", { id: "send", type: "submit", class: "primary" }, "Send");
    const form = h("form", { class: "composer", onsubmit: (e) => { e.preventDefault(); submit(); } },
      h("div", { id: "pending-files", class: "pending-files" }),
      h("div", { class: "composer-row" }, attach, picker, area, session ? stop : null, sendButton));
    return form;
  }

  renderComposerFiles() {
    const box = document.getElementById("pending-files");
    if (!box) return;
    fill(box, this.attachments.map((a) => h("span", { class: `chip file-${a.state}`, dataset: { state: a.state } },
      a.url ? h("img", { class: "mini", src: a.url, alt: "" }) : null,
      `${a.file.name} · ${a.state === "ready" ? humanSize(a.file.size) : a.state}`,
      h("button", { type: "button", class: "icon small", "aria-label": `Remove ${a.file.name}`, onclick: () => { this.attachments = this.attachments.filter((x) => x !== a); this.renderComposerFiles(); } }, "×"))));
  }

  dropZone(main) {
    let depth = 0;
    main.addEventListener("dragenter", (e) => { if (e.dataTransfer?.types?.includes("Files")) { depth += 1; main.classList.add("dropping"); e.preventDefault(); } });
    main.addEventListener("dragover", (e) => { if (e.dataTransfer?.types?.includes("Files")) e.preventDefault(); });
    main.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (depth === 0) main.classList.remove("dropping"); });
    main.addEventListener("drop", (e) => {
      e.preventDefault();
      depth = 0;
      main.classList.remove("dropping");
      for (const file of e.dataTransfer?.files ?? []) this.upload(file);
    });
  }

  approvalsView(main) {
    const open = openApprovals(this.state);
    const decided = [...this.state.approvals.values()].filter((a) => a.outcome && a.tool);
    fill(main, h("div", { class: "page" },
      h("h2", {}, "Approvals"),
      this.can("approvals.list") ? null : h("p", { class: "notice" }, "This token has no approvals scope."),
      open.length ? h("div", { class: "cards" }, open.map((a) => this.approvalCard(a))) : h("p", { class: "muted empty" }, "Nothing is waiting for you."),
      decided.length ? [h("h3", {}, "Decided"), h("div", { class: "cards" }, decided.map((a) => this.approvalCard(a)))] : null));
  }

  pairingView(main) {
    const requests = [...this.state.pairing.values()];
    const row = (p) => h("section", { class: "pairing card", dataset: { pairing: `${p.platform}:${p.user_id}` } },
      h("div", { class: "approval-head" }, h("strong", {}, p.name || p.user_id), h("span", { class: "platform" }, p.platform)),
      h("p", { class: "muted small-text" }, `user ${p.user_id}${p.created ? ` · asked ${when(p.created)}` : ""}`),
      p.outcome ? h("p", { class: "outcome" }, p.outcome) : h("div", { class: "row" },
        h("button", { class: "primary", onclick: () => this.answerPairing(p, "approve") }, "Approve"),
        h("button", { class: "danger", onclick: () => this.answerPairing(p, "deny") }, "Deny")));
    fill(main, h("div", { class: "page" },
      h("h2", {}, "Pairing requests"),
      this.can("pairing.list") ? null : h("p", { class: "notice" }, "This token has no pairing scope."),
      requests.length ? h("div", { class: "cards" }, requests.map(row)) : h("p", { class: "muted empty" }, "Nobody is waiting to be let in.")));
  }

  statusView(main) {
    const health = this.health;
    const failing = Object.entries(health?.failing ?? {});
    const differs = health?.config?.differs;
    const facts = health ? [
      ["agents", "Agents", (health.agents ?? []).map((a) => `${a.name} (${a.model})`).join(", ") || "none"],
      ["platforms", "Platforms", Object.entries(health.platforms ?? {}).map(([name, state]) => h("span", { class: `chip platform-state ${state === "connected" ? "ok" : "bad"}`, dataset: { platform: name } }, `${name}: ${state}`))],
      ["store", "Store", health.store ?? "unknown"],
      ["uptime", "Uptime", health.uptime_seconds === undefined ? "unknown" : duration(health.uptime_seconds)],
      ["config", "Config revision", health.config ? `${health.config.revision}${differs ? ` (${differs})` : ""}` : "unknown"],
      ["version", "botweave", health.version ?? "unknown"],
    ] : [];
    fill(main, h("div", { class: "page" },
      h("div", { class: "panel-head" }, h("h2", {}, "Status"), h("button", { class: "quiet", onclick: () => this.loadHealth() }, "Refresh")),
      h("p", { id: "health", class: `health health-${health?.status ?? "unknown"}` }, health ? `Health: ${health.status}` : "Health: asking…"),
      failing.length ? h("ul", {}, failing.map(([part, why]) => h("li", {}, `${part}: ${why}`))) : null,
      facts.length ? h("dl", { id: "about", class: "about" }, facts.map(([key, label, value]) => [h("dt", {}, label), h("dd", { dataset: { about: key } }, value)])) : null,
      h("h3", {}, "Connected now"),
      h("ul", { class: "list presence" }, this.state.presence.map((p) => h("li", { class: "item static" },
        h("span", { class: "item-title" }, typeof p.principal === "string" ? p.principal : p.principal?.name ?? "?"),
        h("span", { class: "item-sub muted" }, `${p.client?.name ?? ""} ${p.client?.version ?? ""} · since ${when(p.since)}`))))));
  }
}

/** How long something has run, as a person reads it: 3d 4h, 2h 5m, 4m 10s. */
function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const [d, hr, m] = [Math.floor(s / 86400), Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60)];
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  return `${m}m ${s % 60}s`;
}

const page = new Page(document.getElementById("app"));
page.boot();
