/* The chat page's socket (docs/stream-protocol.md): send a message, stream the reply, catch up after a drop.
 * Model text is only ever set with textContent; the one HTML inserted is the server-sanitised `html` of `done`. */
(function () {
  "use strict";

  var config = readJSON("chat-config");
  var labels = readJSON("chat-labels");
  var log = document.getElementById("chat-log");
  var form = document.getElementById("chat-form");
  var input = document.getElementById("chat-input");
  var sendButton = document.getElementById("chat-send");
  var stopButton = document.getElementById("chat-stop");
  var statusLine = document.getElementById("chat-status");
  if (!config || !log) return;

  var lastSeq = Number(config.lastSeq) || 0;
  var socket = null;
  var everOpened = false;
  var retries = 0;
  var running = false;
  // The message sent but not yet acknowledged by a `user_message` frame: resent as is after a reconnect.
  var pending = null;
  // The reply being written: its bubble, and the step cards of a plan keyed by index.
  var reply = null;
  var steps = {};

  function readJSON(id) {
    var node = document.getElementById(id);
    if (!node) return null;
    try { return JSON.parse(node.textContent); } catch (e) { return null; }
  }

  function format(template, values) {
    return String(template || "").replace(/%\((\w+)\)s/g, function (_, key) {
      return values[key] === undefined || values[key] === null ? "" : String(values[key]);
    });
  }

  function newClientId() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
    // Plain-http pages on a LAN address have no randomUUID: build a v4 UUID from getRandomValues.
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    var hex = Array.prototype.map.call(bytes, function (b) { return (b + 0x100).toString(16).slice(1); }).join("");
    return hex.slice(0, 8) + "-" + hex.slice(8, 12) + "-" + hex.slice(12, 16) + "-" + hex.slice(16, 20) + "-" + hex.slice(20);
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function scrollDown() {
    window.scrollTo(0, document.body.scrollHeight);
  }

  function setStatus(text) {
    if (statusLine) statusLine.textContent = text || "";
  }

  function setRunning(value) {
    running = value;
    if (stopButton) stopButton.hidden = !value;
    if (sendButton) sendButton.disabled = value;
    if (!value) setStatus("");
  }

  function hideEmpty() {
    var empty = document.getElementById("chat-empty");
    if (empty) empty.hidden = true;
  }

  function addUserBubble(content, clientId) {
    hideEmpty();
    var item = el("li", "chat-msg chat-user");
    if (clientId) item.dataset.clientId = clientId;
    item.appendChild(el("div", "chat-body", content));
    log.appendChild(item);
    scrollDown();
    return item;
  }

  function findUserBubble(clientId) {
    if (!clientId) return null;
    var nodes = log.querySelectorAll("li.chat-user");
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i].dataset.clientId === clientId) return nodes[i];
    }
    return null;
  }

  function ensureReply() {
    if (reply) return reply;
    hideEmpty();
    var item = el("li", "chat-msg chat-assistant chat-streaming");
    var tools = el("ul", "chat-tools");
    var stepsBox = el("div", "chat-steps");
    var body = el("div", "chat-body chat-md chat-plain");
    var text = document.createTextNode("");
    body.appendChild(text);
    item.appendChild(tools);
    item.appendChild(stepsBox);
    item.appendChild(body);
    log.appendChild(item);
    reply = { item: item, tools: tools, steps: stepsBox, body: body, text: text };
    steps = {};
    return reply;
  }

  // A frame with index > 0 belongs to a plan step: its own card under the reply, keyed by index.
  function ensureStep(index) {
    if (steps[index]) return steps[index];
    var target = ensureReply();
    var card = el("section", "chat-step");
    card.dataset.index = String(index);
    var head = el("header", "chat-step-head");
    var title = el("span", "chat-step-title", format(labels.step, { index: index }));
    var status = el("span", "chat-step-status", "");
    head.appendChild(title);
    head.appendChild(status);
    var tools = el("ul", "chat-tools");
    var body = el("div", "chat-body chat-plain");
    var text = document.createTextNode("");
    body.appendChild(text);
    card.appendChild(head);
    card.appendChild(tools);
    card.appendChild(body);
    target.steps.appendChild(card);
    steps[index] = { item: card, status: status, tools: tools, body: body, text: text };
    return steps[index];
  }

  function targetFor(frame) {
    var index = Number(frame.index) || 0;
    return index > 0 ? ensureStep(index) : ensureReply();
  }

  function toolLine(frame) {
    var name = frame.name || "";
    if (frame.status === "failed" || frame.status === "error") return format(labels.toolFailed, { name: name });
    if (frame.status === "completed" || frame.status === "finished" || frame.status === "done") {
      return format(labels.toolFinished, { name: name });
    }
    return format(labels.toolStarted, { name: name });
  }

  function usageLine(usage) {
    if (!usage) return null;
    return el("p", "chat-usage", format(labels.tokens, {
      prompt: usage.prompt_tokens || 0,
      completion: usage.completion_tokens || 0,
    }));
  }

  function finishReply(frame) {
    var target = targetFor(frame);
    if (typeof frame.html === "string") {
      // Server-sanitised markdown (chat.markdown.render_markdown): the only HTML the page inserts.
      target.body.innerHTML = frame.html;
      target.body.classList.remove("chat-plain");
    }
    if (frame.message_id) target.item.dataset.messageId = String(frame.message_id);
    if (frame.status && frame.status !== "complete" && frame.status !== "completed") {
      target.item.classList.add("chat-incomplete");
      target.item.dataset.status = frame.status;
      target.item.appendChild(el("p", "chat-error", labels.incomplete));
    }
    var usage = usageLine(frame.usage);
    if (usage) target.item.appendChild(usage);
    var strategy = frame.strategy;
    if (strategy && strategy.triggered) {
      var note = strategy.summarized ? labels.summarised : format(labels.windowed, { saved: strategy.tokens_saved || 0 });
      target.item.appendChild(el("p", "chat-strategy-note", note));
    }
    target.item.classList.remove("chat-streaming");
    if ((Number(frame.index) || 0) === 0) {
      reply = null;
      setRunning(false);
    }
  }

  function showError(frame) {
    var index = Number(frame.index) || 0;
    // A refused message (busy, invalid) is not resent after a reconnect; it stays on the page with the error.
    if (pending && frame.client_id === pending.clientId) pending = null;
    var target = index > 0 || reply ? targetFor(frame) : null;
    var line = el("p", "chat-error", frame.message || labels.failed);
    if (target) {
      target.item.classList.add("chat-incomplete");
      target.item.classList.remove("chat-streaming");
      target.item.appendChild(line);
    } else {
      var item = el("li", "chat-msg chat-assistant chat-incomplete");
      item.appendChild(line);
      log.appendChild(item);
    }
    if (index === 0) {
      reply = null;
      setRunning(false);
    }
    scrollDown();
  }

  function handle(frame) {
    switch (frame.type) {
      case "hello":
        // A reply still being written (another tab, or before a reload): its frames come with the catch-up.
        if (frame.running) {
          setRunning(true);
          setStatus(labels.thinking);
        } else if (!pending && !reply) {
          setRunning(false);
        }
        break;
      case "user_message": {
        var bubble = findUserBubble(frame.client_id);
        if (!bubble) bubble = addUserBubble(frame.content || "", frame.client_id);
        if (frame.message_id) bubble.dataset.messageId = String(frame.message_id);
        if (pending && pending.clientId === frame.client_id) pending = null;
        setRunning(true);
        setStatus(labels.thinking);
        break;
      }
      case "delta": {
        var target = targetFor(frame);
        target.text.appendData(frame.content || "");
        setRunning(true);
        scrollDown();
        break;
      }
      case "tool": {
        var holder = targetFor(frame);
        holder.tools.appendChild(el("li", "chat-tool", toolLine(frame)));
        break;
      }
      case "step": {
        var index = Number(frame.index) || 0;
        if (index > 0) {
          var card = ensureStep(index);
          card.status.textContent = (labels.stepStatus && labels.stepStatus[frame.status]) || frame.status || "";
          card.item.dataset.status = frame.status || "";
          var answer = frame.agentChatResponse && frame.agentChatResponse.content;
          if (answer && !card.text.data) card.text.appendData(answer);
        }
        break;
      }
      case "done":
        finishReply(frame);
        break;
      case "error":
        showError(frame);
        break;
      default:
        break;
    }
  }

  function socketUrl() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    return scheme + window.location.host + config.wsPath;
  }

  function send(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(frame));
      return true;
    }
    return false;
  }

  function connect() {
    setStatus(everOpened ? labels.reconnecting : "");
    socket = new WebSocket(socketUrl());
    socket.addEventListener("open", function () {
      retries = 0;
      // Every frame after the last one seen: what was missed while away (the page embeds the seq it shows).
      send({ type: "catch_up", after_seq: lastSeq });
      everOpened = true;
      setStatus(running ? labels.thinking : "");
      if (pending) send({ type: "user_message", client_id: pending.clientId, content: pending.content });
    });
    socket.addEventListener("message", function (event) {
      var frame;
      try { frame = JSON.parse(event.data); } catch (e) { return; }
      if (!frame || typeof frame !== "object") return;
      if (typeof frame.seq === "number") {
        if (frame.seq <= lastSeq) return; // already shown (a catch-up overlaps what arrived live)
        lastSeq = frame.seq;
      }
      handle(frame);
    });
    socket.addEventListener("close", function (event) {
      socket = null;
      // 4xxx: the server refused this conversation (not found, not allowed); retrying cannot help.
      if (event.code >= 4000 && event.code < 5000) {
        setStatus(labels.failed);
        return;
      }
      var delay = Math.min(10000, 500 * Math.pow(2, retries)) + Math.floor(Math.random() * 250);
      retries += 1;
      setStatus(labels.reconnecting);
      window.setTimeout(connect, delay);
    });
  }

  function submit() {
    if (!input) return;
    var content = input.value.replace(/\s+$/, "");
    if (!content.trim() || running) return;
    var clientId = newClientId();
    pending = { clientId: clientId, content: content };
    addUserBubble(content, clientId);
    input.value = "";
    setRunning(true);
    setStatus(labels.thinking);
    if (!send({ type: "user_message", client_id: clientId, content: content })) setStatus(labels.connecting);
  }

  if (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      submit();
    });
  }
  if (input) {
    input.addEventListener("keydown", function (event) {
      // Enter sends, Shift+Enter adds a line; Enter that confirms an input-method composition does neither.
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
        event.preventDefault();
        submit();
      }
    });
  }
  if (stopButton) {
    stopButton.addEventListener("click", function () {
      if (send({ type: "stop" })) setStatus(labels.stopping);
    });
  }

  connect();
})();
