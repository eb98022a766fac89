// The disquette dashboard: polls the node's JSON API every second and shows the whole
// cluster (nodes, queues, jobs) with the operator's actions behind a confirmation.
//
// Why it is written this way:
// - No framework and no build step: the file is served as is by every node, and the
//   page must work with no outside network. It is a plain ES module.
// - Escaping by construction: every element that carries data is built with
//   createElement and filled with textContent (or an attribute set through the DOM);
//   nothing ever goes through innerHTML, so a queue named `<img onerror=...>` or a job
//   body holding `</script>` is text and nothing else.
// - Cheap with 10,000 queues: the page only ever asks for one page of queues (and one
//   page of a queue's jobs). Rates are computed here from the counters' deltas between
//   two polls, and the sparklines from the page's own history of the queues it shows.
// - Rows are kept by key (node ID, queue name, job ID) and updated in place, so a
//   button the operator is about to press is not replaced under the pointer.
// - Failed jobs are read only while their section is open, and every 5 seconds rather
//   than every second: each reading has every node scan its jobs for dead letters
//   (observe/failed.py). The ticked rows are a set of IDs kept across readings.
// - Workflows likewise: read while their section is open, every 5 seconds, since each
//   reading counts the jobs of the workflows shown on every node
//   (client/workflow_state.py); the one opened is read with them, a page of its jobs.
// - Authentication: when the API answers 401 the page asks for the password once,
//   keeps it in sessionStorage (gone with the tab) and sends it as a Bearer token.
//   Requests never carry the browser's own credentials (credentials: "omit"), so the
//   browser never opens its Basic-auth prompt over the page.

const POLL_MS = 1000;
const SPARK_POINTS = 60; // one per poll: the last minute
const PASSWORD_KEY = "disquette.password";
const FAILED_POLL_MS = 5000;
const WORKFLOWS_POLL_MS = 5000;
const WORKFLOW_JOBS = 50; // jobs of the opened workflow per page

// ------------------------------------------------------------------ DOM helpers

const $ = (id) => document.getElementById(id);

/** An element with attributes/properties and children (strings become text nodes). */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key in node && key !== "title") node[key] = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace a cell's content with the given children (text or nodes). */
function fill(cell, ...children) {
  cell.replaceChildren(
    ...children
      .filter((c) => c !== null && c !== undefined)
      .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))),
  );
}

/** Set a cell's text only when it changed (keeps selections and avoids layout work). */
function text(cell, value) {
  const s = value === null || value === undefined ? "–" : String(value);
  if (cell.textContent !== s) cell.textContent = s;
}

/**
 * Keep a tbody's rows in step with `items`: one row per key, created by `create`
 * (which returns the row), updated by `update(row, item)`, in the items' order;
 * rows whose key is gone are removed.
 */
function syncRows(tbody, items, key, create, update) {
  const existing = new Map();
  for (const row of tbody.rows) existing.set(row.dataset.key, row);
  const wanted = [];
  for (const item of items) {
    const k = key(item);
    let row = existing.get(k);
    if (row) existing.delete(k);
    else {
      row = create(item);
      row.dataset.key = k;
    }
    update(row, item);
    wanted.push(row);
  }
  for (const row of existing.values()) row.remove();
  wanted.forEach((row, i) => {
    if (tbody.rows[i] !== row) tbody.insertBefore(row, tbody.rows[i] || null);
  });
}

// ------------------------------------------------------------------ formatting

const nf = new Intl.NumberFormat("en");

function num(n) {
  return n === null || n === undefined ? "–" : nf.format(n);
}

function rate(r) {
  if (r === null || r === undefined) return "–";
  return r >= 100 ? nf.format(Math.round(r)) : r.toFixed(1);
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.floor(s));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** Whether a URL from the API may become a link (http or https only: never javascript:). */
function safeUrl(url) {
  try {
    return typeof url === "string" && ["http:", "https:"].includes(new URL(url).protocol);
  } catch {
    return false;
  }
}

/** A node's or a job's ID as every table shows it: its first 8 characters (the whole
 * ID in the element's title). */
function shortId(id) {
  return typeof id === "string" && id.length > 12 ? id.slice(0, 8) + "…" : String(id);
}

/** A time in milliseconds since the epoch, in the browser's local time: the time of
 * day for today, with the date before. */
function when(ms) {
  const date = new Date(ms);
  const today = date.toDateString() === new Date().toDateString();
  return today ? date.toLocaleTimeString() : date.toLocaleString();
}

/** A moment in the past, as a time and how long ago. */
function since(ms) {
  return `${when(ms)} (${duration((Date.now() - ms) / 1000)} ago)`;
}

/** A node's data generation: the time (ms) its data began, when it reads as one (a
 * node whose clock went back counts on from the last generation instead). */
function generation(n) {
  if (typeof n !== "number") return "–";
  return n > 1e12 ? when(n) : String(n);
}

// How the job panel shows SHOW's fields: times as times, durations with their unit,
// node IDs short (SHOW gives ctime in ms x 1,000,000, ttl/delay/retry in seconds and
// the *_within fields in milliseconds).
const JOB_FIELDS = {
  ctime: (v) => since(v / 1e6),
  ttl: (v) => `${duration(v)} left`,
  delay: (v) => duration(v),
  retry: (v) => duration(v),
  next_requeue_within: (v) => `in ${duration(v / 1000)}`,
  next_awake_within: (v) => `in ${duration(v / 1000)}`,
  nodes_delivered: (v) => v.map(shortId).join(", ") || "none",
  nodes_confirmed: (v) => v.map(shortId).join(", ") || "none",
};

/** A queue's or a job's body as text, marked when the bytes were not UTF-8. */
function bodyText(item) {
  return item.body_b64 ? `${item.body} (not UTF-8; base64 ${item.body_b64})` : item.body;
}

// ------------------------------------------------------------------ the API

// A queue name is text when it is UTF-8; otherwise the API writes it "~b64~" and its
// URL-safe base64, which addresses it in URLs as it is.
const B64_PREFIX = "~b64~";

/** URL path segment of a queue. */
function queueSegment(queue) {
  return encodeURIComponent(queue.name);
}

const queueKey = (queue) => queue.name;

