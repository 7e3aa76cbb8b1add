// The Documents page: while a document is pending or processing, ask the page's own URL
// for its JSON status (Accept: application/json) every few seconds and update those rows
// in place; stop as soon as none is left in progress. No full-page reload.
(function () {
  "use strict";
  const table = document.getElementById("documents");
  if (!table) return;
  const IN_PROGRESS = new Set(["pending", "processing"]);
  const POLL_MS = 2000;

  function pendingRows() {
    return [...table.querySelectorAll("tr[data-document-id]")].filter((row) =>
      IN_PROGRESS.has(row.dataset.status)
    );
  }

  function update(row, doc) {
    row.dataset.status = doc.status;
    const status = row.querySelector("td.status");
    if (status) {
      status.className = "status status-" + doc.status;
      status.textContent = doc.status_display + (doc.error ? ": " + doc.error : "");
    }
    const passages = row.querySelector("td.passages");
    if (passages && !passages.querySelector(".flagged")) {
      passages.textContent = String(doc.chunks);
      if (doc.flagged_chunks) {
        const link = document.createElement("a");
        link.className = "flagged";
        link.dataset.flagged = String(doc.flagged_chunks);
        link.href = row.querySelector("td a").getAttribute("href");
        link.textContent = "· " + doc.flagged_chunks + " flagged, not used in answers";
        passages.append(" ", link);
      }
    }
  }

  async function poll() {
    if (pendingRows().length === 0) return;
    try {
      const response = await fetch(table.dataset.statusUrl, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (response.ok) {
        const data = await response.json();
        const byId = new Map(data.documents.map((d) => [String(d.id), d]));
        for (const row of pendingRows()) {
          const doc = byId.get(row.dataset.documentId);
          if (doc) update(row, doc);
        }
      }
    } catch (err) {
      // a network blip: try again on the next tick
    }
    if (pendingRows().length > 0) setTimeout(poll, POLL_MS);
  }

  if (pendingRows().length > 0) setTimeout(poll, POLL_MS);
})();
