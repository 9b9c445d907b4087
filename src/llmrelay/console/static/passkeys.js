// Passkeys in the console: the browser's half of the WebAuthn ceremonies. Forms marked
// data-passkey="register" (the account page), "sign-in" (password-less) and "second" (the
// second step after a password) ask the authenticator, put its answer (JSON) in their hidden
// field and are then sent as ordinary forms: the server checks everything.
(function () {
  "use strict";
  if (!window.PublicKeyCredential || !navigator.credentials) { return; }

  function bytes(text) {
    const plain = text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4);
    return Uint8Array.from(atob(plain), (c) => c.charCodeAt(0)).buffer;
  }

  function text(buffer) {
    let raw = "";
    new Uint8Array(buffer).forEach((b) => { raw += String.fromCharCode(b); });
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function descriptors(list) {
    return (list || []).map((c) => Object.assign({}, c, { id: bytes(c.id) }));
  }

  function creationOptions(json) {
    return Object.assign({}, json, {
      challenge: bytes(json.challenge),
      user: Object.assign({}, json.user, { id: bytes(json.user.id) }),
      excludeCredentials: descriptors(json.excludeCredentials),
    });
  }

  function requestOptions(json) {
    return Object.assign({}, json, {
      challenge: bytes(json.challenge),
      allowCredentials: descriptors(json.allowCredentials),
    });
  }

  function answer(credential) {
    if (typeof credential.toJSON === "function") { return credential.toJSON(); }
    const r = credential.response;
    const response = { clientDataJSON: text(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = text(r.attestationObject);
      response.transports = r.getTransports ? r.getTransports() : [];
    } else {
      response.authenticatorData = text(r.authenticatorData);
      response.signature = text(r.signature);
      response.userHandle = r.userHandle ? text(r.userHandle) : null;
    }
    return {
      id: credential.id,
      rawId: text(credential.rawId),
      type: credential.type,
      response: response,
      clientExtensionResults: credential.getClientExtensionResults(),
      authenticatorAttachment: credential.authenticatorAttachment,
    };
  }

  async function options(path, headers, body) {
    const reply = await fetch("/api/admin" + path, {
      method: "POST",
      credentials: "same-origin",
      headers: Object.assign({ "Content-Type": "application/json" }, headers),
      body: JSON.stringify(body || {}),
    });
    const json = await reply.json();
    if (!reply.ok) { throw new Error((json.error && json.error.message) || "refused"); }
    return json;
  }

  async function ceremony(form) {
    const kind = form.dataset.passkey;
    if (kind === "register") {
      const csrf = form.querySelector("input[name=csrf_token]").value;
      const json = await options("/auth/passkeys/register/options", { "X-CSRF-Token": csrf });
      return navigator.credentials.create({ publicKey: creationOptions(json) });
    }
    const json = kind === "second"
      ? JSON.parse(form.dataset.options)
      : await options("/auth/passkeys/login/options");
    return navigator.credentials.get({ publicKey: requestOptions(json) });
  }

  function say(form, message) {
    const status = form.querySelector("[data-passkey-status]");
    if (status) { status.textContent = message; status.hidden = false; }
  }

  document.querySelectorAll("form[data-passkey]").forEach((form) => {
    form.hidden = false;
    form.addEventListener("submit", async (event) => {
      const field = form.querySelector("input[data-passkey-answer]");
      if (field.value) { return; }  // the answer is in: send the form
      event.preventDefault();
      try {
        const credential = await ceremony(form);
        if (!credential) { throw new Error("no passkey was chosen"); }
        field.value = JSON.stringify(answer(credential));
        form.requestSubmit();
      } catch (error) {
        say(form, "The passkey did not answer: " + (error.message || error));
      }
    });
  });
})();
