/* The chat page's socket (docs/stream-protocol.md): send a message, stream the reply, catch up after a drop.
 * Model text is only ever set with textContent; the only HTML inserted is the server-sanitised `html` of `done`
 * (a reply) and of `step` (a step card's result), both rendered by core.markdown.render_markdown. */
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
  // A frame arrived after a hole in the seqs: a catch_up is on its way (nothing is applied until it fills the hole).
  var repairing = false;
  // The server said the frames before the next one are gone (`gap`): accept its seq as the new start.
  var acceptJump = false;
  // The reply being written (its bubble), and the plan's step cards keyed by index.
  var reply = null;
  var steps = {};
  var feedbackQueues = new WeakMap(); // a reply's feedback bar -> its requests in order (postFeedback)
  // The attach button and its tray (static/js/attachments.js), where the page offers them.
  var attachments = window.ChatAttachments && window.ChatAttachments.enabled ? window.ChatAttachments : null;

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
    updateSendable();
    if (!value) setStatus("");
  }

  // Send is offered only for something to send: not while a reply is written, not for an empty or blank message,
  // not over the length the server takes (a counter says so next to the button).
  function updateSendable() {
    var text = input ? input.value : "";
    var limit = Number(config.maxChars) || 0;
    var tooLong = limit > 0 && text.length > limit;
    var counter = document.getElementById("chat-count");
    if (counter) {
      var near = limit > 0 && text.length > limit * 0.9;
      counter.hidden = !near;
      counter.classList.toggle("over", tooLong);
      var template = tooLong ? labels.tooLong : "%(count)s / %(max)s";
      counter.textContent = near ? format(template, { count: text.length, max: limit }) : "";
    }
    var files = attachments ? attachments.ready().length : 0;
    var uploading = attachments ? attachments.busy() : false;
    if (sendButton) sendButton.disabled = running || (!text.trim() && !files) || tooLong || uploading;
  }

  function hideEmpty() {
    var empty = document.getElementById("chat-empty");
    if (empty) empty.hidden = true;
  }

  function addUserBubble(content, clientId, files) {
    hideEmpty();
    var item = el("li", "chat-msg chat-user");
    if (clientId) item.dataset.clientId = clientId;
    item.appendChild(el("div", "chat-body", content));
    if (files && files.length && window.ChatAttachments) item.appendChild(window.ChatAttachments.chips(files));
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
    return reply;
  }

  // The plan panel (templates/chat/_plan.html): one card per step, keyed by index (= the step's seqNo). Cards
  // rendered by the server on reload are adopted; `plan` frames add and update them; step frames fill them.
  var planPanel = document.getElementById("chat-plan");
  var planSteps = document.getElementById("chat-plan-steps");
  var planLabels = planPanel ? planPanel.dataset : {};
  // Owners and admins get a log link on the plan and on each step (the panel carries the URL pattern); members do
  // not, and the log page refuses them anyway.
  var logTemplate = (planPanel && planPanel.dataset.logTemplate) || "";
  var NO_PLAN = "00000000-0000-0000-0000-000000000000";

  function logUrl(index) {
    var planId = planPanel ? planPanel.dataset.planId : "";
    if (!logTemplate || !planId) return "";
    var url = logTemplate.replace(NO_PLAN, encodeURIComponent(planId));
    return index === undefined ? url : url + "?step=" + encodeURIComponent(String(index));
  }

  function refreshLogLinks() {
    if (!logTemplate || !planPanel) return;
    var planLink = planPanel.querySelector(".chat-plan-log");
    if (planLink) {
      planLink.hidden = !logUrl();
      if (logUrl()) planLink.href = logUrl();
    }
    Object.keys(steps).forEach(function (key) {
      var link = steps[key].item.querySelector(".chat-step-log");
      if (link && logUrl(key)) link.href = logUrl(key);
    });
  }

  function statusLabel(status) {
    return (labels.stepStatus && labels.stepStatus[status]) || status || "";
  }

  function adoptCard(card) {
    var text = null;
    var body = card.querySelector(".chat-body");
    if (body && body.children.length) {
      // A finished step's result, rendered by the server from Markdown (sanitised): kept as it is.
    } else if (body) {
      // No result yet (the step has not run, is running, or asked a question): the run's deltas append here.
      text = document.createTextNode("");
      body.textContent = "";
      body.appendChild(text);
    }
    return {
      item: card,
      status: card.querySelector(".chat-step-status"),
      agent: card.querySelector(".chat-step-agent"),
      requirement: card.querySelector(".chat-step-requirement"),
      after: card.querySelector(".chat-step-after"),
      tools: card.querySelector(".chat-tools"),
      body: body,
      text: text,
      result: card.querySelector(".chat-step-result"),
      question: card.querySelector(".chat-step-question"),
    };
  }

  if (planSteps) {
    Array.prototype.forEach.call(planSteps.querySelectorAll(".chat-step"), function (card) {
      steps[card.dataset.index] = adoptCard(card);
    });
  }

  function ensureStep(index) {
    if (steps[index]) return steps[index];
    var card = el("section", "chat-step");
    card.dataset.index = String(index);
    card.dataset.status = "not_started";
    var head = el("header", "chat-step-head");
    head.appendChild(el("span", "chat-step-title", format(planLabels.labelStep || labels.step, { index: index })));
    head.appendChild(el("span", "chat-step-agent", ""));
    head.appendChild(el("span", "chat-step-status badge", statusLabel("not_started")));
    if (logTemplate) {
      var log = el("a", "chat-step-log", planLabels.labelLog || "Log");
      log.target = "_blank";
      log.rel = "noopener";
      if (logUrl(index)) log.href = logUrl(index);
      head.appendChild(log);
    }
    card.appendChild(head);
    card.appendChild(el("p", "chat-step-requirement", ""));
    var after = el("p", "chat-step-after", "");
    after.hidden = true;
    card.appendChild(after);
    card.appendChild(el("ul", "chat-tools"));
    var body = el("div", "chat-body chat-md chat-plain");
    body.appendChild(document.createTextNode(""));
    card.appendChild(body);
    card.appendChild(el("div", "chat-step-result"));
    var container = planSteps;
    if (!container) container = ensureReply().steps; // a page without the panel: cards under the reply
    // Keep the cards in index order whatever order their first frames arrive in.
    var before = null;
    Array.prototype.forEach.call(container.children, function (other) {
      if (!before && Number(other.dataset.index) > index) before = other;
    });
    container.insertBefore(card, before);
    if (planPanel) planPanel.hidden = false;
    steps[index] = adoptCard(card);
    return steps[index];
  }

  // A card shows one run of its step. The run's deltas append to the body as text; its `step` frame then replaces
  // the body with the whole result (the server's sanitised rendering, else the text). A new run (the status goes
  // to in_progress: the plan resumed after the step's question, or the step runs again) starts from an empty body
  // and no result, so it never continues the text of the run before (the question it asked).
  var ENDED = { completed: true, failed: true, stopped: true };

  function resetBody(card) {
    if (!card.body) return;
    card.body.textContent = "";
    card.body.classList.add("chat-plain");
    card.text = document.createTextNode("");
    card.body.appendChild(card.text);
  }

  function setBodyText(card, content) {
    if (!card.text) resetBody(card);
    if (card.text) card.text.data = content;
  }

  function setBodyHtml(card, html) {
    if (!card.body) return;
    card.body.innerHTML = html; // core.markdown.render_markdown's output: sanitised by the server
    card.body.classList.remove("chat-plain");
    card.text = null;
  }

  function setStepStatus(card, status) {
    if (!status) return;
    if (status === "in_progress" && card.item.dataset.status !== "in_progress") {
      resetBody(card);
      if (card.result) card.result.textContent = "";
      if (card.tools) card.tools.textContent = ""; // the earlier run's tool lines too
    }
    card.item.dataset.status = status;
    if (card.status) card.status.textContent = statusLabel(status);
  }

  function showQuestion(card, question) {
    if (card.item.dataset.status !== "interrupted") {
      if (card.question) card.question.hidden = true;
      return;
    }
    if (!card.question) {
      card.question = el("div", "chat-step-question");
      card.question.appendChild(el("strong", null, planLabels.labelWaiting || ""));
      card.question.appendChild(document.createTextNode(" "));
      card.question.appendChild(el("span", null, ""));
      card.item.insertBefore(card.question, card.tools);
    }
    card.question.hidden = false;
    if (question) card.question.querySelector("span").textContent = question;
  }

  function safeUrl(url) {
    url = String(url || "");
    return /^(\/|https?:\/\/)/i.test(url) ? url : "";
  }

  function cell(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function buildTable(columns, rows) {
    var table = el("table", "chat-step-table");
    var head = el("tr");
    columns.forEach(function (column) { head.appendChild(el("th", null, cell(column))); });
    table.appendChild(el("thead")).appendChild(head);
    var tbody = table.appendChild(el("tbody"));
    rows.forEach(function (row) {
      var tr = el("tr");
      row.forEach(function (value) { tr.appendChild(el("td", null, cell(value))); });
      tbody.appendChild(tr);
    });
    return table;
  }

  // A structured result by shape: a list of objects or {columns, rows} is a table, {recordId, url, title} a link.
  function renderResult(card, response) {
    if (typeof response === "string") response = { content: response };
    if (!response || typeof response !== "object") return;
    var content = response.content !== undefined ? response.content : response.output;
    var data = response.data;
    if (data === undefined && response.output && typeof response.output === "object") data = response.output;
    if (response.intent) card.item.dataset.intent = String(response.intent);
    var node = null;
    if (Array.isArray(data) && data.length && data.every(function (row) { return row && typeof row === "object" && !Array.isArray(row); })) {
      var columns = [];
      data.forEach(function (row) {
        Object.keys(row).forEach(function (key) { if (columns.indexOf(key) < 0) columns.push(key); });
      });
      node = buildTable(columns, data.map(function (row) { return columns.map(function (key) { return row[key]; }); }));
    } else if (data && typeof data === "object" && Array.isArray(data.columns) && Array.isArray(data.rows)) {
      node = buildTable(data.columns, data.rows.map(function (row) { return Array.isArray(row) ? row : [row]; }));
    } else if (data && typeof data === "object" && data.recordId && safeUrl(data.url)) {
      node = el("a", "chat-step-link", data.title || data.url);
      node.href = safeUrl(data.url);
    }
    if (node && card.result) {
      card.result.textContent = "";
      card.result.appendChild(node);
    }
    if (card.item.dataset.status === "interrupted") {
      showQuestion(card, typeof content === "string" ? content : "");
    } else if (typeof content === "string" && content && card.text) {
      // The full result as text (no rendering arrived with it): it replaces what the deltas wrote.
      setBodyText(card, content);
    }
  }

  function updatePlan(plan) {
    if (!plan || typeof plan !== "object") return;
    if (planPanel) {
      var planId = plan.planId ? String(plan.planId) : "";
      if (planId && planPanel.dataset.planId && planPanel.dataset.planId !== planId && planSteps) {
        // A new plan replaces the previous one's cards.
        planSteps.textContent = "";
        Object.keys(steps).forEach(function (key) { delete steps[key]; });
      }
      if (planId) planPanel.dataset.planId = planId;
      if (plan.status) planPanel.dataset.status = String(plan.status);
      refreshLogLinks();
    }
    (plan.steps || []).forEach(function (step) {
      var index = Number(step && step.seqNo);
      if (!index && index !== 0) return;
      var card = ensureStep(index);
      if (card.agent) card.agent.textContent = step.agentName || "";
      if (card.requirement) card.requirement.textContent = step.requirement || "";
      var depends = Array.isArray(step.depends_on) ? step.depends_on : [];
      if (card.after) {
        card.after.hidden = depends.length === 0;
        card.after.textContent = depends.length ? format(planLabels.labelAfter, { steps: depends.join(", ") }) : "";
      }
      setStepStatus(card, step.status);
      // A step that has not run yet or runs again still holds its earlier run's result (the question it asked):
      // only an ended or interrupted step's result is its card's.
      var current = ENDED[step.status] || step.status === "interrupted";
      if (current && step.result !== undefined && step.result !== null) renderResult(card, step.result);
      else showQuestion(card, "");
    });
    refreshLogLinks();
  }

  function targetFor(frame) {
    var index = Number(frame.index) || 0;
    return index > 0 ? ensureStep(index) : ensureReply();
  }

  function toolStatus(frame) {
    if (frame.status === "failed" || frame.status === "error") return "failed";
    if (frame.status === "interrupted") return "interrupted";
    if (frame.status === "completed" || frame.status === "finished" || frame.status === "done") return "completed";
    return "started";
  }

  // What the line calls the tool or step: its label in the page's language (a frame carries the identifier).
  function toolDisplayName(frame) {
    var names = labels.toolNames || {};
    if (frame.step_type) {
      if (frame.tool && names[frame.tool]) return names[frame.tool];
      return (labels.stepTypes || {})[frame.step_type] || frame.name || "";
    }
    return names[frame.name] || frame.name || "";
  }

  // One line per tool call (or workflow step): a later frame of the same call replaces its line, so a call shows
  // one outcome, as the reloaded page does (templates/chat/conversation.html).
  function toolLine(holder, frame) {
    var key = frame.call_id ? "call:" + frame.call_id : "step:" + (frame.name || "");
    var item = null;
    Array.prototype.forEach.call(holder.tools.children, function (line) {
      if (line.dataset.key === key) item = line;
    });
    if (!item) {
      item = el("li", "chat-tool");
      item.dataset.key = key;
      if (frame.call_id) item.dataset.callId = frame.call_id;
      holder.tools.appendChild(item);
    }
    var status = toolStatus(frame);
    var words = (frame.step_type ? labels.stepLine : labels.toolStatus) || {};
    item.dataset.status = status;
    item.title = frame.name || "";
    item.textContent = format(words[status] || words.started || "%(name)s", { name: toolDisplayName(frame) });
    return item;
  }

  // A reply's tokens; not shown where the page says not to (the widget, unless its embed shows them to visitors).
  function usageLine(usage) {
    if (!usage || config.showUsage === false) return null;
    return el("p", "chat-usage", format(labels.tokens, {
      prompt: usage.prompt_tokens || 0,
      completion: usage.completion_tokens || 0,
    }));
  }

  // The long-term memories a reply was given (the step frame's data.memories), as a closed list under it.
  function memoriesBox(memories) {
    if (!memories || !memories.length) return null;
    var box = el("details", "chat-memories");
    box.appendChild(el("summary", "", format(labels.memories, { count: memories.length })));
    var list = el("ul", "");
    memories.forEach(function (memory) {
      var item = el("li", "chat-memory chat-memory-" + memory.kind);
      item.appendChild(el("span", "chat-memory-kind", (labels.memoryKinds || {})[memory.kind] || memory.kind));
      item.appendChild(document.createTextNode(" " + (memory.text || "")));
      list.appendChild(item);
    });
    box.appendChild(list);
    return box;
  }

  // Feedback on a reply (thumbs up or down, an optional comment), when the page allows it (config.feedbackUrl).
  // The bar is the page's own markup (templates/chat/_feedback.html: icons, translated labels, the viewer's stored
  // rating): the server renders it under each stored reply, and a new reply gets a clone of #chat-feedback-template.
  // A reply's feedback is posted in order, one request at a time: a rating's request and the comment sent right
  // after it would otherwise race, and the rating's (which carries no comment) could be stored last and wipe the
  // comment. The note speaks once every queued request has answered.
  function postFeedback(item, body, bar) {
    var url = config.feedbackUrl.replace("/0/", "/" + item.dataset.messageId + "/");
    var fields = config.feedbackFields || {};
    Object.keys(fields).forEach(function (key) { body[key] = fields[key]; });
    var headers = { "Content-Type": "application/json" };
    if (config.csrfToken) headers["X-CSRFToken"] = config.csrfToken;
    var note = bar.querySelector(".chat-feedback-note");
    if (note) note.textContent = "";
    var queue = feedbackQueues.get(bar) || { last: Promise.resolve(), pending: 0, failed: false };
    feedbackQueues.set(bar, queue);
    queue.pending += 1;
    queue.last = queue.last.then(function () {
      return window.fetch(url, { method: "POST", headers: headers, body: JSON.stringify(body), credentials: "same-origin" })
        .then(function (response) { return response.ok; })
        .catch(function () { return false; });
    }).then(function (ok) {
      queue.pending -= 1;
      queue.failed = queue.failed || !ok;
      if (queue.pending === 0) {
        if (note) note.textContent = queue.failed ? labels.feedbackFailed : labels.thanks;
        queue.failed = false;
      }
      return ok;
    });
    return queue.last;
  }

  function showRating(bar, rating) {
    bar.dataset.rating = String(rating);
    Array.prototype.forEach.call(bar.querySelectorAll("button[data-rating]"), function (button) {
      button.setAttribute("aria-pressed", String(Number(button.dataset.rating) === rating));
    });
    var makeCase = bar.querySelector(".chat-feedback-case");
    if (makeCase) makeCase.hidden = rating !== -1;
  }

  // Owners and admins turn a 👎 reply into an evaluation case (templates/chat/_feedback.html's .chat-feedback-case
  // carries the URL and the words); a second click answers the same case. The note links to the case.
  function makeTestCase(item, bar, holder) {
    var note = bar.querySelector(".chat-feedback-note");
    var button = holder.querySelector("button");
    var headers = { "X-CSRFToken": config.csrfToken || "" };
    var url = holder.dataset.url.replace("/0/", "/" + item.dataset.messageId + "/");
    button.disabled = true;
    return window.fetch(url, { method: "POST", headers: headers, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (made) {
        if (!note) return;
        note.textContent = format(holder.dataset.made, { dataset: made.dataset_name }) + " ";
        var link = el("a", "chat-feedback-case-link", holder.dataset.open);
        link.href = made.url;
        note.appendChild(link);
      })
      .catch(function () { if (note) note.textContent = holder.dataset.failed; })
      .then(function () { button.disabled = false; });
  }

  function wireFeedback(item, bar) {
    if (bar.dataset.wired) return;
    bar.dataset.wired = "1";
    var commentForm = bar.querySelector("form");
    var comment = bar.querySelector(".chat-feedback-comment");
    Array.prototype.forEach.call(bar.querySelectorAll("button[data-rating]"), function (button) {
      button.addEventListener("click", function () {
        var rating = Number(button.dataset.rating);
        showRating(bar, rating);
        if (commentForm) commentForm.hidden = false;
        postFeedback(item, { rating: rating }, bar);
      });
    });
    var makeCase = bar.querySelector(".chat-feedback-case");
    if (makeCase) {
      makeCase.querySelector("button").addEventListener("click", function () { makeTestCase(item, bar, makeCase); });
    }
    if (commentForm) {
      commentForm.addEventListener("submit", function (event) {
        event.preventDefault();
        postFeedback(item, { rating: Number(bar.dataset.rating), comment: comment ? comment.value : "" }, bar);
      });
    }
  }

  function feedbackBar(item) {
    if (!config.feedbackUrl || !item.dataset.messageId) return;
    var bar = item.querySelector(".chat-feedback");
    if (!bar) {
      var template = document.getElementById("chat-feedback-template");
      if (!template || !template.content || !template.content.firstElementChild) return;
      bar = template.content.firstElementChild.cloneNode(true);
      item.appendChild(bar);
    }
    wireFeedback(item, bar);
  }

  function finishReply(frame) {
    var target = targetFor(frame);
    if (typeof frame.html === "string") {
      // Server-sanitised markdown (core.markdown.render_markdown), as for a step card's result.
      target.body.innerHTML = frame.html;
      target.body.classList.remove("chat-plain");
    }
    if (frame.message_id) target.item.dataset.messageId = String(frame.message_id);
    if (frame.status && frame.status !== "complete" && frame.status !== "completed") {
      target.item.classList.add("chat-incomplete");
      target.item.dataset.status = frame.status;
      target.item.appendChild(el("p", "chat-error", labels.incomplete));
    }
    // The agent's longest reply cut the reply mid-way (as templates/chat/_cut.html says after a reload).
    if (frame.finish_reason === "length" && labels.cutShort) {
      var cut = el("p", "chat-cut-note", labels.cutShort);
      cut.setAttribute("role", "note");
      target.item.appendChild(cut);
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
      feedbackBar(target.item);
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
        // A counter lower than ours means the log started again (the store was reset): follow its numbering.
        if (typeof frame.last_seq === "number" && frame.last_seq < lastSeq) lastSeq = frame.last_seq;
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
        if (!bubble) bubble = addUserBubble(frame.content || "", frame.client_id, frame.attachments);
        if (frame.message_id) bubble.dataset.messageId = String(frame.message_id);
        if (pending && pending.clientId === frame.client_id) pending = null;
        setRunning(true);
        setStatus(labels.thinking);
        break;
      }
      case "delta": {
        var target = targetFor(frame);
        if (!target.text) resetBody(target);
        target.text.appendData(frame.content || "");
        setRunning(true);
        scrollDown();
        break;
      }
      case "tool":
        toolLine(targetFor(frame), frame);
        break;
      case "step": {
        var index = Number(frame.index) || 0;
        if (index === 0) {
          var box = memoriesBox(((frame.agentChatResponse || {}).data || {}).memories);
          if (box) targetFor(frame).item.appendChild(box);
        }
        if (index > 0) {
          var card = ensureStep(index);
          setStepStatus(card, frame.status);
          if (frame.status === "interrupted") {
            resetBody(card); // the question goes to the card's question box, not its result
          } else if (typeof frame.html === "string") {
            // The whole result as Markdown, rendered and sanitised by the server (chat.sinks): tables, lists.
            setBodyHtml(card, frame.html);
          }
          renderResult(card, frame.agentChatResponse || {}); // the question, a table or a link; text without html
          if (frame.status !== "interrupted") showQuestion(card, "");
        }
        break;
      }
      case "plan":
        updatePlan(frame.plan);
        break;
      case "done":
        finishReply(frame);
        break;
      case "error":
        if (frame.code === "overloaded" && pending && frame.client_id === pending.clientId) {
          retryLater(pending, frame);
          break;
        }
        showError(frame);
        break;
      case "gap":
        acceptJump = true;
        break;
      default:
        break;
    }
  }

  // The server had no room for the message (it was not stored): say so and send it again after its hint.
  function retryLater(message, frame) {
    setStatus(frame.message || "");
    var seconds = Number(frame.retry_after) || 10;
    window.setTimeout(function () {
      if (pending !== message) return; // answered, refused for good, or replaced meanwhile
      setStatus(labels.thinking);
      send(messageFrame(message));
    }, seconds * 1000 + Math.floor(Math.random() * 1000));
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
      repairing = false;
      // The widget's visitor proves who they are in the first frame, never in the URL (docs/embed.md); the server
      // answers hello after it (its conversation_id is null until the visitor's first message).
      if (config.socketAuth) send(config.socketAuth);
      // Every frame after the last one seen: what was missed while away (the page embeds the seq it shows).
      send({ type: "catch_up", after_seq: lastSeq });
      everOpened = true;
      setStatus(running ? labels.thinking : "");
      if (pending) send(messageFrame(pending));
    });
    socket.addEventListener("message", function (event) {
      var frame;
      try { frame = JSON.parse(event.data); } catch (e) { return; }
      if (!frame || typeof frame !== "object") return;
      if (typeof frame.seq === "number") {
        if (frame.seq <= lastSeq) return; // already shown (a catch-up overlaps what arrived live)
        if (frame.seq > lastSeq + 1 && !acceptJump) {
          // A frame went missing on the way: ask once for everything after the last one applied; the answer
          // brings this frame again, in order.
          if (!repairing) repairing = send({ type: "catch_up", after_seq: lastSeq });
          return;
        }
        repairing = false;
        acceptJump = false;
        lastSeq = frame.seq;
      }
      handle(frame);
    });
    socket.addEventListener("close", function (event) {
      socket = null;
      // 4012: the user's place in the tenant changed; connecting again checks whether they may still be here.
      if (event.code === 4012) {
        setStatus(labels.reconnecting);
        window.setTimeout(connect, 100);
        return;
      }
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

  // A message as its frame: its files go by id (uploaded already).
  function messageFrame(message) {
    var frame = { type: "user_message", client_id: message.clientId, content: message.content };
    if (message.files.length) frame.attachments = message.files.map(function (file) { return file.id; });
    return frame;
  }

  function submit() {
    if (!input) return;
    var content = input.value.replace(/\s+$/, "");
    var limit = Number(config.maxChars) || 0;
    var files = attachments ? attachments.ready() : [];
    if (attachments && attachments.busy()) {
      setStatus(labels.waitUploads);
      return;
    }
    if ((!content.trim() && !files.length) || running || (limit > 0 && content.length > limit)) return;
    var clientId = newClientId();
    pending = { clientId: clientId, content: content, files: files };
    addUserBubble(content, clientId, files);
    input.value = "";
    if (attachments) attachments.clear();
    setRunning(true);
    updateSendable();
    setStatus(labels.thinking);
    if (!send(messageFrame(pending))) setStatus(labels.connecting);
  }

  if (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      submit();
    });
  }
  if (attachments) attachments.onChange(updateSendable);
  if (input) {
    input.addEventListener("input", updateSendable);
    updateSendable();
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

  Array.prototype.forEach.call(log.querySelectorAll(".chat-assistant[data-message-id]"), feedbackBar);
  connect();
  // The handlers are on: Enter sends from now on (before this, Enter in the textarea only adds a line). Tests wait
  // for it where the page is loaded in a frame that nothing else waits for (the widget).
  if (form) form.setAttribute("data-ready", "1");
})();