/** A queue's name as shown: a ~b64~ name decoded with replacement characters. */
function displayName(name) {
  if (!name.startsWith(B64_PREFIX)) return name;
  try {
    const b64 = name.slice(B64_PREFIX.length).replaceAll("-", "+").replaceAll("_", "/");
    const raw = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
    return new TextDecoder("utf-8").decode(raw);
  } catch {
    return name;
  }
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let passwordPrompt = null; // the one login dialog in progress, shared by every request

/** Ask for the password (once for every request waiting on it); `wrong` says why. */
function askPassword(wrong) {
  if (!passwordPrompt) {
    passwordPrompt = new Promise((resolve) => {
      const dialog = $("login");
      const error = $("login-error");
      error.hidden = !wrong;
      error.textContent = wrong ? "Wrong password: try again." : "";
      $("login-password").value = "";
      dialog.addEventListener(
        "close",
        () => {
          sessionStorage.setItem(PASSWORD_KEY, $("login-password").value);
          passwordPrompt = null;
          resolve();
        },
        { once: true },
      );
      setStatus("password needed", "auth");
      dialog.showModal();
    });
  }
  return passwordPrompt;
}

/** One API call: JSON in, JSON out; a 401 asks for the password and tries again. */
async function api(method, path, body) {
  for (;;) {
    const headers = { Accept: "application/json" };
    const password = sessionStorage.getItem(PASSWORD_KEY);
    if (password !== null) headers.Authorization = `Bearer ${password}`;
    const init = { method, headers, credentials: "omit", cache: "no-store" };
    if (method === "POST") {
      headers["X-Disquette-Action"] = "1";
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body || {});
    }
    const response = await fetch(path, init);
    if (response.status === 401) {
      await askPassword(password !== null);
      continue;
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!response.ok) {
      const message = data && typeof data.error === "string" ? data.error : response.statusText;
      throw new ApiError(response.status, message || `HTTP ${response.status}`);
    }
    return data;
  }
}

// ------------------------------------------------------------------ page state

const view = {
  sort: "name",
  prefix: "",
  limit: 20,
  cursors: [null], // the `after` cursor of each page seen, the current one last
  nextCursor: null,
  browse: null, // {queue, offset, limit, next}
  jobId: null, // the job shown in the detail panel
  failed: {
    open: false, // the section is open: its jobs are read
    filters: {}, // the API's parameters: dlq, queue, task, error, min_age, max_age
    limit: 50,
    cursors: [null],
    next: null,
    total: 0,
    selected: new Set(), // the dead letters' IDs ticked
    due: 0, // when (performance.now()) the next reading is due
  },
  workflows: {
    open: false, // the section is open: the workflows are read
    limit: 20,
    cursors: [null],
    next: null,
    due: 0,
    id: null, // the workflow opened in the detail panel
    offset: 0, // of its jobs shown
    nextOffset: null,
    filter: "", // the job state its jobs are filtered on ("" for all)
  },
};

const counters = new Map(); // queue key -> {t, in, out}: the previous poll's counters
const lengths = new Map(); // queue key -> [len, ...]: the sparkline's points
let polling = null; // the poll in flight
let pollAgain = false; // something changed while it ran: poll once more at once

function setStatus(message, state) {
  const status = $("status");
  status.textContent = message;
  status.dataset.state = state;
}

function notice(message, isError = true) {
  const banner = $("error");
  banner.hidden = !message;
  banner.classList.toggle("error", isError);
  banner.textContent = message || "";
}

// ------------------------------------------------------------------ nodes

function nodeState(node, unanswered) {
  if (unanswered.has(node.id) && node.state === "ok") return "unreachable";
  return node.state || "unreachable";
}

function memoryBar(memory) {
  if (!memory || memory.used === null || memory.used === undefined) return "–";
  const level = memory.level;
  const bar = el("span", { class: "bar" });
  const fillEl = el("span", { class: "bar-fill" });
  if (level === null || level === undefined) {
    bar.classList.add("unlimited");
    fillEl.style.width = "0%";
  } else {
    fillEl.style.width = `${Math.min(100, Math.max(0, level * 100)).toFixed(1)}%`;
    bar.classList.add(level >= 0.95 ? "level-high" : level >= 0.75 ? "level-warn" : "level-ok");
  }
  bar.append(fillEl);
  const unlimited = level === null || level === undefined;
  const title = unlimited
    ? `${bytes(memory.used)} used, no maxmemory`
    : `${bytes(memory.used)} used of ${bytes(memory.max)} (${Math.round(level * 100)} %)`;
  const label = unlimited ? bytes(memory.used) : `${Math.round(level * 100)} %`;
  return el("span", { class: "memory", title }, bar, el("span", {}, label));
}

/** The release a node runs and its bus protocol (a rolling upgrade shows two), under
 * its address, and a badge when the serving node refuses it (no bus protocol in common). */
function releaseLine(node) {
  const release = node.release || "–";
  const bus = node.bus ? `bus ${node.bus}` : "bus –";
  const parts = [el("div", { class: "hint release", title: "release, cluster bus protocol" }, `${release} · ${bus}`)];
  if (node.refused) {
    parts.push(el("span", { class: "badge state-fail", title: "no bus protocol in common with the node serving this page" }, "refused"));
  }
  return parts;
}

function createNodeRow() {
  const row = el("tr");
  for (let i = 0; i < 16; i++) row.append(el("td"));
  return row;
}

function updateNodeRow(row, { node, myself, unanswered }) {
  const c = row.cells;
  const state = nodeState(node, unanswered);
  row.dataset.id = node.id;
  row.dataset.state = state;
  row.className = `state-${state}`;
  const idCell = el("span", { title: node.id, class: "mono" }, shortId(node.id));
  const mine = node.id === myself;
  fill(c[0], idCell, mine ? el("span", { class: "tag", title: "the node serving this page" }, "this") : null);
  const address = safeUrl(node.http)
    ? el("a", { href: node.http, title: "this node's own dashboard" }, node.addr || "–")
    : el("span", {}, node.addr || "–");
  fill(c[1], address, ...releaseLine(node));
  const badges = [el("span", { class: `badge state-${state}` }, state)];
  if (unanswered.has(node.id)) badges.push(el("span", { class: "badge state-unreachable" }, "no answer"));
  fill(c[2], ...badges);
  fill(c[3], memoryBar(node.memory));
  text(c[4], num(node.jobs));
  text(c[5], num(node.queued));
  text(c[6], num(node.active));
  text(c[7], num(node.queues));
  text(c[8], num(node.clients));
  text(c[9], num(node.blocked_clients));
  text(c[10], num(node.repair_backlog));
  text(c[11], generation(node.generation));
  c[11].title = `data generation ${node.generation}: when this node's data began`;
  text(c[12], node.ops_per_sec === undefined ? null : num(node.ops_per_sec));
  text(c[13], node.aof);
  text(c[14], node.uptime === undefined ? null : duration(node.uptime));
  const leaving = (node.flags || []).includes("leaving") || node.state === "leaving";
  const label = leaving ? "stop leaving" : "leave…";
  if (c[15].textContent !== label) {
    fill(
      c[15],
      el("button", {
        type: "button",
        class: "leave",
        onclick: () => confirmLeave(row.dataset.id, !leaving),
      }, label),
    );
  }
}

function renderNodes(cluster) {
  const unanswered = new Set(cluster.unanswered || []);
  const items = (cluster.nodes || []).map((node) => ({ node, myself: cluster.myself, unanswered }));
  syncRows($("nodes").tBodies[0], items, (i) => i.node.id, createNodeRow, updateNodeRow);
  const banner = $("unanswered");
  const silent = [...unanswered];
  banner.hidden = silent.length === 0;
  banner.textContent = silent.length
    ? `Not answering (their figures are missing or stale): ${silent.map(shortId).join(", ")}`
    : "";
  const states = {};
  for (const item of items) {
    const s = nodeState(item.node, unanswered);
    states[s] = (states[s] || 0) + 1;
  }
  const parts = Object.entries(states).map(([s, n]) => `${n} ${s}`);
  $("summary").textContent = `${items.length} nodes: ${parts.join(", ")}`;
}

