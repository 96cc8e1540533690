// The page's event reducer, without a browser: snapshot, history and events; duplicates
// dropped by seq, messages replaced by id, echoes reconciled, gaps detected.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  addEcho, applyConnect, applyEvent, applyHistory, applySubscribed, conversation, echoFailed, echoSent, initialState,
  openApprovals, openPairing, resumeCursors, running, timeline, unsentEchoes,
} from "../../../gateway/static/js/reducer.js";

const C = "web:s-1";

function msg(id, text, kind = "user", extra = {}) {
  return { id, text, author: { kind, id: kind === "user" ? "me" : "bot", name: kind }, at: 1, attachments: [], ...extra };
}

function ev(seq, event, data, conversationKey = C) {
  return { type: "event", event, conversation: conversationKey, seq, data };
}

function texts(state, key = C) {
  return timeline(state, key).map((item) => {
    if (item.kind === "message") return item.message.text;
    if (item.kind === "echo") return `echo:${item.echo.text}`;
    return `run:${item.showText ? item.run.text : ""}:${item.run.status}`;
  });
}

test("connect's snapshot fills sessions, approvals and pairing", () => {
  const state = initialState();
  applyConnect(state, {
    principal: { name: "ann" },
    scopes: ["read", "write"],
    methods: ["chat.send"],
    snapshot: {
      sessions: [{ id: "s-1", conversation: C, title: "t" }],
      approvals: [{ id: "a1", tool: "transfer", conversation: C, deadline: 5 }],
      pairing: [{ platform: "telegram", user_id: "7", name: "Bo" }],
    },
  });
  assert.equal(state.principal.name, "ann");
  assert.deepEqual([...state.sessions.keys()], ["s-1"]);
  assert.deepEqual(openApprovals(state).map((a) => a.id), ["a1"]);
  assert.deepEqual(openPairing(state).map((p) => p.user_id), ["7"]);
});

test("a later snapshot drops approvals decided while the tab was away", () => {
  const state = initialState();
  applyConnect(state, { snapshot: { approvals: [{ id: "a1" }, { id: "a2" }] } });
  applyConnect(state, { snapshot: { approvals: [{ id: "a2" }] } });
  assert.deepEqual(openApprovals(state).map((a) => a.id), ["a2"]);
});

test("events apply in seq order; a replayed seq is a duplicate and changes nothing", () => {
  const state = initialState();
  applyHistory(state, C, { messages: [msg("m1", "one")], seq: 3 });
  assert.equal(applyEvent(state, ev(4, "message", msg("m2", "two"))), "applied");
  assert.equal(applyEvent(state, ev(4, "message", msg("m2", "two again"))), "duplicate");
  assert.equal(applyEvent(state, ev(2, "message", msg("m0", "old"))), "duplicate");
  assert.deepEqual(texts(state), ["one", "two"]);
  assert.equal(conversation(state, C).seq, 4);
});

test("a skipped seq is a gap: not applied, reported once until filled", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 10 });
  assert.equal(applyEvent(state, ev(12, "message", msg("m12", "twelve"))), "gap");
  assert.equal(applyEvent(state, ev(13, "message", msg("m13", "thirteen"))), "waiting");
  assert.deepEqual(texts(state), []);
  // the replay after last_seq=10 fills it, in order
  for (const [seq, id] of [[11, "m11"], [12, "m12"], [13, "m13"]]) {
    assert.equal(applyEvent(state, ev(seq, "message", msg(id, id))), "applied");
  }
  assert.deepEqual(texts(state), ["m11", "m12", "m13"]);
  assert.equal(conversation(state, C).filling, false);
  // and a later gap is reported again
  assert.equal(applyEvent(state, ev(15, "message", msg("m15", "x"))), "gap");
});

test("the first event of a conversation with no known seq is taken as it comes", () => {
  const state = initialState();
  assert.equal(applyEvent(state, ev(40, "message", msg("m", "hi"))), "applied");
  assert.equal(conversation(state, C).seq, 40);
});

test("the same message id again replaces it in place", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 0 });
  applyEvent(state, ev(1, "message", msg("m1", "first")));
  applyEvent(state, ev(2, "message", msg("b1", "Hel", "bot")));
  applyEvent(state, ev(3, "message", msg("m2", "second")));
  applyEvent(state, ev(4, "message", msg("b1", "Hello there", "bot", { edited: true })));
  assert.deepEqual(texts(state), ["first", "Hello there", "second"]);
});

test("history replaces what was shown and sets the seq", () => {
  const state = initialState();
  applyHistory(state, C, { messages: [msg("a", "A"), msg("b", "B")], seq: 7 });
  assert.deepEqual(texts(state), ["A", "B"]);
  assert.equal(conversation(state, C).seq, 7);
});

