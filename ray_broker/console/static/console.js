// ray-broker console: one page, plain JavaScript, no libraries. Routes (the URL's hash):
//   #/                      the namespace's overview
//   #/queue/NAME            a queue;  #/topic/NAME a topic;  #/subscription/TOPIC/subscriptions/SUB
// Every call goes to the console's JSON API (/api/...), which calls the namespace's client.
"use strict";

const REFRESH_MS = 3000;
const PAGE = 20;
const TOKEN_KEY = "ray-broker-console-token";
const state = { route: null, timer: null, detail: null, browse: null, selected: new Set(), bodyView: "text" };

// ------------------------------------------------------------------ DOM helpers (text only: no HTML from data)

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);
const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const rate = (r) => (r === null || r === undefined ? "–" : `${r.toFixed(1)}/s`);

function table(headers, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", { class: cls, scope: "col" }, label)))),
    h("tbody", {}, rows));
}

function entityHref(kind, path) { return `#/${kind}/${path.split("/").map(encodeURIComponent).join("/")}`; }

// ------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(line, status) { super(line); this.status = status; }
}

async function api(path, body) {
  const headers = { "Accept": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const init = { headers };
  if (body !== undefined) {
    init.method = "POST";
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError("error: ConnectionError: the console does not answer; is `ray-broker console` still running?", 0);
  }
  const document_ = await response.json().catch(() => ({ error: `error: HTTP ${response.status}` }));
  if (!response.ok) throw new ApiError(document_.error || `error: HTTP ${response.status}`, response.status);
  return document_;
}

function showError(error) {
  const box = $("error");
  if (!error) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = error.message || String(error);
  box.hidden = false;
  if (error.status === 401) showLogin();
}

function showLogin() {
  $("login").hidden = false;
  $("view").replaceChildren();
  stopTimer();
  $("token").focus();
}

// ------------------------------------------------------------------ routing and refreshing

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "").map(decodeURIComponent);
  if (parts.length >= 2 && ["queue", "topic", "subscription"].includes(parts[0])) {
    return { kind: parts[0], path: parts.slice(1).join("/") };
  }
  return { kind: "overview" };
}

function stopTimer() { if (state.timer) { clearInterval(state.timer); state.timer = null; } }

function startTimer() {
  stopTimer();
  if ($("live").checked) state.timer = setInterval(() => refresh(false), REFRESH_MS);
}

async function navigate() {
  const route = parseRoute();
  const changed = !state.route || route.kind !== state.route.kind || route.path !== state.route.path;
  state.route = route;
  if (changed) {
    state.detail = null; state.browse = null; state.selected = new Set();
    $("view").replaceChildren(h("p", { class: "muted" }, "loading…"));
  }
  renderCrumbs(route);
  await refresh(changed);
  startTimer();
}

async function refresh(focus) {
  if (!$("login").hidden) return;
  const route = state.route || parseRoute();
  try {
    if (route.kind === "overview") renderOverview(await api("/api/overview"));
    else renderEntity(await api(`/api/entity?kind=${route.kind}&path=${encodeURIComponent(route.path)}`));
    showError(null);
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (focus) $("view").focus();
  } catch (e) {
    showError(e);
  }
}

function renderCrumbs(route) {
  const crumbs = [h("a", { href: "#/" }, "overview")];
  if (route.kind !== "overview") {
    const at = route.path.toLowerCase().indexOf("/subscriptions/");
    if (at >= 0) crumbs.push(" › ", h("a", { href: entityHref("topic", route.path.slice(0, at)) }, route.path.slice(0, at)));
    crumbs.push(" › ", h("span", {}, `${route.kind} ${at >= 0 ? route.path.slice(at + 15) : route.path}`));
  }
  $("crumbs").replaceChildren(...crumbs);
}

// ------------------------------------------------------------------ charts