function renderHealth(cluster) {
  const nodes = cluster.nodes || [];
  const dl = $("health");
  const rows = [];
  let used = 0;
  let max = 0;
  let unlimited = false;
  for (const n of nodes) {
    if (!n.memory) continue;
    used += n.memory.used || 0;
    if (n.memory.max) max += n.memory.max;
    else unlimited = true;
  }
  rows.push(["memory used", `${bytes(used)}${unlimited ? "" : ` of ${bytes(max)}`}`]);
  const levelOf = (n) => (n.memory && typeof n.memory.level === "number" ? n.memory.level : 0);
  const high = nodes.filter((n) => levelOf(n) >= 0.95).map((n) => shortId(n.id));
  const warn = nodes.filter((n) => levelOf(n) >= 0.75 && levelOf(n) < 0.95).map((n) => shortId(n.id));
  rows.push(["nodes at 95 % of maxmemory or more", high.length ? high.join(", ") : "none"]);
  rows.push(["nodes at 75–95 %", warn.length ? warn.join(", ") : "none"]);
  const backlog = nodes.reduce((sum, n) => sum + (n.repair_backlog || 0), 0);
  const repairing = nodes.filter((n) => n.repair_backlog > 0);
  rows.push([
    "repair backlog (jobs short of copies)",
    repairing.length
      ? `${num(backlog)}: ${repairing.map((n) => `${shortId(n.id)} ${num(n.repair_backlog)}`).join(", ")}`
      : "0",
  ]);
  const rewriting = nodes.filter((n) => n.aof === "rewriting").map((n) => shortId(n.id));
  if (rewriting.length) rows.push(["AOF rewriting", rewriting.join(", ")]);
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

// ------------------------------------------------------------------ charts

/** Points of a polyline for `values` at `xs`, scaled into a width x height box whose
 * left and right edges are x0 and x1 (by default the first and the last of `xs`). */
function points(xs, values, width, height, max, x0 = xs[0], x1 = xs[xs.length - 1]) {
  const span = x1 - x0 || 1;
  const x = (i) => (((xs[i] - x0) / span) * width).toFixed(1);
  const y = (v) => (height - ((v || 0) / max) * height).toFixed(1);
  return values.map((v, i) => `${x(i)},${y(v)}`).join(" ");
}

function renderHistory(history) {
  const box = $("history");
  const t = (history && history.t) || [];
  if (t.length < 2) {
    box.replaceChildren(el("p", { class: "hint" }, "No history yet."));
    return;
  }
  const ins = history.jobs_in || [];
  const outs = history.jobs_out || [];
  const W = 600;
  const H = 140;
  const max = Math.max(1, ...ins, ...outs);
  const chart = svg(
    "svg",
    { viewBox: `-40 -10 ${W + 50} ${H + 30}`, class: "history", role: "img" },
    svg("title", {}, "jobs in and out per second, cluster-wide"),
    svg("line", { x1: 0, y1: H, x2: W, y2: H, class: "axis" }),
    svg("line", { x1: 0, y1: 0, x2: 0, y2: H, class: "axis" }),
    svg("text", { x: -6, y: 4, class: "label", "text-anchor": "end" }, num(max)),
    svg("text", { x: -6, y: H, class: "label", "text-anchor": "end" }, "0"),
    svg("text", { x: 0, y: H + 16, class: "label" }, `${duration(t[t.length - 1] - t[0])} ago`),
    svg("text", { x: W, y: H + 16, class: "label", "text-anchor": "end" }, "now"),
    svg("polyline", { points: points(t, ins, W, H, max), class: "line-in" }),
    svg("polyline", { points: points(t, outs, W, H, max), class: "line-out" }),
  );
  const last = (a) => (a.length ? a[a.length - 1] : 0);
  const legend = el(
    "div",
    { class: "legend" },
    el("span", { class: "key-in" }, `in ${num(last(ins))}/s`),
    el("span", { class: "key-out" }, `out ${num(last(outs))}/s`),
  );
  box.replaceChildren(chart, legend);
}

function sparkline(values) {
  const W = 120;
  const H = 28;
  if (values.length < 2) return el("span", { class: "hint" }, "collecting…");
  const max = Math.max(1, ...values);
  // The points the page has (one a second, up to a minute) across the whole box, the
  // area under the line filled, in a frame: a flat line (a queue that keeps its length,
  // an empty one at the bottom) still reads.
  const xs = values.map((_, i) => i);
  const line = points(xs, values, W, H, max);
  const first = line.split(" ")[0].split(",")[0];
  return el(
    "span",
    { class: "spark-box" },
    svg(
      "svg",
      { viewBox: `-1 -2 ${W + 2} ${H + 4}`, class: "spark", width: W + 2, height: H + 4 },
      svg("title", {}, `length, one point a second: ${values.join(", ")}`),
      svg("rect", { x: 0, y: 0, width: W, height: H, class: "frame" }),
      svg("polygon", { points: `${first},${H} ${line} ${W},${H}`, class: "area" }),
      svg("polyline", { points: line }),
    ),
    el("span", { class: "spark-max", title: "the highest length in the last minute" },
      `max ${num(Math.max(...values))}`),
  );
}

// ------------------------------------------------------------------ queues

function queueQuery() {
  const params = new URLSearchParams({ sort: view.sort, limit: String(view.limit) });
  if (view.prefix) params.set("prefix", view.prefix);
  const after = view.cursors[view.cursors.length - 1];
  if (after !== null) params.set("after", after);
  return `api/queues?${params}`;
}

/** Per-queue rates from the counters' deltas since the previous poll. */
function trackQueues(queues, now) {
  const rates = new Map();
  for (const q of queues) {
    const k = queueKey(q);
    const prev = counters.get(k);
    if (prev && now > prev.t) {
      const dt = (now - prev.t) / 1000;
      rates.set(k, {
        in: Math.max(0, (q.jobs_in - prev.in) / dt),
        out: Math.max(0, (q.jobs_out - prev.out) / dt),
      });
    }
    counters.set(k, { t: now, in: q.jobs_in, out: q.jobs_out });
    const series = lengths.get(k) || [];
    series.push(q.len || 0);
    if (series.length > SPARK_POINTS) series.shift();
    lengths.set(k, series);
  }
  // Only the visible page is tracked: forget the queues that left it.
  const shown = new Set(queues.map(queueKey));
  for (const k of [...counters.keys()]) if (!shown.has(k)) counters.delete(k);
  for (const k of [...lengths.keys()]) if (!shown.has(k)) lengths.delete(k);
  return rates;
}

function perNode(nodes) {
  const entries = Object.entries(nodes || {});
  if (!entries.length) return "–";
  const box = el("span", { class: "per-node" });
  for (const [id, len] of entries) {
    box.append(el("span", { class: "chip", title: id }, `${shortId(id)} ${num(len)}`));
  }
  return box;
}

function createQueueRow(q) {
  const row = el("tr");
  for (let i = 0; i < 12; i++) row.append(el("td"));
  row.cells[0].append(el("span", { class: "name", title: q.name }, displayName(q.name)));
  if (q.name.startsWith(B64_PREFIX)) row.cells[0].append(el("span", { class: "hint" }, " (not UTF-8)"));
  row.cells[11].append(
    el("button", { type: "button", class: "browse", onclick: () => openBrowser(row.queue) }, "jobs"),
    el("button", { type: "button", class: "pause", onclick: () => confirmPause(row.queue) }, "pause…"),
    el("button", { type: "button", class: "add", onclick: () => confirmAdd(row.queue) }, "add…"),
  );
  return row;
}

function updateQueueRow(row, { q, r }) {
  const c = row.cells;
  row.queue = q;
  row.dataset.paused = q.paused;
  text(c[1], num(q.len));
  fill(c[2], perNode(q.nodes));
  text(c[3], r ? rate(r.in) : null);
  text(c[4], r ? rate(r.out) : null);
  fill(c[5], sparkline(lengths.get(queueKey(q)) || []));
  text(c[6], num(q.nacks));
  text(c[7], num(q.additional_deliveries));
  fill(c[8], el("span", { class: `badge paused-${q.paused}` }, q.paused));
  text(c[9], q.age === null ? "–" : duration(q.age));
  text(c[10], num(q.blocked));
  c[11].querySelector("button.pause").textContent = q.paused === "none" ? "pause…" : "resume…";
}

function renderQueues(page) {
  const queues = page.queues || [];
  const rates = trackQueues(queues, performance.now());
  syncRows(
    $("queues").tBodies[0],
    queues.map((q) => ({ q, r: rates.get(queueKey(q)) })),
    (item) => queueKey(item.q),
    (item) => createQueueRow(item.q),
    updateQueueRow,
  );
  view.nextCursor = page.next ?? null;
  $("queues-total").textContent = `(${num(page.total)} in all)`;
  const first = (view.cursors.length - 1) * view.limit;
  $("queue-page").textContent = queues.length
    ? `page ${view.cursors.length}, queues ${num(first + 1)}–${num(first + queues.length)}`
    : view.prefix
      ? "no queue with this prefix"
      : "no queues";
  $("queue-prev").disabled = view.cursors.length === 1;
  $("queue-first").disabled = view.cursors.length === 1;
  $("queue-next").disabled = view.nextCursor === null;
}

// ------------------------------------------------------------------ jobs

function openBrowser(queue) {
  view.browse = { queue, offset: 0, limit: 50, next: null };
  $("browse-name").textContent = displayName(queue.name);
  $("jobs").tBodies[0].replaceChildren(); // (the previous queue's jobs)
  $("browse-page").textContent = "loading…";
  $("job-browser").hidden = false;
  refresh();
  $("jobs-section").scrollIntoView({ block: "nearest" });
}

function createJobRow(job) {
  const row = el("tr");
  for (let i = 0; i < 7; i++) row.append(el("td"));
  row.cells[0].append(
    el("a", { href: "#", class: "job-link mono", onclick: (e) => (e.preventDefault(), showJob(job.id)) },
      job.id),
  );
  return row;
}

function updateJobRow(row, job) {
  const c = row.cells;
  text(c[1], job.state);
  const body = bodyText(job);
  const cell = c[2];
  if (cell.dataset.body !== body) {
    cell.dataset.body = body;
    const shown = body.length > 120 ? body.slice(0, 120) + "…" : body;
    fill(cell, el("span", { class: "body", title: body }, shown));
  }
  text(c[3], job.ctime ? when(job.ctime) : null);
  text(c[4], num(job.nacks));
  text(c[5], num(job.additional_deliveries));
  fill(c[6], el("span", { class: "mono", title: job.node }, shortId(job.node)));
}

function renderBrowser(page) {
  const b = view.browse;
  const jobs = page.jobs || [];
  b.next = page.next ?? null;
  syncRows($("jobs").tBodies[0], jobs, (j) => j.id, createJobRow, updateJobRow);
  $("browse-page").textContent = jobs.length
    ? `jobs ${num(b.offset + 1)}–${num(b.offset + jobs.length)}`
    : "no jobs queued here";
  $("browse-prev").disabled = b.offset === 0;
  $("browse-next").disabled = b.next === null;
}

function showJob(id) {
  view.jobId = id;
  $("job-id").value = id;
  refresh();
}

function field(name, value) {
  const format = JOB_FIELDS[name];
  const shown =
    value === null || value === undefined
      ? "–"
      : format
        ? format(value)
        : typeof value === "object"
          ? JSON.stringify(value)
          : String(value);
  const raw = format && value !== null && value !== undefined ? JSON.stringify(value) : undefined;
  return [el("dt", {}, name), el("dd", { dataset: { field: name }, title: raw }, shown)];
}

function renderJob(detail) {
  const panel = $("job-detail");
  panel.hidden = false;
  if (detail === null) {
    const missing = `No job ${view.jobId} on any node that answered.`;
    panel.replaceChildren(el("p", { class: "error-text" }, missing));
    return;
  }
  const job = detail.job || {};
  const sync = detail.synchronised;
  const header = el(
    "h3",
    {},
    el("span", { class: "mono" }, job.id || view.jobId),
    " ",
    el("span", { class: `badge ${sync ? "state-ok" : "state-pfail"}`, id: "job-sync" },
      `${sync ? "synchronised" : "not synchronised"}: ${detail.live} live of ${detail.replicate}`),
  );
  const fields = el("dl", { class: "facts" });
  for (const [k, v] of Object.entries(job)) {
    if (k === "body_b64") continue;
    fields.append(...field(k, k === "body" ? bodyText(job) : v));
  }
  const copies = el(
    "table",
    { class: "grid" },
    el("thead", {}, el("tr", {}, el("th", {}, "node"), el("th", {}, "copy"))),
    el(
      "tbody",
      {},
      ...(detail.copies || []).map((copy) =>
        el("tr", {},
          el("td", { class: "mono", title: copy.node }, shortId(copy.node)),
          el("td", {}, copy.state ?? "no copy")),
      ),
    ),
  );
  const actions = el("div", { class: "controls" });
  for (const action of ["enqueue", "dequeue", "nack", "delete"]) {
    actions.append(
      el("button", {
        type: "button",
        class: `job-${action}`,
        onclick: () => confirmJobAction(job.id || view.jobId, action),
      }, action + "…"),
    );
  }
  actions.append(el("button", { type: "button", onclick: closeJob }, "close"));
  panel.replaceChildren(header, fields, el("h4", {}, "copies"), copies, actions);
}

function closeJob() {
  view.jobId = null;
  $("job-detail").hidden = true;
}

// ------------------------------------------------------------------ failed jobs

function failedQuery() {
  const f = view.failed;
  const params = new URLSearchParams({ limit: String(f.limit) });
  for (const [k, v] of Object.entries(f.filters)) if (v) params.set(k, v);
  const cursor = f.cursors[f.cursors.length - 1];
  if (cursor !== null) params.set("cursor", cursor);
  return `api/failed?${params}`;
}

/** Whether this poll reads the failed jobs: the section is open and a reading is due. */
function failedDue() {
  return view.failed.open && performance.now() >= view.failed.due;
}

/** The last line of an error (a traceback's: the exception and its message). */
function lastLine(error) {
  const lines = error.trim().split("\n");
  return lines[lines.length - 1];
}

function createFailedRow(job) {
  const row = el("tr");
  for (let i = 0; i < 10; i++) row.append(el("td"));
  row.cells[0].append(
    el("input", { type: "checkbox", class: "pick", title: "select", onchange: (e) => pick(row.job.id, e.target.checked) }),
  );
  row.cells[8].append(
    el("a", {
      href: "#",
      class: "job-link mono",
      title: job.id,
      onclick: (e) => {
        e.preventDefault();
        showJob(job.id);
        $("jobs-section").scrollIntoView({ block: "nearest" });
      },
    }, shortId(job.id)),
  );
  row.cells[9].append(
    el("button", { type: "button", class: "retry", onclick: () => confirmFailed("retry", [row.job.id]) }, "retry…"),
    el("button", { type: "button", class: "delete", onclick: () => confirmFailed("delete", [row.job.id]) }, "delete…"),
  );
  return row;
}

/** The reason (with the error's last line), opening on the whole error, where the job
 * came from, its body's first bytes and the nodes holding its dead letter. */
function failure(job) {
  const facts = el("dl", { class: "facts" });
  const body = job.body_size > job.body.length ? `${job.body}…` : job.body;
  for (const [k, v] of [
    ["origin job", job.origin_id || "unknown"],
    ["dead-lettered by", { worker: "a worker", policy: "a queue policy" }[job.kind] || "unknown"],
    ["body", `${body} (${bytes(job.body_size)})`],
    ["held by", (job.nodes || []).map(shortId).join(", ") || "–"],
  ]) {
    facts.append(el("dt", {}, k), el("dd", {}, v));
  }
  return el(
    "details",
    { class: "failure" },
    el("summary", { title: job.error || job.reason }, job.error ? `${job.reason}: ${lastLine(job.error)}` : job.reason),
    job.error ? el("pre", { class: "traceback" }, job.error) : null,
    facts,
  );
}

function updateFailedRow(row, job) {
  const c = row.cells;
  row.job = job;
  c[0].firstChild.checked = view.failed.selected.has(job.id);
  text(c[1], `${duration(job.age)} ago`);
  c[1].title = when(job.ctime);
  text(c[2], displayName(job.queue));
  text(c[3], job.origin_queue === null ? "unknown" : displayName(job.origin_queue));
  text(c[4], job.task);
  // Rebuilt only when it changed: an open traceback stays open across readings.
  const shown = JSON.stringify([job.reason, job.error, job.origin_id, job.body, job.nodes]);
  if (c[5].dataset.shown !== shown) {
    c[5].dataset.shown = shown;
    fill(c[5], failure(job));
  }
  text(c[6], num(job.nacks));
  text(c[7], num(job.additional_deliveries));
}

/** A datalist's options: the choices the last reading found. */
function choices(id, values) {
  const list = $(id);
  const wanted = JSON.stringify(values);
  if (list.dataset.values === wanted) return;
  list.dataset.values = wanted;
  list.replaceChildren(...values.map((value) => el("option", { value })));
}

function renderFailed(answer) {
  const f = view.failed;
  const status = $("failed-page");
  status.classList.toggle("error-text", Boolean(answer.error));
  if (answer.error) {
    status.textContent = `Could not read the failed jobs: ${answer.error.message}`;
    return;
  }
  const jobs = answer.jobs || [];
  f.next = answer.next ?? null;
  f.total = answer.total;
  syncRows($("failed-jobs").tBodies[0], jobs, (j) => j.id, createFailedRow, updateFailedRow);
  choices("failed-dlqs", answer.dead_letter_queues || []);
  choices("failed-queues", Object.keys(answer.counts.queues));
  choices("failed-tasks", Object.keys(answer.counts.tasks));
  const filtered = Object.values(f.filters).some(Boolean);
  $("failed-total").textContent = `(${num(answer.total)}${filtered ? " matching" : ""})`;
  const first = (f.cursors.length - 1) * f.limit;
  const notes = [];
  if (answer.unanswered.length) notes.push(`not answering: ${answer.unanswered.map(shortId).join(", ")}`);
  if (answer.truncated) notes.push("a node holds more dead letters than one reading takes: narrow the filters");
  const where = jobs.length
    ? `failed jobs ${num(first + 1)}–${num(first + jobs.length)} of ${num(answer.total)}`
    : filtered ? "no failed job matches" : "no failed jobs";
  status.textContent = [where, ...notes].join(" · ");
  $("failed-first").disabled = f.cursors.length === 1;
  $("failed-prev").disabled = f.cursors.length === 1;
  $("failed-next").disabled = f.next === null;
  updateFailedButtons();
}

function pick(id, on) {
  if (on) view.failed.selected.add(id);
  else view.failed.selected.delete(id);
  updateFailedButtons();
}

/** The action buttons and the page's tick box, as the selection and the reading say. */
function updateFailedButtons() {
  const f = view.failed;
  const rows = [...$("failed-jobs").tBodies[0].rows];
  const n = f.selected.size;
  for (const action of ["retry", "delete"]) {
    const button = $(`failed-${action}-selected`);
    button.disabled = n === 0;
    button.textContent = n ? `${action} ${n} selected…` : `${action} selected…`;
    $(`failed-${action}-all`).disabled = f.total === 0;
  }
  const box = $("failed-select-page");
  box.checked = rows.length > 0 && rows.every((row) => f.selected.has(row.job.id));
}

function selectPage(on) {
  for (const row of $("failed-jobs").tBodies[0].rows) {
    row.cells[0].firstChild.checked = on;
    pick(row.job.id, on);
  }
}

const FAILED_ACTIONS = {
  retry: "each back on its origin queue with fresh counters, its dead letter removed on every node",
  delete: "each dead letter removed on every node, and nothing put back",
};

/** Retry or delete the failed jobs `ids` (null: every one matching the filters). */
async function confirmFailed(action, ids) {
  const f = view.failed;
  const filtered = Object.values(f.filters).some(Boolean);
  const what = ids === null
    ? `all ${num(f.total)} failed jobs${filtered ? " matching the filters" : ""}`
    : ids.length === 1 ? `failed job ${ids[0]}` : `${ids.length} failed jobs`;
  const verb = action === "retry" ? "Retry" : "Delete";
  if (!(await confirmDialog(`${verb} ${what}: ${FAILED_ACTIONS[action]}?`))) return;
  const body = ids === null ? { all: true, ...f.filters } : { ids, dlq: f.filters.dlq };
  const done = action === "retry" ? "retried" : "deleted";
  try {
    const report = await api("POST", `api/failed/${action}`, body);
    const failures = report.results.filter((r) => r.error);
    if (failures.length) {
      const first = failures[0];
      notice(`Failed: ${action} ${what}: ${report.done} ${done}, ${report.failed} not (${first.id}: ${first.error}).`);
    } else {
      notice(`Done: ${report.done} failed job${report.done === 1 ? "" : "s"} ${done}.`, false);
    }
  } catch (err) {
    notice(`Failed: ${action} ${what}: ${err.message}`);
  }
  f.selected.clear();
  f.due = 0;
  refresh();
}

function failedFirstPage() {
  const f = view.failed;
  f.cursors = [null];
  f.selected.clear();
  f.due = 0;
  refresh();
}

// ------------------------------------------------------------------ workflows

// How a workflow's overall state shows, as the node badges' colours.
const WORKFLOW_BADGES = {
  running: "state-pfail",
  succeeded: "state-ok",
  failed: "state-fail",
  cancelled: "state-leaving",
  unknown: "",
};

function workflowsQuery() {
  const w = view.workflows;
  const params = new URLSearchParams({ limit: String(w.limit) });
  const cursor = w.cursors[w.cursors.length - 1];
  if (cursor !== null) params.set("cursor", cursor);
  return `api/workflows?${params}`;
}

function workflowPath() {
  const w = view.workflows;
  if (w.id === null) return null;
  const params = new URLSearchParams({ offset: String(w.offset), limit: String(WORKFLOW_JOBS) });
  if (w.filter) params.set("state", w.filter);
  return `api/workflows/${encodeURIComponent(w.id)}?${params}`;
}

/** Whether this poll reads the workflows: the section is open and a reading is due. */
function workflowsDue() {
  return view.workflows.open && performance.now() >= view.workflows.due;
}

/** "3 succeeded, 1 failed, 6 queued": the states a workflow's jobs are in. */
function stateCounts(counts) {
  return Object.entries(counts || {})
    .filter(([, n]) => n)
    .map(([state, n]) => `${num(n)} ${state}`)
    .join(", ");
}

/** A workflow's progress: a bar of its jobs finished, and the percent. */
function progressBar(w) {
  const bar = el("span", { class: "bar" });
  const fillEl = el("span", { class: "bar-fill" });
  fillEl.style.width = `${w.counted ? w.percent : 0}%`;
  bar.classList.add(w.state === "failed" || w.state === "cancelled" ? "level-high" : "level-ok");
  bar.append(fillEl);
  const label = w.counted ? `${w.percent} %` : "not counted";
  const title = w.counted
    ? `${num(w.done)} of ${num(w.jobs)} jobs finished`
    : `${num(w.jobs)} jobs: too many to count with the others; open it`;
  return el("span", { class: "memory progress", title }, bar, el("span", {}, label));
}

function createWorkflowRow(w) {
  const row = el("tr");
  for (let i = 0; i < 7; i++) row.append(el("td"));
  row.cells[6].append(
    el("a", {
      href: "#",
      class: "workflow-link mono",
      title: w.id,
      onclick: (e) => {
        e.preventDefault();
        showWorkflow(row.workflow.id);
      },
    }, shortId(w.id)),
  );
  return row;
}

function updateWorkflowRow(row, w) {
  const c = row.cells;
  row.workflow = w;
  text(c[0], `${duration(w.age)} ago`);
  c[0].title = when(w.created);
  text(c[1], w.kind);
  text(c[2], w.name);
  const shown = JSON.stringify([w.counted, w.percent, w.state]);
  if (c[3].dataset.shown !== shown) {
    c[3].dataset.shown = shown;
    fill(c[3], progressBar(w));
  }
  text(c[4], w.counted ? `${stateCounts(w.counts)} (of ${num(w.jobs)})` : `${num(w.jobs)} jobs`);
  const state = w.counted ? w.state : "not counted";
  if (c[5].textContent !== state) {
    fill(c[5], el("span", { class: `badge ${WORKFLOW_BADGES[w.state] || ""}` }, state));
  }
}

function renderWorkflows(answer) {
  const w = view.workflows;
  const status = $("workflows-page");
  status.classList.toggle("error-text", Boolean(answer.error));
  if (answer.error) {
    status.textContent = `Could not read the workflows: ${answer.error.message}`;
    return;
  }
  const items = answer.workflows || [];
  w.next = answer.next ?? null;
  syncRows($("workflows-list").tBodies[0], items, (x) => x.id, createWorkflowRow, updateWorkflowRow);
  $("workflows-total").textContent = `(${num(answer.total)})`;
  const first = (w.cursors.length - 1) * w.limit;
  const notes = [];
  if (answer.unanswered.length) notes.push(`not answering: ${answer.unanswered.map(shortId).join(", ")}`);
  if (answer.truncated) notes.push("a node holds more records than one reading takes");
  const where = items.length
    ? `workflows ${num(first + 1)}–${num(first + items.length)} of ${num(answer.total)}`
    : "no workflows";
  status.textContent = [where, ...notes].join(" · ");
  $("workflows-first").disabled = w.cursors.length === 1;
  $("workflows-prev").disabled = w.cursors.length === 1;
  $("workflows-next").disabled = w.next === null;
}

function showWorkflow(id) {
  const w = view.workflows;
  w.id = id;
  w.offset = 0;
  w.filter = "";
  $("workflow-filter").value = "";
  w.due = 0;
  refresh();
}

function closeWorkflow() {
  view.workflows.id = null;
  $("workflow-detail").hidden = true;
}

function createWorkflowJobRow() {
  const row = el("tr");
  for (let i = 0; i < 5; i++) row.append(el("td"));
  row.cells[0].append(
    el("a", {
      href: "#",
      class: "job-link mono",
      onclick: (e) => {
        e.preventDefault();
        showJob(row.job.id);
        $("jobs-section").scrollIntoView({ block: "nearest" });
      },
    }),
  );
  return row;
}

function updateWorkflowJobRow(row, job) {
  const c = row.cells;
  row.job = job;
  const link = c[0].firstChild;
  text(link, shortId(job.id));
  link.title = job.id;
  text(c[1], job.role);
  text(c[2], job.task ?? "(join)");
  text(c[3], job.state);
  row.dataset.state = job.state;
  text(c[4], job.result);
}

/** The opened workflow: its summary, its result or its failures, a page of its jobs
 * (`answer` null: no node holds its record any more). */
function renderWorkflow(answer) {
  const w = view.workflows;
  const panel = $("workflow-detail");
  panel.hidden = false;
  $("workflow-id").textContent = w.id;
  const facts = $("workflow-facts");
  const badge = $("workflow-state");
  if (answer === null || answer.error) {
    badge.className = "badge state-fail";
    badge.textContent = answer === null ? "gone" : "unread";
    const why = answer === null
      ? "No node that answered holds this workflow's record (expired, or never sent)."
      : `Could not read it: ${answer.error.message}`;
    facts.replaceChildren(el("dt", {}, "note"), el("dd", { class: "error-text" }, why));
    $("workflow-jobs").tBodies[0].replaceChildren();
    $("workflow-cancel").disabled = true;
    return;
  }
  const wf = answer.workflow;
  badge.className = `badge ${WORKFLOW_BADGES[wf.state] || ""}`;
  badge.textContent = `${wf.state} · ${wf.percent} %`;
  $("workflow-cancel").disabled = wf.state !== "running";
  const entries = [
    ["kind", wf.kind],
    ["name", wf.name ?? "–"],
    ["created", since(wf.created)],
    ["jobs", `${num(wf.jobs)}: ${num(wf.members)} members, ${num(wf.joins)} joins, ${num(wf.steps.length)} steps`],
    ["by state", stateCounts(wf.counts) || "–"],
    ["on failure", wf.on_failure ?? "–"],
  ];
  if (wf.state !== "running" && (wf.result !== null || wf.state === "succeeded")) {
    entries.push(["result", JSON.stringify(wf.result)]);
  }
  if (wf.failed.length) entries.push(["failed", wf.failed.join(", ")]);
  if (answer.unanswered.length) entries.push(["not answering", answer.unanswered.map(shortId).join(", ")]);
  facts.replaceChildren(
    ...entries.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { dataset: { field: k } }, v)]),
  );
  const jobs = answer.jobs || [];
  syncRows($("workflow-jobs").tBodies[0], jobs, (j) => j.id, createWorkflowJobRow, updateWorkflowJobRow);
  w.nextOffset = answer.next ?? null;
  $("workflow-page").textContent = jobs.length
    ? `jobs ${num(w.offset + 1)}–${num(w.offset + jobs.length)} of ${num(answer.matching)}`
    : "no job matches";
  $("workflow-prev").disabled = w.offset === 0;
  $("workflow-next").disabled = w.nextOffset === null;
}

