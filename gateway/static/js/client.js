// The gateway's WebSocket protocol, as this page speaks it: the connect handshake with the
// tab's token and where each followed conversation stands (resume), requests matched to their
// answers by id, events handed on, and a reconnect after every drop (a short wait that grows,
// with some jitter) until the token is refused or the page signs out.

export const PROTOCOL = 1;
export const CLIENT = { name: "botweave-web", version: "1" };
//: Close codes after which trying again cannot help: the token is bad, revoked, or the
//: protocol is not spoken.
const FINAL_CLOSES = new Map([
  [4001, "unauthorized"],
  [4002, "protocol_unsupported"],
  [4010, "revoked"],
]);
const FIRST_WAIT_MS = 250;
const LONGEST_WAIT_MS = 5000;

/** An error answer from the gateway (or `offline` when there was no connection to ask). */
export class GatewayError extends Error {
  constructor(error) {
    super(error.message ?? error.code);
    this.code = error.code;
    this.retryable = Boolean(error.retryable);
    this.retryAfterMs = error.retry_after_ms;
  }
}

export class GatewayClient {
  /**
   * url: the WebSocket address; token: the tab's token; resume(): {conversation: last_seq};
   * onConnected(result), onEvent(frame), onStatus(status, detail): what the page does.
   */
  constructor({ url, token, resume, onConnected, onEvent, onStatus, WebSocketImpl = globalThis.WebSocket, random = Math.random, setTimer = (fn, ms) => setTimeout(fn, ms) }) {
    this.url = url;
    this.token = token;
    this.resume = resume ?? (() => ({}));
    this.onConnected = onConnected ?? (() => {});
    this.onEvent = onEvent ?? (() => {});
    this.onStatus = onStatus ?? (() => {});
    this.WebSocketImpl = WebSocketImpl;
    this.random = random;
    this.setTimer = setTimer;
    this.socket = null;
    this.ready = false;
    this.stopped = false;
    this.nextId = 1;
    this.waiting = new Map(); // id -> {resolve, reject}
    this.failures = 0;
    this.opened = 0; // sockets opened so far (the page shows it; tests read it)
  }

  start() {
    this.stopped = false;
    this.open();
  }

  /** Close for good (sign-out): no reconnect. */
  stop() {
    this.stopped = true;
    if (this.socket) this.socket.close(1000, "signed out");
    this.fail(new GatewayError({ code: "offline", message: "signed out", retryable: false }));
  }

  open() {
    this.opened += 1;
    this.onStatus("connecting", { attempt: this.failures, opened: this.opened });
    const socket = new this.WebSocketImpl(this.url);
    this.socket = socket;
    socket.onopen = () => {
      const params = {
        min_protocol: PROTOCOL,
        max_protocol: PROTOCOL,
        client: CLIENT,
        auth: { token: this.token },
        resume: this.resume(),
      };
      this.send({ type: "req", id: "connect", method: "connect", params });
    };
    socket.onmessage = (message) => this.receive(socket, message.data);
    socket.onclose = (close) => this.closed(socket, close.code, close.reason);
    socket.onerror = () => {}; // a close follows, and says more
  }

  receive(socket, raw) {
    if (socket !== this.socket) return;
    let frame;
    try {
      frame = JSON.parse(raw);
    } catch {
      return; // the gateway sends JSON only; nothing to do with anything else
    }
    if (frame.type === "event") {
      this.onEvent(frame);
      return;
    }
    if (frame.type !== "res") return;
    if (frame.id === "connect") {
      if (frame.ok) {
        this.ready = true;
        this.failures = 0;
        this.onStatus("open", { opened: this.opened, conn_id: frame.result?.server?.conn_id });
        this.onConnected(frame.result);
      } else {
        this.lastError = frame.error;
      }
      return;
    }
    const waiter = this.waiting.get(String(frame.id));
    if (!waiter) return;
    this.waiting.delete(String(frame.id));
    if (frame.ok) waiter.resolve(frame.result ?? {});
    else waiter.reject(new GatewayError(frame.error ?? { code: "internal", message: "no error given" }));
  }

  closed(socket, code, reason) {
    if (socket !== this.socket) return;
    this.socket = null;
    this.ready = false;
    this.fail(new GatewayError({ code: "offline", message: "the connection closed", retryable: true }));
    if (this.stopped) {
      this.onStatus("closed", { code });
      return;
    }
    if (FINAL_CLOSES.has(code)) {
      this.stopped = true;
      this.onStatus("refused", { code, why: FINAL_CLOSES.get(code), message: this.lastError?.message ?? reason });
      return;
    }
    this.failures += 1;
    const base = Math.min(LONGEST_WAIT_MS, FIRST_WAIT_MS * 2 ** (this.failures - 1));
    const wait = Math.round(base * (0.5 + this.random() / 2));
    this.onStatus("reconnecting", { code, wait_ms: wait, opened: this.opened });
    this.setTimer(() => {
      if (!this.stopped) this.open();
    }, wait);
  }

  fail(error) {
    const waiting = [...this.waiting.values()];
    this.waiting.clear();
    for (const waiter of waiting) waiter.reject(error);
  }

  send(frame) {
    this.socket.send(JSON.stringify(frame));
  }

  /** Call a method; resolves with its result, rejects with a GatewayError. */
  request(method, params = {}) {
    if (!this.ready || !this.socket) {
      return Promise.reject(new GatewayError({ code: "offline", message: "not connected", retryable: true }));
    }
    const id = String(this.nextId++);
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.send({ type: "req", id, method, params });
    });
  }
}
