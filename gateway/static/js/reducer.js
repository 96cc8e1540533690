// The page's model of what the gateway said: the snapshot at connect, each conversation's
// history and events, and the messages this tab is still sending.
//
// It is plain data and plain functions (no DOM, no socket), so it can be tested without a
// browser. Three rules keep what a person sees right across reconnects:
//
// * every event of a conversation carries that conversation's seq: one already applied is a
//   duplicate (a replay after a reconnect overlaps what arrived before) and is dropped, and
//   one that skips a number is a gap: it is not applied, and the caller asks the gateway for
//   everything after the last seq it has (subscribe with last_seq);
// * a message is known by its id: the same id again replaces what is shown (a reply growing,
//   an edit, a deletion) and keeps its place;
// * a message this tab sends is shown at once (the optimistic echo) under its idempotency key,
//   and disappears when the gateway's own copy of it arrives (matched by the message id that
//   chat.send answered, or by the key where the message carries it), so it is never shown twice.

/** A fresh, empty model. */
export function initialState() {
  return {
    principal: null,
    scopes: [],
    methods: [],
    sessions: new Map(), // id -> Session
    conversations: new Map(), // key -> conversation model (see conversation())
    approvals: new Map(), // id -> Approval, with `outcome` and `by` once resolved
    pairing: new Map(), // "platform:user_id" -> PairingRequest, with `outcome` once resolved
    presence: [],
    listing: [], // what conversations.list answered, newest activity first
  };
}

/** The model of one conversation, made empty the first time it is named. */
export function conversation(state, key) {
  let conv = state.conversations.get(key);
  if (conv === undefined) {
    conv = {
      key,
      seq: null, // the last seq applied; null until the first history, subscribe or event
      order: [], // message ids, oldest first
      messages: new Map(), // id -> Message (with `_seq`: the seq of its newest version)
      runs: new Map(), // run_id -> Run
      pending: new Map(), // idempotency_key -> the echo of a message being sent
      filling: false, // a gap was seen and everything after `seq` has been asked for
      following: false, // subscribed (and resumed after a reconnect)
    };
    state.conversations.set(key, conv);
  }
  return conv;
}

function pairingKey(request) {
  return `${request.platform}:${request.user_id}`;
}

/** What connect answered: who we are and the snapshot of sessions, approvals, pairing. */
export function applyConnect(state, result) {
  state.principal = result.principal ?? null;
  state.scopes = result.scopes ?? [];
  state.methods = result.methods ?? [];
  const snapshot = result.snapshot ?? {};
  if (Array.isArray(snapshot.sessions)) {
    state.sessions = new Map(snapshot.sessions.map((s) => [s.id, s]));
  }
  if (Array.isArray(snapshot.approvals)) {
    // What is open now is the snapshot: a request that was open here and is not in it was
    // decided while this tab was away.
    const open = new Set(snapshot.approvals.map((a) => a.id));
    for (const [id, approval] of state.approvals) {
      if (!approval.outcome && !open.has(id)) state.approvals.delete(id);
    }
    for (const approval of snapshot.approvals) {
      const known = state.approvals.get(approval.id);
      state.approvals.set(approval.id, { ...known, ...approval, outcome: undefined });
    }
  }
  if (Array.isArray(snapshot.pairing)) {
    state.pairing = new Map(snapshot.pairing.map((p) => [pairingKey(p), p]));
  }
}

/** chat.history's answer (or a resync's): the conversation's messages and its newest seq. */
export function applyHistory(state, key, history) {
  const conv = conversation(state, key);
  conv.order = [];
  conv.messages = new Map();
  for (const message of history.messages ?? []) putMessage(conv, message, null);
  if (typeof history.seq === "number" && (conv.seq === null || history.seq > conv.seq)) conv.seq = history.seq;
  conv.filling = false;
  for (const [idem, echo] of conv.pending) {
    if (echo.message_id && conv.messages.has(echo.message_id)) conv.pending.delete(idem);
  }
  return conv;
}

/**
 * subscribe's answer. Subscribed from a seq the page has (`last_seq`), the events after it come
 * next, whatever the head (`result.seq`) is now: moving the cursor to the head would drop them
 * as duplicates (a message sent while the history was read). Only a page that had no seq yet
 * starts from the head.
 */
export function applySubscribed(state, key, result) {
  const conv = conversation(state, key);
  conv.following = true;
  if (typeof result.seq === "number" && conv.seq === null) conv.seq = result.seq;
  return conv;
}

/** Where each followed conversation's events stand: connect's `resume`. */
export function resumeCursors(state) {
  const resume = {};
  for (const conv of state.conversations.values()) {
    if (conv.following && conv.seq !== null) resume[conv.key] = conv.seq;
  }
  return resume;
}

/**
 * Apply one event frame. The answer says what became of it: "applied", "duplicate" (its
 * seq was applied before), "gap" (a seq was skipped: ask for what follows `conv.seq`; the
 * first gap of a conversation answers "gap", later ones until it is filled "waiting") or
 * "ignored" (an event this page does not know).
 */