async function confirmCancelWorkflow() {
  const id = view.workflows.id;
  const question = `Cancel workflow ${id}? Every job of it not finished yet is cancelled ` +
    "on every node (members, joins and steps); finished ones stay as they are.";
  if (!(await confirmDialog(question))) return;
  try {
    const done = await api("POST", `api/workflows/${encodeURIComponent(id)}/cancel`);
    notice(`Done: workflow ${id} cancelled (${done.cancelled} of ${done.jobs} jobs were pending).`, false);
  } catch (err) {
    notice(`Failed: cancel workflow ${id}: ${err.message}`);
  }
  view.workflows.due = 0;
  refresh();
}

// ------------------------------------------------------------------ actions

/**
 * The confirmation dialog: `message`, then `fields` (elements with a name), resolved
 * with {name: value} on Confirm, null on Cancel or Escape.
 */
function confirmDialog(message, fields = []) {
  const dialog = $("confirm");
  $("confirm-text").textContent = message;
  $("confirm-fields").replaceChildren(...fields);
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        if (dialog.returnValue !== "ok") return resolve(null);
        const values = {};
        for (const input of $("confirm-fields").querySelectorAll("[name]")) values[input.name] = input.value;
        resolve(values);
      },
      { once: true },
    );
    dialog.showModal();
    $("confirm-ok").focus();
  });
}

