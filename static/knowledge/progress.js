// The documents table of a knowledge base: while a document waits or is processed, poll the progress endpoint
// about once a second and update each row's status, stage, percentage, error and chunk count in place.
(function () {
  "use strict";
  const table = document.getElementById("document-table");
  if (!table) return;
  const url = table.dataset.progressUrl;
  const labelsNode = document.getElementById("knowledge-labels");
  const labels = labelsNode ? JSON.parse(labelsNode.textContent) : {};
  const INTERVAL = 1000;
  const MAX_INTERVAL = 10000;
  let delay = INTERVAL;

  function busy(status) {
    return status === "pending" || status === "processing";
  }

  function anyBusy() {
    return Array.from(table.querySelectorAll("tr[data-document]")).some(
      (row) => busy(row.dataset.status) && !row.classList.contains("stalled")
    );
  }

  function part(row, role) {
    return row.querySelector(`[data-role="${role}"]`);
  }

  function update(row, doc) {
    row.dataset.status = doc.status;
    row.className = `document-row status-${doc.status}${doc.stalled ? " stalled" : ""}`;
    const status = part(row, "status");
    status.className = `badge status-${doc.status}`;
    status.textContent = doc.stalled ? labels.stalled || doc.status_label : doc.status_label;
    part(row, "stage").textContent = busy(doc.status) ? doc.stage_label : "";
    part(row, "progress-wrap").hidden = !busy(doc.status);
    part(row, "progress-bar").value = doc.progress;
    part(row, "progress").textContent = `${doc.progress}%`;
    const error = part(row, "error");
    error.textContent = doc.error;
    error.hidden = !doc.error;
    part(row, "stalled").hidden = !doc.stalled;
    part(row, "chunks").textContent = doc.chunk_count;
  }

  async function poll() {
    let data;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      data = await response.json();
      delay = INTERVAL;
    } catch (error) {
      delay = Math.min(delay * 2, MAX_INTERVAL); // the server is busy or gone: ask less often
      window.setTimeout(poll, delay);
      return;
    }
    for (const doc of data.documents) {
      const row = table.querySelector(`tr[data-document="${doc.id}"]`);
      if (row) update(row, doc);
    }
    if (data.active || anyBusy()) {
      window.setTimeout(poll, delay);
    }
  }

  if (anyBusy()) {
    window.setTimeout(poll, 300);
  }
})();
