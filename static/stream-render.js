// Progressive Markdown for a streaming answer (issue 11, "Streaming that reads well").
// The text streamed so far is rendered with the vendored markdown-it, set up like the
// server (conversations/rendering.py: CommonMark + tables + strikethrough, no raw
// HTML, no linkify, images become links, table alignment is a class because the CSP
// refuses style attributes), then sanitised with DOMPurify using the server's
// allow-lists before it enters the page. This is only a preview: on `done` chat.js
// swaps in the server's sanitised HTML, the stored truth.
//
// Cost: at most one render per animation frame (deltas are coalesced), and fewer when
// renders get slow. Top-level blocks before the last one are final once the last
// block's first line is complete (a new block cannot change how an earlier, closed one
// parses, except link reference definitions, which the server's HTML fixes on `done`):
// they are rendered once and kept, so a frame re-parses and re-renders only the live
// tail, usually one paragraph, not the whole answer.
(function () {
  "use strict";
  if (typeof window.markdownit !== "function" || typeof window.DOMPurify !== "function") {
    window.StreamRender = null; // chat.js falls back to plain text
    return;
  }

  const md = window.markdownit("commonmark", {html: false, linkify: false, typographer: false});
  md.enable(["table", "strikethrough"]);
  const escapeHtml = md.utils.escapeHtml;

  // An image is a link to it, its text the alt text (or the URL); inside a link only
  // the text (links do not nest). Same rule as rendering._image_as_link.
  md.renderer.rules.image = function (tokens, idx, options, env, self) {
    const token = tokens[idx];
    const src = token.attrGet("src") || "";
    const text = self.renderInlineAsText(token.children || [], options, env) || src;
    let depth = 0;
    for (let i = 0; i < idx; i++) {
      if (tokens[i].type === "link_open") depth++;
      else if (tokens[i].type === "link_close") depth--;
    }
    if (depth > 0) return escapeHtml(text);
    const title = token.attrGet("title");
    const titleAttr = title ? ' title="' + escapeHtml(title) + '"' : "";
    return '<a href="' + escapeHtml(src) + '"' + titleAttr + ">" + escapeHtml(text) + "</a>";
  };

  // style="text-align:X" on table cells becomes class="align-X" (rendering.py).
  md.core.ruler.push("table_align_as_class", function (state) {
    for (const token of state.tokens) {
      if (token.type !== "th_open" && token.type !== "td_open") continue;
      const style = token.attrGet("style") || "";
      if (!style) continue;
      token.attrs = token.attrs.filter(function (a) { return a[0] !== "style"; });
      if (style.indexOf("text-align:") === 0) token.attrSet("class", "align-" + style.slice(11));
    }
  });

  // The server's allow-lists (rendering.ALLOWED_TAGS / ALLOWED_ATTRIBUTES), on an
  // instance of our own so the hooks touch no other DOMPurify user.
  const PER_TAG = {
    a: ["href", "title"], code: ["class"], div: ["class"], span: ["class"],
    pre: ["class"], th: ["class"], td: ["class"], ol: ["start"],
  };
  const TAGS = ["p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody",
    "tr", "th", "td", "div", "span"];
  const purify = window.DOMPurify(window);
  purify.addHook("uponSanitizeAttribute", function (node, data) {
    const allowed = PER_TAG[node.nodeName.toLowerCase()];
    if (!allowed || allowed.indexOf(data.attrName) < 0) data.keepAttr = false;
  });
  purify.addHook("afterSanitizeAttributes", function (node) {
    if (node.nodeName === "A") node.setAttribute("rel", "noopener noreferrer nofollow");
  });
  const CONFIG = {
    ALLOWED_TAGS: TAGS,
    ALLOWED_ATTR: ["href", "title", "class", "start"],
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    // http(s) and mailto links, or relative ones (nh3's url_schemes on the server)
    ALLOWED_URI_REGEXP: /^(?:(?:https?|mailto):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
    RETURN_DOM_FRAGMENT: true,
  };

  function sanitized(html) { return purify.sanitize(html, CONFIG); }

  // Offsets (characters) where each line of `text` starts, with markdown-it's own
  // line breaks (\r\n, \r, \n), so they match its token maps.
  function lineStarts(text) {
    const starts = [0];
    const re = /\r\n?|\n/g;
    let m;
    while ((m = re.exec(text)) !== null) starts.push(m.index + m[0].length);
    return starts;
  }

  // A renderer for one answer body, starting from `initial` (the text so far of an
  // answer that is continued, shown at once). `append(delta)` adds streamed text;
  // `text()` is all of it (exactly the stored answer once it ends); `stop()`
  // ends the preview (chat.js then replaces the body with the server's HTML).
  function create(body, initial) {
    let text = initial || "";
    let frozenChars = 0; // characters of `text` rendered for good
    let live = []; // the nodes of the live tail
    let scheduled = false;
    let stopped = false;
    let lastAt = 0;
    let lastCost = 0;

    body.textContent = "";
    body.classList.add("md-live");

    function render() {
      const started = performance.now();
      const tail = text.slice(frozenChars);
      const env = {};
      const tokens = md.parse(tail, env);
      let last = -1;
      let blocks = 0;
      for (let i = 0; i < tokens.length; i++) {
        if (tokens[i].level === 0 && tokens[i].nesting !== -1) { last = i; blocks++; }
      }
      for (const node of live) node.remove();
      let liveTokens = tokens;
      if (blocks >= 2 && tokens[last].map) {
        const line = tokens[last].map[0];
        const starts = lineStarts(tail);
        if (line + 1 < starts.length) { // the live block's first line is complete
          body.append(sanitized(md.renderer.render(tokens.slice(0, last), md.options, env)));
          frozenChars += starts[line];
          liveTokens = tokens.slice(last);
        }
      }
      const fragment = sanitized(md.renderer.render(liveTokens, md.options, env));
      live = Array.from(fragment.childNodes);
      body.append(fragment);
      lastAt = performance.now();
      lastCost = lastAt - started;
    }

    function frame() {
      scheduled = false;
      if (stopped) return;
      // a slow render (a long live block) waits longer: at most ~20% of the time
      if (performance.now() - lastAt < Math.min(lastCost * 4, 250)) { schedule(); return; }
      render();
    }

    function schedule() {
      if (scheduled || stopped) return;
      scheduled = true;
      window.requestAnimationFrame(frame);
    }

    if (text) schedule();

    return {
      append: function (delta) { text += delta; schedule(); },
      text: function () { return text; },
      stop: function () { stopped = true; body.classList.remove("md-live"); },
    };
  }

  window.StreamRender = {create: create};
})();
