// Build static/vendor/lucide-sprite.svg from the pinned lucide-static package: one
// <symbol id="NAME"> per icon the site uses (the list below; templates reference them
// as <use href=".../lucide-sprite.svg#NAME">, static/icons.js builds the same).
// Run by `make vendor` after `npm ci`. Stroke, fill and size come from CSS (.icon in
// static/site.css), so the symbols carry only their geometry.
import { readFileSync, writeFileSync } from "node:fs";

export const ICONS = [
  "arrow-down", "arrow-left", "arrow-up", "brain", "check", "chevron-left", "chevron-right",
  "circle-alert", "copy", "download", "ellipsis", "fast-forward", "file-text", "gauge", "info",
  "key-round", "lock", "log-out", "menu", "message-square", "moon", "palette", "panel-left",
  "pencil", "refresh-cw", "search", "settings", "sliders-horizontal", "sparkles", "square",
  "square-pen", "sun", "thumbs-down", "thumbs-up", "trash-2", "triangle-alert", "upload", "user",
  "wrench", "x",
];

const dir = "node_modules/lucide-static/icons/";
const version = JSON.parse(readFileSync("node_modules/lucide-static/package.json", "utf8")).version;
const symbols = ICONS.map((name) => {
  const svg = readFileSync(dir + name + ".svg", "utf8");
  const inner = svg.slice(svg.indexOf(">", svg.indexOf("<svg")) + 1, svg.lastIndexOf("</svg>")).trim()
    .split("\n").map((line) => line.trim()).join("");
  return `<symbol id="${name}" viewBox="0 0 24 24">${inner}</symbol>`;
});
writeFileSync("static/vendor/lucide-sprite.svg",
  `<!-- lucide-static ${version}, ISC licence (static/vendor/lucide.LICENSE); built by scripts/icon-sprite.mjs -->\n` +
  `<svg xmlns="http://www.w3.org/2000/svg">\n${symbols.join("\n")}\n</svg>\n`);