function spark(partitions) {
  // one bar per partition: its messages, relative to this entity's fullest partition; red where it is down
  const width = 6, gap = 2, height = 18;
  const totals = partitions.map((p) => p.active + p.dead_letter + p.scheduled);
  const most = Math.max(1, ...totals);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", partitions.length * (width + gap));
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "messages per partition: " + totals.join(", "));
  partitions.forEach((p, i) => {
    const r = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    const tall = p.available ? Math.max(1, Math.round((totals[i] / most) * height)) : height;
    r.setAttribute("x", i * (width + gap)); r.setAttribute("y", height - tall);
    r.setAttribute("width", width); r.setAttribute("height", tall);
    if (!p.available) r.setAttribute("class", "down");
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = `partition ${p.index}: ${p.available ? totals[i] + " message(s)" : "down"}`;
    r.append(title);
    svg.append(r);
  });
  return svg;
}

function partitionChart(rows) {
  return h("div", { class: "chart", id: "partitions", role: "list" }, rows.flatMap((p) => {
    const down = p.down;
    return [
      h("span", { role: "listitem" }, `p${p.index}`),
      h("div", { class: "track" + (down ? " down" : ""), "data-partition": p.index, "data-down": down ? "true" : "false",
                 title: `partition ${p.index}: ${down ? "down" : p.total + " message(s)"}` },
        h("div", { class: "fill", style: `width: ${down ? 100 : Math.round(p.share * 100)}%` })),
      h("span", { class: down ? "health-down" : "health-up", "data-health": p.index },
        down ? `down (${p.health})` : `${num(p.total)} · ${num(p.active)} active · ${num(p.dead_letter)} dead`),
    ];
  }));
}

// ------------------------------------------------------------------ overview

function renderOverview(doc) {
  const ns = doc.namespace;
  $("namespace").textContent = `namespace ${ns.name}`;
  const totals = doc.entities.filter((e) => e.kind !== "topic").reduce((t, e) => {
    t.active += e.active; t.scheduled += e.scheduled; t.dead_letter += e.dead_letter; return t;
  }, { active: 0, scheduled: 0, dead_letter: 0 });
  const down = doc.partitions.filter((p) => p.down).length;
  const card = (value, label, id) => h("div", { class: "card", id }, h("b", {}, value), h("span", {}, label));
  const view = [
    h("h1", {}, `Namespace ${ns.name}`),
    h("div", { class: "cards" },
      card(ns.sku, "tier"), card(`${ns.partition_count}${down ? ` (${down} down)` : ""}`, "partitions", "card-partitions"),
      card(ns.replicas, "replicas"), card(ns.gateways, "gateways"),
      card(ns.amqp_port ? `:${ns.amqp_port}` : "off", "AMQP front end"),
      card(ns.management_port ? `:${ns.management_port}` : "off", "management HTTP"),
      card(num(totals.active), "active"), card(num(totals.scheduled), "scheduled"),
      card(num(totals.dead_letter), "dead-letter"),
      card(rate(doc.throughput.in_per_s), "in"), card(rate(doc.throughput.out_per_s), "out")),
    h("h2", {}, "Entities"),
    doc.entities.length === 0 ? h("p", { class: "muted" }, "No queues or topics yet: `ray-broker queue create NAME`.") :
      table([["entity"], ["kind"], ["active", "n"], ["scheduled", "n"], ["dead-letter", "n"], ["transfer", "n"],
             ["transfer DL", "n"], ["availability"], ["per partition"]],
        doc.entities.map((e) => h("tr", { "data-entity": e.path },
          h("td", {}, h("a", { href: entityHref(e.kind, e.path) }, e.path)), h("td", {}, e.kind),
          h("td", { class: "n", "data-count": "active" }, num(e.active)),
          h("td", { class: "n", "data-count": "scheduled" }, num(e.scheduled)),
          h("td", { class: "n", "data-count": "dead_letter" }, num(e.dead_letter)),
          h("td", { class: "n", "data-count": "transfer" }, num(e.transfer)),
          h("td", { class: "n" }, num(e.transfer_dead_letter)), h("td", {}, e.availability),
          h("td", {}, spark(e.partitions)))), { id: "entities" }),
    h("h2", {}, "Messages per partition"),
    partitionChart(doc.partitions),
    h("h2", {}, "Partitions"),
    table([["partition"], ["health"], ["node"], ["pid", "n"], ["restarts", "n"], ["active", "n"], ["dead-letter", "n"],
           ["scheduled", "n"]],
      doc.partitions.map((p) => h("tr", {},
        h("td", {}, p.index), h("td", { class: p.down ? "health-down" : "health-up" }, p.down ? `down (${p.health})` : "up"),
        h("td", {}, p.node || "–"), h("td", { class: "n" }, p.pid ?? "–"), h("td", { class: "n" }, p.restarts ?? "–"),
        h("td", { class: "n" }, num(p.active)), h("td", { class: "n" }, num(p.dead_letter)),
        h("td", { class: "n" }, num(p.scheduled))))),
  ];
  if (doc.replicas.length) {
    view.push(h("h2", {}, "Replicas"),
      table([["partition"], ["replica"], ["node"], ["role"], ["epoch", "n"], ["position", "n"], ["behind", "n"], ["in sync"]],
        doc.replicas.map((r) => h("tr", {}, h("td", {}, r.partition), h("td", {}, r.replica), h("td", {}, r.node || "–"),
          h("td", { class: r.role === "down" ? "health-down" : "" }, r.role), h("td", { class: "n" }, r.epoch ?? "–"),
          h("td", { class: "n" }, r.position ?? "–"), h("td", { class: "n" }, r.behind ?? "–"),
          h("td", {}, r.in_sync ? "yes" : "no")))));
  }
  keepFocus(() => $("view").replaceChildren(...view));
}

