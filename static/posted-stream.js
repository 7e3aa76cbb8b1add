// The chat's streamed POST (issue 13): a new message's answer streams in the response
// of the POST that sends it (Accept: text/event-stream), so its first text needs no
// second request. The body's first frame, `event: turn`, is the JSON the page would
// otherwise get; then come the frames of the stream URL (meta, token, queue, done,
// error). SSE is parsed by eventsource-parser (npm, vendored).
//
// chat.js calls window.ChatPostedStream.send when this module has loaded, and sends
// the plain JSON POST (then an EventSource) when it has not.
import {createParser} from "./vendor/eventsource-parser/parse.js";

// An EventSource-like source over a streamed POST's body: addEventListener(type, fn)
// gets {data, lastEventId} per frame, close() ends it. When the body breaks off before
// the answer's `done` or `error` (a dropped connection, a restarted web process), it
// goes on with a real EventSource on the stream URL from the last event id, as a
// dropped EventSource reconnects by itself; the listeners move over. Frames that come
// before the listeners (the turn's first token often shares a read with the `turn`
// frame) wait for them: they are handed out once the caller has added its listeners.
function postedSource(body, controller) {
  const listeners = {};
  let waiting = []; // frames read before any listener was added; null once handed out
  let lastId = "";
  let streamUrl = "";
  let closed = false;
  let ended = false;
  let fallback = null;
  let turnReady, turnFailed;
  const turn = new Promise(function (resolve, reject) { turnReady = resolve; turnFailed = reject; });

  function emit(type, data, id) {
    if (id) lastId = id;
    if (type === "turn") {
      const payload = JSON.parse(data);
      streamUrl = payload.assistant_message.stream_url;
      turnReady(payload);
      return;
    }
    if (type === "done" || type === "error") ended = true;
    const event = {type: type, data: data, lastEventId: id || lastId};
    if (waiting) waiting.push(event);
    else dispatch(event);
  }

  function dispatch(event) {
    (listeners[event.type] || []).forEach(function (fn) { fn(event); });
  }

  const parser = createParser({onEvent: function (e) { emit(e.event || "message", e.data, e.id); }});

  (async function pump() {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const chunk = await reader.read();
        if (chunk.done) break;
        parser.feed(chunk.value);
      }
    } catch (err) {
      // a dropped connection, or close() aborted the request
    }
    if (closed || ended) return;
    if (!streamUrl) {
      turnFailed(new Error("The connection dropped before the answer started. Reload the page to see whether your message was sent."));
      return;
    }
    const sep = streamUrl.indexOf("?") >= 0 ? "&" : "?";
    fallback = new EventSource(lastId ? streamUrl + sep + "last_event_id=" + encodeURIComponent(lastId) : streamUrl);
    Object.keys(listeners).forEach(function (type) {
      listeners[type].forEach(function (fn) { fallback.addEventListener(type, fn); });
    });
  })();

  return {
    turn: turn,
    addEventListener: function (type, fn) {
      (listeners[type] = listeners[type] || []).push(fn);
      if (fallback) fallback.addEventListener(type, fn);
      if (waiting && !waiting.scheduled) {
        // after the caller's other addEventListener calls (same task)
        waiting.scheduled = true;
        queueMicrotask(function () {
          const early = waiting;
          waiting = null;
          early.forEach(dispatch);
        });
      }
    },
    close: function () {
      closed = true;
      controller.abort();
      if (fallback) fallback.close();
    },
  };
}

// POST a message; resolve to {turn, source}: `source` follows the answer (null when
// the server answered with JSON: then the caller opens the stream URL itself).
// `payloadOf(response)` reads a JSON response, throwing the server's error.
async function send(url, data, csrf, payloadOf) {
  const controller = new AbortController();
  const response = await fetch(url, {
    method: "POST",
    headers: {"X-CSRFToken": csrf, "Accept": "text/event-stream, application/json"},
    body: data || null,
    credentials: "same-origin",
    signal: controller.signal,
  });
  const type = response.headers.get("Content-Type") || "";
  if (!response.ok || !response.body || !type.startsWith("text/event-stream")) {
    return {turn: await payloadOf(response), source: null};
  }
  const source = postedSource(response.body, controller);
  return {turn: await source.turn, source: source};
}

window.ChatPostedStream = {send: send};
