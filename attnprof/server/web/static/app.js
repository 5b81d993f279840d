// The dashboard's glue: draws the Plotly specs the server rendered into the page and keeps live fields fresh.
// Charts are drawn by Plotly; nothing here computes a figure.
"use strict";

const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"];

// A chart inside a closed <details> is drawn when it opens: Plotly sizes a figure from its box, which a closed
// <details> does not have, and a page of a hundred cases would otherwise draw a hundred figures up front.
function drawCharts(root = document) {
  for (const el of root.querySelectorAll(".chart[data-spec]")) {
    const source = document.getElementById(el.dataset.spec);
    if (!source || !window.Plotly || el.dataset.drawn === "true") continue;
    const closed = el.closest("details:not([open])");
    if (closed) continue;
    const spec = JSON.parse(source.textContent);
    const layout = Object.assign(
      { colorway: PALETTE, font: { family: "system-ui, sans-serif", size: 12 }, hovermode: "closest",
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", margin: { l: 60, r: 20, t: 20, b: 50 } },
      spec.layout || {});
    window.Plotly.newPlot(el, spec.data, layout, { displaylogo: false, responsive: true });
    el.dataset.drawn = "true";
    if (spec.links) {
      el.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        const target = point && point.customdata;
        if (typeof target === "string" && target) window.location.assign(new URL(target, window.location.href));
      });
    }
  }
}

async function pollOnce(box) {
  const response = await fetch(box.dataset.poll, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  if (!response.ok) return true;
  const state = await response.json();
  for (const [key, text] of Object.entries(state.fields || {})) {
    for (const el of box.querySelectorAll(`[data-field="${CSS.escape(key)}"]`)) {
      el.textContent = text;
      if (el.classList.contains("status")) el.className = `status status-${text}`;
    }
  }
  for (const [key, href] of Object.entries(state.links || {})) {
    for (const el of box.querySelectorAll(`[data-link="${CSS.escape(key)}"]`)) {
      if (href) { el.setAttribute("href", href); el.hidden = false; }
    }
  }
  box.dataset.polled = String(Number(box.dataset.polled || 0) + 1);
  return Boolean(state.done);
}

function startPolling() {
  for (const box of document.querySelectorAll("[data-poll]")) {
    const interval = Number(box.dataset.pollMs || 2000);
    const tick = async () => {
      let done = false;
      try { done = await pollOnce(box); } catch (err) { done = false; }
      if (done) box.dataset.live = "done"; else setTimeout(tick, interval);
    };
    box.dataset.live = "polling";
    setTimeout(tick, interval);
  }
}

// The <details> a link points at (#case-...) opens, so that the link lands on what it names.
function openTarget() {
  const id = decodeURIComponent(window.location.hash.slice(1));
  const target = id && document.getElementById(id);
  const details = target && (target.tagName === "DETAILS" ? target : target.closest("details"));
  if (details && !details.open) { details.open = true; target.scrollIntoView(); }
}

// "Open in Perfetto": Perfetto's documented postMessage protocol. The tab is opened on the click (a pop-up
// blocker allows it then), the trace is read from this site with the session cookie, PING is repeated until the
// UI answers PONG, then the trace goes over as an ArrayBuffer. Nothing is sent anywhere until the click.
const PERFETTO = "https://ui.perfetto.dev";

function openInPerfetto(button) {
  const tab = window.open(PERFETTO);
  if (!tab) { button.textContent = "Pop-up blocked: download the trace instead"; return; }
  button.disabled = true;
  fetch(button.dataset.perfetto, { credentials: "same-origin" })
    .then((response) => { if (!response.ok) throw new Error(`HTTP ${response.status}`); return response.arrayBuffer(); })
    .then((buffer) => {
      let tries = 0;
      const ping = setInterval(() => {
        if (++tries > 300) { clearInterval(ping); window.removeEventListener("message", onPong); button.disabled = false; }
        else tab.postMessage("PING", PERFETTO);
      }, 100);
      const onPong = (event) => {
        if (event.source !== tab || event.data !== "PONG") return;
        clearInterval(ping);
        window.removeEventListener("message", onPong);
        tab.postMessage({ perfetto: { buffer, title: button.dataset.title, fileName: button.dataset.file } }, PERFETTO);
        button.disabled = false;
      };
      window.addEventListener("message", onPong);
    })
    .catch((err) => { button.disabled = false; button.textContent = `Could not read the trace (${err.message})`; });
}

document.addEventListener("toggle", (event) => {
  if (event.target.tagName === "DETAILS" && event.target.open) drawCharts(event.target);
}, true);
window.addEventListener("hashchange", openTarget);

document.addEventListener("DOMContentLoaded", () => {
  openTarget();
  drawCharts();
  startPolling();
  for (const button of document.querySelectorAll("button[data-perfetto]")) {
    button.hidden = false;
    button.addEventListener("click", () => openInPerfetto(button));
  }
});
