// XO console: live updates over Server-Sent Events (/api/v1/events).
// The pages work without this script; it keeps them current.
"use strict";
(function () {
  const live = document.getElementById("live");
  const csrf = (document.querySelector('meta[name="xo-csrf"]') || {}).content || "";

  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({
      "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
    })[c]);
  }
  // A unit's row as the server rendered it (one row builder: the server's;
  // the rows come in the `rows` event, no request per row).
  function rowOf(html) {
    const t = document.createElement("template");
    t.innerHTML = String(html).trim();
    return t.content.firstElementChild;
  }

  // The triage buckets, in the server's order (fleet.rs BUCKETS).
  const BUCKETS = ["red", "amber", "stale", "green", "idle"];
  // Triage order within the table (fleet.rs triage_key, which the
  // server's view of this page follows too): a unit that needs a person
  // first, then its bucket, the unacknowledged, the most steered, the
  // longest without progress, then its id.
  function before(a, b) {
    const k = (r) => [1 - Number(r.dataset.needs || 0), Number(r.dataset.rank), Number(r.dataset.acked || 0), -Number(r.dataset.steered || 0), -Number(r.dataset.tsp || 0), r.dataset.unit];
    const x = k(a), y = k(b);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] < y[i];
    return false;
  }

  const table = document.querySelector("table[data-live]");
  const mode = table ? table.dataset.live : null;
  const params = new URLSearchParams(location.search);
  function matches(u) {
    const role = params.get("role"), health = params.get("health"), q = params.get("q");
    if (role && u.role !== role) return false;
    if (health && BUCKETS[Math.min(u.rank, BUCKETS.length - 1)] !== health) return false;
    if (q && u.unit.toLowerCase().indexOf(q.toLowerCase()) < 0) return false;
    return true;
  }

  // The changed rows of a `rows` event (at most one a second, however
  // many reports): each swapped in or placed in triage order; on page 1 a
  // row that ranks into the page comes in and the page keeps its length.
  const page1 = table && Number(table.dataset.page || 1) === 1;
  const perPage = table ? Number(table.dataset.per || 0) : 0;
  function applyRow(row) {
    const tr = rowOf(row.html);
    if (!tr) return;
    if (mode === "unit" && table.dataset.unit !== row.unit) return;
    const u = { unit: row.unit, role: row.role, rank: Number(row.rank) };
    const tbody = table.tBodies[0];
    const old = document.getElementById("unit-" + u.unit);
    if (!matches(u)) { if (old) old.remove(); return; }
    const triage = mode === "fleet" && (table.dataset.sort || "health") === "health" && params.get("dir") !== "desc";
    // In triage order (the default), a row goes before the first less severe one.
    const place = () => {
      if (!triage) return null;
      for (const r of tbody.rows) {
        if (r !== tr && r !== old && before(tr, r)) return r;
      }
      return null;
    };
    if (old) {
      const same = ["needs", "rank", "acked", "steered", "tsp"].every((k) => old.dataset[k] === tr.dataset[k]);
      if (same || mode !== "fleet") old.replaceWith(tr);
      else { const at = place(); old.remove(); tbody.insertBefore(tr, at); }
    } else {
      if (mode !== "fleet" || !page1) return;
      const at = place();
      // Past the end of a full page: on a later page, not this one.
      if (!at && perPage && tbody.rows.length >= perPage) return;
      tbody.insertBefore(tr, at);
      while (perPage && tbody.rows.length > perPage) tbody.deleteRow(-1);
      const none = document.getElementById("no-units");
      if (none) none.remove();
    }
    tr.classList.add("flash-row");
  }
  function applyRows(batch) {
    if (!table) return;
    for (const row of batch.rows || []) {
      try { applyRow(row); } catch (e) { /* the next batch carries it again */ }
    }
    // The counts are the whole fleet's, as the server counted them.
    if (mode === "fleet" && batch.counts) {
      BUCKETS.forEach((h, rank) => {
        const c = document.querySelector("#count-" + h + " b");
        if (c && batch.counts[rank] != null) c.textContent = String(batch.counts[rank]);
      });
      const n = document.getElementById("unit-count");
      if (n && batch.units != null) n.textContent = String(batch.units);
    }
  }


  let reloadTimer = null;
  function reloadSoon() {
    // Not while the operator is typing into a form.
    const a = document.activeElement;
    if (a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) return;
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(() => location.reload(), 700);
  }

  function banner(text) {
    let b = document.getElementById("changed");
    if (!b) {
      b = document.createElement("p");
      b.id = "changed";
      b.className = "flash ok";
      const h1 = document.querySelector("main h1");
      h1.parentNode.insertBefore(b, h1.nextSibling);
    }
    b.innerHTML = esc(text) + ' <a href="' + esc(location.pathname + location.search) + '">Reload</a>';
  }

  if (!window.EventSource) return;
  const page = location.pathname;
  // Only the events this page uses: the fleet its rows, a unit page its
  // unit's reports and steering; a tab is sent nothing per report elsewhere.
  // The fleet page names its view: its stream carries only the rows it
  // shows and, on page 1 in triage order, those that rank into it.
  const only = mode === "fleet" ? "only=rows,steer" + (table.dataset.view ? "&view=" + encodeURIComponent(table.dataset.view) : "")
    : mode === "unit" ? "only=rows,steer&unit=" + encodeURIComponent(table.dataset.unit)
    : "only=task,fleet,review,settings,steer";
  const es = new EventSource("/api/v1/events?" + only);
  // Browsers allow six connections per host: a stream left open by each
  // page visited would starve the seventh page. Close it when leaving.
  window.addEventListener("pagehide", () => es.close());
  es.onopen = () => { if (live) { live.textContent = "live"; live.classList.add("on"); } };
  es.onerror = () => { if (live) { live.textContent = "reconnecting"; live.classList.remove("on"); } };
  es.addEventListener("lagged", () => { if (mode) location.reload(); });
  // The unit page's latest report, charts and steering timeline (each
  // steering with its evidence and what followed it, runs collapsed), as
  // the server renders them, at most twice a second: when a `rows` batch
  // carries the unit (it reported) or it is steered.
  let unitTimer = null;
  function refreshUnit(unit) {
    if (unitTimer) return;
    unitTimer = setTimeout(async () => {
      unitTimer = null;
      try {
        const r = await fetch("/units/" + encodeURIComponent(unit), { credentials: "same-origin" });
        if (!r.ok) return;
        const doc = new DOMParser().parseFromString(await r.text(), "text/html");
        for (const id of ["latest-report", "history", "timeline"]) {
          const fresh = doc.getElementById(id);
          const cur = document.getElementById(id);
          if (!fresh) continue;
          if (cur) { cur.replaceWith(fresh); continue; }
          // Not on the page yet (the first report, the first charts):
          // before the timeline's section.
          const tl = document.getElementById("timeline");
          const sec = tl && tl.closest("section");
          if (sec && id !== "timeline") sec.parentNode.insertBefore(fresh, sec);
        }
        const tl = document.getElementById("timeline");
        const none = tl && tl.children.length && tl.closest("section").querySelector("p.empty");
        if (none) none.remove();
      } catch (e) { /* the next batch tries again */ }
    }, 500);
  }

  es.addEventListener("rows", (ev) => {
    const batch = JSON.parse(ev.data);
    applyRows(batch);
    if (mode === "unit" && (batch.rows || []).some((r) => r.unit === table.dataset.unit)) refreshUnit(table.dataset.unit);
  });
  es.addEventListener("steer", (ev) => {
    const s = JSON.parse(ev.data);
    if (mode === "unit" && table.dataset.unit === s.unit) refreshUnit(s.unit);
  });
  es.addEventListener("task", () => { if (page === "/queue" || page === "/directives" || page === "/audit") reloadSoon(); });
  es.addEventListener("fleet", () => { if (page === "/containers") reloadSoon(); });
  es.addEventListener("review", () => { if (page === "/reviews") reloadSoon(); });
  es.addEventListener("settings", (ev) => {
    if (page !== "/settings") return;
    const c = JSON.parse(ev.data);
    const shown = document.getElementById("settings-version");
    if (shown && String(c.settings.version) !== shown.textContent) {
      banner("Settings changed to version " + c.settings.version + " by " + (c.settings.updated_by || "someone") + ".");
    }
  });
  // The header's "Needs you" says how many units need a person (every
  // page; the list itself is the server's /needs page).
  const needsLink = document.querySelector('header nav a[href="/needs"]');
  async function needsCount() {
    if (!needsLink) return;
    try {
      const r = await fetch("/api/v1/needs", { credentials: "same-origin" });
      if (!r.ok) return;
      const n = (await r.json()).length;
      needsLink.textContent = n > 0 ? "Needs you (" + n + ")" : "Needs you";
      needsLink.classList.toggle("alert", n > 0);
      needsLink.dataset.count = String(n);
    } catch (e) { /* offline: the link stays as it is */ }
  }
  needsCount();
  setInterval(needsCount, 10000);
  // A steering may be the one that made a unit need you: counted again,
  // at most once in 2 s however many come.
  let needsTimer = null;
  es.addEventListener("steer", () => {
    if (!needsTimer) needsTimer = setTimeout(() => { needsTimer = null; needsCount(); }, 2000);
  });
  void csrf;
})();
