// Workflow editor: a line-number gutter beside the YAML, error lines marked, and a click on an error selects its line.
(function () {
  "use strict";
  var area = document.getElementById("id_yaml");
  if (!area) return;
  var errorLines = {};
  document.querySelectorAll("#workflow-errors li[data-line]").forEach(function (item) {
    var line = parseInt(item.getAttribute("data-line"), 10);
    if (!line) return;
    errorLines[line] = (errorLines[line] ? errorLines[line] + "\n" : "") + item.textContent.trim().split("\n")[0];
    item.classList.add("clickable");
    item.addEventListener("click", function () { selectLine(line); });
  });

  var gutter = document.createElement("pre");
  gutter.className = "yaml-gutter";
  gutter.setAttribute("aria-hidden", "true");
  var wrap = document.createElement("div");
  wrap.className = "yaml-editor";
  area.parentNode.insertBefore(wrap, area);
  wrap.appendChild(gutter);
  wrap.appendChild(area);

  function escape(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }

  function render() {
    var count = area.value.split("\n").length;
    var html = [];
    for (var n = 1; n <= count; n++) {
      html.push(errorLines[n] ? '<span class="error-mark" title="' + escape(errorLines[n]) + '">' + n + " !</span>" : String(n));
    }
    gutter.innerHTML = html.join("\n");
    gutter.scrollTop = area.scrollTop;
  }

  function selectLine(line) {
    var lines = area.value.split("\n");
    var start = 0;
    for (var i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
    area.focus();
    area.setSelectionRange(start, start + (lines[line - 1] || "").length);
    var lineHeight = area.scrollHeight / Math.max(lines.length, 1);
    area.scrollTop = Math.max(0, (line - 3) * lineHeight);
    render();
  }

  area.addEventListener("input", render);
  area.addEventListener("scroll", function () { gutter.scrollTop = area.scrollTop; });
  render();
})();
