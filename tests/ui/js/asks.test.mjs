// The page's model of agents' questions (ask_user), without a browser: the `ask` event, the
// copy a resumed connection is sent again, the end of a question, and who may answer.
import assert from "node:assert/strict";
import { test } from "node:test";

import { applyConnect, applyEvent, asksIn, asksMe, initialState } from "../../../gateway/static/js/reducer.js";

const C = "web:s-1";
const ASK = {
  id: "q1", question: "Which size?", options: ["Small", "Large"], session: "s-1", conversation: C,
  asked: { platform: "web", user_id: "ann", name: "ann" }, message_id: "b-1", deadline: 10,
};

test("an ask event is shown once, also when a resumed connection sends it again", () => {
  const state = initialState();
  assert.equal(applyEvent(state, { type: "event", event: "ask", conversation: C, seq: 4, data: ASK }), "applied");
  assert.equal(applyEvent(state, { type: "event", event: "ask", conversation: C, data: ASK }), "duplicate");
  assert.deepEqual(asksIn(state, C).map((a) => [a.id, a.outcome]), [["q1", undefined]]);
  assert.deepEqual(asksIn(state, "web:s-2"), []);
});

test("ask.resolved ends the question with its answer, and a late copy does not reopen it", () => {
  const state = initialState();
  applyEvent(state, { type: "event", event: "ask", conversation: C, seq: 1, data: ASK });
  applyEvent(state, { type: "event", event: "ask.resolved", conversation: C, seq: 2,
    data: { id: "q1", outcome: "answered", value: "Large", by: "ann", session: "s-1" } });
  const [ask] = asksIn(state, C);
  assert.equal(ask.outcome, "answered");
  assert.equal(ask.value, "Large");
  assert.equal(applyEvent(state, { type: "event", event: "ask", conversation: C, data: ASK }), "duplicate");
  assert.equal(asksIn(state, C)[0].outcome, "answered");
});

test("connect's snapshot brings the questions still open", () => {
  const state = initialState();
  applyConnect(state, { principal: { name: "ann", kind: "token" }, snapshot: { asks: [ASK] } });
  assert.deepEqual(asksIn(state, C).map((a) => a.id), ["q1"]);
});

test("only the person asked may answer: the web principal, or a token bound to them", () => {
  const state = initialState();
  state.principal = { name: "ann", kind: "token", user: "telegram:1" };
  assert.equal(asksMe(state, ASK), true);
  assert.equal(asksMe(state, { ...ASK, asked: { platform: "web", user_id: "bob" } }), false);
  assert.equal(asksMe(state, { ...ASK, asked: { platform: "telegram", user_id: "1" } }), true);
  assert.equal(asksMe(state, { ...ASK, asked: { platform: "telegram", user_id: "2" } }), false);
  state.principal = { name: "root", kind: "token" };
  assert.equal(asksMe(state, { ...ASK, asked: { platform: "telegram", user_id: "1" } }), false);
});