async function act(description, method, path, body) {
  try {
    await api(method, path, body);
    notice(`Done: ${description}.`, false);
  } catch (err) {
    notice(`Failed: ${description}: ${err.message}`);
  }
  refresh();
}

async function confirmPause(queue) {
  const select = el(
    "select",
    { name: "state", id: "pause-state" },
    ...["none", "in", "out", "all"].map((s) =>
      el("option", { value: s }, s === "none" ? "none (resume)" : s)),
  );
  select.value = queue.paused === "none" ? "all" : "none";
  const values = await confirmDialog(`Pause state of queue “${displayName(queue.name)}” on every node:`, [
    el("label", {}, "pause ", select),
  ]);
  if (values) {
    const what = `pause ${values.state} on queue “${displayName(queue.name)}”`;
    await act(what, "POST", `api/queues/${queueSegment(queue)}/pause`, { state: values.state });
  }
}

function input(name, label, props = {}) {
  return el("label", {}, `${label} `, el(props.rows ? "textarea" : "input", { name, ...props }));
}

async function confirmAdd(queue) {
  const fields = [];
  if (!queue) fields.push(input("queue", "queue", { required: true, id: "add-queue" }));
  fields.push(
    input("body", "body", { rows: 4, cols: 40, id: "add-body" }),
    input("replicate", "replicate", { type: "number", min: 1, placeholder: "default", id: "add-replicate" }),
    input("ttl", "TTL (s)", { type: "number", min: 1, placeholder: "default", id: "add-ttl" }),
    input("retry", "retry (s)", { type: "number", min: 0, placeholder: "default", id: "add-retry" }),
    input("delay", "delay (s)", { type: "number", min: 0, placeholder: "0", id: "add-delay" }),
  );
  const target = queue ? `queue “${displayName(queue.name)}”` : "a queue";
  const values = await confirmDialog(`Add a job to ${target} (ADDJOB):`, fields);
  if (!values) return;
  const q = queue || { name: values.queue };
  if (!q.name) return notice("Failed: add a job: no queue name given.");
  const body = { body: values.body };
  for (const k of ["replicate", "ttl", "retry", "delay"]) if (values[k] !== "") body[k] = Number(values[k]);
  const what = `add a job to queue “${displayName(q.name)}”`;
  await act(what, "POST", `api/queues/${queueSegment(q)}/jobs`, body);
}

