// kestrel's chat page: conversations kept in the browser's localStorage, answers streamed from
// the server's /v1/chat/completions (the model's own chat template applies there), a stop
// button that aborts the request (the server cancels the sequence), the sampling settings, and
// each answer's speed. No framework and nothing fetched from anywhere but this server.
"use strict";

(function () {
  const STORE = "kestrel.chat.v1";
  const SETTINGS = "kestrel.settings.v1";
  const $ = function (id) { return document.getElementById(id); };
  const defaults = { system: "", temperature: 0.7, top_p: 0.95, max_tokens: 512, schema: "", apiKey: "" };

  function load(key, fallback) {
    try {
      const v = JSON.parse(localStorage.getItem(key));
      return v && typeof v === "object" ? v : fallback;
    } catch (_) {
      return fallback;
    }
  }

  const state = load(STORE, { conversations: [], current: null });
  // whatever another version of the page (or a hand edit) left: keep only what reads as chats
  if (!Array.isArray(state.conversations)) state.conversations = [];
  state.conversations = state.conversations.filter(function (c) {
    return c && typeof c.id === "string" && Array.isArray(c.messages);
  });
  state.conversations.forEach(function (c) {
    c.title = String(c.title || "Chat");
    c.messages = c.messages.filter(function (m) {
      return m && (m.role === "user" || m.role === "assistant") && typeof m.content === "string";
    });
  });
  const settings = Object.assign({}, defaults, load(SETTINGS, {}));
  let busy = null; // {controller, conversation} while an answer streams
  let modelId = null;

  function save() {
    try {
      localStorage.setItem(STORE, JSON.stringify(state));
    } catch (e) {
      console.warn("kestrel: cannot keep the conversations:", e);
    }
  }

  function current() {
    return state.conversations.find(function (c) { return c.id === state.current; }) || null;
  }

  function newConversation() {
    const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 7), title: "New chat", created: Date.now(), messages: [] };
    state.conversations.unshift(c);
    state.current = c.id;
    save();
    return c;
  }

  function headers() {
    const h = { "Content-Type": "application/json" };
    if (settings.apiKey) h.Authorization = "Bearer " + settings.apiKey;
    return h;
  }

  // The server's own words for a failed request: {"error": {"message": ...}} when it sent one.
  async function errorText(resp) {
    const body = await resp.text();
    try {
      const j = JSON.parse(body);
      if (j && j.error && j.error.message) return j.error.message + " (HTTP " + resp.status + ")";
    } catch (_) { /* not JSON */ }
    return "HTTP " + resp.status + (body ? ": " + body.slice(0, 500) : "");
  }

  // ---- rendering ----

  function statsText(s) {
    if (!s) return "";
    const parts = [];
    if (s.tokens != null) parts.push(s.tokens + " tokens");
    if (s.tps != null) parts.push(s.tps.toFixed(1) + " tokens/s");
    if (s.ttft != null) parts.push("first token " + Math.round(s.ttft) + " ms");
    if (s.stopped) parts.push("stopped");
    return parts.join(" · ");
  }

  function messageNode(m) {
    const div = document.createElement("div");
    div.className = "msg " + m.role;
    const body = document.createElement("div");
    body.className = "body";
    div.appendChild(body);
    const stats = document.createElement("div");
    stats.className = "stats";
    div.appendChild(stats);
    fill(div, m);
    return div;
  }

  function fill(div, m) {
    const body = div.querySelector(".body");
    if (m.role === "user") {
      body.textContent = m.content;
    } else {
      body.innerHTML = window.kestrelMarkdown(m.content || "");
      body.querySelectorAll("pre").forEach(addCopy);
    }
    let err = div.querySelector(".error");
    if (m.error) {
      if (!err) {
        err = document.createElement("div");
        err.className = "error";
        div.insertBefore(err, div.querySelector(".stats"));
      }
      err.textContent = m.error;
    } else if (err) {
      err.remove();
    }
    div.querySelector(".stats").textContent = statsText(m.stats);
  }

  function addCopy(pre) {
    const b = document.createElement("button");
    b.className = "copy";
    b.type = "button";
    b.textContent = "copy";
    b.addEventListener("click", function () {
      const code = pre.querySelector("code");
      if (navigator.clipboard) navigator.clipboard.writeText(code ? code.textContent : "");
    });
    pre.appendChild(b);
  }

  function renderList() {
    const ul = $("conversations");
    ul.textContent = "";
    state.conversations.forEach(function (c) {
      const li = document.createElement("li");
      if (c.id === state.current) li.className = "current";
      const title = document.createElement("span");
      title.textContent = c.title;
      title.title = c.title;
      title.addEventListener("click", function () {
        if (busy) return;
        state.current = c.id;
        save();
        renderAll();
      });
      const del = document.createElement("button");
      del.type = "button";
      del.textContent = "×";
      del.title = "Delete this conversation";
      del.setAttribute("aria-label", "Delete " + c.title);
      del.addEventListener("click", function () {
        if (busy && busy.conversation === c) return;
        state.conversations = state.conversations.filter(function (x) { return x !== c; });
        if (state.current === c.id) state.current = state.conversations.length ? state.conversations[0].id : null;
        save();
        renderAll();
      });
      li.appendChild(title);
      li.appendChild(del);
      ul.appendChild(li);
    });
  }

  function renderMessages() {
    const box = $("messages");
    box.textContent = "";
    const c = current();
    if (!c || !c.messages.length) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = modelId ? "Ask " + modelId + " anything." : "Ask anything.";
      box.appendChild(p);
      return;
    }
    c.messages.forEach(function (m) { box.appendChild(messageNode(m)); });
    box.scrollTop = box.scrollHeight;
  }

  function renderAll() {
    renderList();
    renderMessages();
  }

  function setBusy(b) {
    busy = b;
    $("send").hidden = !!b;
    $("stop").hidden = !b;
    document.body.classList.toggle("busy", !!b);
  }

  // ---- settings ----

  function readSettings() {
    const num = function (id, lo, hi) {
      const v = parseFloat($(id).value);
      return isFinite(v) ? Math.min(hi, Math.max(lo, v)) : defaults[id];
    };
    settings.system = $("system").value;
    settings.temperature = num("temperature", 0, 2);
    settings.top_p = num("top_p", 0, 1);
    settings.max_tokens = Math.round(num("max_tokens", 1, 1 << 20));
    settings.schema = $("schema").value;
    settings.apiKey = $("api-key").value;
    try {
      localStorage.setItem(SETTINGS, JSON.stringify(settings));
    } catch (_) { /* storage full or off: settings last for this page */ }
  }

  function showSettings() {
    $("system").value = settings.system;
    $("temperature").value = settings.temperature;
    $("top_p").value = settings.top_p;
    $("max_tokens").value = settings.max_tokens;
    $("schema").value = settings.schema;
    $("api-key").value = settings.apiKey;
  }

  function responseFormat() {
    const text = settings.schema.trim();
    if (!text) return null;
    let schema;
    try {
      schema = JSON.parse(text);
    } catch (e) {
      throw new Error("The JSON schema is not valid JSON: " + e.message);
    }
    return { type: "json_schema", json_schema: { name: "answer", schema: schema, strict: true } };
  }

  // ---- talking to the server ----

  async function loadModel() {
    try {
      const r = await fetch("/v1/models", { headers: headers() });
      if (!r.ok) {
        $("model-name").textContent = await errorText(r);
        return;
      }
      const j = await r.json();
      modelId = j.data && j.data[0] ? j.data[0].id : null;
      $("model-name").textContent = modelId || "no model";
      renderMessages();
    } catch (e) {
      $("model-name").textContent = "server unreachable: " + e.message;
    }
  }

  function requestBody(c) {
    const messages = [];
    if (settings.system.trim()) messages.push({ role: "system", content: settings.system });
    c.messages.forEach(function (m) {
      if (m.role === "user" || (m.role === "assistant" && !m.error && m.content)) {
        messages.push({ role: m.role, content: m.content });
      }
    });
    const body = {
      model: modelId || undefined,
      messages: messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: settings.temperature,
      top_p: settings.top_p,
      max_tokens: settings.max_tokens,
    };
    const rf = responseFormat();
    if (rf) body.response_format = rf;
    return body;
  }

  // Reads the SSE body, calling `onData` with each parsed `data:` payload.
  async function readEvents(resp, onData) {
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      buf += dec.decode(r.value, { stream: true });
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, at);
        buf = buf.slice(at + 2);
        const data = ev.split("\n").filter(function (l) { return l.startsWith("data:"); })
          .map(function (l) { return l.slice(5).trimStart(); }).join("\n");
        if (!data) continue;
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }

  async function send(text) {
    readSettings();
    const c = current() || newConversation();
    if (!c.messages.length) c.title = text.split("\n")[0].slice(0, 60) || "New chat";
    c.messages.push({ role: "user", content: text });
    const answer = { role: "assistant", content: "", stats: null };
    let body;
    try {
      body = requestBody(c);
    } catch (e) {
      answer.error = e.message;
      c.messages.push(answer);
      save();
      renderAll();
      return;
    }
    c.messages.push(answer);
    save();
    renderAll();
    const box = $("messages");
    const node = box.lastElementChild;
    node.classList.add("streaming");
    const controller = new AbortController();
    setBusy({ controller: controller, conversation: c });
    const t0 = performance.now();
    let tFirst = null;
    let chunks = 0;
    let usage = null;
    let pending = false;
    const draw = function () {
      if (pending) return;
      pending = true;
      requestAnimationFrame(function () {
        pending = false;
        fill(node, answer);
        box.scrollTop = box.scrollHeight;
      });
    };
    try {
      const resp = await fetch("/v1/chat/completions", {
        method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
      });
      if (!resp.ok) throw new Error(await errorText(resp));
      await readEvents(resp, function (j) {
        if (j.error) throw new Error(j.error.message || JSON.stringify(j.error));
        if (j.usage) usage = j.usage;
        const ch = j.choices && j.choices[0];
        const piece = ch && ch.delta && ch.delta.content;
        if (piece) {
          if (tFirst === null) tFirst = performance.now();
          chunks++;
          answer.content += piece;
          draw();
        }
      });
    } catch (e) {
      if (e.name === "AbortError") {
        answer.stopped = true;
      } else {
        answer.error = e.message || String(e);
      }
    }
    const tEnd = performance.now();
    const tokens = usage ? usage.completion_tokens : chunks;
    answer.stats = answer.error && !answer.content ? null : {
      tokens: tokens,
      ttft: tFirst === null ? null : tFirst - t0,
      tps: tFirst !== null && tokens > 1 && tEnd > tFirst ? (tokens - 1) / ((tEnd - tFirst) / 1000) : null,
      stopped: !!answer.stopped,
    };
    setBusy(null);
    save();
    node.classList.remove("streaming");
    if (current() === c) fill(node, answer);
    renderList();
    $("input").focus();
  }

  // ---- wiring ----

  function init() {
    showSettings();
    renderAll();
    loadModel();
    $("composer").addEventListener("submit", function (e) {
      e.preventDefault();
      const text = $("input").value.trim();
      if (!text || busy) return;
      $("input").value = "";
      send(text);
    });
    $("input").addEventListener("keydown", function (e) {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $("composer").requestSubmit();
      }
    });
    $("stop").addEventListener("click", function () {
      if (busy) busy.controller.abort();
    });
    $("new-chat").addEventListener("click", function () {
      if (busy) return;
      newConversation();
      renderAll();
      $("input").focus();
    });
    $("settings-toggle").addEventListener("click", function () {
      const s = $("settings");
      s.hidden = !s.hidden;
      $("settings-toggle").setAttribute("aria-expanded", String(!s.hidden));
    });
    ["system", "temperature", "top_p", "max_tokens", "schema"].forEach(function (id) {
      $(id).addEventListener("change", readSettings);
    });
    $("api-key").addEventListener("change", function () {
      readSettings();
      loadModel();
    });
    $("input").focus();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
