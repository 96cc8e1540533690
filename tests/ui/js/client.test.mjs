// The page's protocol client against a scripted socket: the handshake carries the token and
// the resume cursors, answers are matched by id, a drop reconnects and resumes, and a refused
// token stops it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { GatewayClient } from "../../../gateway/static/js/client.js";
import { codeFromFragment, takeCode } from "../../../gateway/static/js/signin.js";

class FakeSocket {
  static made = [];
  constructor(url) {
    this.url = url;
    this.sent = [];
    FakeSocket.made.push(this);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close(code = 1000) {
    this.onclose?.({ code, reason: "" });
  }
  serverSends(frame) {
    this.onmessage({ data: JSON.stringify(frame) });
  }
}

function harness(resume = () => ({})) {
  FakeSocket.made = [];
  const timers = [];
  const statuses = [];
  const events = [];
  const connects = [];
  const client = new GatewayClient({
    url: "ws://gw/ws",
    token: "tok",
    resume,
    onConnected: (r) => connects.push(r),
    onEvent: (e) => events.push(e),
    onStatus: (s, d) => statuses.push([s, d]),
    WebSocketImpl: FakeSocket,
    random: () => 1,
    setTimer: (fn, ms) => timers.push({ fn, ms }),
  });
  return { client, timers, statuses, events, connects };
}

function handshake(socket) {
  socket.onopen();
  const connect = socket.sent.at(-1);
  socket.serverSends({ type: "res", id: connect.id, ok: true, result: { server: { conn_id: "c" } } });
  return connect;
}

test("connect sends the token and the resume cursors, then requests are answered by id", async () => {
  const { client, connects, events } = harness(() => ({ "web:s-1": 41 }));
  client.start();
  const socket = FakeSocket.made[0];
  const connect = handshake(socket);
  assert.equal(connect.method, "connect");
  assert.deepEqual(connect.params.auth, { token: "tok" });
  assert.deepEqual(connect.params.resume, { "web:s-1": 41 });
  assert.equal(connects.length, 1);

  const first = client.request("sessions.list");
  const second = client.request("health");
  const [r1, r2] = socket.sent.slice(-2);
  socket.serverSends({ type: "res", id: r2.id, ok: false, error: { code: "forbidden", message: "no", retryable: false } });
  socket.serverSends({ type: "res", id: r1.id, ok: true, result: { sessions: [] } });
  assert.deepEqual(await first, { sessions: [] });
  await assert.rejects(second, (e) => e.code === "forbidden" && e.retryable === false);

  socket.serverSends({ type: "event", event: "presence", data: {} });
  assert.equal(events.length, 1);
});

test("a dropped connection fails what waits, reconnects after a growing wait and resumes", async () => {
  let cursor = 1;
  const { client, timers, statuses } = harness(() => ({ "web:s-1": cursor }));
  client.start();
  handshake(FakeSocket.made[0]);
  const waiting = client.request("chat.history", {});
  FakeSocket.made[0].close(1006);
  await assert.rejects(waiting, (e) => e.code === "offline" && e.retryable);
  assert.equal(statuses.at(-1)[0], "reconnecting");
  assert.equal(timers.length, 1);
  await assert.rejects(client.request("health"), (e) => e.code === "offline");
  cursor = 9;
  timers[0].fn();
  const again = FakeSocket.made[1];
  assert.ok(again, "a new socket was opened");
  again.onopen();
  assert.deepEqual(again.sent[0].params.resume, { "web:s-1": 9 });
  again.close(1006);
  assert.ok(timers[1].ms > timers[0].ms, "the wait grows");
});

test("a refused token stops reconnecting", () => {
  const { client, timers, statuses } = harness();
  client.start();
  FakeSocket.made[0].onopen();
  FakeSocket.made[0].serverSends({ type: "res", id: "connect", ok: false, error: { code: "unauthorized", message: "bad token" } });
  FakeSocket.made[0].close(4001);
  assert.equal(timers.length, 0);
  assert.equal(statuses.at(-1)[0], "refused");
  assert.equal(statuses.at(-1)[1].why, "unauthorized");
});

test("the sign-in code is read from the fragment and taken out of the address bar", () => {
  assert.equal(codeFromFragment("#code=abc%2Fd"), "abc/d");
  assert.equal(codeFromFragment("#x=1&code=zz"), "zz");
  assert.equal(codeFromFragment("#codes=zz"), null);
  assert.equal(codeFromFragment(""), null);
  const replaced = [];
  const history = { state: null, replaceState: (s, t, url) => replaced.push(url) };
  assert.equal(takeCode({ hash: "#code=k1", pathname: "/", search: "" }, history), "k1");
  assert.deepEqual(replaced, ["/"]);
  assert.equal(takeCode({ hash: "", pathname: "/", search: "" }, history), null);
  assert.deepEqual(replaced, ["/"]);
});
