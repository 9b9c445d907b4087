// The Playground: the browser calls the model API itself (this origin's /v1, or the one
// LLMRELAY_PUBLIC_API_URL names), with a key held in this closure's variable only: never sent
// to the console, never written to storage or a cookie, gone with the page.
// A conversation of several turns, with parameters, against one model or two side by side
// (each keeps its own answers); answers stream in as their deltas arrive, then show as
// markdown drawn here from DOM nodes (never HTML from the answer).
(function () {
  "use strict";
  var apiKey = null;
  var running = []; // the AbortControllers of the requests in flight
  var panes = {
    a: { history: [], select: "pg-model", transcript: "pg-transcript", suffix: "" },
    b: { history: [], select: "pg-model-b", transcript: "pg-transcript-b", suffix: "-b" }
  };

  function $(id) { return document.getElementById(id); }
  function api(path) { return ($("playground").getAttribute("data-api") || "") + path; }

  function showError(message) {
    var box = $("pg-error");
    box.textContent = message;
    box.hidden = !message;
  }

  function errorOf(status, text) {
    try {
      var body = JSON.parse(text);
      if (body && body.error && body.error.message) {
        return body.error.message + " (" + status + (body.error.code ? ", " + body.error.code : "") + ")";
      }
    } catch (e) { /* not JSON */ }
    return "the gateway answered " + status;
  }

  function takeKey() {
    var input = $("pg-key");
    if (input.value.trim()) {
      apiKey = input.value.trim();
      input.value = "";
      input.placeholder = "key …" + apiKey.slice(-4) + " held in this page";
      input.required = false;
    }
    return apiKey;
  }

  function headers() {
    return { "Authorization": "Bearer " + apiKey, "Content-Type": "application/json" };
  }

  // ---- markdown: a small, safe subset, built as DOM nodes ----
  function inline(text, into) {
    var pattern = /(`[^`]+`|\*\*[^*]+\*\*|\*[^*\s][^*]*\*|\[[^\]]+\]\((https?:\/\/[^)\s]+)\))/;
    while (text) {
      var match = pattern.exec(text);
      if (!match) { into.appendChild(document.createTextNode(text)); return; }
      if (match.index) { into.appendChild(document.createTextNode(text.slice(0, match.index))); }
      var token = match[0];
      var node;
      if (token[0] === "`") {
        node = document.createElement("code");
        node.textContent = token.slice(1, -1);
      } else if (token.slice(0, 2) === "**") {
        node = document.createElement("strong");
        inline(token.slice(2, -2), node);
      } else if (token[0] === "*") {
        node = document.createElement("em");
        inline(token.slice(1, -1), node);
      } else {
        node = document.createElement("a");
        node.href = match[2];
        node.rel = "noopener noreferrer";
        node.textContent = token.slice(1, token.indexOf("]"));
      }
      into.appendChild(node);
      text = text.slice(match.index + token.length);
    }
  }

  function markdown(source, into) {
    into.replaceChildren();
    var lines = source.replace(/\r\n/g, "\n").split("\n");
    var i = 0;
    while (i < lines.length) {
      var line = lines[i];
      if (/^```/.test(line)) {
        var code = [];
        i += 1;
        while (i < lines.length && !/^```/.test(lines[i])) { code.push(lines[i]); i += 1; }
        var pre = document.createElement("pre");
        var inner = document.createElement("code");
        inner.textContent = code.join("\n");
        pre.appendChild(inner);
        into.appendChild(pre);
        i += 1;
        continue;
      }
      var heading = /^(#{1,4})\s+(.*)$/.exec(line);
      if (heading) {
        var h = document.createElement("h" + (heading[1].length + 2));
        inline(heading[2], h);
        into.appendChild(h);
        i += 1;
        continue;
      }
      if (/^\s*([-*]|\d+\.)\s+/.test(line)) {
        var ordered = /^\s*\d+\./.test(line);
        var list = document.createElement(ordered ? "ol" : "ul");
        while (i < lines.length && /^\s*([-*]|\d+\.)\s+/.test(lines[i])) {
          var item = document.createElement("li");
          inline(lines[i].replace(/^\s*([-*]|\d+\.)\s+/, ""), item);
          list.appendChild(item);
          i += 1;
        }
        into.appendChild(list);
        continue;
      }
      if (!line.trim()) { i += 1; continue; }
      var paragraph = document.createElement("p");
      var parts = [];
      while (i < lines.length && lines[i].trim() && !/^(```|#{1,4}\s|\s*([-*]|\d+\.)\s)/.test(lines[i])) {
        parts.push(lines[i]);
        i += 1;
      }
      inline(parts.join(" "), paragraph);
      into.appendChild(paragraph);
    }
  }

  // ---- models ----
  function loadModels() {
    showError("");
    if (!takeKey()) { showError("paste an API key first"); return; }
    fetch(api("/v1/models"), { headers: headers(), credentials: "omit" })
      .then(function (r) { return r.text().then(function (t) { return [r.status, t]; }); })
      .then(function (pair) {
        if (pair[0] !== 200) { showError(errorOf(pair[0], pair[1])); return; }
        // embedding models answer /v1/embeddings, not chat: never offered here
        var embedding = ($("pg-model").getAttribute("data-embedding") || "").split(",");
        var names = JSON.parse(pair[1]).data
          .map(function (model) { return model.id; })
          .filter(function (id) { return embedding.indexOf(id) === -1; });
        ["pg-model", "pg-model-b"].forEach(function (id, index) {
          var select = $(id);
          select.replaceChildren();
          names.forEach(function (name) {
            var option = document.createElement("option");
            option.value = name;
            option.textContent = name;
            select.appendChild(option);
          });
          if (index === 1 && names.length > 1) { select.value = names[1]; }
        });
        if (!names.length) { showError("this key may use no chat model"); }
      })
      .catch(function (e) { showError("could not reach the gateway: " + e.message); });
  }

  // ---- a conversation ----
  function bubble(pane, role, text) {
    var box = document.createElement("div");
    box.className = "turn " + role;
    var who = document.createElement("p");
    who.className = "who-said";
    who.textContent = role === "user" ? "You" : "Assistant";
    var body = document.createElement("div");
    body.className = "said";
    body.textContent = text;
    box.appendChild(who);
    box.appendChild(body);
    $(pane.transcript).appendChild(box);
    return body;
  }

  function number(id) {
    var value = $(id).value.trim();
    return value === "" ? null : Number(value);
  }

  function request(pane, model) {
    var messages = [];
    if ($("pg-system").value.trim()) { messages.push({ role: "system", content: $("pg-system").value }); }
    var body = { model: model, messages: messages.concat(pane.history), stream: true,
                 stream_options: { include_usage: true } };
    [["temperature", "pg-temperature"], ["max_tokens", "pg-max-tokens"], ["top_p", "pg-top-p"]]
      .forEach(function (pair) { var v = number(pair[1]); if (v !== null) { body[pair[0]] = v; } });
    return JSON.stringify(body);
  }

  function stream(pane, model) {
    var previous = $("pg-output" + pane.suffix);
    if (previous) { previous.removeAttribute("id"); }
    var output = bubble(pane, "assistant", "");
    output.id = "pg-output" + pane.suffix;
    output.setAttribute("aria-busy", "true");
    var status = $("pg-status" + pane.suffix);
    var served = $("pg-served" + pane.suffix);
    served.textContent = "";
    status.textContent = "streaming…";
    var control = new AbortController();
    running.push(control);
    var answer = "";
    function finish() {
      output.setAttribute("aria-busy", "false");
      if (answer) { markdown(answer, output); }
      pane.history.push({ role: "assistant", content: answer });
    }
    return fetch(api("/v1/chat/completions"), { method: "POST", headers: headers(), credentials: "omit",
                                               body: request(pane, model), signal: control.signal })
      .then(function (response) {
        if (!response.ok) {
          return response.text().then(function (t) {
            showError(errorOf(response.status, t));
            status.textContent = "refused";
          });
        }
        served.textContent = "served by " + (response.headers.get("x-llmrelay-provider") || "?") +
          " (" + (response.headers.get("x-llmrelay-model") || model) + ")";
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function handle(data) {
          if (data === "[DONE]") { return; }
          var event;
          try { event = JSON.parse(data); } catch (e) { return; }
          if (event.error) { showError(event.error.message || "the stream ended with an error"); return; }
          (event.choices || []).forEach(function (choice) {
            if (choice.delta && choice.delta.content) {
              answer += choice.delta.content;
              output.textContent = answer;
            }
            if (choice.finish_reason) { status.textContent = "finished: " + choice.finish_reason; }
          });
          if (event.usage) {
            status.textContent += " · " + event.usage.prompt_tokens + " in, " + event.usage.completion_tokens + " out";
          }
        }
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) { return; }
            buffer += decoder.decode(chunk.value, { stream: true });
            var parts = buffer.split(/\r?\n\r?\n/);
            buffer = parts.pop();
            parts.forEach(function (part) {
              part.split(/\r?\n/).forEach(function (line) {
                if (line.indexOf("data:") === 0) { handle(line.slice(5).trim()); }
              });
            });
            return pump();
          });
        }
        return pump();
      })
      .catch(function (e) {
        if (e.name === "AbortError") { status.textContent = "stopped"; } else { showError("the request failed: " + e.message); }
      })
      .finally(finish);
  }

  function comparing() { return $("pg-compare").checked; }

  function send(event) {
    event.preventDefault();
    showError("");
    if (!takeKey()) { showError("paste an API key first"); return; }
    var text = $("pg-message").value;
    var models = { a: $("pg-model").value, b: $("pg-model-b").value };
    if (!models.a || (comparing() && !models.b)) { showError("load the key's models and pick one"); return; }
    if (!text.trim()) { showError("type a message"); return; }
    var used = comparing() ? ["a", "b"] : ["a"];
    $("pg-send").disabled = true;
    $("pg-stop").disabled = false;
    $("pg-message").value = "";
    Promise.all(used.map(function (name) {
      var pane = panes[name];
      pane.history.push({ role: "user", content: text });
      bubble(pane, "user", text);
      $("pg-pane-title" + pane.suffix).textContent = models[name];
      return stream(pane, models[name]);
    })).finally(function () {
      running = [];
      $("pg-send").disabled = false;
      $("pg-stop").disabled = true;
      $("pg-message").focus();
    });
  }

  function reset() {
    ["a", "b"].forEach(function (name) {
      panes[name].history = [];
      $(panes[name].transcript).replaceChildren();
      $("pg-status" + panes[name].suffix).textContent = "";
      $("pg-served" + panes[name].suffix).textContent = "";
    });
    showError("");
  }

  function showCompare() {
    var on = comparing();
    $("pg-pane-b").hidden = !on;
    $("pg-model-b-field").hidden = !on;
    $("pg-panes").classList.toggle("two", on);
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("pg-load").addEventListener("click", loadModels);
    $("playground").addEventListener("submit", send);
    $("pg-stop").addEventListener("click", function () { running.forEach(function (c) { c.abort(); }); });
    $("pg-new").addEventListener("click", reset);
    $("pg-compare").addEventListener("change", showCompare);
    $("pg-message").addEventListener("keydown", function (event) {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { $("pg-send").click(); }
    });
    showCompare();
  });
})();
