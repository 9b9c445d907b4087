// The theme: the system's (prefers-color-scheme) unless the toggle chose one, kept in
// localStorage (a preference, not a secret). Loaded in <head> so the page never flashes.
(function () {
  "use strict";
  document.documentElement.classList.add("js"); // the narrow layout hides the menu behind its button
  var stored = null;
  try { stored = window.localStorage.getItem("llmrelay-theme"); } catch (e) { stored = null; }
  if (stored === "dark" || stored === "light") {
    document.documentElement.setAttribute("data-theme", stored);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-toggle");
    if (!button) { return; }
    button.hidden = false;
    button.addEventListener("click", function () {
      var current = document.documentElement.getAttribute("data-theme");
      if (!current) {
        current = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
      }
      var next = current === "dark" ? "light" : "dark";
      document.documentElement.setAttribute("data-theme", next);
      try { window.localStorage.setItem("llmrelay-theme", next); } catch (e) { /* private mode */ }
    });
  });
})();
