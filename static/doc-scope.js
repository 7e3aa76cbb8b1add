// Documents in chat (issue 11): the Documents menu (its name "Documents: All") in the composer chooses
// which of the user's documents answers in this chat may quote: all, none or some.
// The menu sits inside the composer form, so a new chat sends its scope with the first
// message; in an existing chat a change is saved at once (POST .../documents/).
(function () {
  "use strict";
  const box = document.getElementById("doc-scope");
  const form = document.getElementById("composer");
  if (!box || !form) return;
  const label = box.querySelector(".doc-scope-label");
  const status = box.querySelector(".doc-scope-status");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const CONVERSATION = /^\/c\/[0-9a-f-]{36}\/$/;

  function scope() {
    const checked = box.querySelector("input[name=doc_scope]:checked");
    return checked ? checked.value : "all";
  }

  function chosen() {
    return box.querySelectorAll("input[name=documents]:checked");
  }

  function showLabel() {
    const kind = scope();
    label.textContent = kind === "none" ? "None" : kind === "some" ? chosen().length + " chosen" : "All";
    box.classList.toggle("picked", kind !== "all"); // the chip shows a scope other than all
  }

  // Saved with the conversation once there is one (the page URL is /c/<id>/ then,
  // also after the first message of a new chat).
  async function save() {
    if (!CONVERSATION.test(location.pathname)) return;
    if (scope() === "some" && chosen().length === 0) {
      status.textContent = "Choose at least one document, or pick No documents.";
      return;
    }
    const data = new FormData();
    data.append("doc_scope", scope());
    for (const input of chosen()) data.append("documents", input.value);
    try {
      const response = await fetch(location.pathname + "documents/", {
        method: "POST",
        headers: {"X-CSRFToken": csrf, "Accept": "application/json"},
        body: data,
        credentials: "same-origin",
      });
      let payload = {};
      try { payload = await response.json(); } catch (err) { payload = {}; }
      if (!response.ok) {
        status.textContent = (payload.error && payload.error.message) || ("Not saved (" + response.status + ")");
        return;
      }
      status.textContent = "Saved for this chat.";
      box.dataset.saved = payload.doc_scope;
    } catch (err) {
      status.textContent = "Not saved: " + err.message;
    }
  }

  box.addEventListener("change", function (e) {
    const target = e.target;
    if (target.name === "documents" && target.checked) {
      box.querySelector("input[name=doc_scope][value=some]").checked = true;
    }
    status.textContent = "";
    showLabel();
    save();
  });

  // Close the menu with Escape or a click elsewhere.
  document.addEventListener("click", function (e) {
    if (box.open && !box.contains(e.target)) box.open = false;
  });
  box.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && box.open) {
      box.open = false;
      box.querySelector("summary").focus();
    }
  });
})();