const JOB_ACTIONS = {
  enqueue: "put back in its queue (ENQUEUE)",
  dequeue: "take out of its queue (DEQUEUE)",
  nack: "give back as not processed (NACK)",
  delete: "delete on every node (DELJOB)",
};

async function confirmJobAction(id, action) {
  if (await confirmDialog(`Job ${id}: ${JOB_ACTIONS[action]}?`)) {
    await act(`${action} job ${id}`, "POST", `api/jobs/${encodeURIComponent(id)}/${action}`);
  }
}

async function confirmLeave(id, leaving) {
  const question = leaving
    ? `Make node ${id} leave the cluster? It refuses new jobs (-LEAVING) ` +
      "and its queued jobs go to the nodes that ask for them."
    : `Node ${id} stops leaving and takes jobs again?`;
  if (await confirmDialog(question)) {
    const what = `${leaving ? "leave" : "stop leaving"}: node ${id}`;
    await act(what, "POST", `api/nodes/${encodeURIComponent(id)}/leave`, { leaving });
  }
}

// ------------------------------------------------------------------ polling

async function pollOnce() {
  const requests = [api("GET", "api/cluster"), api("GET", queueQuery())];
  const b = view.browse;
  const jobsPath = b && `api/queues/${queueSegment(b.queue)}/jobs?offset=${b.offset}&limit=${b.limit}`;
  requests.push(b ? api("GET", jobsPath) : null);
  const jobId = view.jobId;
  requests.push(
    jobId
      ? api("GET", `api/jobs/${encodeURIComponent(jobId)}`).catch((err) => {
          if (err.status === 404) return null;
          throw err;
        })
      : undefined,
  );
  const failedPath = failedDue() ? failedQuery() : null;
  if (failedPath) view.failed.due = performance.now() + FAILED_POLL_MS;
  requests.push(failedPath && api("GET", failedPath).catch((error) => ({ error })));
  const workflowsPath = workflowsDue() ? workflowsQuery() : null;
  const workflowPathNow = workflowsPath && workflowPath();
  if (workflowsPath) view.workflows.due = performance.now() + WORKFLOWS_POLL_MS;
  requests.push(workflowsPath && api("GET", workflowsPath).catch((error) => ({ error })));
  requests.push(
    workflowPathNow &&
      api("GET", workflowPathNow).catch((error) => (error.status === 404 ? null : { error })),
  );
  const [cluster, queues, jobs, job, failed, workflowList, workflow] = await Promise.all(requests);
  renderNodes(cluster);
  renderHistory(cluster.history);
  renderHealth(cluster);
  renderQueues(queues);
  if (jobs && view.browse === b) renderBrowser(jobs);
  if (job !== undefined && view.jobId === jobId) renderJob(job);
  if (failed && failedQuery() === failedPath) renderFailed(failed);
  if (workflowList && workflowsQuery() === workflowsPath) renderWorkflows(workflowList);
  if (workflowPathNow && workflowPath() === workflowPathNow) renderWorkflow(workflow);
}