test("an echo shows at once and goes when the gateway's copy arrives (answer first)", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 0 });
  addEcho(state, C, { key: "k1", session: "s-1", text: "hi" });
  assert.deepEqual(texts(state), ["echo:hi"]);
  echoSent(state, C, "k1", { message_id: "w-1" });
  assert.deepEqual(texts(state), ["echo:hi"]);
  applyEvent(state, ev(1, "message", msg("w-1", "hi")));
  assert.deepEqual(texts(state), ["hi"]);
});

test("an echo whose message arrives before chat.send's answer is shown once", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 0 });
  addEcho(state, C, { key: "k1", session: "s-1", text: "hi" });
  applyEvent(state, ev(1, "message", msg("w-1", "hi")));
  echoSent(state, C, "k1", { message_id: "w-1" });
  assert.deepEqual(texts(state), ["hi"]);
});

test("an echo is matched by the idempotency key the message carries", () => {
  const state = initialState();
  addEcho(state, C, { key: "k9", session: "s-1", text: "yo" });
  applyEvent(state, ev(1, "message", msg("w-9", "yo", "user", { idempotency_key: "k9" })));
  assert.deepEqual(texts(state), ["yo"]);
});

test("an echo whose send failed for want of a connection is sent again; a refused one is not", () => {
  const state = initialState();
  addEcho(state, C, { key: "k1", session: "s-1", text: "a" });
  addEcho(state, C, { key: "k2", session: "s-1", text: "b" });
  echoFailed(state, C, "k1", { code: "offline", retryable: true, message: "not connected" });
  echoFailed(state, C, "k2", { code: "forbidden", retryable: false, message: "no" });
  assert.deepEqual(unsentEchoes(state).map((u) => u.echo.key), ["k1"]);
});

test("a streamed answer grows with deltas and gives way to the reply message", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 0 });
  applyEvent(state, ev(1, "message", msg("w-1", "question")));
  applyEvent(state, ev(2, "delta", { run_id: "r1", message_id: "w-1", text: "Hel" }));
  applyEvent(state, ev(3, "delta", { run_id: "r1", message_id: "w-1", text: "lo" }));
  assert.deepEqual(texts(state), ["question", "run:Hello:running"]);
  assert.equal(running(state, C), true);
  applyEvent(state, ev(4, "final", { run_id: "r1", message_id: "w-1", text: "Hello", reply_ids: ["b-1"] }));
  applyEvent(state, ev(5, "message", msg("b-1", "Hello", "bot", { reply_to: "w-1" })));
  assert.deepEqual(texts(state), ["question", "run::final", "Hello"]);
  assert.equal(running(state, C), false);
});

test("a reply message posted while streaming replaces the streamed words", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 0 });
  applyEvent(state, ev(1, "message", msg("w-1", "q")));
  applyEvent(state, ev(2, "delta", { run_id: "r1", message_id: "w-1", text: "Hi" }));
  applyEvent(state, ev(3, "message", msg("b-1", "Hi", "bot", { reply_to: "w-1" })));
  assert.deepEqual(texts(state), ["q", "run::running", "Hi"]);
});

test("a stopped run keeps what it streamed and says why", () => {
  const state = initialState();
  applyEvent(state, ev(1, "message", msg("w-1", "q")));
  applyEvent(state, ev(2, "delta", { run_id: "r1", message_id: "w-1", text: "partial" }));
  applyEvent(state, ev(3, "stopped", { run_id: "r1", message_id: "w-1", reason: "stopped" }));
  assert.deepEqual(texts(state), ["q", "run:partial:stopped"]);
  assert.equal(running(state, C), false);
});

test("an edit re-run shows the newest run of the message", () => {
  const state = initialState();
  applyEvent(state, ev(1, "message", msg("w-1", "q")));
  applyEvent(state, ev(2, "delta", { run_id: "r1", message_id: "w-1", text: "old" }));
  applyEvent(state, ev(3, "stopped", { run_id: "r1", message_id: "w-1", reason: "edited" }));
  applyEvent(state, ev(4, "delta", { run_id: "r2", message_id: "w-1", text: "new" }));
  assert.deepEqual(texts(state), ["q", "run:new:running"]);
});

test("tool steps are kept per call with their newest status", () => {
  const state = initialState();
  applyEvent(state, ev(1, "message", msg("w-1", "q")));
  applyEvent(state, ev(2, "tool", { run_id: "r1", message_id: "w-1", call_id: "c1", name: "transfer", status: "started", arguments: { a: 1 } }));
  applyEvent(state, ev(3, "tool", { run_id: "r1", message_id: "w-1", call_id: "c1", name: "transfer", status: "awaiting_approval", arguments: { a: 1 } }));
  applyEvent(state, ev(4, "tool", { run_id: "r1", message_id: "w-1", call_id: "c2", name: "react", status: "done", arguments: {} }));
  const run = timeline(state, C).find((i) => i.kind === "run").run;
  assert.deepEqual([...run.tools.values()].map((t) => `${t.name}:${t.status}`), ["transfer:awaiting_approval", "react:done"]);
});