function keepFocus(render) {
  // re-rendering replaces the elements: focus goes back to the element with the same id or link
  const active = document.activeElement;
  const id = active && active.id;
  const href = active && active.getAttribute && active.getAttribute("href");
  render();
  const again = id ? $(id) : href ? $("view").querySelector(`a[href="${CSS.escape(href)}"]`) : null;
  if (again && again !== active) again.focus();
}

// ------------------------------------------------------------------ entity page

function renderEntity(doc) {
  const rt = doc.runtime;
  const holds = doc.kind !== "topic";
  let existing = $("entity-live");
  const live = h("div", { id: "entity-live" },
    h("div", { class: "cards" },
      ...[["active", rt.active], ["scheduled", rt.scheduled], ["dead-letter", rt.dead_letter], ["transfer", rt.transfer],
          ["transfer DL", rt.transfer_dead_letter], ["bytes", rt.size_in_bytes]]
        .map(([label, value]) => h("div", { class: "card", "data-count": label }, h("b", {}, num(value)), h("span", {}, label))),
      h("div", { class: "card" }, h("b", {}, rt.availability), h("span", {}, "availability"))),
    h("h2", {}, "Messages per partition"),
    partitionChart(rt.partitions.map((p) => {
      const total = p.active + p.dead_letter + p.scheduled;
      const most = Math.max(1, ...rt.partitions.map((q) => q.active + q.dead_letter + q.scheduled));
      return { index: p.index, down: !p.available, health: "not answering", total, active: p.active,
               dead_letter: p.dead_letter, share: total / most };
    })),
    doc.kind === "topic" ? subscriptionsTable(doc.subscriptions) : null,
    doc.kind === "subscription" ? rulesTable(doc.rules) : null);
  if (existing) { keepFocus(() => existing.replaceWith(live)); return; }
  const view = [
    h("h1", {}, `${doc.kind} ${doc.path}`),
    live,
    h("div", { class: "toolbar", id: "actions" },
      holds ? h("button", { type: "button", class: "danger", id: "purge", onclick: () => purge(doc, false) }, "Purge messages…") : null,
      holds ? h("button", { type: "button", class: "danger", id: "purge-dlq", onclick: () => purge(doc, true) }, "Purge dead letters…") : null,
      holds ? h("button", { type: "button", id: "resubmit-all", onclick: () => resubmit(doc, null) }, "Resubmit all dead letters…") : null,
      h("button", { type: "button", id: "send-open", onclick: () => { $("send-form").hidden = false; $("send-body").focus(); } },
        "Send test message…")),
    sendForm(doc),
    holds ? browser(doc) : null,
    h("h2", {}, "Properties"),
    h("dl", { class: "props", id: "properties" },
      Object.entries(doc.properties).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v === null ? "–" : String(v))])),
  ];
  $("view").replaceChildren(...view);
  if (holds) peek(doc.kind, doc.path, false, 0);
}

