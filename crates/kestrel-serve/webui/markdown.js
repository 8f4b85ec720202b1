// kestrel's chat page: a small Markdown renderer for the model's answers. It escapes all HTML
// first, so the model's text can never add markup of its own; then renders fenced code,
// headings, lists, quotes, rules, pipe tables, paragraphs, and inline code, bold, italic and
// http(s) links. An unclosed fence (an answer still streaming) renders as code so far.
"use strict";

(function () {
  function esc(s) {
    return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // Inline spans of one escaped line: code first (its content is left alone), then links,
  // bold, italic.
  function inline(text) {
    const parts = text.split(/(`[^`]+`)/);
    return parts.map(function (p, i) {
      if (i % 2 === 1) return "<code>" + esc(p.slice(1, -1)) + "</code>";
      let s = esc(p);
      s = s.replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, function (_, label, url) {
        return '<a href="' + url + '" target="_blank" rel="noopener noreferrer">' + label + "</a>";
      });
      s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
      s = s.replace(/__([^_]+)__/g, "<strong>$1</strong>");
      s = s.replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>");
      s = s.replace(/(^|[^\w_])_([^_\s][^_]*)_(?!\w)/g, "$1<em>$2</em>");
      return s;
    }).join("");
  }

  function tableRow(line, tag) {
    const cells = line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|");
    return "<tr>" + cells.map(function (c) {
      return "<" + tag + ">" + inline(c.trim()) + "</" + tag + ">";
    }).join("") + "</tr>";
  }

  // Block structure of text without fences.
  function blocks(text) {
    const lines = text.split("\n");
    const out = [];
    let para = [];
    let list = null; // {tag, items}
    function flushPara() {
      if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>");
      para = [];
    }
    function flushList() {
      if (list) {
        out.push("<" + list.tag + ">" + list.items.map(function (it) {
          return "<li>" + inline(it) + "</li>";
        }).join("") + "</" + list.tag + ">");
      }
      list = null;
    }
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      let m;
      if (/^\s*$/.test(line)) { flushPara(); flushList(); continue; }
      if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
        flushPara(); flushList();
        const n = m[1].length;
        out.push("<h" + n + ">" + inline(m[2]) + "</h" + n + ">");
        continue;
      }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { flushPara(); flushList(); out.push("<hr>"); continue; }
      if ((m = /^\s*>\s?(.*)$/.exec(line))) {
        flushPara(); flushList();
        out.push("<blockquote>" + inline(m[1]) + "</blockquote>");
        continue;
      }
      if (line.indexOf("|") >= 0 && i + 1 < lines.length && /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/.test(lines[i + 1])) {
        flushPara(); flushList();
        let html = "<table><thead>" + tableRow(line, "th") + "</thead><tbody>";
        i += 2;
        while (i < lines.length && lines[i].indexOf("|") >= 0 && !/^\s*$/.test(lines[i])) {
          html += tableRow(lines[i], "td");
          i++;
        }
        i--;
        out.push(html + "</tbody></table>");
        continue;
      }
      if ((m = /^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/.exec(line))) {
        flushPara();
        const tag = m[1] !== undefined ? "ol" : "ul";
        if (!list || list.tag !== tag) { flushList(); list = { tag: tag, items: [] }; }
        list.items.push(m[2]);
        continue;
      }
      if (list && /^\s{2,}\S/.test(line)) { list.items[list.items.length - 1] += " " + line.trim(); continue; }
      flushList();
      para.push(line);
    }
    flushPara(); flushList();
    return out.join("");
  }

  // The whole answer: fenced code blocks kept verbatim (escaped), the rest as blocks.
  function render(md) {
    const out = [];
    const re = /^```[ \t]*([\w+#.-]*)[^\n]*\n([\s\S]*?)(?:^```[ \t]*$|(?![\s\S]))/gm;
    let last = 0;
    let m;
    while ((m = re.exec(md)) !== null) {
      out.push(blocks(md.slice(last, m.index)));
      const lang = m[1] ? ' class="language-' + esc(m[1]) + '"' : "";
      const code = m[2].replace(/\n$/, "");
      out.push("<pre><code" + lang + ">" + esc(code) + "</code></pre>");
      last = re.lastIndex;
      if (m[0].length === 0) re.lastIndex++;
    }
    out.push(blocks(md.slice(last)));
    return out.join("");
  }

  window.kestrelMarkdown = render;
})();
