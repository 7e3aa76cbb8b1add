// The composer's Tools menu (issue 26; templates/chat/_tool_picker.html). "Use for
// this message" is the form's `tool` radio group: it goes with the next message (its
// first step must call that tool) and returns to "Let the assistant choose" once the
// message is sent. The on/off boxes are the user's choice for every later turn, saved
// at once (POST /c/tools/); a tool turned off cannot be picked for a message.
(function () {
  "use strict";
  const box = document.getElementById("tool-picker");
  const form = document.getElementById("composer");
  if (!box || !form) return;
  const label = box.querySelector(".tool-picker-label");
  const status = box.querySelector(".tool-picker-status");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;

  function radio(name) {
    return box.querySelector("input[name=tool][value=\"" + CSS.escape(name) + "\"]");
  }

  function showLabel() {
    const picked = box.querySelector("input[name=tool]:checked");
    const name = picked && picked.value ? picked.dataset.title : "";
    label.textContent = name || "Auto";
    box.classList.toggle("picked", Boolean(name));
  }

  function pickAuto() {
    radio("").checked = true;
    showLabel();
  }

  async function save(input) {
    const data = new FormData();
    data.append("tool", input.value);
    data.append("enabled", input.checked ? "1" : "0");
    try {
      const response = await fetch(box.dataset.choiceUrl, {
        method: "POST",
        headers: {"X-CSRFToken": csrf, "Accept": "application/json"},
        body: data,
        credentials: "same-origin",
      });
      let payload = {};
      try { payload = await response.json(); } catch (err) { payload = {}; }
      if (!response.ok) throw new Error((payload.error && payload.error.message) || ("error " + response.status));
      status.textContent = (input.checked ? "On: " : "Off: ") + input.parentElement.textContent.trim() + ".";
    } catch (err) {
      input.checked = !input.checked; // not saved: show what is in force
      status.textContent = "Not saved: " + err.message;
    }
    const once = radio(input.value);
    if (once) {
      once.disabled = !input.checked;
      if (once.disabled && once.checked) pickAuto();
    }
  }

  box.addEventListener("change", function (e) {
    const target = e.target;
    if (target.classList.contains("tool-enabled")) {
      status.textContent = "";
      save(target);
    } else if (target.name === "tool") {
      showLabel();
    }
  });

  // On a narrow screen the menu opened at the summary's left edge could pass the
  // right edge of the screen: shift it left as far as needed (not past the left one).
  const panel = box.querySelector(".tool-picker-panel");
  box.addEventListener("toggle", function () {
    if (!box.open) return;
    panel.style.left = "";
    const rect = panel.getBoundingClientRect();
    const over = rect.right - (document.documentElement.clientWidth - 8);
    if (over > 0) panel.style.left = -Math.min(over, Math.max(rect.left - 8, 0)) + "px";
  });

  // The pick is for one message: back to Auto once it is sent (chat.js's event).
  document.addEventListener("chat:turn", pickAuto);

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
  showLabel();
})();
