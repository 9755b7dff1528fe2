/* The widget frame's first page: keep the visitor's random id in this frame's storage (made at the first visit),
 * then open the visitor's chat by posting it with the page's signed ticket (widget/views.py). They go in the body of
 * a POST, never in a URL: URLs are kept in access logs and histories (docs/embed.md). */
(function () {
  "use strict";
  var node = document.getElementById("widget-boot");
  if (!node) return;
  var boot = JSON.parse(node.textContent);
  var KEY = "agentplat-visitor";
  var visitor = null;
  try { visitor = window.localStorage.getItem(KEY); } catch (e) { visitor = null; }
  if (!visitor || !/^[0-9a-f]{32}$/.test(visitor)) {
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    visitor = Array.prototype.map.call(bytes, function (b) { return (b + 0x100).toString(16).slice(1); }).join("");
    try { window.localStorage.setItem(KEY, visitor); } catch (e) { /* storage refused: a new visitor each load */ }
  }
  var form = document.createElement("form");
  form.method = "post";
  form.action = boot.chatUrl;
  form.target = "_self";
  form.hidden = true;
  [["ticket", boot.ticket], ["visitor", visitor]].forEach(function (field) {
    var input = document.createElement("input");
    input.type = "hidden";
    input.name = field[0];
    input.value = field[1];
    form.appendChild(input);
  });
  document.body.appendChild(form);
  // Submitted while this page is still loading, so the chat page replaces it in the frame's history.
  form.submit();
})();
