// Chat page layout (templates/chat/chat.html): the start page's suggestion chips, the
// "jump to latest" button, following the newest answer to its end, and a composer that
// grows with its text. Sending and streaming are chat.js's; this file only moves the view.
(function () {
  "use strict";
  const thread = document.getElementById("thread");
  const input = document.getElementById("content");
  const jump = document.getElementById("jump-latest");
  if (!thread || !input) return;
  const NEAR_PX = 120; // this close to the bottom counts as "reading the newest"

  // ---- start page: a chip fills the composer with its prompt. A draft the user
  // typed is kept: the prompt goes after it, on a line of its own; only an empty box,
  // or one holding just another chip's prompt, is replaced.
  thread.addEventListener("click", function (e) {
    const chip = e.target.closest(".chip[data-prompt]");
    if (!chip) return;
    const draft = input.value.replace(/\s+$/, "");
    const prompts = Array.from(thread.querySelectorAll(".chip[data-prompt]"), function (c) { return c.dataset.prompt; });
    const typed = draft.trim() !== "" && prompts.indexOf(draft.trim()) < 0;
    input.value = typed ? draft + "\n" + chip.dataset.prompt : chip.dataset.prompt;
    input.dispatchEvent(new Event("input", {bubbles: true}));
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  });
  // the first message replaces the start page
  thread.addEventListener("chat:turn", function () {
    const welcome = document.getElementById("welcome");
    if (welcome) welcome.remove();
  });

  // ---- jump to latest: shown while the reader is scrolled up
  function atBottom() {
    return thread.scrollHeight - thread.scrollTop - thread.clientHeight < NEAR_PX;
  }
  let following = true; // the reader is at the newest message (or was when it grew)
  function update() {
    if (jump) jump.hidden = atBottom();
  }
  thread.addEventListener("scroll", function () {
    following = atBottom();
    update();
  }, {passive: true});
  new ResizeObserver(update).observe(thread);
  if (jump) {
    jump.addEventListener("click", function () {
      following = true;
      thread.scrollTo({top: thread.scrollHeight, behavior: "smooth"});
      input.focus({preventScroll: true});
    });
  }

  // ---- an answer that ends: its status line and actions come into view (unless the
  // reader scrolled up to read something else)
  thread.addEventListener("chat:finished", function (e) {
    if (!following) { update(); return; }
    const article = e.target.closest ? e.target.closest("article.msg") : null;
    requestAnimationFrame(function () {
      const last = article && article.querySelector(".msg-actions, .msg-footer");
      thread.scrollTop = thread.scrollHeight;
      if (last) last.scrollIntoView({block: "nearest"});
      update();
    });
  });
  // the thread grows while an answer streams: stay at the bottom when already there
  new MutationObserver(function () {
    if (following) thread.scrollTop = thread.scrollHeight;
    update();
  }).observe(thread, {childList: true, subtree: true, characterData: true});

  // ---- the composer grows with its text, up to a third of the window (site.css caps it)
  if (!CSS.supports("field-sizing", "content")) {
    // no inline styles under the CSP: a few fixed heights by line count instead
    input.addEventListener("input", function () {
      const lines = Math.min(8, input.value.split("\n").length);
      input.rows = Math.max(1, lines);
    });
  }
  update();
})();
