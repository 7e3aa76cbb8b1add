// Every page (templates/base.html): the sidebar is a drawer on phones. The toggle
// button says whether it is open (aria-expanded); Esc or a click outside closes it and
// gives the focus back to the toggle.
(function () {
  "use strict";
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