function subscriptionsTable(subs) {
  return h("div", {}, h("h2", {}, "Subscriptions"),
    subs.length === 0 ? h("p", { class: "muted" }, "No subscriptions.") :
      table([["subscription"], ["active", "n"], ["scheduled", "n"], ["dead-letter", "n"], ["rules"]],
        subs.map((s) => h("tr", { "data-entity": s.path },
          h("td", {}, h("a", { href: entityHref("subscription", s.path) }, s.path.split("/").pop())),
          h("td", { class: "n" }, num(s.active)), h("td", { class: "n" }, num(s.scheduled)),
          h("td", { class: "n" }, num(s.dead_letter)),
          h("td", {}, s.rules.map((r) => h("div", {}, h("b", {}, r.name), ": ", h("code", {}, r.filter),
            r.action ? [" → ", h("code", {}, r.action)] : null)))))));
}

function rulesTable(rules) {
  return h("div", {}, h("h2", {}, "Rules"),
    table([["rule"], ["filter type"], ["filter"], ["action"]],
      rules.map((r) => h("tr", {}, h("td", {}, r.name), h("td", {}, r.filter_type), h("td", {}, h("code", {}, r.filter)),
        h("td", {}, r.action ? h("code", {}, r.action) : "–")))),
    h("p", { class: "muted" }, "Rules are added and removed with `ray-broker rule add|remove`."));
}

function sendForm(doc) {
  const target = doc.kind === "subscription" ? doc.path.slice(0, doc.path.toLowerCase().indexOf("/subscriptions/")) : doc.path;
  const field = (label, id, attrs) => h("label", {}, label, h("input", { id, ...(attrs || {}) }));
  const form = h("form", { id: "send-form", hidden: true, onsubmit: async (event) => {
      event.preventDefault();
      const value = (id) => $(id).value.trim();
      const body = { path: target, body: $("send-body").value, count: parseInt(value("send-count") || "1", 10),
                     subject: value("send-subject"), content_type: value("send-content-type"),
                     session_id: value("send-session"), partition_key: value("send-key"),
                     properties: $("send-properties").value.split("\n").map((s) => s.trim()).filter((s) => s) };
      if (!confirm(`Send ${body.count} message(s) to ${target}?`)) return;
      await act(() => api("/api/send", body), (r) => `sent ${r.sent} message(s) to ${r.entity}`);
    } },
    h("fieldset", {}, h("legend", {}, `Send test message to ${target}`),
      h("label", {}, "Body", h("textarea", { id: "send-body", rows: 3 })),
      field("Subject", "send-subject"), field("Content type", "send-content-type", { placeholder: "application/json" }),
      field("Session id", "send-session"), field("Partition key", "send-key"),
      field("Count", "send-count", { type: "number", min: 1, max: 1000, value: 1 }),
      h("label", {}, "Properties, one a line: KEY=VALUE or KEY:TYPE=VALUE (int, float, bool, str)",
        h("textarea", { id: "send-properties", rows: 2 })),
      h("div", { class: "toolbar" }, h("button", { type: "submit", id: "send" }, "Send"),
        h("button", { type: "button", onclick: () => { $("send-form").hidden = true; } }, "Cancel"))));
  return form;
}

// ------------------------------------------------------------------ actions

async function act(call, summary) {
  try {
    const result = await call();
    showError(null);
    $("updated").textContent = summary(result);
    await refresh(false);
    if (state.browse) await peek(state.browse.kind, state.browse.path, state.browse.dead, state.browse.from);
    return result;
  } catch (e) {
    showError(e);
    return null;
  }
}

async function purge(doc, dead) {
  const what = dead ? "dead-letter queue" : "messages";
  if (!confirm(`Remove every message of the ${what} of ${doc.kind} ${doc.path}? This cannot be undone.`)) return;
  await act(() => api("/api/purge", { kind: doc.kind, path: doc.path, dead_letter: dead }),
            (r) => `removed ${r.removed} message(s) from ${r.entity}${dead ? " (dead-letter)" : ""}`);
}

