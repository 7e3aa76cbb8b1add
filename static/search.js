// Open a conversation at the message a search result links to (#m-<uuid>): scroll it
// into view and outline it. A message on another branch is not on the page: switch to
// its branch first (the same POST as the ‹ › switcher, so the choice is stored and the
// next message continues that branch), then show it. Loaded after chat.js.
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
      try {
        const result = await page.post("/c/" + conversation[1] + "/messages/" + match[1] + "/switch/");
        document.getElementById("thread").innerHTML = result.html; // the server's render
        document.getElementById("thread").dispatchEvent(new CustomEvent("chat:thread", {bubbles: true}));
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
