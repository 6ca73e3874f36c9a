// kohort console: reads the broker's JSON API (/api/...) and renders topics, groups and one group's
// members, lag (table + SVG chart) and rebalance history. Data is only ever inserted as text
// (textContent), never as HTML. Views: #topics, #groups, #group=<id>.
"use strict";

// ?refresh=MS sets the refresh period; ?refresh=0 renders once per navigation (no auto-refresh)
const REFRESH_PARAM = new URLSearchParams(location.search).get("refresh");
const REFRESH_MS = REFRESH_PARAM === null ? 2000 : Number(REFRESH_PARAM);
const COLORS = ["#2456c8", "#d1495b", "#1f7a45", "#edae49", "#7b2cbf", "#00798c", "#a05a00", "#555"];
let cluster = null;
let timer = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "href") e.setAttribute("href", v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function fmt(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function time(ms) { return new Date(ms).toLocaleTimeString("en-GB", { hour12: false }); }
function tps(list) {
  return (list || []).map(a => a.topic + "-[" + a.partitions.join(",") + "]").join(" ") || "–";
}
function num(v) { return el("td", { class: "num" }, fmt(v)); }

async function api(path, opts) {
  const r = await fetch(path, Object.assign({ cache: "no-store" }, opts || {}));
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) { const e = new Error(body.error || r.statusText); e.status = r.status; throw e; }
  return body;
}

function show(view) {
  for (const v of ["topics", "groups", "group"]) {
    document.getElementById("view-" + v).hidden = v !== view;
  }
  document.getElementById("nav-topics").classList.toggle("active", view === "topics");
  document.getElementById("nav-groups").classList.toggle("active", view !== "topics");
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// -- views ---------------------------------------------------------------------------------------
async function renderTopics() {
  const topics = await api("/api/topics");
  const internal = document.getElementById("show-internal").checked;
  const shown = topics.filter(t => internal || !t.internal);
  fill(document.querySelector("#topics-table tbody"), shown.map(t =>
    el("tr", { "data-topic": t.name },
      el("td", {}, t.name, t.internal ? el("span", { class: "muted" }, " (internal)") : null),
      num(t.partitions.length), num(t.messages), el("td", { class: "num" }, bytes(t.size_bytes)),
      el("td", { class: "mono" }, t.topic_id))));
  const rows = [];
  for (const t of shown) {
    for (const p of t.partitions) {
      rows.push(el("tr", { "data-topic": t.name, "data-partition": p.partition },
        el("td", {}, t.name), num(p.partition),
        el("td", { class: "num log-start" }, fmt(p.log_start_offset)),
        el("td", { class: "num log-end" }, fmt(p.log_end_offset)),
        el("td", { class: "num hw" }, fmt(p.high_watermark)),
        el("td", { class: "num lso" }, fmt(p.last_stable_offset)),
        el("td", { class: "num" }, bytes(p.size_bytes)),
        el("td", { class: "num" }, p.leader + " (" + p.leader_epoch + ")")));
    }
  }
  fill(document.querySelector("#partitions-table tbody"), rows);
}

async function renderGroups() {
  const groups = await api("/api/groups");
  fill(document.querySelector("#groups-table tbody"), groups.map(g =>
    el("tr", { "data-group": g.group_id },
      el("td", {}, el("a", { href: "#group=" + encodeURIComponent(g.group_id) }, g.group_id)),
      el("td", { class: "type" }, g.type === "consumer" ? "consumer (KIP-848)" : "classic" + (g.protocol_type ? " / " + g.protocol_type : "")),
      el("td", {}, el("span", { class: "state " + g.state }, g.state)),
      num(g.generation), el("td", { class: "num members" }, fmt(g.members)),
      el("td", {}, g.assignor || "–"), num(g.partitions),
      el("td", { class: "num total-lag" }, fmt(g.total_lag)))));
}

function dl(pairs) {
  const out = [];
  for (const [k, v] of pairs) {
    if (v === undefined) continue;
    out.push(el("dt", {}, k), el("dd", {}, v === null ? "–" : String(v)));
  }
  return out;
}

async function renderGroup(id) {
  let g;
  try {
    g = await api("/api/group?id=" + encodeURIComponent(id));
  } catch (e) {
    if (e.status === 404) {
      document.getElementById("group-id").textContent = id;
      document.getElementById("group-state").textContent = "not found";
      return;
    }
    throw e;
  }
  document.getElementById("group-id").textContent = g.group_id;
  const st = document.getElementById("group-state");
  st.textContent = g.state;
  st.className = "state " + g.state;
  const consumer = g.type === "consumer";
  document.getElementById("group-summary").replaceChildren(...dl([
    ["Type", consumer ? "consumer (KIP-848, broker-side assignment)" : (g.type ? "classic" : "–")],
    ["Protocol type", g.protocol_type],
    [consumer ? "Group epoch" : "Generation", consumer ? g.group_epoch : g.generation],
    ["Target assignment epoch", consumer ? g.assignment_epoch : undefined],
    [consumer ? "Assignor" : "Protocol (assignor)", g.assignor],
    ["Leader", consumer ? undefined : g.leader],
    ["Members", g.members.length],
    ["Total lag", fmt(g.total_lag)],
  ]));
  const actions = document.getElementById("group-actions");
  actions.hidden = !(cluster && cluster.console.allow_writes);

  const head = consumer
    ? ["Member", "Client id", "Host", "Instance id", "Protocol", "Epoch", "Member state", "Assignment", "Target assignment", "Pending revocation", "Subscription"]
    : ["Member", "Client id", "Host", "Instance id", "Leader", "Assignment", "Subscription", "Session timeout"];
  document.querySelector("#members-table thead tr").replaceChildren(...head.map(h => el("th", {}, h)));
  fill(document.querySelector("#members-table tbody"), g.members.map(m => consumer
    ? el("tr", { "data-member": m.member_id },
        el("td", { class: "mono" }, m.member_id), el("td", { class: "client-id" }, m.client_id), el("td", {}, m.client_host),
        el("td", {}, m.group_instance_id || "–"), el("td", {}, m.protocol), num(m.member_epoch),
        el("td", {}, m.member_state), el("td", { class: "assignment" }, tps(m.assignment)),
        el("td", { class: "target" }, tps(m.target_assignment)), el("td", {}, tps(m.pending_revocation)),
        el("td", {}, m.subscribed_regex ? "/" + m.subscribed_regex + "/" : m.subscribed_topics.join(", ")))
    : el("tr", { "data-member": m.member_id },
        el("td", { class: "mono" }, m.member_id), el("td", { class: "client-id" }, m.client_id), el("td", {}, m.client_host),
        el("td", {}, m.group_instance_id || "–"), el("td", {}, m.leader ? "yes" : ""),
        el("td", { class: "assignment" }, tps(m.assignment)), el("td", {}, m.subscribed_topics.join(", ")),
        el("td", { class: "num" }, m.session_timeout_ms + " ms"))));

  fill(document.querySelector("#offsets-table tbody"), g.offsets.map(o =>
    el("tr", { "data-tp": o.topic + "-" + o.partition },
      el("td", {}, o.topic), num(o.partition), el("td", { class: "num committed" }, fmt(o.committed_offset)),
      el("td", { class: "num log-end" }, fmt(o.log_end_offset)), el("td", { class: "num lag" }, fmt(o.lag)),
      el("td", { class: "mono" }, o.member_id || "–"), el("td", {}, o.client_id || "–"), el("td", {}, o.client_host || "–"))));

  drawChart(g.lag_history || []);

  fill(document.querySelector("#events-table tbody"), g.events.slice().reverse().map(e =>
    el("tr", { "data-kind": e.kind, class: "kind-" + e.kind },
      el("td", {}, time(e.ts_ms)), el("td", { class: "kind" }, e.kind), el("td", { class: "mono" }, e.member_id || ""),
      num(e.generation), el("td", {}, e.state), el("td", { class: "reason" }, e.reason))));
}

// A line per partition and one for the total; x = time, y = lag.
function drawChart(points) {
  const box = document.getElementById("lag-chart");
  const W = 900, H = 260, L = 60, R = 10, T = 10, B = 30;
  box.replaceChildren();
  box.setAttribute("data-points", String(points.length));
  const legend = document.getElementById("lag-legend");
  legend.replaceChildren();
  if (!points.length) {
    const t = svg("text", { x: L, y: H / 2 });
    t.textContent = "no lag samples yet (a sample is taken every " +
      (cluster ? cluster.console.lag_sample_ms : "?") + " ms for groups with committed offsets)";
    box.appendChild(t);
    return;
  }
  const t0 = points[0].ts_ms, t1 = Math.max(points[points.length - 1].ts_ms, t0 + 1);
  const ymax = Math.max(1, ...points.map(p => p.total));
  const x = ts => L + (ts - t0) / (t1 - t0) * (W - L - R);
  const y = v => T + (1 - v / ymax) * (H - T - B);
  box.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999" }));
  box.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#999" }));
  for (const v of [0, ymax / 2, ymax]) {
    const t = svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" });
    t.textContent = fmt(Math.round(v));
    box.appendChild(t);
  }
  for (const ts of [t0, t1]) {
    const t = svg("text", { x: x(ts), y: H - 10, "text-anchor": ts === t0 ? "start" : "end" });
    t.textContent = time(ts);
    box.appendChild(t);
  }
  const keys = [...new Set(points.flatMap(p => Object.keys(p.partitions)))].sort();
  const series = [["total", p => p.total]].concat(keys.map(k => [k, p => p.partitions[k]]));
  series.forEach(([name, get], i) => {
    const color = COLORS[i % COLORS.length];
    const pts = points.filter(p => get(p) !== undefined).map(p => x(p.ts_ms).toFixed(1) + "," + y(get(p)).toFixed(1));
    const line = svg("polyline", { points: pts.join(" "), fill: "none", stroke: color,
      "stroke-width": name === "total" ? 2.5 : 1.2, "data-series": name });
    box.appendChild(line);
    for (const p of points) {
      if (get(p) === undefined) continue;
      box.appendChild(svg("circle", { cx: x(p.ts_ms).toFixed(1), cy: y(get(p)).toFixed(1), r: name === "total" ? 2.5 : 1.5,
        fill: color, class: "point", "data-series": name }));
    }
    const sw = el("i", {});
    sw.style.background = color;
    legend.appendChild(el("span", {}, sw, name + " (" + fmt(get(points[points.length - 1])) + ")"));
  });
}

// -- actions (only with --console-allow-writes) ----------------------------------------------------
async function act(path, body, question) {
  if (!confirm(question)) return;
  const id = decodeURIComponent(location.hash.slice("#group=".length));
  const out = document.getElementById("action-result");
  try {
    await api(path + "?id=" + encodeURIComponent(id), {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    out.textContent = "done";
  } catch (e) {
    out.textContent = "refused: " + e.message;
  }
  refresh();
}

// -- loop ----------------------------------------------------------------------------------------
async function refresh() {
  clearTimeout(timer);
  const err = document.getElementById("error");
  try {
    if (!cluster) {
      cluster = await api("/api/cluster");
      const l = cluster.listeners[0];
      document.getElementById("cluster").textContent =
        "kohort " + cluster.version + " · cluster " + cluster.cluster_id + " · node " + cluster.node_id +
        " · " + l.host + ":" + l.port;
      const mode = document.getElementById("mode");
      mode.textContent = cluster.console.allow_writes ? "read-write" : "read-only";
      mode.classList.toggle("rw", cluster.console.allow_writes);
    }
    const h = location.hash || "#topics";
    if (h.startsWith("#group=")) {
      show("group");
      await renderGroup(decodeURIComponent(h.slice("#group=".length)));
    } else if (h === "#groups") {
      show("groups");
      await renderGroups();
    } else {
      show("topics");
      await renderTopics();
    }
    err.hidden = true;
    document.getElementById("updated").textContent = "updated " + time(Date.now());
    document.body.setAttribute("data-loaded", String(Date.now()));
  } catch (e) {
    err.textContent = "cannot reach the broker's console API: " + e.message;
    err.hidden = false;
  }
  if (REFRESH_MS > 0) timer = setTimeout(refresh, REFRESH_MS);
}

document.getElementById("refresh-s").textContent = REFRESH_MS > 0 ? "every " + REFRESH_MS / 1000 + " s" : "on navigation";
window.addEventListener("hashchange", refresh);
document.getElementById("show-internal").addEventListener("change", refresh);
document.getElementById("reset-earliest").addEventListener("click", () =>
  act("/api/group/reset-offsets", { to: "earliest" }, "Reset every committed offset of this group to the log start?"));
document.getElementById("reset-latest").addEventListener("click", () =>
  act("/api/group/reset-offsets", { to: "latest" }, "Reset every committed offset of this group to the log end?"));
document.getElementById("delete-group").addEventListener("click", () =>
  act("/api/group/delete", {}, "Delete this group and its committed offsets?"));
refresh();