async function resubmit(doc, numbers, filter) {
  const to = $("resubmit-to") ? $("resubmit-to").value.trim() : "";
  const what = numbers ? `${numbers.length} selected dead letter(s)` :
    filter ? `the dead letters matching ${filter}` : "every dead letter";
  if (!confirm(`Resubmit ${what} of ${doc.path} to ${to || "their entity"}?`)) return;
  await act(() => api("/api/resubmit", { kind: doc.kind, path: doc.path, sequence_numbers: numbers, to: to || null,
                                         filter: filter || null }),
            (r) => `resubmitted ${r.resubmitted} dead letter(s) of ${r.entity}`);
  state.selected = new Set();
}

// ------------------------------------------------------------------ message browser

function browser(doc) {
  return h("section", { id: "browser" },
    h("h2", {}, "Messages"),
    h("div", { class: "toolbar", role: "group", "aria-label": "Which messages" },
      h("button", { type: "button", id: "tab-active", onclick: () => peek(doc.kind, doc.path, false, 0) }, "Active"),
      h("button", { type: "button", id: "tab-dead", onclick: () => peek(doc.kind, doc.path, true, 0) }, "Dead letters"),
      h("label", {}, "from sequence ", h("input", { id: "from", type: "number", min: 0, value: 0, size: 8 })),
      h("label", {}, "partition ", h("select", { id: "partition" }, h("option", { value: "" }, "all"),
        doc.runtime.partitions.map((p) => h("option", { value: p.index }, p.index)))),
      h("label", {}, "filter ", h("input", { id: "filter", size: 28, placeholder: "SQL, e.g. amount > 100",
        onkeydown: (e) => { if (e.key === "Enter") $("peek").click(); } })),
      h("button", { type: "button", id: "peek", onclick: () => peek(doc.kind, doc.path, state.browse ? state.browse.dead : false,
        parseInt($("from").value || "0", 10)) }, "Peek"),
      h("button", { type: "button", id: "next-page", disabled: true,
                    onclick: () => state.browse && state.browse.next !== null &&
                      peek(doc.kind, doc.path, state.browse.dead, state.browse.next) }, "Next page"),
      h("span", { id: "dead-tools", hidden: true },
        h("button", { type: "button", id: "resubmit-selected",
                      onclick: () => state.selected.size && resubmit(doc, [...state.selected]) }, "Resubmit selected…"),
        " ", h("button", { type: "button", id: "resubmit-matching",
                           onclick: () => $("filter").value.trim() && resubmit(doc, null, $("filter").value.trim()) },
          "Resubmit matching filter…"),
        " ", h("label", {}, "to ", h("input", { id: "resubmit-to", placeholder: "(their entity)", size: 14 })))),
    h("div", { class: "cols" }, h("div", { id: "messages" }), h("div", { id: "detail", hidden: true })));
}

async function peek(kind, path, dead, from) {
  const filter = $("filter") ? $("filter").value.trim() : "";
  const partition = $("partition") ? $("partition").value : "";
  try {
    const page = await api(`/api/messages?kind=${kind}&path=${encodeURIComponent(path)}&dead_letter=${dead ? 1 : 0}` +
                           `&from=${from}&count=${PAGE}&filter=${encodeURIComponent(filter)}&partition=${partition}`);
    state.browse = { kind, path, dead, from, next: page.next };
    renderMessages(page.messages, dead);
    showError(null);
  } catch (e) {
    showError(e);
  }
}

