// The console's live parts: fragments that refresh themselves (dashboard charts, provider
// health), breaker states on the models pages, a discovery job's status, copy buttons.
// Everything here only improves a page that already works without it.
(function () {
  "use strict";

  function refreshFragment(element) {
    var url = element.getAttribute("data-refresh");
    var every = Number(element.getAttribute("data-every") || "15") * 1000;
    function tick() {
      if (document.hidden) { window.setTimeout(tick, every); return; }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html !== null) {
            var doc = new DOMParser().parseFromString(html, "text/html");
            element.replaceChildren.apply(element, Array.from(doc.body.childNodes));
          }
        })
        .catch(function () { /* keep what is shown; try again */ })
        .finally(function () { window.setTimeout(tick, every); });
    }
    window.setTimeout(tick, every);
  }

  function watchBreakers(url) {
    function tick() {
      fetch(url, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (body) {
          if (!body || !body.breakers) { return; }
          var states = {};
          body.breakers.forEach(function (b) { states[b.route_id] = b.state; });
          document.querySelectorAll("[data-breaker]").forEach(function (holder) {
            var state = states[holder.getAttribute("data-breaker")] || "closed";
            var badge = holder.querySelector(".badge");
            if (badge && badge.textContent !== state.replace("_", "-")) {
              badge.className = "badge " + state;
              badge.textContent = state.replace("_", "-");
            }
          });
          window.setTimeout(tick, 5000);
        })
        .catch(function () { window.setTimeout(tick, 10000); });
    }
    tick();
  }

  function watchJob(holder) {
    var id = holder.getAttribute("data-job");
    var status = holder.querySelector(".job-status");
    if (!id || !status) { return; }
    function tick() {
      fetch("/api/admin/jobs/" + encodeURIComponent(id), { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (job) {
          if (!job) { return; }
          status.textContent = job.status + (job.error ? " — " + job.error : "");
          if (job.status === "queued" || job.status === "running") { window.setTimeout(tick, 2000); }
        })
        .catch(function () { /* the refresh link still works */ });
    }
    tick();
  }

  function copyButtons() {
    document.querySelectorAll("button[data-copy]").forEach(function (button) {
      if (!navigator.clipboard) { return; }
      button.hidden = false;
      button.addEventListener("click", function () {
        var source = document.getElementById(button.getAttribute("data-copy"));
        if (!source) { return; }
        navigator.clipboard.writeText(source.textContent.trim()).then(function () {
          button.textContent = "Copied";
          window.setTimeout(function () { button.textContent = "Copy"; }, 1500);
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(refreshFragment);
    var table = document.querySelector("[data-breakers]");
    if (table) { watchBreakers(table.getAttribute("data-breakers")); }
    document.querySelectorAll("[data-job]").forEach(watchJob);
    copyButtons();
  });
})();
