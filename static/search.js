// Open a conversation at the message a search result links to (#m-<uuid>): scroll it
// into view and outline it. Loaded after chat.js, which scrolls to the newest message.
(function () {
  "use strict";
  function show() {
    const match = /^#m-[0-9a-f-]{36}$/.exec(window.location.hash);
    if (!match) return;
    const target = document.getElementById(match[0].slice(1));
    if (!target) return;
    document.querySelectorAll(".msg.search-target").forEach(function (el) {
      el.classList.remove("search-target");
    });
    target.classList.add("search-target");
    target.scrollIntoView({block: "center"});
  }
  window.addEventListener("hashchange", show);
  show();
})();
