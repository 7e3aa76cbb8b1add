// Every page (templates/base.html): the sidebar drawer on phones, the theme toggle,
// menus, numbers in the reader's locale, and window.SiteUI (icons for other scripts).
(function () {
  "use strict";
  const root = document.documentElement;

  // ---- icons: <svg><use href="sprite#name"> from the vendored Lucide sprite
  // (static/vendor/lucide-sprite.svg, its URL in <html data-icons>)
  const SVG = "http://www.w3.org/2000/svg";
  function icon(name) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "icon");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("focusable", "false");
    const use = document.createElementNS(SVG, "use");
    use.setAttribute("href", (root.dataset.icons || "") + "#" + name);
    svg.append(use);
    return svg;
  }
  function setIcon(el, name) {
    const use = el.querySelector("svg.icon use");
    if (use) use.setAttribute("href", (root.dataset.icons || "") + "#" + name);
  }
  function iconOf(el) {
    const use = el.querySelector("svg.icon use");
    return use ? use.getAttribute("href").split("#").pop() : "";
  }
  // A button with an icon, an accessible name and a tooltip (data-tip, site.css);
  // `text` adds a visible label beside the icon.
  function iconButton(cls, name, label, text) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = ("icon-btn " + (cls || "")).trim();
    button.setAttribute("aria-label", label);
    button.dataset.tip = label;
    button.append(icon(name));
    if (text) {
      const span = document.createElement("span");
      span.className = "btn-label";
      span.textContent = text;
      button.append(span);
      button.classList.add("with-label");
    }
    return button;
  }

  // ---- numbers: <data class="num" value="N"> (the `num` filter) in the reader's locale
  const numbers = new Intl.NumberFormat(navigator.language || undefined);
  function formatNumber(n) { return numbers.format(Number(n)); }
  function formatAll(node) {
    if (!node.querySelectorAll) return;
    const found = node.matches && node.matches("data.num") ? [node] : node.querySelectorAll("data.num");
    found.forEach(function (el) {
      const text = formatNumber(el.value);
      if (el.textContent !== text) el.textContent = text;
    });
  }
  formatAll(document);
  // parts of the page fetched later (a thread, the quota panel) are formatted as they come
  new MutationObserver(function (records) {
    for (const r of records) r.addedNodes.forEach(formatAll);
  }).observe(document.body, {childList: true, subtree: true});

  window.SiteUI = {icon: icon, iconButton: iconButton, setIcon: setIcon, iconOf: iconOf, formatNumber: formatNumber};

  // ---- theme: <html data-theme> is the stored choice (system, light, dark); the
  // toggle flips the theme in effect and stores it (POST /settings/theme/)
  const themeForm = document.getElementById("theme-form");
  const dark = window.matchMedia("(prefers-color-scheme: dark)");
  function effectiveTheme() {
    const chosen = root.dataset.theme;
    if (chosen === "light" || chosen === "dark") return chosen;
    return dark.matches ? "dark" : "light";
  }
  function labelToggle() {
    const button = document.getElementById("theme-toggle");
    if (!button) return;
    const next = effectiveTheme() === "dark" ? "light" : "dark";
    button.value = next;
    button.setAttribute("aria-label", "Switch to " + next + " theme");
    button.dataset.tip = "Switch to " + next + " theme";
  }
  labelToggle();
  dark.addEventListener("change", labelToggle);
  if (themeForm) {
    themeForm.addEventListener("submit", async function (e) {
      e.preventDefault();
      const next = effectiveTheme() === "dark" ? "light" : "dark";
      root.dataset.theme = next;
      labelToggle();
      const data = new FormData(themeForm);
      data.set("theme", next);
      try {
        await fetch(themeForm.action, {
          method: "POST", body: data, credentials: "same-origin",
          headers: {"Accept": "application/json", "X-CSRFToken": data.get("csrfmiddlewaretoken")},
        });
      } catch (err) {
        // offline: the page keeps the theme until the next load
      }
    });
  }

  // ---- menus: a button with aria-expanded and aria-controls opens its panel; Escape,
  // a click outside or choosing an item closes it. Delegated: the chat page builds
  // its header menu after the first message.
  function openMenus() { return document.querySelectorAll(".menu-button[aria-expanded=true]"); }
  function setMenu(button, open, focus) {
    const panel = document.getElementById(button.getAttribute("aria-controls"));
    if (!panel) return;
    button.setAttribute("aria-expanded", open ? "true" : "false");
    panel.hidden = !open;
    if (open) {
      const first = panel.querySelector("a, button, input:not([type=hidden]), select, textarea");
      // a text field first (the chat menu's Rename) takes the focus on a click too,
      // its text selected, so typing replaces the title rather than landing elsewhere
      const field = first && first.matches("input:not([type]), input[type=text], textarea");
      if (first && (focus || field)) first.focus();
      if (field) first.select();
    } else if (focus) {
      button.focus();
    }
  }
  document.addEventListener("click", function (e) {
    const button = e.target.closest(".menu-button");
    openMenus().forEach(function (b) {
      const panel = document.getElementById(b.getAttribute("aria-controls"));
      if (b !== button && !(panel && panel.contains(e.target) && !e.target.closest("a"))) setMenu(b, false, false);
    });
    if (button) setMenu(button, button.getAttribute("aria-expanded") !== "true", e.detail === 0);
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    const open = openMenus();
    if (!open.length) return;
    e.preventDefault(); // the chat page's Esc (stop the answer) waits for the next press
    open.forEach(function (b) { setMenu(b, false, true); });
  });
  // arrow keys move between a menu's items
  document.addEventListener("keydown", function (e) {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
    const panel = e.target.closest && e.target.closest(".menu");
    if (!panel || e.target.tagName === "TEXTAREA") return;
    const items = Array.from(panel.querySelectorAll("a, button, input:not([type=hidden])"));
    const i = items.indexOf(e.target);
    if (i < 0) return;
    e.preventDefault();
    items[(i + (e.key === "ArrowDown" ? 1 : items.length - 1)) % items.length].focus();
  });

  // ---- the sidebar is a drawer on phones. The toggle button says whether it is open
  // (aria-expanded); Esc or a click outside closes it and gives the focus back.
  const toggle = document.getElementById("sidebar-toggle");
  const sidebar = document.getElementById("sidebar");
  if (!toggle || !sidebar) return;

  function setOpen(open, { focus = false } = {}) {
    sidebar.classList.toggle("open", open);
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
    if (open && focus) {
      const first = sidebar.querySelector("a, button, input, select, textarea");
      // the drawer becomes visible after its transition starts; focus once it can
      if (first) requestAnimationFrame(() => first.focus());
    } else if (!open && focus) {
      toggle.focus();
    }
  }

  toggle.addEventListener("click", () => {
    setOpen(!sidebar.classList.contains("open"), { focus: true });
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && sidebar.classList.contains("open")) {
      setOpen(false, { focus: true });
    }
  });
  document.addEventListener("click", (event) => {
    if (!sidebar.classList.contains("open")) return;
    if (sidebar.contains(event.target) || toggle.contains(event.target)) return;
    setOpen(false);
  });
})();