async function poll() {
  try {
    await pollOnce();
    setStatus(`live · updated ${new Date().toLocaleTimeString()}`, "live");
  } catch (err) {
    setStatus(`no answer from this node (${err.message}); retrying`, "down");
  }
}

/** Poll now (or right after the poll in flight), e.g. after an action or a new filter. */
function refresh() {
  if (polling) pollAgain = true;
  else run();
}

async function run() {
  clearTimeout(run.timer);
  polling = poll();
  await polling;
  polling = null;
  if (pollAgain) {
    pollAgain = false;
    run();
  } else {
    run.timer = setTimeout(run, POLL_MS);
  }
}

// ------------------------------------------------------------------ controls

function firstPage() {
  view.cursors = [null];
  refresh();
}

function wire() {
  let typing = null;
  $("queue-prefix").addEventListener("input", (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      view.prefix = e.target.value;
      firstPage();
    }, 250);
  });
  $("queue-sort").addEventListener("change", (e) => {
    view.sort = e.target.value;
    firstPage();
  });
  $("queue-limit").addEventListener("change", (e) => {
    view.limit = Number(e.target.value);
    firstPage();
  });
  $("queue-controls").addEventListener("submit", (e) => e.preventDefault());
  $("queue-first").addEventListener("click", firstPage);
  // Paging buttons stay disabled until their page came: a second click must not reuse
  // the cursor of the page it leaves.
  $("queue-prev").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (view.cursors.length > 1) view.cursors.pop();
    refresh();
  });
  $("queue-next").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (view.nextCursor !== null) view.cursors.push(view.nextCursor);
    view.nextCursor = null;
    refresh();
  });
  $("queue-add").addEventListener("click", () => confirmAdd(null));
  $("browse-close").addEventListener("click", () => {
    view.browse = null;
    $("job-browser").hidden = true;
  });
  $("browse-prev").addEventListener("click", (e) => {
    e.target.disabled = true;
    view.browse.offset = Math.max(0, view.browse.offset - view.browse.limit);
    refresh();
  });
  $("browse-next").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (view.browse.next !== null) view.browse.offset = view.browse.next;
    view.browse.next = null;
    refresh();
  });
  $("job-search").addEventListener("submit", (e) => {
    e.preventDefault();
    const id = $("job-id").value.trim();
    if (id) showJob(id);
  });
  wireFailed();
  wireWorkflows();
}

