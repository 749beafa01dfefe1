// Polls /api/status and draws it. Builds nodes with textContent only: job names and
// messages come from users and are never parsed as HTML.
"use strict";

const PAGE = 50;
let offset = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function bar(resource) {
  const share = resource.used_fraction;
  const fill = el("span", share !== null && share >= 1 ? { class: "full" } : {});
  fill.style.width = share === null ? "0%" : `${Math.round(share * 100)}%`;
  const amounts = resource.quota === null
    ? `${resource.used} used (no quota)`
    : `${resource.used} / ${resource.quota}, ${resource.free} free`;
  const others = resource.used_by_others && resource.used_by_others !== "0"
    ? ` (${resource.used_by_others} by others)` : "";
  return el("div", { class: "bar-row", "data-resource": resource.resource },
    el("span", {}, resource.resource), el("div", { class: "bar" }, fill),
    el("span", { class: "amounts" }, amounts + others));
}

function drawWorkers(workers) {
  const box = document.getElementById("workers");
  box.replaceChildren(...workers.map((w) => el("div", { class: "worker", "data-worker": w.name },
    el("div", { class: "title" }, el("span", {}, w.name),
      el("span", { class: `state-${w.active}` }, w.active === "True" ? "active" : "inactive")),
    el("div", { class: "reason" },
      `${w.reason}${w.message ? ": " + w.message : ""} · ${w.mirrors} mirrors`
      + (w.flags === "-" ? "" : ` · ${w.flags}`)),
    ...w.resources.map(bar))));
  if (!workers.length) box.replaceChildren(el("p", { class: "muted" }, "no workers"));
}

function drawCounts(id, counts) {
  const entries = Object.entries(counts);
  document.getElementById(id).replaceChildren(...(entries.length ? entries.flatMap(
    ([k, v]) => [el("dt", {}, k), el("dd", {}, v)]) : [el("dt", { class: "muted" }, "none")]));
}

function drawRows(id, rows, cells) {
  document.querySelector(`#${id} tbody`).replaceChildren(...rows.map((row) =>
    el("tr", row.type ? { class: row.type } : {},
      ...cells(row).map((c, i) => el("td", i === 0 && typeof c === "number"
        ? { class: "num" } : {}, c)))));
}

// A link to the job's logs on the logs endpoint, which asks for the reader's manager
// token (`dispatcher logs` sends it); the title says the command.
function logsLink(view, job) {
  if (!view.logsPort) return "-";
  const path = `/logs/${encodeURIComponent(job.namespace)}/${encodeURIComponent(job.name)}`;
  return el("a", { href: `${location.protocol}//${location.hostname}:${view.logsPort}${path}`,
    title: `dispatcher logs ${job.namespace}/${job.name}` }, "logs");
}

function total(id, page, what) {
  document.getElementById(id).textContent = page.total > page.items.length
    ? `(${page.items.length} of ${page.total} ${what})` : `(${page.total})`;
}

function draw(view) {
  document.getElementById("role").textContent = view.role;
  document.getElementById("updated").textContent = `updated ${view.generatedAt}`;
  drawWorkers(view.workers);
  drawCounts("by-state", view.by_state);
  drawCounts("by-reason", view.by_reason);
  drawCounts("by-namespace", view.by_namespace);
  drawRows("queue", view.queue.items,
    (j) => [j.position, j.namespace, j.name, j.state, j.message]);
  document.getElementById("queue-total").textContent = `(${view.queue.total} waiting)`;
  const last = Math.min(view.queue.offset + view.queue.items.length, view.queue.total);
  document.getElementById("page").textContent = view.queue.total
    ? `${view.queue.offset + 1}–${last} of ${view.queue.total}` : "";
  document.getElementById("prev").disabled = view.queue.offset === 0;
  document.getElementById("next").disabled = last >= view.queue.total;
  drawRows("placed", view.placed.items,
    (j) => [j.namespace, j.name, j.worker, j.state, j.message, logsLink(view, j)]);
  total("placed-total", view.placed, "shown");
  drawRows("others", view.others.items,
    (j) => [j.namespace, j.name, j.state, j.message, logsLink(view, j)]);
  total("others-total", view.others, "shown");
  drawRows("recent", view.recent,
    (a) => [a.time.replace("T", " ").slice(0, 19), a.reason, `${a.namespace}/${a.name}`,
      a.message]);
}

async function refresh() {
  const error = document.getElementById("error");
  try {
    const response = await fetch(`/api/status?offset=${offset}&limit=${PAGE}`,
      { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    draw(await response.json());
    error.hidden = true;
    document.body.dataset.loaded = "true";
  } catch (e) {
    error.textContent = `cannot reach the dispatcher: ${e.message}`;
    error.hidden = false;
  }
}

document.getElementById("prev").addEventListener("click", () => {
  offset = Math.max(0, offset - PAGE); refresh();
});
document.getElementById("next").addEventListener("click", () => { offset += PAGE; refresh(); });
refresh();
setInterval(refresh, 2000);
