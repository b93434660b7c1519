// The hub's status page: draws each sample of /api/events (server-sent, one a second).
// No framework and no build step: the hub serves this file as it is.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

function fmt(n) {
  if (n === null || n === undefined) return "–";
  if (typeof n !== "number") return String(n);
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function duration(s) {
  if (s < 60) return s.toFixed(0) + "s";
  if (s < 3600) return (s / 60).toFixed(0) + "m";
  if (s < 86400) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

// Replace a table's rows; each row is [attributes, [text, class]...].
function fill(tableId, rows, empty) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  if (!rows.length) {
    const tr = body.insertRow();
    const td = cell(empty, "empty");
    td.colSpan = $(tableId).tHead.rows[0].cells.length;
    tr.appendChild(td);
    return;
  }
  for (const [attrs, cells] of rows) {
    const tr = body.insertRow();
    for (const [k, v] of Object.entries(attrs)) tr.setAttribute(k, v);
    for (const [text, cls] of cells) tr.appendChild(cell(text, cls));
  }
}

function el(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// This hub in the middle, its peers on a circle around it; each edge coloured by link state.
function drawMesh(hub, mesh) {
  const svg = $("mesh");
  svg.replaceChildren();
  const cx = 210, cy = 150, r = 110;
  const peers = mesh ? mesh.peers : [];
  peers.forEach((p, i) => {
    const a = (2 * Math.PI * (i + 0.5)) / Math.max(peers.length, 1) - Math.PI / 2;
    const x = cx + r * Math.cos(a), y = cy + r * Math.sin(a);
    svg.appendChild(el("line", { x1: cx, y1: cy, x2: x, y2: y, class: "edge " + p.state }));
    const rtt = p.rtt_ms === null ? p.state : p.rtt_ms.toFixed(1) + " ms";
    svg.appendChild(el("text", { x: (cx + x) / 2, y: (cy + y) / 2 - 6, class: "rtt" }, rtt));
    const g = el("g", { class: "node peer", "data-peer-id": p.peer_id, "data-state": p.state });
    g.appendChild(el("circle", { cx: x, cy: y, r: 28 }));
    g.appendChild(el("text", { x: x, y: y + 4, class: "id" }, (p.hub_id || p.peer_id.slice(-8)).slice(0, 8)));
    g.appendChild(el("title", {}, p.peer_id));
    svg.appendChild(g);
  });
  const me = el("g", { class: "node self" });
  me.appendChild(el("circle", { cx: cx, cy: cy, r: 34 }));
  me.appendChild(el("text", { x: cx, y: cy + 4, class: "id" }, hub.name || hub.hub_id.slice(0, 8)));
  svg.appendChild(me);
  if (!mesh) svg.appendChild(el("text", { x: cx, y: cy + 60 }, "no mesh (--mesh-listen not set)"));
}

function render(s) {
  const h = s.hub;
  document.title = "pub0sub " + (h.name || h.hub_id);
  $("hub-name").textContent = h.name || "hub";
  $("hub-id").textContent = h.hub_id + " · " + h.listen;
  $("connections").textContent = fmt(h.connections);
  $("rate-in").textContent = fmt(h.messages_in_per_s);
  $("rate-out").textContent = fmt(h.deliveries_per_s);
  $("messages-in").textContent = fmt(h.messages_in);
  $("dropped").textContent = fmt(h.dropped_messages);
  $("uptime").textContent = duration(h.uptime_s);
  const err = $("storage-error");
  err.hidden = !h.storage_error;
  err.textContent = h.storage_error ? "storage error: publishes are refused: " + h.storage_error : "";

  const peers = s.mesh ? s.mesh.peers : [];
  const linked = peers.filter((p) => p.state === "linked").length;
  $("peer-count").textContent = s.mesh ? linked + " of " + peers.length + " peers linked" : "";
  drawMesh(h, s.mesh);
  fill("peers", peers.map((p) => [{ "data-peer-id": p.peer_id }, [
    [p.hub_id || "?", "mono"], ["…" + p.peer_id.slice(-8), "mono"], [p.state, "state-" + p.state],
    [p.rtt_ms === null ? "–" : p.rtt_ms.toFixed(1) + " ms", "num"], [fmt(p.forwarded), "num"],
    [fmt(p.received), "num"], [fmt(p.unacked), "num"], [p.last_close || "", ""],
  ]]), s.mesh ? "no peers yet" : "no mesh");
  fill("topics", s.topics.map((t) => [{ "data-topic": t.topic }, [
    [t.topic, "mono"], [fmt(t.messages), "num"], [fmt(t.rate), "num rate"], [fmt(t.subscribers), "num"],
  ]]), "no topics yet");
  fill("slow", s.slow_consumers.map((c) => [{}, [
    [String(c.conn), "num"], [(c.name || "") + " " + c.peer, "mono"],
    [fmt(c.pending_bytes) + " B of " + fmt(c.cap), "num"], [fmt(c.dropped), "num"],
  ]]), "none: every connection keeps up");
  fill("groups", s.groups.map((g) => [{}, [
    [g.group, "mono"], [fmt(g.members), "num"], [fmt(g.pending), "num"], [fmt(g.redelivered), "num"],
  ]]), "no groups");
  fill("lags", s.lags.map((l) => [{}, [[l.name, "mono"], [l.kind, ""], [fmt(l.lag), "num"]]]),
    "no durable subscriptions or groups");
  fill("recent", s.recent.slice().reverse().map((e) => [{}, [
    [new Date(e.ts * 1000).toLocaleTimeString(), ""], [e.level, "level-" + e.level], [e.event, "mono"],
    [e.conn !== null ? "conn " + e.conn : (e.peer || ""), "mono"], [e.reason || "", ""], [e.msg, ""],
  ]]), "nothing yet");
}

function live(on, text) {
  const badge = $("live");
  badge.className = "live " + (on ? "on" : "off");
  badge.textContent = text;
}

// Server-sent events; if the stream breaks, poll until it can be opened again.
function connect() {
  const source = new EventSource("/api/events");
  source.onmessage = (msg) => { live(true, "live"); render(JSON.parse(msg.data)); };
  source.onerror = () => {
    live(false, "reconnecting…");
    source.close();
    setTimeout(poll, 2000);
  };
}

async function poll() {
  try {
    const reply = await fetch("/api/status", { cache: "no-store" });
    render(await reply.json());
    connect();
  } catch (e) {
    live(false, "hub unreachable");
    setTimeout(poll, 2000);
  }
}

connect();