function wireFailed() {
  const f = view.failed;
  $("failed").addEventListener("toggle", (e) => {
    f.open = e.target.open;
    if (f.open) {
      f.due = 0;
      refresh();
    }
  });
  const filters = {
    "failed-dlq": "dlq",
    "failed-queue": "queue",
    "failed-task": "task",
    "failed-error": "error",
    "failed-min-age": "min_age",
    "failed-max-age": "max_age",
  };
  let typing = null;
  for (const [id, param] of Object.entries(filters)) {
    $(id).addEventListener("input", (e) => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        f.filters[param] = e.target.value.trim();
        failedFirstPage();
      }, 300);
    });
  }
  $("failed-filters").addEventListener("submit", (e) => e.preventDefault());
  $("failed-limit").addEventListener("change", (e) => {
    f.limit = Number(e.target.value);
    failedFirstPage();
  });
  $("failed-first").addEventListener("click", failedFirstPage);
  $("failed-prev").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (f.cursors.length > 1) f.cursors.pop();
    f.due = 0;
    refresh();
  });
  $("failed-next").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (f.next !== null) f.cursors.push(f.next);
    f.next = null;
    f.due = 0;
    refresh();
  });
  $("failed-select-page").addEventListener("change", (e) => selectPage(e.target.checked));
  for (const action of ["retry", "delete"]) {
    $(`failed-${action}-selected`).addEventListener("click", () => confirmFailed(action, [...f.selected]));
    $(`failed-${action}-all`).addEventListener("click", () => confirmFailed(action, null));
  }
}

function wireWorkflows() {
  const w = view.workflows;
  const again = () => {
    w.due = 0;
    refresh();
  };
  const firstWorkflows = () => {
    w.cursors = [null];
    again();
  };
  $("workflows").addEventListener("toggle", (e) => {
    w.open = e.target.open;
    if (w.open) again();
  });
  $("workflows-limit").addEventListener("change", (e) => {
    w.limit = Number(e.target.value);
    firstWorkflows();
  });
  $("workflows-first").addEventListener("click", firstWorkflows);
  $("workflows-prev").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (w.cursors.length > 1) w.cursors.pop();
    again();
  });
  $("workflows-next").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (w.next !== null) w.cursors.push(w.next);
    w.next = null;
    again();
  });
  $("workflow-close").addEventListener("click", closeWorkflow);
  $("workflow-cancel").addEventListener("click", confirmCancelWorkflow);
  $("workflow-filter").addEventListener("change", (e) => {
    w.filter = e.target.value;
    w.offset = 0;
    again();
  });
  $("workflow-prev").addEventListener("click", (e) => {
    e.target.disabled = true;
    w.offset = Math.max(0, w.offset - WORKFLOW_JOBS);
    again();
  });
  $("workflow-next").addEventListener("click", (e) => {
    e.target.disabled = true;
    if (w.nextOffset !== null) w.offset = w.nextOffset;
    w.nextOffset = null;
    again();
  });
}

wire();
run();