test("approval events: a copy without seq is not shown twice; resolved leaves the inbox", () => {
  const state = initialState();
  const request = { id: "a1", tool: "transfer", conversation: C, deadline: 9 };
  assert.equal(applyEvent(state, ev(1, "approval.requested", request)), "applied");
  assert.equal(applyEvent(state, { type: "event", event: "approval.requested", data: request }), "duplicate");
  assert.deepEqual(openApprovals(state, C).map((a) => a.id), ["a1"]);
  assert.deepEqual(openApprovals(state, "telegram:1"), []);
  applyEvent(state, { type: "event", event: "approval.resolved", data: { id: "a1", outcome: "approved", by: "ann" } });
  assert.deepEqual(openApprovals(state), []);
  // a late copy of the request does not bring it back
  applyEvent(state, { type: "event", event: "approval.requested", data: request });
  assert.deepEqual(openApprovals(state), []);
});

test("pairing requests come and go by platform and user", () => {
  const state = initialState();
  applyEvent(state, { type: "event", event: "pairing.requested", data: { platform: "telegram", user_id: "5", name: "Eve" } });
  assert.equal(openPairing(state).length, 1);
  applyEvent(state, { type: "event", event: "pairing.resolved", data: { platform: "telegram", user_id: "5", outcome: "approved" } });
  assert.equal(openPairing(state).length, 0);
});

test("resync replaces the history and carries on from its seq", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 2 });
  applyEvent(state, ev(3, "message", msg("x", "x")));
  applyEvent(state, ev(900, "resync", { seq: 899, messages: [msg("y", "y"), msg("z", "z")] }));
  assert.deepEqual(texts(state), ["y", "z"]);
  assert.equal(conversation(state, C).seq, 899);
  assert.equal(applyEvent(state, ev(900, "message", msg("n", "n"))), "applied");
});

test("resume names each followed conversation with its last seq", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 5 });
  applySubscribed(state, "telegram:-100", { seq: 0 });
  applyEvent(state, ev(6, "message", msg("m", "m")));
  conversation(state, "telegram:9"); // known but not followed
  assert.deepEqual(resumeCursors(state), { [C]: 6, "telegram:-100": 0 });
});

test("presence events say who joined and who left: the list the presence method gave is kept up to date", () => {
  const state = initialState();
  state.presence = [{ conn_id: "c1", principal: "ann" }, { conn_id: "c2", principal: "bob" }]; // the presence method's answer
  const presence = (data) => applyEvent(state, { type: "event", event: "presence", data });
  assert.equal(presence({ joined: [{ conn_id: "c3", principal: "eve" }], left: ["c1"] }), "applied");
  assert.deepEqual(state.presence.map((p) => p.conn_id), ["c2", "c3"]);
  presence({ joined: [{ conn_id: "c3", principal: "eve" }], left: [] }); // told twice: listed once
  assert.deepEqual(state.presence.map((p) => p.conn_id), ["c2", "c3"]);
  assert.equal(applyEvent(state, { type: "event", event: "something.new", data: {} }), "ignored");
});

test("a reply posted early and edited now and then shows the streamed words ahead of it", () => {
  const state = initialState();
  applySubscribed(state, C, { seq: 0 });
  applyEvent(state, ev(1, "message", msg("w-1", "q")));
  applyEvent(state, ev(2, "delta", { run_id: "r1", message_id: "w-1", text: "one " }));
  applyEvent(state, ev(3, "message", msg("b-1", "one ", "bot", { reply_to: "w-1" })));
  applyEvent(state, ev(4, "delta", { run_id: "r1", message_id: "w-1", text: "two " }));
  applyEvent(state, ev(5, "delta", { run_id: "r1", message_id: "w-1", text: "three" }));
  const reply = () => timeline(state, C).find((i) => i.key === "m:b-1");
  assert.equal(reply().live, "one two three");
  applyEvent(state, ev(6, "final", { run_id: "r1", message_id: "w-1", text: "one two three", reply_ids: ["b-1"] }));
  applyEvent(state, ev(7, "message", msg("b-1", "one two three", "bot", { reply_to: "w-1" })));
  assert.equal(reply().live, undefined);
  assert.deepEqual(texts(state), ["q", "run::final", "one two three"]);
});

test("subscribed from the seq of its history, the events after it are applied, not taken for duplicates", () => {
  const state = initialState();
  applyHistory(state, C, { messages: [], seq: 0 }); // read before the first message was stored
  applySubscribed(state, C, { seq: 2 }); // the head by the time subscribe was answered
  assert.equal(applyEvent(state, ev(1, "message", msg("m1", "hello"))), "applied");
  assert.equal(applyEvent(state, ev(2, "message", msg("b1", "hi", "bot"))), "applied");
  assert.deepEqual(texts(state), ["hello", "hi"]);
  assert.equal(conversation(state, C).seq, 2);
});
