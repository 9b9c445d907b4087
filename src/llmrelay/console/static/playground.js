// The Playground: the browser calls the data plane itself (same origin, /v1), with a key
// held in this closure's variable only: never sent to the console, never written to
// storage or a cookie, gone with the page. The answer streams in as its deltas arrive.
(function () {
  "use strict";
  var apiKey = null;
  var running = null; // the AbortController of the request in flight

  function $(id) { return document.getElementById(id); }

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

  function loadModels() {
    showError("");
    if (!takeKey()) { showError("paste an API key first"); return; }
    fetch("/v1/models", { headers: headers(), credentials: "omit" })
      .then(function (r) { return r.text().then(function (t) { return [r.status, t]; }); })
      .then(function (pair) {
        if (pair[0] !== 200) { showError(errorOf(pair[0], pair[1])); return; }
        var select = $("pg-model");
        select.replaceChildren();
        JSON.parse(pair[1]).data.forEach(function (model) {
          var option = document.createElement("option");
          option.value = model.id;
          option.textContent = model.id;
          select.appendChild(option);
        });
        if (!select.options.length) { showError("this key may use no model"); }
      })
      .catch(function (e) { showError("could not reach the gateway: " + e.message); });
  }

  function handleEvent(data, output, meta) {
    if (data === "[DONE]") { return; }
    var event;
    try { event = JSON.parse(data); } catch (e) { return; }
    if (event.error) { showError(event.error.message || "the stream ended with an error"); return; }
    (event.choices || []).forEach(function (choice) {
      if (choice.delta && choice.delta.content) { output.textContent += choice.delta.content; }
      if (choice.finish_reason) { meta.textContent = "finished: " + choice.finish_reason; }
    });
    if (event.usage) {
      meta.textContent += " · " + event.usage.prompt_tokens + " in, " + event.usage.completion_tokens + " out";
    }
  }

  function send(event) {
    event.preventDefault();
    showError("");
    if (!takeKey()) { showError("paste an API key first"); return; }
    var model = $("pg-model").value;
    var text = $("pg-message").value;
    if (!model) { showError("load the key's models and pick one"); return; }
    var messages = [];
    if ($("pg-system").value.trim()) { messages.push({ role: "system", content: $("pg-system").value }); }
    messages.push({ role: "user", content: text });
    var output = $("pg-output");
    var meta = $("pg-meta");
    output.textContent = "";
    meta.textContent = "streaming…";
    output.setAttribute("aria-busy", "true");
    running = new AbortController();
    $("pg-send").disabled = true;
    $("pg-stop").disabled = false;
    var body = JSON.stringify({ model: model, messages: messages, stream: true,
                                stream_options: { include_usage: true } });
    fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: body,
                                    credentials: "omit", signal: running.signal })
      .then(function (response) {
        if (!response.ok) {
          return response.text().then(function (t) { showError(errorOf(response.status, t)); meta.textContent = ""; });
        }
        meta.textContent = "served by " + (response.headers.get("x-llmrelay-provider") || "?") + " · streaming…";
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) { return; }
            buffer += decoder.decode(chunk.value, { stream: true });
            var parts = buffer.split(/\r?\n\r?\n/);
            buffer = parts.pop();
            parts.forEach(function (part) {
              part.split(/\r?\n/).forEach(function (line) {
                if (line.indexOf("data:") === 0) { handleEvent(line.slice(5).trim(), output, meta); }
              });
            });
            return pump();
          });
        }
        return pump();
      })
      .catch(function (e) {
        if (e.name === "AbortError") { meta.textContent = "stopped"; } else { showError("the request failed: " + e.message); }
      })
      .finally(function () {
        running = null;
        output.setAttribute("aria-busy", "false");
        $("pg-send").disabled = false;
        $("pg-stop").disabled = true;
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("pg-load").addEventListener("click", loadModels);
    $("playground").addEventListener("submit", send);
    $("pg-stop").addEventListener("click", function () { if (running) { running.abort(); } });
  });
})();
