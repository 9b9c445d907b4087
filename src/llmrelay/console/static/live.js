// The console's live parts: fragments that refresh themselves (dashboard charts, provider
// health), breaker states on the models pages, a discovery job's status, copy buttons.
// Everything here only improves a page that already works without it.
(function () {
  "use strict";
  var ended = false;

  // A session that ended while the page was open: one notice with a way back to this page
  // after signing in; the live parts stop (they never paste the sign-in page into a panel).
  function sessionEnded() {
    if (ended) { return; }
    ended = true;
    var main = document.getElementById("main");
    if (!main) { return; }
    var notice = document.createElement("p");
    notice.className = "banner warn";
    notice.id = "session-ended";
    notice.setAttribute("role", "alert");
    notice.appendChild(document.createTextNode("Your session has ended: the figures here stopped updating. "));
    var link = document.createElement("a");
    link.href = "/sign-in?next=" + encodeURIComponent(window.location.pathname + window.location.search);
    link.textContent = "Sign in again";
    notice.appendChild(link);
    notice.appendChild(document.createTextNode(" to come back to this page."));
    main.insertBefore(notice, main.firstChild);
  }

  function signedOut(response) {
    if (response.status === 401) { sessionEnded(); return true; }
    return false;
  }

  function refreshFragment(element) {
    var url = element.getAttribute("data-refresh");
    var every = Number(element.getAttribute("data-every") || "15") * 1000;
    function tick() {
      if (ended) { return; }
      if (document.hidden) { window.setTimeout(tick, every); return; }
      fetch(url, { credentials: "same-origin", redirect: "error",
                   headers: { "Accept": "text/html", "X-Console-Fragment": "1" } })
        .then(function (r) { return signedOut(r) || !r.ok ? null : r.text(); })
        .then(function (html) {
          if (html !== null) {
            var doc = new DOMParser().parseFromString(html, "text/html");
            element.replaceChildren.apply(element, Array.from(doc.body.childNodes));
          }
        })
        .catch(function () { /* keep what is shown; try again */ })
        .finally(function () { if (!ended) { window.setTimeout(tick, every); } });
    }
    window.setTimeout(tick, every);
  }

  function watchBreakers(url) {
    function tick() {
      if (ended) { return; }
      fetch(url, { credentials: "same-origin" })
        .then(function (r) { return signedOut(r) || !r.ok ? null : r.json(); })
        .then(function (body) {
          if (!body || !body.breakers) { if (!ended) { window.setTimeout(tick, 10000); } return; }
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
        .then(function (r) { return signedOut(r) || !r.ok ? null : r.json(); })
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

  // The narrow layout's Menu button: shows and hides the navigation (without script it is a
  // link to the navigation, below the content).
  function menuButton() {
    var toggle = document.getElementById("menu-toggle");
    if (!toggle) { return; }
    toggle.setAttribute("role", "button");
    toggle.addEventListener("click", function (event) {
      event.preventDefault();
      var open = document.documentElement.classList.toggle("nav-open");
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
      if (open) {
        var current = document.querySelector("#console-nav a");
        if (current) { current.focus(); }
      }
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && document.documentElement.classList.contains("nav-open")) {
        document.documentElement.classList.remove("nav-open");
        toggle.setAttribute("aria-expanded", "false");
        toggle.focus();
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    menuButton();
    document.querySelectorAll("[data-refresh]").forEach(refreshFragment);
    var table = document.querySelector("[data-breakers]");
    if (table) { watchBreakers(table.getAttribute("data-breakers")); }
    document.querySelectorAll("[data-job]").forEach(watchJob);
    copyButtons();
  });
})();