function renderMessages(messages, dead) {
  $("tab-active").classList.toggle("on", !dead);
  $("tab-dead").classList.toggle("on", dead);
  $("next-page").disabled = state.browse.next === null;
  $("dead-tools").hidden = !dead;
  $("from").value = state.browse.from;
  const preview = (m) => {
    const text = m.body.text;
    if (text === null) return `<${m.body.size} bytes, not UTF-8>`;
    return text.length > 60 ? text.slice(0, 57) + "..." : text;
  };
  const headers = [...(dead ? [[""]] : []), ["sequence", "n"], ["partition", "n"], ["message id"], ["subject"],
                   ["enqueued (UTC)"], ["body"], ...(dead ? [["reason"], ["description"]] : [])];
  const rows = messages.map((m) => h("tr", { "data-sequence": m.sequence_number },
    dead ? h("td", {}, h("input", { type: "checkbox", "aria-label": `select ${m.sequence_number}`,
      checked: state.selected.has(m.sequence_number),
      onchange: (e) => e.target.checked ? state.selected.add(m.sequence_number) : state.selected.delete(m.sequence_number) })) : null,
    h("td", { class: "n" }, h("a", { href: "#", class: "open", onclick: (e) => { e.preventDefault(); showDetail(m); } },
      m.sequence_number)),
    h("td", { class: "n" }, m.partition), h("td", {}, m.fields.message_id ?? "–"), h("td", {}, m.fields.subject ?? "–"),
    h("td", { class: "time" }, (m.fields.enqueued_time_utc || "–").replace("T", " ").slice(0, 19)), h("td", {}, preview(m)),
    dead ? h("td", { class: "reason" }, m.fields.dead_letter_reason ?? "–") : null,
    dead ? h("td", {}, m.fields.dead_letter_error_description ?? "–") : null));
  $("messages").replaceChildren(messages.length ? table(headers, rows, { id: "message-table" }) :
    h("p", { class: "muted", id: "no-messages" }, dead ? "No dead letters here." : "No messages here."));
  $("detail").hidden = true;
}

function showDetail(m) {
  state.detail = m;
  const body = m.body;
  const views = { text: body.text ?? "(not UTF-8 text: see hex)", json: body.json ?? "(not JSON)",
                  hex: body.hex + (body.hex_truncated ? "\n…" : "") };
  const pre = h("pre", { class: "body", id: "detail-body" }, views[state.bodyView]);
  const tab = (name) => h("button", { type: "button", id: `body-${name}`, class: state.bodyView === name ? "on" : "",
    onclick: () => { state.bodyView = name; showDetail(m); $(`body-${name}`).focus(); } }, name.toUpperCase());
  const props = Object.entries(m.application_properties);
  $("detail").replaceChildren(
    h("h2", {}, `Message ${m.sequence_number} `, h("span", { class: "muted" }, `partition ${m.partition} · ${m.state || ""}`),
      " ", h("button", { type: "button", id: "detail-close", onclick: closeDetail }, "Close")),
    h("div", { class: "tabs" }, tab("text"), tab("json"), tab("hex"), h("span", { class: "muted" }, `${body.size} bytes`)),
    pre,
    h("h2", {}, "Application properties"),
    props.length ? table([["name"], ["type"], ["value"]], props.map(([k, v]) => h("tr", { "data-property": k },
      h("td", {}, k), h("td", {}, v.type), h("td", {}, String(v.value)))), { id: "app-properties" })
      : h("p", { class: "muted" }, "none"),
    h("h2", {}, "Properties"),
    h("dl", { class: "props", id: "message-fields" }, Object.entries(m.fields).flatMap(([k, v]) =>
      [h("dt", {}, k), h("dd", {}, v === null ? "–" : String(v))])));
  $("detail").hidden = false;
}

function closeDetail() {
  $("detail").hidden = true;
  state.detail = null;
  const first = $("messages").querySelector("a.open");
  if (first) first.focus();
}

// ------------------------------------------------------------------ start

document.addEventListener("keydown", (e) => {
  const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(e.target.tagName);
  if (e.key === "Escape" && state.detail) { closeDetail(); return; }
  if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === "g") { location.hash = "#/"; }
  else if (e.key === "r") { refresh(false); }
  else if (e.key === "p") { $("live").checked = !$("live").checked; startTimer(); }
});
$("live").addEventListener("change", startTimer);
$("refresh").addEventListener("click", () => refresh(false));
$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("login").hidden = true;
  state.route = null;
  await navigate();
});
window.addEventListener("hashchange", navigate);
navigate();
