// galley's operator console. Everything a worker or its agent wrote is
// hostile text: it is only ever set with textContent, never as markup.
// The operator token is sent once, to the login; the session is an
// HttpOnly cookie the page cannot read. Actions carry the CSRF header.

const $ = (id) => document.getElementById(id);
const api = "v1/";
const csrf = { "X-Galley-Operator": "1" };

let listTimer = null;
let stream = null;
let poller = null; // the AbortController of a long-poll follow
let live = "sse"; // how this deployment follows events: "sse", or "poll" (AWS)
let current = null; // the handle shown in detail
let lastList = [];

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function status(text) { $("status").textContent = text; }

async function call(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: { ...csrf } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(api + path, opts);
  if (r.status === 401 && path !== "login") {
    showLogin();
    throw new Error("not logged in");
  }
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
  return data;
}

function show(id) {
  for (const s of ["login", "list", "detail"]) $(s).hidden = s !== id;
  $("logout").hidden = id === "login";
}

function showLogin() {
  stopAll();
  show("login");
  $("token").focus();
}

function stopAll() {
  if (listTimer) { clearTimeout(listTimer); listTimer = null; }
  if (stream) { stream.close(); stream = null; }
  if (poller) { poller.abort(); poller = null; }
}

function age(s) {
  if (s < 120) return s + "s";
  if (s < 7200) return Math.floor(s / 60) + "m";
  if (s < 172800) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

function tokens(t) {
  if (!t) return "";
  const parts = [];
  if (t.input != null) parts.push(t.input + " in");
  if (t.output != null) parts.push(t.output + " out");
  return parts.join(", ");
}

function cost(c) {
  if (!c) return "";
  return "$" + (c.microUsd / 1e6).toFixed(4) + (c.basis ? " (" + c.basis + ")" : "");
}

function cell(tr, label, text, cls) {
  const td = el("td", text, cls);
  td.dataset.label = label;
  tr.append(td);
  return td;
}

// stateText is a worker's state as the list and its facts show it: the
// outcome of a settled one, and parked (docs/parking.md) for one whose
// compute ended while it waits on its coordinator.
function stateText(w) {
  return w.state + (w.outcome ? " (" + w.outcome + ")" : "") + (w.parked ? ", parked" : "");
}

// renderList replaces the worker table's rows with ws (newest first).
export function renderList(ws) {
  const body = document.querySelector("#workers tbody");
  const frag = document.createDocumentFragment();
  for (const w of ws) {
    const tr = document.createElement("tr");
    tr.dataset.handle = w.handle;
    cell(tr, "Worker", w.handle);
    cell(tr, "State", stateText(w) + (w.released ? ", released" : ""), "state-" + w.state + (w.parked ? " parked" : ""));
    cell(tr, "Age", age(w.ageSeconds));
    cell(tr, "Agent", (w.agent || "") + (w.model ? " " + w.model : ""));
    cell(tr, "Branch", w.branch || "");
    cell(tr, "Tokens", tokens(w.tokens));
    cell(tr, "Cost", cost(w.cost));
    const e = w.lastEvent;
    cell(tr, "Last event", e ? e.kind + ": " + (e.text || (e.fields && e.fields.state) || "") : "", "last");
    frag.append(tr);
  }
  body.replaceChildren(frag);
  $("count").textContent = "(" + ws.length + ")";
}

async function refreshList() {
  try {
    const data = await call("GET", "workers");
    lastList = data.workers;
    if (current === null) renderList(lastList);
    status("updated " + new Date().toLocaleTimeString());
  } catch (e) {
    status("list: " + e.message);
    if (e.message === "not logged in") return;
  }
  listTimer = setTimeout(refreshList, 2000);
}

function showList() {
  stopAll();
  current = null;
  show("list");
  refreshList();
}

function fact(dl, name, value) {
  if (value === undefined || value === null || value === "") return;
  dl.append(el("dt", name), el("dd", value));
}

function renderFacts(w) {
  const dl = $("d-facts");
  dl.replaceChildren();
  if (!w) return;
  fact(dl, "State", stateText(w));
  if (w.parked && w.parkedSince) fact(dl, "Parked since", new Date(w.parkedSince).toLocaleString());
  fact(dl, "Age", age(w.ageSeconds));
  fact(dl, "Agent", (w.agent || "") + (w.model ? " " + w.model : ""));
  fact(dl, "Branch", w.branch);
  fact(dl, "Run", w.run);
  fact(dl, "Task", w.task);
  fact(dl, "Tokens", tokens(w.tokens));
  fact(dl, "Cost", cost(w.cost));
  const settled = w.state === "settled";
  $("cancel").disabled = settled;
}

const threadKinds = new Set(["question", "reply", "message", "escalation", "worker-done"]);

function appendEvent(e) {
  const li = el("li", null, "k-" + e.kind);
  li.dataset.seq = e.seq;
  li.append(el("span", new Date(e.at).toLocaleTimeString(), "time"));
  li.append(el("span", e.kind + (e.fields && e.fields.kind ? " " + e.fields.kind : "") +
    (e.fields && e.fields.event ? " " + e.fields.event : ""), "kind"));
  li.append(el("span", e.text || "", "text"));
  const f = e.fields || {};
  const rest = Object.keys(f).filter((k) => k !== "kind" && k !== "event").sort()
    .map((k) => k + "=" + f[k]).join("  ");
  if (rest) li.append(el("span", rest, "fields"));
  $("timeline").append(li);
  if (e.kind === "mailbox" && threadKinds.has(f.kind)) {
    const t = el("li", null, "k-" + f.kind);
    t.append(el("span", new Date(e.at).toLocaleTimeString(), "time"));
    t.append(el("span", f.kind + (f.id ? " " + f.id : "") + (f.question ? " to " + f.question : ""), "kind"));
    t.append(el("span", e.text || "", "text"));
    $("thread").append(t);
  }
  if (e.kind === "usage") {
    const parts = [];
    if (f.input) parts.push(f.input + " input tokens");
    if (f.output) parts.push(f.output + " output tokens");
    if (f.costMicroUsd) parts.push("$" + (Number(f.costMicroUsd) / 1e6).toFixed(4));
    if (f.model) parts.push(f.model);
    $("d-usage").textContent = parts.join(", ") || "reported";
  }
  if (e.kind === "state" && f.state) {
    const w = lastList.find((x) => x.handle === current);
    if (w) { w.state = f.state; w.outcome = f.outcome || ""; renderFacts(w); }
  }
}

function showDetail(handle) {
  stopAll();
  current = handle;
  show("detail");
  $("d-handle").textContent = handle;
  $("timeline").replaceChildren();
  $("thread").replaceChildren();
  $("d-usage").textContent = "none reported";
  renderFacts(lastList.find((w) => w.handle === handle));
  call("GET", "workers").then((d) => { lastList = d.workers; renderFacts(lastList.find((w) => w.handle === handle)); })
    .catch((e) => status(e.message));
  if (live === "poll") {
    follow(handle);
    return;
  }
  // An EventSource resumes after the last id it received by itself
  // (Last-Event-ID); a fresh page reads the whole retained log.
  stream = new EventSource(api + "workers/" + encodeURIComponent(handle) + "/stream?after=0");
  stream.onmessage = (m) => {
    try { appendEvent(JSON.parse(m.data)); } catch (err) { status("bad event: " + err.message); }
    status("live");
  };
  stream.onerror = () => status("reconnecting…");
}

// follow reads the worker's events by long poll from the cursor 0 (where
// a deployment cannot stream: API Gateway in front of Lambda), moving the
// cursor to each answer's next, so nothing is missed or shown twice.
async function follow(handle) {
  const ctl = new AbortController();
  poller = ctl;
  let after = 0;
  let pause = 500;
  while (!ctl.signal.aborted) {
    try {
      const r = await fetch(api + "workers/" + encodeURIComponent(handle) + "/events?after=" + after + "&wait=25",
        { credentials: "same-origin", headers: { ...csrf }, signal: ctl.signal });
      if (r.status === 401) { showLogin(); return; }
      const data = await r.json();
      if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
      for (const e of data.events) appendEvent(e);
      after = data.next;
      pause = 500;
      status("live");
    } catch (err) {
      if (ctl.signal.aborted) return;
      status("reconnecting…");
      await new Promise((res) => setTimeout(res, pause));
      pause = Math.min(pause * 2, 10000);
    }
  }
}

function route() {
  const m = location.hash.match(/^#w=(.+)$/);
  if (m) showDetail(decodeURIComponent(m[1]));
  else showList();
}

function confirmAction(text) {
  return new Promise((resolve) => {
    const d = $("confirm");
    $("confirm-text").textContent = text;
    d.onclose = () => resolve(d.returnValue === "yes");
    d.returnValue = "";
    d.showModal();
  });
}

async function act(what, question) {
  const handle = current;
  if (!handle || !(await confirmAction(question + " " + handle + "?"))) return;
  try {
    await call("POST", "workers/" + encodeURIComponent(handle) + "/" + what);
    status(what + " done");
  } catch (e) {
    status(what + ": " + e.message);
  }
}

async function start() {
  $("workers").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-handle]");
    if (tr) location.hash = "w=" + encodeURIComponent(tr.dataset.handle);
  });
  $("home").addEventListener("click", (ev) => { ev.preventDefault(); location.hash = ""; });
  window.addEventListener("hashchange", route);
  $("cancel").addEventListener("click", () => act("cancel", "Cancel worker"));
  $("revoke").addEventListener("click", () => act("revoke", "Revoke the credential of worker"));
  $("logout").addEventListener("click", async () => {
    await call("POST", "logout").catch(() => {});
    showLogin();
  });
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = $("token");
    const token = input.value;
    input.value = "";
    $("login-error").textContent = "";
    try {
      await call("POST", "login", { token });
      const s = await call("GET", "session");
      if (s.live) live = s.live;
      route();
    } catch (e) {
      $("login-error").textContent = e.message;
    }
  });
  try {
    const s = await call("GET", "session");
    if (s.live) live = s.live;
    route();
  } catch (e) {
    showLogin();
  }
}

start();
