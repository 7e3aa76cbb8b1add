// Chat page: send, stream (SSE), stop, regenerate; a "cached answer" label on answers
// the gateway served from its answer caches. Versions, edits, copy: threads.js. A new
// message's answer streams in its POST's response (posted-stream.js); after a page
// load, a branch change or a dropped stream, an EventSource reads the stream URL.
// While streaming, model text is rendered as Markdown and sanitised by
// static/stream-render.js (plain textContent if that is not loaded); on `done` the
// server's sanitised HTML (markdown-it-py + nh3) replaces it, and after a branch
// change the server-rendered thread does. Nothing else is set as HTML.
(function () {
  "use strict";
  const chat = document.getElementById("chat");
  if (!chat) return;
  const thread = document.getElementById("thread");
  const form = document.getElementById("composer");
  const input = document.getElementById("content");
  const sendBtn = document.getElementById("send");
  const stopBtn = document.getElementById("stop");
  const errorBox = document.getElementById("composer-error");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  let active = null; // {source, article, stopUrl}
  let sending = false; // a send/regenerate POST is in flight (guards double Enter)
  let stopAsked = false; // Stop pressed while that POST was in flight: stop its answer
  let sendAfterStop = false; // Enter/Send pressed while a stopped answer winds down

  function setBusy(busy) {
    sendBtn.disabled = busy;
    stopBtn.hidden = !busy;
    // an answer's own Regenerate (threads.js) waits too
    thread.querySelectorAll("button.msg-regenerate").forEach(function (b) { b.disabled = busy; });
  }

  function showError(text) { errorBox.textContent = text || ""; }

  function bubble(role, text) {
    const article = document.createElement("article");
    article.className = "msg msg-" + role;
    const who = document.createElement("div");
    who.className = "msg-role";
    who.textContent = role === "user" ? "You said:" : "The assistant said:"; // read by screen readers only
    const body = document.createElement("div");
    body.className = "msg-body " + (role === "user" ? "plain" : "markdown");
    body.textContent = text || "";
    article.append(who, body);
    if (role === "assistant") {
      const footer = document.createElement("div");
      footer.className = "msg-footer";
      for (const cls of ["msg-state", "msg-meta"]) {
        const span = document.createElement("span");
        span.className = cls;
        footer.append(span);
      }
      article.append(footer);
    }
    thread.append(article);
    if (role === "assistant") pruneContinue(); // an older answer has a reply now
    article.scrollIntoView({block: "end"});
    return article;
  }

  const CACHE_TITLES = {
    exact: "Answered instantly from your earlier answer to the same question",
    semantic: "Answered instantly from your earlier answer to a near-identical question",
  };

  // Mark an answer served from the gateway's answer caches (meta/done `cache`).
  function markCached(article, kind) {
    if (!kind || article.querySelector(".msg-cache")) return;
    const label = document.createElement("span");
    label.className = "msg-cache";
    label.dataset.cache = kind;
    label.title = (CACHE_TITLES[kind] || "Answered from a cached answer") +
      "; no tokens used. Regenerate writes a new answer.";
    label.textContent = "cached answer";
    const footer = article.querySelector(".msg-footer");
    if (footer) footer.prepend(label);
  }

  // The answer was written without the user's memory and documents (no embedding worker).
  function markMemoryUnavailable(article, unavailable) {
    if (!unavailable || article.querySelector(".msg-note")) return;
    const note = document.createElement("span");
    note.className = "msg-note";
    note.dataset.note = "memory-unavailable";
    note.title = "No embedding worker could read your question, so your saved " +
      "memories and documents were not searched for this answer.";
    note.textContent = "answered without memory and documents";
    const footer = article.querySelector(".msg-footer");
    if (footer) footer.prepend(note);
  }

  // Thumbs under an answer that has ended: the page renders them hidden while it
  // streams; an answer started on this page gets them from its feedback URL.
  function showFeedback(article) {
    let box = article.querySelector(".msg-feedback");
    if (!box && article.dataset.feedbackUrl) {
      box = document.createElement("span");
      box.className = "msg-feedback";
      box.dataset.feedbackUrl = article.dataset.feedbackUrl;
      for (const [rating, icon, title] of [["up", "thumbs-up", "Good answer"], ["down", "thumbs-down", "Bad answer"]]) {
        const button = window.SiteUI.iconButton("", icon, title);
        button.dataset.rating = rating;
        button.setAttribute("aria-pressed", "false");
        box.append(button);
      }
      // into the actions row (threads.js moves it there if that row comes later)
      const bar = article.querySelector(".msg-actions") || article.querySelector(".msg-footer");
      if (bar) bar.append(box);
    }
    if (box) box.hidden = false;
  }

  function finish(article, data, failed) {
    const body = article.querySelector(".msg-body");
    const view = views.get(article);
    if (view) {
      view.stop();
      body.dataset.raw = view.text(); // the text as streamed (equals the stored answer)
    }
    hideQueue(article);
    article.removeAttribute("aria-busy");
    if (data.html !== undefined) body.innerHTML = data.html; // sanitised on the server
    article.dataset.status = data.status || (failed ? "error" : "complete");
    article.classList.remove("status-streaming");
    article.classList.add("status-" + article.dataset.status);
    markCached(article, data.cache);
    markMemoryUnavailable(article, data.memory_unavailable);
    if (data.citations && data.citations.length && !article.querySelector(".citations")) {
      const list = document.createElement("ol");
      list.className = "citations";
      list.setAttribute("aria-label", "Sources");
      for (const c of data.citations) {
        const item = document.createElement("li");
        item.value = c.number;
        item.id = "cite-" + data.message_id + "-" + c.number; // target of [n] links
        const link = document.createElement("a");
        link.href = c.url;
        link.textContent = "[" + c.number + "] " + c.title + ", passage " + c.passage;
        item.append(link);
        list.append(item);
      }
      article.insertBefore(list, article.querySelector(".msg-footer"));
    }
    const state = article.querySelector(".msg-state");
    if (failed) state.textContent = data.message || "The answer failed.";
    else if (data.status === "cancelled") state.textContent = "Stopped";
    else if (data.status === "filtered") state.textContent = data.error || "Cut by the content filter";
    if (data.status === "filtered" && article.dataset.messageId && !article.querySelector(".msg-appeal")) {
      state.after(appealButton("/moderation/answers/" + encodeURIComponent(article.dataset.messageId) + "/appeal/"));
    }
    showFeedback(article);
    fillFooter(article, data);
    markCutShort(article, data);
    announceEnd(article, data, failed);
    // threads.js keeps the Markdown source for the copy button, adds code copy buttons
    article.dispatchEvent(new CustomEvent("chat:finished", {bubbles: true, detail: data}));
  }

  // Insert a tool step's block into an answer: `html` is the server's rendering of
  // templates/chat/_tool_step.html (conversations.rendering.tool_step_html: every
  // model and tool text escaped there, as the thread after a reload), the one place
  // besides the server-rendered thread where HTML is set. A block with the same id (a
  // running step, a frame sent again after a reconnect) is replaced, keeping it open
  // if the reader opened it; new blocks go after the others, before the answer text.
  function insertStep(article, html) {
    const holder = document.createElement("div");
    holder.innerHTML = html;
    const block = holder.querySelector("details.tool-step");
    if (!block) return null;
    const old = block.id ? document.getElementById(block.id) : null;
    if (old) {
      block.open = old.open;
      old.replaceWith(block);
      return block;
    }
    let steps = article.querySelector(".tool-steps");
    if (!steps) {
      steps = document.createElement("div");
      steps.className = "tool-steps";
      article.insertBefore(steps, article.querySelector(".msg-body"));
    }
    steps.append(block);
    return block;
  }
  window.ChatTools = {insertStep: insertStep};

  // An answer that called tools ended (its `done` frame, finish "tool_calls"): its
  // text (sanitised on the server) moves above the tool blocks, and the body waits
  // for the next message's text, streamed into the same article.
  function toolRound(article, data) {
    const body = article.querySelector(".msg-body");
    const view = views.get(article);
    if (view) view.stop();
    views.delete(article);
    hideQueue(article);
    let steps = article.querySelector(".tool-steps");
    if (!steps) {
      steps = document.createElement("div");
      steps.className = "tool-steps";
      article.insertBefore(steps, body);
    }
    if (data.content && !steps.querySelector('[data-round="' + data.message_id + '"]')) {
      const interim = document.createElement("div");
      interim.className = "tool-interim markdown";
      interim.dataset.round = data.message_id;
      interim.innerHTML = data.html;
      steps.append(interim);
    }
    body.innerHTML = "";
    delete body.dataset.raw;
  }

  // Model, tokens and time to first token under an answer, from its `done` / `error`
  // frame (the same text as the server renders in _message.html).
  function fillFooter(article, data) {
    const meta = article.querySelector(".msg-meta");
    if (!meta || !data.model) return;
    const n = window.SiteUI.formatNumber;
    let m = data.model;
    if (data.usage && data.usage.completion_tokens) m += " · " + n(data.usage.completion_tokens) + " tokens";
    if (data.ttft_ms !== null && data.ttft_ms !== undefined) m += " · first token " + n(data.ttft_ms) + " ms";
    meta.textContent = m;
  }

  // ---- streaming that reads well (issue 11): renderer, queue, cut short, Esc, live region
  const views = new WeakMap(); // article -> its stream renderer (kept across reconnects)
  const announcer = document.getElementById("answer-status");

  // The Markdown source of an answer so far: the server's <template class=msg-source>
  // (a continued answer streams again after its text), or the text streamed here.
  function sourceText(article) {
    const tpl = article.querySelector("template.msg-source");
    if (tpl && tpl.content.textContent) return tpl.content.textContent;
    return article.querySelector(".msg-body").dataset.raw || "";
  }

  // The renderer of an answer's body: progressive Markdown (stream-render.js), or
  // plain text appended with textContent when that script did not load. It starts
  // with the answer's text so far (a continued answer grows in place).
  function streamView(article) {
    let view = views.get(article);
    if (view) return view;
    const body = article.querySelector(".msg-body");
    const initial = sourceText(article);
    if (window.StreamRender) view = window.StreamRender.create(body, initial);
    else {
      let text = initial;
      body.textContent = initial;
      view = {
        append: function (t) { text += t; body.append(document.createTextNode(t)); },
        text: function () { return text; },
        stop: function () {},
      };
    }
    views.set(article, view);
    return view;
  }

  // "Waiting for a free worker…" while the job is queued (SSE `queue` events: position
  // 1 = next; 0 = a worker is taking it).
  function showQueue(article, position) {
    if (!position) { hideQueue(article); return; }
    let note = article.querySelector(".msg-queue");
    if (!note) {
      note = document.createElement("p");
      note.className = "msg-queue";
      article.insertBefore(note, article.querySelector(".msg-footer"));
    }
    const text = "Waiting for a free worker… position " + position + " in the queue";
    note.dataset.state = "queued";
    if (note.textContent !== text) note.textContent = text;
  }

  // "Reading the conversation…" from the moment a worker takes the job (its `meta`
  // event: the engine starts on the prompt) until the first token replaces it: a long
  // history takes seconds to read before the answer starts.
  function showReading(article) {
    let note = article.querySelector(".msg-queue");
    if (!note) {
      note = document.createElement("p");
      note.className = "msg-queue";
      article.insertBefore(note, article.querySelector(".msg-footer"));
    }
    note.dataset.state = "reading";
    note.textContent = "Reading the conversation…";
  }

  function hideQueue(article) {
    const note = article.querySelector(".msg-queue");
    if (note) note.remove();
  }

  // An answer that hit its token limit says so; it and a stopped answer get a
  // Continue button on the newest answer. The footer reads as the server renders it
  // after a reload (templates/chat/_message.html): notes, state, appeal, "Cut short…",
  // Continue, then the model line last.
  function markCutShort(article, data) {
    const cut = data.finish_reason === "length";
    const text = typeof data.content === "string" ? data.content : sourceText(article);
    const stopped = data.status === "cancelled" && text.trim() !== "";
    const footer = article.querySelector(".msg-footer");
    if ((!cut && !stopped) || !footer) return;
    const meta = footer.querySelector(".msg-meta");
    if (cut && !article.querySelector(".msg-cut")) {
      const note = document.createElement("span");
      note.className = "msg-cut";
      note.textContent = "Cut short — the answer reached its length limit";
      footer.insertBefore(note, meta);
    }
    if (!article.querySelector(".msg-continue")) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "pill msg-continue";
      button.title = "Ask the model to continue this answer";
      const label = document.createElement("span");
      label.textContent = "Continue";
      button.append(window.SiteUI.icon("fast-forward"), label);
      footer.insertBefore(button, meta);
    }
    pruneContinue();
  }

  // Only the newest answer can be continued (the last answer of its branch).
  function pruneContinue() {
    const buttons = thread.querySelectorAll("button.msg-continue");
    const answers = thread.querySelectorAll(".msg-assistant");
    const newest = answers[answers.length - 1];
    buttons.forEach(function (b) { if (!newest || !newest.contains(b)) b.remove(); });
  }

  // Announce a finished answer once to screen readers (the thread itself is not a
  // live region: that would read every token).
  function announceEnd(article, data, failed) {
    if (!announcer) return;
    let text;
    if (failed) text = "The answer failed. " + (data.message || "");
    else if (data.status === "cancelled") text = "Answer stopped.";
    else {
      const body = article.querySelector(".msg-body").textContent.trim().replace(/\s+/g, " ");
      const first = (body.match(/^.{1,200}?[.!?](?=\s|$)/) || [body.slice(0, 200)])[0];
      text = (data.finish_reason === "length" ? "Answer cut short: " : "Answer complete: ") + first;
    }
    announcer.textContent = text;
  }

  // Esc stops the streaming answer, from anywhere on the chat page, unless an editor
  // or a dialog is open (they take Esc themselves: an open <dialog>, or a handler
  // that called preventDefault).
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape" || e.defaultPrevented || e.isComposing || !(active || sending)) return;
    if (document.querySelector("dialog[open]")) return;
    const target = e.target;
    const editing = target && target !== input && target.closest &&
      target.closest("textarea, input:not([type=button]):not([type=submit]), select, [contenteditable=true]");
    if (editing) return;
    e.preventDefault();
    stopBtn.click();
  });

  // Continue a cut-short or stopped answer in place: the same answer streams again,
  // its new text appended to what it shows (conversations turn_continue).
  thread.addEventListener("click", async function (e) {
    const button = e.target.closest("button.msg-continue");
    if (!button || active || sending) return;
    const article = button.closest("article.msg");
    if (!article || !article.dataset.messageId) return;
    showError("");
    sending = true;
    setBusy(true);
    try {
      const url = chat.dataset.sendUrl + encodeURIComponent(article.dataset.messageId) + "/continue/";
      const turn = await post(url);
      const body = article.querySelector(".msg-body");
      body.dataset.raw = sourceText(article);
      views.delete(article); // a new renderer starts from the text so far
      article.querySelectorAll(".msg-cut, .msg-continue").forEach(function (el) { el.remove(); });
      const state = article.querySelector(".msg-state");
      if (state) state.textContent = "";
      const box = article.querySelector(".msg-feedback");
      if (box) box.hidden = true;
      article.className = article.className.replace(/\bstatus-\S+/g, "").trim();
      stream(article, turn.assistant_message.stream_url, turn.assistant_message.stop_url, 0);
    } catch (err) {
      if (err.code === "content_policy_violation") policyNotice(err.message, err.eventId);
      else showError(err.message);
      if (!active) setBusy(false);
    } finally {
      sending = false;
      if (!active) { // no answer to stop (the send failed): nothing waits on one
        stopAsked = false;
        sendAfterStop = false;
      }
    }
  });

  // Ask the server to stop `answer` (the active one); a message sent meanwhile waits
  // for its end (sendAfterStop), unless the stop fails.
  function stopAnswer(answer) {
    answer.stopping = true;
    return post(answer.stopUrl).catch(function (err) {
      answer.stopping = false;
      sendAfterStop = false;
      showError(err.message);
    });
  }

  // Follow an answer: `posted`, the streamed POST's source, or an EventSource on streamUrl.
  function stream(article, streamUrl, stopUrl, attempt, posted) {
    const view = streamView(article);
    article.dataset.status = "streaming";
    article.classList.add("status-streaming");
    article.setAttribute("aria-busy", "true");
    const source = posted || new EventSource(streamUrl);
    let lastId = "";
    let answering = false; // a token arrived: the status line has done its job
    active = {source: source, article: article, stopUrl: stopUrl};
    setBusy(true);
    if (stopAsked) { // Stop came before the answer had a stop URL: send it now
      stopAsked = false;
      stopAnswer(active);
    }
    const end = function () {
      source.close();
      active = null;
      setBusy(false);
      if (sendAfterStop) { // sent while the stopped answer wound down: send it now
        sendAfterStop = false;
        showError("");
        form.requestSubmit();
      }
    };
    source.addEventListener("token", function (e) {
      lastId = e.lastEventId || lastId;
      answering = true;
      hideQueue(article);
      view.append(JSON.parse(e.data).t);
      if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 80) article.scrollIntoView({block: "end"});
    });
    source.addEventListener("meta", function (e) {
      lastId = e.lastEventId || lastId;
      const meta = JSON.parse(e.data);
      hideQueue(article);
      markCached(article, meta.cache);
      if (!meta.cache && !answering) showReading(article); // a worker started on the prompt
    });
    source.addEventListener("queue", function (e) {
      if (!answering) showQueue(article, JSON.parse(e.data).position);
    });
    // a tool step of this answer, running or finished (conversations.sse.tool_step_payload)
    source.addEventListener("tool_step", function (e) {
      lastId = e.lastEventId || lastId;
      hideQueue(article);
      insertStep(article, JSON.parse(e.data).html);
    });
    source.addEventListener("done", function (e) {
      const data = JSON.parse(e.data);
      if (data.finish_reason === "tool_calls") {
        // the model called tools: the turn goes on in this stream (tool_step, then
        // next); its text so far stays above the step's blocks
        toolRound(article, data);
        return;
      }
      finish(article, data, false);
      end();
      // for features in their own files (static/titles.js polls the new title)
      document.dispatchEvent(new CustomEvent("chat:answer-done", {detail: {article: article}}));
    });
    // the tool step ended and the turn's next message is generated: follow its own
    // stream (a reconnect then resumes in the right one)
    source.addEventListener("next", function (e) {
      const data = JSON.parse(e.data);
      source.close();
      article.id = "m-" + data.message_id;
      article.dataset.messageId = data.message_id;
      stream(article, data.stream_url, data.stop_url, 0);
    });
    // the turn ended at a tool step (stopped, or the step limit)
    source.addEventListener("step_end", function (e) {
      const data = JSON.parse(e.data);
      finish(article, {status: data.state === "stopped" ? "cancelled" : "complete"}, false);
      end();
    });
    source.addEventListener("error", function (e) {
      // no data: a connection error; EventSource reconnects with Last-Event-ID by itself.
      if (!e.data) return;
      const data = JSON.parse(e.data);
      // The stream broke (a backing service restarted) but the answer may still be
      // running: follow it again from the last text shown, a few times.
      if (data.code === "stream_interrupted" && (attempt || 0) < 5) {
        source.close();
        const state = article.querySelector(".msg-state");
        if (state) state.textContent = "Connection interrupted, reconnecting…";
        const base = streamUrl.split(/[?&]last_event_id=/)[0];
        const sep = base.indexOf("?") >= 0 ? "&" : "?";
        const url = lastId ? base + sep + "last_event_id=" + encodeURIComponent(lastId) : base;
        setTimeout(function () {
          if (state) state.textContent = "";
          stream(article, url, stopUrl, (attempt || 0) + 1);
        }, 1000 * (data.retry_after_s || 1));
        return;
      }
      finish(article, data, true);
      end();
    });
  }

  async function post(url, data) {
    const response = await fetch(url, {
      method: "POST",
      headers: {"X-CSRFToken": csrf, "Accept": "application/json"},
      body: data || null, // an empty multipart body is a 400 in Django
      credentials: "same-origin",
    });
    return payloadOf(response);
  }

  // Send a new message: {turn, source}. The answer streams in the POST's response
  // (static/posted-stream.js, when that module has loaded): `source` is EventSource-like;
  // otherwise `source` is null and stream() opens the stream URL.
  async function sendTurn(url, data) {
    const posted = window.ChatPostedStream;
    if (posted) return posted.send(url, data, csrf, payloadOf);
    return {turn: await post(url, data), source: null};
  }

  // A JSON response's payload; throws the server's error (message and code) if not ok.
  async function payloadOf(response) {
    let payload = {};
    try { payload = await response.json(); } catch (err) { payload = {}; }
    if (!response.ok) {
      const message = (payload.error && payload.error.message) || ("Request failed (" + response.status + ")");
      const error = new Error(message);
      error.code = payload.error && payload.error.code;
      error.eventId = payload.error && payload.error.moderation_event_id;
      throw error;
    }
    return payload;
  }

  // A message the content policy refused: a notice in the thread (it stays there; the
  // user's text stays in the input box to edit). Text only, never HTML.
  function policyNotice(message, eventId) {
    const notice = document.createElement("article");
    notice.className = "msg msg-notice";
    notice.dataset.code = "content_policy_violation";
    notice.setAttribute("role", "alert");
    const who = document.createElement("div");
    who.className = "msg-role";
    who.textContent = "Message not sent";
    const body = document.createElement("div");
    body.className = "msg-body plain";
    body.textContent = message;
    notice.append(who, body);
    if (eventId) notice.append(appealButton("/moderation/events/" + encodeURIComponent(eventId) + "/appeal/"));
    thread.append(notice);
    notice.scrollIntoView({block: "end"});
    return notice;
  }

  // "This was a mistake": appeal a moderation decision (a refused message, a cut
  // answer); the server answers with a confirmation shown in place of the button.
  function appealButton(url) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link msg-appeal";
    button.dataset.appealUrl = url;
    button.textContent = "This was a mistake";
    return button;
  }
  document.addEventListener("click", async function (e) {
    const button = e.target.closest && e.target.closest("button.msg-appeal");
    if (!button) return;
    button.disabled = true;
    try {
      const done = await post(button.dataset.appealUrl);
      const note = document.createElement("span");
      note.className = "msg-appealed";
      note.setAttribute("role", "status");
      note.textContent = done.appeal.message;
      button.replaceWith(note);
    } catch (err) {
      button.disabled = false;
      showError(err.message);
    }
  });

  // The title and the actions menu (rename, export, delete) of a conversation created
  // on this page: a copy of chat.html's #chat-menu-template (templates/chat/_chat_menu.html,
  // which the server renders on later page loads) with this conversation's URLs.
  function conversationControls(conversation) {
    const tpl = document.getElementById("chat-menu-template");
    const controls = tpl.content.cloneNode(true);
    controls.querySelectorAll("[data-path]").forEach(function (el) {
      el.setAttribute(el.tagName === "FORM" ? "action" : "href", conversation.url + el.dataset.path);
    });
    controls.querySelector(".chat-title").textContent = conversation.title;
    controls.querySelector("input[name=title]").value = conversation.title;
    return controls;
  }

  // The current branch as the server renders it (versions switchers included), then
  // follow its streaming answer: after a regenerate or an edit (issue 11).
  async function showThread(url) {
    const response = await fetch(url, {headers: {"Accept": "text/html"}, credentials: "same-origin"});
    if (!response.ok) throw new Error("Could not load the conversation (" + response.status + ")");
    delete thread.dataset.viewLeaf; // the stored current branch again
    thread.innerHTML = await response.text(); // server-rendered and sanitised, like the page
    thread.dispatchEvent(new CustomEvent("chat:thread", {bubbles: true}));
    const streaming = thread.querySelector("article[data-status=streaming]");
    if (streaming) stream(streaming, streaming.dataset.streamUrl, streaming.dataset.stopUrl);
  }

  // POST a turn that changes the branch (regenerate, edit) and show the new branch.
  async function branchTurn(url, data) {
    if (active || sending) { showError(BUSY); return false; }
    showError("");
    sending = true;
    setBusy(true);
    try {
      const turn = await post(url, data);
      await showThread(turn.thread_url);
      return true;
    } catch (err) {
      if (err.code === "content_policy_violation") policyNotice(err.message, err.eventId);
      else showError(err.message);
      if (!active) setBusy(false);
      return false;
    } finally {
      sending = false;
      if (!active) stopAsked = false;
    }
  }
  const BUSY = "An answer is still being written in this conversation. Stop it or wait for it to finish.";
  window.ChatPage = {
    post: post,
    showError: showError,
    showThread: showThread,
    branchTurn: branchTurn,
    busy: function () { return Boolean(active || sending); },
    BUSY: BUSY,
  };

  // The sidebar's list (templates/_sidebar_conversations.html): a new chat goes first
  // under "Today" (the group is made when the list has none), marked as the page's.
  function listAdd(conversation) {
    const list = document.getElementById("conversation-list");
    if (!list) return;
    list.querySelectorAll("a.conv-link.active").forEach(function (a) {
      a.classList.remove("active");
      a.removeAttribute("aria-current");
    });
    let group = list.querySelector("section.conv-group");
    const title = group && group.querySelector(".conv-group-title");
    if (!title || title.textContent.trim() !== "Today") {
      const today = document.createElement("section");
      today.className = "conv-group";
      const heading = document.createElement("h2");
      heading.className = "conv-group-title";
      heading.textContent = "Today";
      today.appendChild(heading);
      list.prepend(today);
      group = today;
    }
    const link = document.createElement("a");
    link.className = "conv-link active";
    link.setAttribute("aria-current", "page");
    link.href = conversation.url;
    link.textContent = conversation.title;
    group.querySelector(".conv-group-title").after(link);
    const empty = document.getElementById("no-conversations");
    if (empty) empty.remove();
  }

  // The path of what the page shows. A Back/Forward that lands on another path within
  // this document (an entry made before a replaceState, a hash entry) reloads, so that
  // the address and the page never disagree and a send never goes into a conversation
  // the address does not show.
  let shownPath = location.pathname;
  window.addEventListener("popstate", function () {
    if (location.pathname !== shownPath) location.reload();
  });

  function startTurn(turn, source) {
    if (turn.conversation.created) {
      // replaceState, not pushState: the page now shows the conversation, and Back
      // leaves the chat (as ChatGPT does) instead of going to "/" over the same page
      history.replaceState(history.state, "", turn.conversation.url);
      shownPath = location.pathname;
      const heading = document.querySelector(".chat-header h1");
      if (heading) heading.replaceWith(conversationControls(turn.conversation));
      document.title = turn.conversation.title + " · Chat";
      chat.dataset.sendUrl = turn.conversation.url + "messages/";
      chat.dataset.regenerateUrl = turn.conversation.url + "regenerate/";
      listAdd(turn.conversation);
    }
    const article = bubble("assistant", "");
    pruneContinue();
    article.id = "m-" + turn.assistant_message.id;
    article.dataset.messageId = turn.assistant_message.id;
    article.dataset.regenerateUrl = turn.assistant_message.regenerate_url;
    article.dataset.feedbackUrl = turn.assistant_message.feedback_url;
    stream(article, turn.assistant_message.stream_url, turn.assistant_message.stop_url, 0, source);
  }

  form.addEventListener("submit", async function (e) {
    e.preventDefault();
    showError("");
    const text = input.value;
    if (!text.trim()) { showError("Your message is empty. Type something to send."); return; }
    // Stop pressed, its answer not ended yet (or not even started: the send's
    // POST still out): this message goes once the stop takes effect
    if ((active && active.stopping) || (sending && stopAsked)) {
      sendAfterStop = true;
      showError("Sending once the answer has stopped…");
      return;
    }
    if (active || sending) return;
    sending = true;
    setBusy(true);
    try {
      const data = new FormData(form);
      // a branch shown for viewing (search.js): the message continues it, so it
      // becomes the conversation's current branch
      if (thread.dataset.viewLeaf) data.set("after", thread.dataset.viewLeaf);
      const sent = await sendTurn(chat.dataset.sendUrl, data);
      delete thread.dataset.viewLeaf;
      const turn = sent.turn;
      const asked = bubble("user", text);
      asked.id = "m-" + turn.user_message.id;
      asked.dataset.messageId = turn.user_message.id;
      asked.dataset.editUrl = turn.user_message.edit_url;
      // keep what was typed while the message was being sent (the box held the sent text)
      input.value = input.value.startsWith(text) ? input.value.slice(text.length) : input.value;
      startTurn(turn, sent.source);
      thread.dataset.threadUrl = turn.thread_url;
      thread.dispatchEvent(new CustomEvent("chat:turn", {bubbles: true, detail: turn}));
    } catch (err) {
      if (err.code === "content_policy_violation") policyNotice(err.message, err.eventId);
      else showError(err.message);
      if (!active) setBusy(false);
      input.focus();
    } finally {
      sending = false;
      if (!active) { // no answer to stop (the send failed): nothing waits on one
        stopAsked = false;
        sendAfterStop = false;
      }
    }
  });

  input.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
  });

  // The box stops at the server's limit (maxlength, CHAT_MAX_MESSAGE_CHARS): say so, or
  // a long paste is cut at the limit without a word.
  const limitNote = "This message is at the limit of " + (input.maxLength || 0).toLocaleString("en") +
    " characters: anything typed or pasted past it was not added. Split longer text into several messages.";
  input.addEventListener("input", function () {
    if (input.maxLength > 0 && input.value.length >= input.maxLength) showError(limitNote);
    else if (errorBox.textContent === limitNote) showError("");
  });

  stopBtn.addEventListener("click", async function (e) {
    // Stop takes Send's place: a double-click on Send lands its second click here
    // (the browser counts it as the pair's second: detail 2); that is no Stop.
    if (e.detail >= 2) return;
    if (!active) { stopAsked = sending; return; }
    await stopAnswer(active);
  });

  // Thumbs up/down under a finished answer (a thumbs down also opens the reason form:
  // threads.js). A second click on the same thumb keeps it: use the other to change.
  thread.addEventListener("click", async function (e) {
    const button = e.target.closest(".msg-feedback button[data-rating]");
    if (!button) return;
    const box = button.closest(".msg-feedback");
    const data = new FormData();
    data.append("rating", button.dataset.rating);
    try {
      await post(box.dataset.feedbackUrl, data);
      box.querySelectorAll("button").forEach(function (b) {
        b.setAttribute("aria-pressed", b === button ? "true" : "false");
      });
    } catch (err) { showError(err.message); }
  });

  thread.scrollTop = thread.scrollHeight; // open a conversation at its newest message
  pruneContinue();

  // Resume an answer that was still streaming when the page loaded (reload, other tab).
  const pending = thread.querySelector("article[data-status=streaming]");
  if (pending) stream(pending, pending.dataset.streamUrl, pending.dataset.stopUrl);
})();
