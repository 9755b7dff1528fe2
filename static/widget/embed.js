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

  var bubble = document.createElement("button");
  bubble.type = "button";
  bubble.className = "agentplat-bubble";
  bubble.setAttribute("aria-label", title);
  bubble.setAttribute("aria-expanded", "false");
  bubble.textContent = "💬";
  style(bubble, {
    position: "fixed", right: "20px", bottom: "20px", width: "56px", height: "56px", borderRadius: "50%",
    border: "none", background: script.dataset.color || "#2563eb", color: "#fff", fontSize: "26px",
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
