/* The snippet's script: <script src="https://PLATFORM/embed.js" data-token="TOKEN" data-lang="zh-hans" async>.
 * Draws a chat bubble at the bottom right; a click opens the agent's chat in a frame served by the platform
 * (docs/embed.md). No inline script or style is needed on the host page: the styles are set from here. */
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || !script.dataset.token) return;
  var base = new URL(script.src).origin;
  var lang = script.dataset.lang || document.documentElement.lang || navigator.language || "en";
  var zh = /^zh/i.test(lang);
  var title = script.dataset.title || (zh ? "在线助手" : "Chat with us");
  var frameUrl = base + "/embed/" + encodeURIComponent(script.dataset.token) + "/?lang=" + (zh ? "zh-hans" : "en");

  function style(node, rules) {
    Object.keys(rules).forEach(function (key) { node.style[key] = rules[key]; });
  }

  // A speech balloon drawn as SVG: a glyph would need an emoji font, which many systems lack (an empty circle).
  function chatIcon() {
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    var attributes = {
      viewBox: "0 0 24 24", width: "28", height: "28", fill: "none", stroke: "currentColor", "stroke-width": "2",
      "stroke-linecap": "round", "stroke-linejoin": "round", "aria-hidden": "true", focusable: "false"
    };
    Object.keys(attributes).forEach(function (key) { svg.setAttribute(key, attributes[key]); });
    var path = document.createElementNS(ns, "path");
    path.setAttribute("d", "M5 4h14a2 2 0 0 1 2 2v9a2 2 0 0 1-2 2h-8l-5 4v-4H5a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2z");
    svg.appendChild(path);
    [8, 12, 16].forEach(function (x) {
      var dot = document.createElementNS(ns, "circle");
      dot.setAttribute("cx", String(x));
      dot.setAttribute("cy", "10.5");
      dot.setAttribute("r", "0.6");
      dot.setAttribute("fill", "currentColor");
      svg.appendChild(dot);
    });
    svg.style.display = "block";
    svg.style.pointerEvents = "none";
    return svg;
  }

  var bubble = document.createElement("button");
  bubble.type = "button";
  bubble.className = "agentplat-bubble";
  bubble.setAttribute("aria-label", title);
  bubble.setAttribute("aria-expanded", "false");
  bubble.title = title;
  bubble.appendChild(chatIcon());
  style(bubble, {
    position: "fixed", right: "20px", bottom: "20px", width: "56px", height: "56px", borderRadius: "50%",
    border: "none", background: script.dataset.color || "#2563eb", color: "#fff", padding: "0",
    display: "flex", alignItems: "center", justifyContent: "center",
    cursor: "pointer", boxShadow: "0 4px 14px rgba(0,0,0,.25)", zIndex: "2147483000"
  });

  var panel = null;
  function open() {
    if (!panel) {
      panel = document.createElement("iframe");
      panel.className = "agentplat-frame";
      panel.title = title;
      panel.referrerPolicy = "origin"; // the platform checks the host page's origin
      panel.src = frameUrl;
      style(panel, {
        position: "fixed", right: "20px", bottom: "88px", width: "min(380px, calc(100vw - 40px))",
        height: "min(560px, calc(100vh - 120px))", border: "1px solid #d0d7de", borderRadius: "12px",
        background: "#fff", boxShadow: "0 8px 30px rgba(0,0,0,.25)", zIndex: "2147483000"
      });
      document.body.appendChild(panel);
    } else {
      panel.hidden = !panel.hidden;
    }
    bubble.setAttribute("aria-expanded", String(!panel.hidden));
  }
  bubble.addEventListener("click", open);

  function mount() { document.body.appendChild(bubble); }
  if (document.body) mount(); else document.addEventListener("DOMContentLoaded", mount);
})();