export function applyEvent(state, frame) {
  const { event, data = {} } = frame;
  const key = frame.conversation;
  if (key && event === "resync") {
    // Whatever the cursor was, the history it brings is where the conversation now stands.
    const conv = conversation(state, key);
    applyHistory(state, key, { messages: data.messages ?? [], seq: null });
    conv.seq = typeof data.seq === "number" ? data.seq : typeof frame.seq === "number" ? frame.seq : conv.seq;
    conv.runs = new Map();
    return "applied";
  }
  if (key && typeof frame.seq === "number") {
    const conv = conversation(state, key);
    if (conv.seq !== null) {
      if (frame.seq <= conv.seq) return "duplicate";
      if (frame.seq > conv.seq + 1) {
        if (conv.filling) return "waiting";
        conv.filling = true;
        return "gap";
      }
    }
    conv.seq = frame.seq;
    conv.filling = false;
    return applyConversationEvent(state, conv, event, data, frame.seq);
  }
  return applyNotice(state, event, data);
}

function applyConversationEvent(state, conv, event, data, seq) {
  switch (event) {
    case "message":
      putMessage(conv, data, seq);
      return "applied";
    case "delta": {
      const run = ensureRun(conv, data, seq);
      run.text += data.text ?? "";
      run.rev += 1;
      return "applied";
    }
    case "final": {
      const run = ensureRun(conv, data, seq);
      Object.assign(run, { status: "final", text: data.text ?? run.text, reply_ids: data.reply_ids ?? [] });
      run.rev += 1;
      return "applied";
    }
    case "stopped": {
      const run = ensureRun(conv, data, seq);
      Object.assign(run, { status: "stopped", reason: data.reason ?? "stopped" });
      run.rev += 1;
      return "applied";
    }
    case "error": {
      const run = ensureRun(conv, data, seq);
      Object.assign(run, { status: "error", error: data.message ?? "" });
      run.rev += 1;
      return "applied";
    }
    case "tool": {
      const run = ensureRun(conv, data, seq);
      const callId = data.call_id ?? `${data.name}#${run.tools.size}`;
      run.tools.set(callId, { call_id: callId, name: data.name, status: data.status, arguments: data.arguments });
      run.rev += 1;
      return "applied";
    }
    default:
      return applyNotice(state, event, data);
  }
}

/** Events that are not a conversation's own (or are copies of one sent without a seq). */
function applyNotice(state, event, data) {
  switch (event) {
    case "approval.requested": {
      const known = state.approvals.get(data.id);
      if (known && known.outcome) return "duplicate"; // a copy of a request already decided
      state.approvals.set(data.id, { ...known, ...data });
      return known ? "duplicate" : "applied";
    }
    case "approval.resolved": {
      const known = state.approvals.get(data.id) ?? { id: data.id };
      state.approvals.set(data.id, { ...known, outcome: data.outcome, by: data.by });
      return "applied";
    }
    case "pairing.requested":
      state.pairing.set(pairingKey(data), { ...data });
      return "applied";
    case "pairing.resolved": {
      const key = pairingKey(data);
      const known = state.pairing.get(key) ?? { platform: data.platform, user_id: data.user_id };
      state.pairing.set(key, { ...known, outcome: data.outcome, by: data.by });
      return "applied";
    }
    case "presence": {
      // Who came and went since the last notice: applied to the list the presence method
      // gave, so the list stays whole between two asks.
      const gone = new Set([...(data.left ?? []), ...(data.joined ?? []).map((p) => p.conn_id)]);
      state.presence = [...state.presence.filter((p) => !gone.has(p.conn_id)), ...(data.joined ?? [])];
      return "applied";
    }
    default:
      return "ignored";
  }
}

function ensureRun(conv, data, seq) {
  let run = conv.runs.get(data.run_id);
  if (run === undefined) {
    run = {
      run_id: data.run_id,
      message_id: data.message_id,
      text: "",
      status: "running",
      tools: new Map(),
      reply_ids: [],
      startSeq: seq,
      rev: 0, // grows with every change, so a view redraws the run only then
    };
    conv.runs.set(data.run_id, run);
  }
  return run;
}

function putMessage(conv, message, seq) {
  const id = String(message.id);
  if (!conv.messages.has(id)) conv.order.push(id);
  const previous = conv.messages.get(id);
  conv.messages.set(id, { ...message, id, _seq: seq, _rev: (previous?._rev ?? 0) + 1 });
  if (message.author?.kind === "user") {
    for (const [idem, echo] of conv.pending) {
      if (echo.message_id === id || message.idempotency_key === idem) conv.pending.delete(idem);
    }
  }
}

// --- sending --------------------------------------------------------------------------------

