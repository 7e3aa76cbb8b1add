// Titles without a reload (issue 11): after the first answer of a chat the title is
// written in the background (a Celery job), so the page asks for it a few times
// (GET /c/<id>/title/, backing off, at most 8 requests over ~30 s) and, once it
// changed, shows it in the sidebar, the rename box and the window title.
(function () {
  "use strict";
  const thread = document.getElementById("thread");
  if (!thread) return;
  const CONVERSATION = /^\/c\/[0-9a-f-]{36}\/$/;
  const DELAYS_MS = [1000, 2000, 3000, 4000, 5000, 5000, 5000, 5000];
  let polling = false;

  function entry(path) {
    for (const link of document.querySelectorAll("#conversation-list a.conv-link")) {
      if (new URL(link.href, location.href).pathname === path) return link;
    }
    return null;
  }

  function show(path, title) {
    const link = entry(path);
    if (link) link.textContent = title;
    const input = document.querySelector(".chat-header input[name=title]");
    if (input && document.activeElement !== input) input.value = title;
    const heading = document.getElementById("chat-title");
    if (heading) heading.textContent = title;
    document.title = title + " · Chat";
  }

  async function poll(path, shown) {
    polling = true;
    try {
      for (const delay of DELAYS_MS) {
        await new Promise(function (resolve) { setTimeout(resolve, delay); });
        if (location.pathname !== path) return; // the user moved on
        const response = await fetch(path + "title/", {headers: {"Accept": "application/json"}, credentials: "same-origin"});
        if (!response.ok) return;
        const data = await response.json();
        if (data.title && data.title !== shown) { show(path, data.title); return; }
      }
    } catch (err) {
      // a failed poll leaves the old title; the next page load shows the new one
    } finally {
      polling = false;
    }
  }

  document.addEventListener("chat:answer-done", function () {
    const path = location.pathname;
    // only the first exchange is titled
    if (polling || !CONVERSATION.test(path) || thread.querySelectorAll("article.msg-user").length !== 1) return;
    const link = entry(path);
    poll(path, link ? link.textContent : "");
  });
})();
