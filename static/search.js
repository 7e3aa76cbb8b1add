// Open a conversation at the message a search result links to (#m-<uuid>): scroll it
// into view and outline it. A message on another branch is not on the page: show the
// branch through it for viewing only (GET thread/?through=, nothing stored: a reload of
// the conversation's URL shows its current branch). Sending a message from that view
// continues the branch shown (chat.js sends `after`: thread.dataset.viewLeaf), and a
// regenerate there makes it current too. Loaded after chat.js.
(function () {
  "use strict";
  const chat = document.getElementById("chat");

  function outline(target) {
    document.querySelectorAll(".msg.search-target").forEach(function (el) {
      el.classList.remove("search-target");
    });
    target.classList.add("search-target");
    target.scrollIntoView({block: "center"});
  }

  async function show() {
    const match = /^#m-([0-9a-f-]{36})$/.exec(window.location.hash);
    if (!match) return;
    let target = document.getElementById("m-" + match[1]);
    const page = window.ChatPage;
    const conversation = /^\/c\/([0-9a-f-]{36})\/$/.exec(window.location.pathname);
    if (!target && page && chat && conversation) {
      if (page.busy()) { page.showError(page.BUSY); return; } // the answer being written stays shown
      try {
        const url = "/c/" + conversation[1] + "/thread/?through=" + encodeURIComponent(match[1]);
        const response = await fetch(url, {headers: {"Accept": "text/html"}, credentials: "same-origin"});
        if (!response.ok) throw new Error("Could not show that message (" + response.status + ")");
        const thread = document.getElementById("thread");
        thread.innerHTML = await response.text(); // the server's render of that branch
        const answers = thread.querySelectorAll("article.msg-assistant[data-message-id]");
        const last = answers[answers.length - 1];
        if (last) thread.dataset.viewLeaf = last.dataset.messageId;
        thread.dispatchEvent(new CustomEvent("chat:thread", {bubbles: true}));
        target = document.getElementById("m-" + match[1]);
      } catch (err) {
        page.showError(err.message);
      }
    }
    if (target) outline(target);
  }
  window.addEventListener("hashchange", show);
  show();
})();
