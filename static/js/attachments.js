/* Files on the chat page and in the widget (docs/attachments.md): the attach button, drag and drop, a pasted
 * image; each file is uploaded at once (progress, then "reading" while the server reads it), shown as a thumbnail
 * (an image) or a chip (a document) in the tray above the message box, and sent with the next message by id
 * (static/js/chat.js reads ChatAttachments.ready()). Errors stay in the tray, next to the file they are about.
 * A file's name is only ever set with textContent. */
(function () {
  "use strict";

  function readJSON(id) {
    var node = document.getElementById(id);
    if (!node) return null;
    try { return JSON.parse(node.textContent); } catch (e) { return null; }
  }

  var config = readJSON("chat-config") || {};
  var labels = readJSON("chat-labels") || {};
  var form = document.getElementById("chat-form");
  var tray = document.getElementById("chat-tray");
  var picker = document.getElementById("chat-file");
  var attachButton = document.getElementById("chat-attach");
  var input = document.getElementById("chat-input");
  var items = []; // {file, state: uploading|reading|ready|failed, info, chip, xhr}
  var listeners = [];

  function format(template, values) {
    return String(template || "").replace(/%\((\w+)\)s/g, function (_, key) {
      return values[key] === undefined || values[key] === null ? "" : String(values[key]);
    });
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  // The document icon drawn by the page (templates/chat/_file_icon.html), cloned from its template.
  function fileIcon() {
    var template = document.getElementById("chat-file-icon");
    var icon = template && template.content && template.content.firstElementChild;
    return icon ? icon.cloneNode(true) : el("span", "chat-file-icon");
  }

  function changed() {
    listeners.forEach(function (listener) { listener(); });
  }

  function fileUrl(id) {
    return String(config.attachmentUrl || "").replace("/0/", "/" + encodeURIComponent(String(id)) + "/");
  }

  function sizeText(bytes) {
    if (bytes >= 1024 * 1024) return (bytes / (1024 * 1024)).toFixed(1) + " MB";
    return Math.max(1, Math.round(bytes / 1024)) + " KB";
  }

  // An image shown from its bytes as a data: URL (the site's Content-Security-Policy allows data: images, not blob:).
  function showBlob(img, blob) {
    var reader = new FileReader();
    reader.addEventListener("load", function () { img.src = String(reader.result || ""); });
    reader.readAsDataURL(blob);
  }

  // A stored image's bytes: a plain URL on the page (the session reads it); the widget's visitor has no session,
  // so its files are fetched with the visitor's credentials in a POST body.
  function loadImage(img, id) {
    if (!config.attachmentPost) {
      img.src = fileUrl(id);
      return;
    }
    var body = new FormData();
    var fields = config.uploadFields || {};
    Object.keys(fields).forEach(function (key) { body.append(key, fields[key]); });
    window.fetch(fileUrl(id), { method: "POST", body: body, credentials: "omit" })
      .then(function (response) { return response.ok ? response.blob() : null; })
      .then(function (blob) { if (blob) showBlob(img, blob); })
      .catch(function () {});
  }

  // A file as a chip: a thumbnail for an image, the name, size and pages for a document. On the page an image's
  // whole chip opens the file (as templates/chat/_message_files.html draws it); the widget's visitor has no session.
  function chip(info) {
    var opens = info.kind === "image" && Boolean(info.id) && !config.attachmentPost;
    var node = el(opens ? "a" : "span", "chat-file chat-file-" + (info.kind || "document"));
    node.dataset.attachmentId = String(info.id || "");
    if (opens) {
      node.href = fileUrl(info.id);
      node.target = "_blank";
      node.rel = "noopener";
    }
    if (info.kind === "image") {
      var img = el("img", "chat-file-thumb");
      img.alt = info.name || "";
      if (info.id) loadImage(img, info.id);
      node.appendChild(img);
    } else {
      node.appendChild(fileIcon());
    }
    var name = el(config.attachmentPost || !info.id || info.kind === "image" ? "span" : "a", "chat-file-name", info.name || "");
    if (name.tagName === "A") {
      name.href = fileUrl(info.id);
      name.target = "_blank";
      name.rel = "noopener";
    }
    node.appendChild(name);
    var meta = info.size ? sizeText(info.size) : "";
    if (info.pages > 1) meta += (meta ? " · " : "") + format(labels.pages, { pages: info.pages });
    if (meta) node.appendChild(el("span", "chat-file-meta", meta));
    return node;
  }

  // The chips of a message's files (a user bubble), in a row under its text.
  function chips(infos) {
    var row = el("div", "chat-files");
    (infos || []).forEach(function (info) { row.appendChild(chip(info)); });
    return row;
  }

  function remove(item) {
    if (item.xhr && item.state !== "ready") item.xhr.abort();
    items = items.filter(function (other) { return other !== item; });
    if (item.chip.parentNode) item.chip.parentNode.removeChild(item.chip);
    changed();
  }

  function setState(item, state, text) {
    item.state = state;
    item.chip.dataset.state = state;
    item.status.textContent = text || "";
    changed();
  }

  function failed(item, reason) {
    setState(item, "failed", format(labels.uploadFailed, { name: item.file.name, reason: reason }));
    item.chip.setAttribute("role", "alert");
  }

  function trayChip(item) {
    var node = el("li", "chat-tray-item");
    var image = /^image\//.test(item.file.type || "");
    if (image) {
      var img = el("img", "chat-file-thumb");
      showBlob(img, item.file);
      img.alt = item.file.name;
      node.appendChild(img);
    } else {
      node.appendChild(fileIcon());
    }
    node.appendChild(el("span", "chat-file-name", item.file.name));
    item.status = el("span", "chat-file-status", "");
    item.status.setAttribute("aria-live", "polite");
    node.appendChild(item.status);
    var close = el("button", "chat-file-remove", "×");
    close.type = "button";
    close.title = format(labels.remove, { name: item.file.name });
    close.setAttribute("aria-label", close.title);
    close.addEventListener("click", function () { remove(item); });
    node.appendChild(close);
    return node;
  }

  function errorMessage(xhr) {
    try {
      var body = JSON.parse(xhr.responseText);
      if (body && body.error && body.error.message) return body.error.message;
    } catch (e) { /* not JSON: a proxy's page */ }
    return labels.uploadBroken;
  }

  function upload(item) {
    var body = new FormData();
    var fields = config.uploadFields || {};
    Object.keys(fields).forEach(function (key) { body.append(key, fields[key]); });
    body.append("file", item.file, item.file.name);
    var xhr = new XMLHttpRequest();
    item.xhr = xhr;
    xhr.open("POST", config.attachUrl);
    if (config.csrfToken) xhr.setRequestHeader("X-CSRFToken", config.csrfToken);
    xhr.upload.addEventListener("progress", function (event) {
      if (!event.lengthComputable) return;
      var percent = Math.round((event.loaded / event.total) * 100);
      // Every byte sent: the server reads the file now (its text, an image's OCR).
      if (percent >= 100) setState(item, "reading", labels.reading);
      else setState(item, "uploading", format(labels.uploading, { percent: percent + "%" }));
    });
    xhr.addEventListener("load", function () {
      if (xhr.status === 201) {
        try { item.info = JSON.parse(xhr.responseText); } catch (e) { item.info = null; }
        if (item.info && item.info.id) {
          item.chip.dataset.attachmentId = String(item.info.id);
          setState(item, "ready", item.info.pages > 1 ? format(labels.pages, { pages: item.info.pages }) : "");
          return;
        }
      }
      failed(item, errorMessage(xhr));
    });
    xhr.addEventListener("error", function () { failed(item, labels.uploadBroken); });
    setState(item, "uploading", format(labels.uploading, { percent: "0%" }));
    xhr.send(body);
  }

  function add(files) {
    Array.prototype.forEach.call(files || [], function (file) {
      var item = { file: file, state: "new" };
      item.chip = trayChip(item);
      tray.appendChild(item.chip);
      tray.hidden = false;
      items.push(item);
      var live = items.filter(function (other) { return other.state !== "failed"; }).length;
      if (config.maxFiles && live > config.maxFiles) {
        failed(item, format(labels.tooManyFiles, { max: config.maxFiles }));
      } else if (config.maxFileBytes && file.size > config.maxFileBytes) {
        failed(item, format(labels.fileTooLarge, { name: file.name, max: Math.floor(config.maxFileBytes / 1048576) }));
      } else {
        upload(item);
      }
    });
  }

  var api = {
    enabled: Boolean(config.attachUrl && form && tray),
    chips: chips,
    // Files attached and read, ready to go with the next message.
    ready: function () {
      return items.filter(function (item) { return item.state === "ready"; }).map(function (item) { return item.info; });
    },
    busy: function () {
      return items.some(function (item) { return item.state === "uploading" || item.state === "reading"; });
    },
    // The message was sent: its files leave the tray (failed ones too: their errors were seen).
    clear: function () { items.slice().forEach(remove); tray.hidden = true; },
    onChange: function (listener) { listeners.push(listener); },
  };
  window.ChatAttachments = api;

  // Stored messages' files rendered by the server: load their thumbnails.
  Array.prototype.forEach.call(document.querySelectorAll(".chat-file-image[data-attachment-id] img:not([src])"), function (img) {
    loadImage(img, img.parentNode.dataset.attachmentId);
  });
  if (!api.enabled) return;

  if (attachButton) {
    attachButton.hidden = false;
    attachButton.addEventListener("click", function () { if (picker) picker.click(); });
  }
  if (picker) {
    picker.addEventListener("change", function () {
      add(picker.files);
      picker.value = "";
    });
  }
  // Drag and drop onto the message box.
  var depth = 0;
  form.addEventListener("dragenter", function (event) {
    if (!event.dataTransfer || Array.prototype.indexOf.call(event.dataTransfer.types || [], "Files") < 0) return;
    depth += 1;
    form.classList.add("chat-dropping");
    form.dataset.dropLabel = labels.dropHere || "";
  });
  form.addEventListener("dragleave", function () {
    depth = Math.max(0, depth - 1);
    if (!depth) form.classList.remove("chat-dropping");
  });
  form.addEventListener("dragover", function (event) { event.preventDefault(); });
  form.addEventListener("drop", function (event) {
    event.preventDefault();
    depth = 0;
    form.classList.remove("chat-dropping");
    if (event.dataTransfer && event.dataTransfer.files.length) add(event.dataTransfer.files);
  });
  // A pasted image (a screenshot): attached like a chosen file; pasted text stays text.
  if (input) {
    input.addEventListener("paste", function (event) {
      var files = event.clipboardData ? event.clipboardData.files : null;
      if (files && files.length) {
        event.preventDefault();
        add(files);
      }
    });
  }
})();
