/* The evaluation pages (evals/views.py): the case form's expectation editor (each row shows the fields of its kind,
 * "Add an expectation" clones the formset's empty row) and a run's live progress (polls the run's progress URL about
 * once a second, like the knowledge documents page, and reloads the page with every result when the run ends).
 * Text of a run (titles, replies, errors) is only ever set with textContent; the only markup inserted is the page's
 * own empty expectation row (its <template>). */
(function () {
  "use strict";

  // --- the expectation editor --------------------------------------------------------------------------------
  var kindsNode = document.getElementById("eval-kind-fields");
  var rows = document.getElementById("expectation-rows");

  function showFields(row) {
    var kinds = JSON.parse(kindsNode.textContent);
    var select = row.querySelector("select[name$='-kind']");
    var wanted = (select && kinds[select.value]) || [];
    Array.prototype.forEach.call(row.querySelectorAll("[data-field]"), function (field) {
      field.hidden = wanted.indexOf(field.dataset.field) === -1;
    });
  }

  function wireRow(row) {
    var select = row.querySelector("select[name$='-kind']");
    if (select) select.addEventListener("change", function () { showFields(row); });
    showFields(row);
  }

  if (kindsNode && rows) {
    Array.prototype.forEach.call(rows.querySelectorAll("[data-row]"), wireRow);
    var add = document.getElementById("add-expectation");
    var template = document.getElementById("expectation-template");
    var total = document.querySelector("input[name$='-TOTAL_FORMS']");
    if (add && template && total) {
      add.hidden = false;
      add.addEventListener("click", function () {
        var index = Number(total.value);
        var holder = document.createElement("div");
        holder.innerHTML = template.innerHTML.replace(/__prefix__/g, String(index));
        var row = holder.firstElementChild;
        rows.appendChild(row);
        total.value = String(index + 1);
        wireRow(row);
        var select = row.querySelector("select");
        if (select) select.focus();
      });
    }
  }

  // --- a run's live progress ------------------------------------------------------------------------------------
  var panel = document.getElementById("run-progress");
  if (!panel || panel.dataset.finished) return;
  var url = panel.dataset.progressUrl;
  var INTERVAL = 1000;
  var MAX_INTERVAL = 10000;
  var delay = INTERVAL;

  function part(role) { return panel.querySelector('[data-role="' + role + '"]'); }

  function percent(rate) { return rate === null || rate === undefined ? "—" : Math.round(rate * 100) + "%"; }

  function update(data) {
    var status = part("status");
    status.className = "badge run-" + data.status;
    status.textContent = data.status_label || data.status;
    panel.dataset.status = data.status;
    var bar = part("bar");
    bar.max = data.total || 1;
    bar.value = data.done || 0;
    ["done", "total", "passed", "failed", "errored", "tokens", "judge_tokens"].forEach(function (name) {
      var node = panel.querySelector('[data-metric="' + name + '"]');
      if (node) node.textContent = String(data[name] === undefined ? "" : data[name]);
    });
    panel.querySelector('[data-metric="pass_rate"]').textContent = percent(data.pass_rate);
    var error = part("error");
    error.textContent = data.error || "";
    error.hidden = !data.error;
    var live = part("live");
    if (live && data.results) {
      live.textContent = "";
      data.results.forEach(function (result) {
        var item = document.createElement("li");
        item.className = "result-" + result.status;
        item.dataset.position = String(result.position);
        var badge = document.createElement("span");
        badge.className = "badge result-" + result.status;
        badge.textContent = result.status_label || result.status;
        item.appendChild(badge);
        item.appendChild(document.createTextNode(" " + (result.title || "#" + (result.position + 1))));
        live.appendChild(item);
      });
    }
  }

  function poll() {
    window.fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        delay = INTERVAL;
        update(data);
        if (data.finished) {
          window.location.reload(); // every result with its verdicts and replies, rendered by the server
          return;
        }
        window.setTimeout(poll, delay);
      })
      .catch(function () {
        delay = Math.min(delay * 2, MAX_INTERVAL); // the server is busy or gone: ask less often
        window.setTimeout(poll, delay);
      });
  }

  window.setTimeout(poll, 300);
})();
