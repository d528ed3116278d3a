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
  function age(at) {
    if (!at) return "—";
    const s = Math.max(0, Math.floor((Date.now() - at) / 1000));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    if (s < 86400) return Math.floor(s / 3600) + "h ago";
    return Math.floor(s / 86400) + "d ago";
  }
  // The same cells as the server's unit_row.
  function row(u) {
    const h = String(u.health).toLowerCase();
    const last = u.last_steering
      ? esc(u.last_steering[0]) + " <small>" + age(u.last_steering[1]) + "</small>"
      : "— <small></small>";
    const tr = document.createElement("tr");
    tr.id = "unit-" + u.unit;
    tr.dataset.unit = u.unit;
    tr.dataset.role = u.role;
    tr.dataset.health = h;
    tr.innerHTML =
      '<td><a href="/units/' + esc(u.unit) + '">' + esc(u.unit) + "</a></td><td>" + esc(u.role) +
      '</td><td><span class="health ' + esc(h) + '">' + esc(h) + "</span>" + (u.stale ? ' <span class="badge">stale</span>' : u.ended ? ' <span class="badge ended">ended</span>' : "") +
      '</td><td class="pace">' + esc(u.pace) + '</td><td class="num fill">' + Math.round(u.context_fill * 100) +
      '%</td><td class="num tsp">' + u.turns_since_progress + '</td><td class="num cost">$' + Number(u.cost_usd).toFixed(4) +
      '</td><td class="steer">' + last + '</td><td class="seen">' + age(u.last_seen) + "</td>";
    return tr;
  }

  const table = document.querySelector("table[data-live]");
  const mode = table ? table.dataset.live : null;
  const params = new URLSearchParams(location.search);
  function matches(u) {
    const role = params.get("role"), health = params.get("health"), q = params.get("q");
    if (role && u.role !== role) return false;
    if (health && String(u.health).toLowerCase() !== health) return false;
    if (q && u.unit.indexOf(q) < 0) return false;
    return true;
  }

  // A unit's row is refreshed from the API at most twice a second.
  const pending = new Map();
  function refresh(unit) {
    if (!table || pending.has(unit)) return;
    if (mode === "unit" && table.dataset.unit !== unit) return;
    pending.set(unit, setTimeout(async () => {
      pending.delete(unit);
      try {
        const r = await fetch("/api/v1/units/" + encodeURIComponent(unit), { credentials: "same-origin" });
        if (!r.ok) return;
        const d = await r.json();
        const u = d.summary;
        const tbody = table.tBodies[0];
        const old = document.getElementById("unit-" + u.unit);
        if (!matches(u)) { if (old) old.remove(); return; }
        const tr = row(u);
        if (old) old.replaceWith(tr); else {
          tbody.appendChild(tr);
          const none = document.getElementById("no-units");
          if (none) none.remove();
          const n = document.getElementById("unit-count");
          if (n) n.textContent = String(Number(n.textContent) + 1);
        }
        tr.classList.add("flash-row");
        for (const h of ["green", "amber", "red"]) {
          const c = document.getElementById("count-" + h);
          if (c) c.textContent = String(tbody.querySelectorAll('tr[data-health="' + h + '"]').length);
        }
      } catch (e) { /* the next event tries again */ }
    }, 500));
  }

  function timeline(html) {
    const tl = document.getElementById("timeline");
    if (!tl) return;
    const li = document.createElement("li");
    li.innerHTML = html;
    li.className = "new";
    tl.insertBefore(li, tl.firstChild);
    while (tl.children.length > 200) tl.removeChild(tl.lastChild);
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
  const es = new EventSource("/api/v1/events");
  // Browsers allow six connections per host: a stream left open by each
  // page visited would starve the seventh page. Close it when leaving.
  window.addEventListener("pagehide", () => es.close());
  es.onopen = () => { if (live) { live.textContent = "live"; live.classList.add("on"); } };
  es.onerror = () => { if (live) { live.textContent = "reconnecting"; live.classList.remove("on"); } };
  es.addEventListener("lagged", () => { if (mode) location.reload(); });
  es.addEventListener("salute", (ev) => {
    const r = JSON.parse(ev.data);
    const unit = r.unit && r.unit.unit;
    if (!unit) return;
    refresh(unit);
    if (mode === "unit" && table.dataset.unit === unit) {
      timeline('<span class="when">turn ' + r.time.turn + " · now</span> report: <b>" + esc((r.activity && r.activity.step) || "—") +
        "</b> " + esc((r.activity && r.activity.summary) || "") + " <span class=\"health " + esc(String(r.status.health).toLowerCase()) + "\">" +
        esc(String(r.status.health).toLowerCase()) + "</span>");
    }
  });
  es.addEventListener("steer", (ev) => {
    const s = JSON.parse(ev.data);
    refresh(s.unit);
    if (mode === "unit" && table.dataset.unit === s.unit) {
      timeline('<span class="when">turn ' + s.turn + " · now</span> <b>" + esc(s.kind) + '</b> <span class="sev">' + esc(s.severity) +
        "</span> <span class=\"src\">" + esc(s.source) + "</span><p>" + esc(s.message) + "</p>");
    }
  });
  es.addEventListener("task", () => { if (page === "/queue" || page === "/directives") reloadSoon(); });
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
  void csrf;
})();
