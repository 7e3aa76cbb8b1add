// Tokens left without a reload: after each answer the sidebar's "Tokens left" panel
// (#quota, rendered by accounts/_quota.html) is fetched again from its data-url, so it
// counts the answer just settled. A failed fetch leaves the old figures; the next
// page load shows the new ones.
(function () {
  "use strict";

  async function refresh() {
    const panel = document.getElementById("quota");
    if (!panel || !panel.dataset.url) return;
    try {
      const response = await fetch(panel.dataset.url, {headers: {"Accept": "text/html"}, credentials: "same-origin"});
      if (!response.ok) return;
      const html = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = html.getElementById("quota");
      if (fresh) panel.replaceWith(document.importNode(fresh, true));
    } catch (err) {
      // offline or the server is restarting: keep what is shown
    }
  }

  document.addEventListener("chat:answer-done", refresh);
})();
