// Message actions (issue 11): copy an answer's Markdown or a code block, edit a
// message (a new branch), regenerate one answer, switch versions `< 2/3 >`, and the
// reason form of a thumbs down. Uses window.ChatPage from chat.js (loaded first).
// Text goes into the page with textContent; HTML only from the server's own renders.
(function () {
  "use strict";
  const thread = document.getElementById("thread");
  const page = window.ChatPage;
  if (!thread || !page) return;
  const COPIED_MS = 2000;
  const ui = window.SiteUI;

  // The Markdown source of an answer: a <template> the server renders, or the
  // `content` of its done event for an answer that ended on this page.
  function sourceOf(article) {
    const tpl = article.querySelector("template.msg-source");
    return tpl ? tpl.content.textContent : article.querySelector(".msg-body").innerText;
  }

  // Copy `text`; the button shows a check and "Copied" (or "Copy failed") for a moment.
  async function copy(button, text) {
    let label = button.querySelector(".btn-label");
    if (!label) {
      label = document.createElement("span");
      label.className = "btn-label";
      button.append(label);
    }
    if (button.dataset.restLabel === undefined) {
      button.dataset.restLabel = label.textContent;
      button.dataset.restIcon = ui.iconOf(button);
    }
    try {
      await navigator.clipboard.writeText(text);
      label.textContent = "Copied";
      ui.setIcon(button, "check");
      button.classList.add("copied");
    } catch (err) {
      label.textContent = "Copy failed";
    }
    clearTimeout(button._copyTimer);
    button._copyTimer = setTimeout(function () {
      label.textContent = button.dataset.restLabel;
      ui.setIcon(button, button.dataset.restIcon);
      button.classList.remove("copied");
    }, COPIED_MS);
  }

  // An icon button with a tooltip (static/site.js); `text` adds a visible label.
  function actionButton(cls, icon, label, text) {
    return ui.iconButton(cls, icon, label, text);
  }

  // Actions of a message the page built itself (the server renders the same).
  function ensureActions(article) {
    if (article.querySelector(".msg-actions")) return;
    const bar = document.createElement("div");
    bar.className = "msg-actions";
    if (article.classList.contains("msg-user")) {
      if (!article.dataset.editUrl) return;
      bar.append(actionButton("msg-edit", "pencil", "Edit message"));
    } else {
      bar.append(actionButton("msg-copy", "copy", "Copy answer"));
      if (article.dataset.regenerateUrl) {
        bar.append(actionButton("msg-regenerate", "refresh-cw", "Regenerate answer"));
      }
      // the thumbs chat.js put in the footer belong in this row
      const feedback = article.querySelector(".msg-footer .msg-feedback");
      if (feedback) bar.append(feedback);
    }
    article.append(bar);
  }

  // A copy button on each code block of the rendered answers under `root`.
  function addCodeCopy(root) {
    root.querySelectorAll(".msg-assistant .msg-body pre").forEach(function (pre) {
      const prev = pre.previousElementSibling;
      if (prev && prev.classList.contains("code-copy")) return;
      const button = actionButton("code-copy", "copy", "Copy code", "Copy code");
      pre.before(button);
    });
  }

  thread.addEventListener("chat:finished", function (e) {
    const article = e.target;
    if (typeof e.detail.content === "string") {
      let tpl = article.querySelector("template.msg-source");
      if (!tpl) {
        tpl = document.createElement("template");
        tpl.className = "msg-source";
        article.append(tpl);
      }
      tpl.content.textContent = e.detail.content;
    }
    ensureActions(article);
    addCodeCopy(article);
  });
  thread.addEventListener("chat:turn", function () {
    thread.querySelectorAll("article.msg-user[data-edit-url]").forEach(ensureActions);
    thread.querySelectorAll("article.msg-assistant[data-regenerate-url]").forEach(ensureActions);
  });
  thread.addEventListener("chat:thread", function () { addCodeCopy(thread); });

  // Inline editor of a user message: Send makes a sibling message and a new answer.
  function openEditor(article) {
    if (article.querySelector(".msg-editor")) return;
    const body = article.querySelector(".msg-body");
    const editor = document.createElement("div");
    editor.className = "msg-editor";
    const input = document.createElement("textarea");
    input.className = "msg-edit-input";
    input.rows = 3;
    input.value = body.textContent;
    input.setAttribute("aria-label", "Edit your message");
    const send = document.createElement("button");
    send.type = "button";
    send.className = "primary msg-edit-send";
    send.textContent = "Send";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "msg-edit-cancel";
    cancel.textContent = "Cancel";
    const error = document.createElement("p");
    error.className = "msg-edit-error";
    error.setAttribute("role", "alert");
    editor.append(input, send, cancel, error);
    // as in the composer: Enter sends, Shift+Enter is a newline; Escape cancels
    input.addEventListener("keydown", function (e) {
      if (e.isComposing) return;
      if (e.key === "Enter" && !e.shiftKey) {
        e.preventDefault();
        sendEdit(article);
      } else if (e.key === "Escape") {
        e.preventDefault(); // not also a Stop of a streaming answer (chat.js)
        closeEditor(article);
      }
    });
    body.hidden = true;
    body.after(editor);
    const pencil = article.querySelector("button.msg-edit");
    if (pencil) pencil.hidden = true; // the editor is open: its own Send/Cancel act
    input.focus();
  }

  function closeEditor(article) {
    const editor = article.querySelector(".msg-editor");
    if (editor) editor.remove();
    article.querySelector(".msg-body").hidden = false;
    const pencil = article.querySelector("button.msg-edit");
    if (pencil) {
      pencil.hidden = false;
      pencil.focus();
    }
  }

  async function sendEdit(article) {
    const editor = article.querySelector(".msg-editor");
    const text = editor.querySelector(".msg-edit-input").value;
    const error = editor.querySelector(".msg-edit-error");
    if (!text.trim()) { error.textContent = "Your message is empty. Type something to send."; return; }
    if (page.busy()) { error.textContent = page.BUSY; return; }
    error.textContent = "";
    const data = new FormData();
    data.append("content", text);
    const model = document.querySelector("#composer select[name=model]");
    if (model && model.value) data.append("model", model.value);
    await page.branchTurn(article.dataset.editUrl, data);
  }

  async function switchTo(url) {
    if (page.busy()) { page.showError(page.BUSY); return; }
    page.showError("");
    try {
      const result = await page.post(url);
      delete thread.dataset.viewLeaf; // the chosen branch is stored: it is current
      thread.innerHTML = result.html; // the server's render of the chosen branch
      addCodeCopy(thread);
    } catch (err) { page.showError(err.message); }
  }

  // A thumbs down opens a form for an optional reason and comment under its answer.
  function openFeedbackForm(article) {
    const tpl = document.getElementById("feedback-form-template");
    if (!tpl || article.querySelector(".feedback-form")) return;
    const form = tpl.content.firstElementChild.cloneNode(true);
    article.querySelector(".msg-footer").after(form);
    form.querySelector("select").focus();
  }

  thread.addEventListener("submit", async function (e) {
    const form = e.target.closest(".feedback-form");
    if (!form) return;
    e.preventDefault();
    const box = form.closest("article").querySelector(".msg-feedback");
    const data = new FormData(form);
    data.append("rating", "down");
    const status = form.querySelector(".feedback-status");
    try {
      await page.post(box.dataset.feedbackUrl, data);
      form.remove();
    } catch (err) { status.textContent = err.message; }
  });

  thread.addEventListener("click", function (e) {
    const button = e.target.closest("button");
    if (!button || !thread.contains(button)) return;
    const article = button.closest("article.msg");
    if (button.classList.contains("code-copy")) {
      copy(button, button.nextElementSibling.textContent);
    } else if (button.classList.contains("msg-copy")) {
      copy(button, sourceOf(article));
    } else if (button.classList.contains("msg-edit")) {
      openEditor(article);
    } else if (button.classList.contains("msg-edit-cancel")) {
      closeEditor(article);
    } else if (button.classList.contains("msg-edit-send")) {
      sendEdit(article);
    } else if (button.classList.contains("msg-regenerate")) {
      page.branchTurn(article.dataset.regenerateUrl);
    } else if (button.dataset.switchUrl) {
      switchTo(button.dataset.switchUrl);
    } else if (button.classList.contains("feedback-cancel")) {
      button.closest(".feedback-form").remove();
    } else if (button.dataset.rating === "down" && button.closest(".msg-feedback")) {
      openFeedbackForm(article); // chat.js stores the thumbs down itself
    }
  });

  addCodeCopy(thread);
})();
