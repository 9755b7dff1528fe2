/* The widget frame's first page: keep the visitor's random id in this frame's storage (made at the first visit),
 * then open the visitor's chat with it and the page's signed ticket (widget/views.py). */
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
  var query = "?ticket=" + encodeURIComponent(boot.ticket) + "&visitor=" + encodeURIComponent(visitor);
  window.location.replace(boot.chatUrl + query);
})();