/** Show a message at once, before the gateway has it; `key` is its idempotency key. */
export function addEcho(state, convKey, echo) {
  const conv = conversation(state, convKey);
  conv.pending.set(echo.key, { state: "sending", message_id: null, attachments: [], at: Date.now() / 1000, ...echo });
  return conv.pending.get(echo.key);
}

/** chat.send answered with the message's id: the echo stays until that message arrives. */
export function echoSent(state, convKey, key, result) {
  const conv = conversation(state, convKey);
  const echo = conv.pending.get(key);
  if (echo === undefined) return;
  if (conv.messages.has(String(result.message_id))) {
    conv.pending.delete(key);
  } else {
    echo.message_id = String(result.message_id);
    echo.state = "sent";
  }
}

/** chat.send failed: the echo says so (and can be sent again), or waits for the connection. */
export function echoFailed(state, convKey, key, error) {
  const conv = conversation(state, convKey);
  const echo = conv.pending.get(key);
  if (echo === undefined) return;
  echo.state = error?.retryable ? "queued" : "failed";
  echo.error = error?.message ?? String(error);
}

/** Echoes whose send has not been answered yet: sent again, under the same key, on reconnect. */
export function unsentEchoes(state) {
  const found = [];
  for (const conv of state.conversations.values()) {
    for (const echo of conv.pending.values()) {
      if (echo.state === "sending" || echo.state === "queued") found.push({ conversation: conv.key, echo });
    }
  }
  return found;
}

// --- reading the model for a view -----------------------------------------------------------

/** Approvals still waiting for a decision, oldest deadline first. */
export function openApprovals(state, convKey = null) {
  return [...state.approvals.values()]
    .filter((a) => !a.outcome && (convKey === null || a.conversation === convKey))
    .sort((a, b) => (a.deadline ?? 0) - (b.deadline ?? 0));
}

/** Pairing requests nobody has answered yet. */
export function openPairing(state) {
  return [...state.pairing.values()].filter((p) => !p.outcome);
}

/** Whether a run has reached the conversation as messages of its own (its reply). */
function replied(conv, run) {
  if (run.reply_ids.some((id) => conv.messages.has(String(id)))) return true;
  for (const id of conv.order) {
    const m = conv.messages.get(id);
    if (m.author?.kind !== "user" && String(m.reply_to ?? "") === String(run.message_id) && (m._seq ?? 0) > (run.startSeq ?? 0)) {
      return true;
    }
  }
  return false;
}

/**
 * What a conversation shows, in order: each message, the newest answer run after the message
 * it answers (its tool steps, and its streamed words until the reply itself arrives), and the
 * echoes of messages still being sent. Items are {kind: "message"|"run"|"echo", key, ...}.
 */
export function timeline(state, convKey) {
  const conv = conversation(state, convKey);
  const newestRun = new Map();
  for (const run of conv.runs.values()) newestRun.set(String(run.message_id), run);
  const items = [];
  const placed = new Set();
  const streaming = streamedReplies(conv, newestRun);
  for (const id of conv.order) {
    const item = { kind: "message", key: `m:${id}`, message: conv.messages.get(id) };
    const live = streaming.get(id);
    if (live !== undefined) item.live = live;
    items.push(item);
    const run = newestRun.get(id);
    if (run) {
      placed.add(run.run_id);
      items.push(runItem(conv, run));
    }
  }
  for (const run of newestRun.values()) {
    if (!placed.has(run.run_id)) items.push(runItem(conv, run));
  }
  for (const echo of conv.pending.values()) items.push({ kind: "echo", key: `e:${echo.key}`, echo });
  return items;
}

/**
 * The reply messages of running answers, each with the words streamed so far where they are
 * ahead of the message (a platform shows a growing reply by editing it now and then; the
 * deltas come at the model's pace): message id -> text.
 */
function streamedReplies(conv, newestRun) {
  const live = new Map();
  for (const id of conv.order) {
    const m = conv.messages.get(id);
    if (m.author?.kind === "user" || m.reply_to == null) continue;
    const run = newestRun.get(String(m.reply_to));
    if (!run || run.status !== "running" || (m._seq ?? 0) <= (run.startSeq ?? 0) || live.has(run.run_id)) continue;
    live.set(run.run_id, true);
    if (run.text.length > String(m.text ?? "").length) live.set(id, run.text);
  }
  for (const key of [...live.keys()]) if (live.get(key) === true) live.delete(key);
  return live;
}

function runItem(conv, run) {
  // Streamed words stand in for the reply until the reply itself is in the conversation.
  const hasReply = replied(conv, run);
  return { kind: "run", key: `r:${run.run_id}`, run, replied: hasReply, showText: run.text !== "" && !hasReply };
}

/** Whether an answer is being written in the conversation (the Stop button shows). */
export function running(state, convKey) {
  const conv = state.conversations.get(convKey);
  if (!conv) return false;
  for (const run of conv.runs.values()) if (run.status === "running") return true;
  return false;
}
