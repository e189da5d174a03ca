"""Scraped articles (HTML or plain text) -> clean, sectioned supporting documents.

Site furniture goes (navigation, breadcrumbs, author/date lines, login prompts, "related projects" and
recommendation lists, footers); the title and sections stay; headings such as 问题现象 / 根本原因 / 解决方案 /
Symptoms / Causes / Solutions are mapped to case parts. An article that is mostly boilerplate is reported as
empty, not ingested as noise.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from app.kb import Problem
from app.lang import detect_lang
from ingest.chunk import MAX_CHARS, Unit

ARTICLE_SUFFIXES = (".txt", ".html", ".htm")
MIN_CONTENT_CHARS = 200

# Lines from which the rest of the page is site furniture.
_END_MARKERS = re.compile(
    r"^(登录后查看全文|热门项目推荐|相关项目推荐|相关推荐|相关文章|推荐阅读|项目优选|猜你喜欢|评论|发表评论|"
    r"related (posts|articles|projects)|you may also like|recommended( for you)?|sign in to (read|continue|view)|"
    r"log in to (read|continue)|comments?|share this( article)?|about the author)\s*[:：]?$",
    re.I,
)
_JUNK_LINE = re.compile(
    r"^(首页|home|menu|导航|登录|注册|sign in|log in|sign up|subscribe|收起|展开|分享|点赞|收藏|举报|返回顶部|"
    r"skip to (main )?content|toggle navigation|search|搜索|上一篇.*|下一篇.*|previous( post)?|next( post)?|-|—|·|\||/)$",
    re.I,
)
_BREADCRUMB = re.compile(r"^(/|›|»|>)\s*\S|^\S+\s*(/|›|»|>)\s*\S+\s*(/|›|»|>)")
_AUTHOR_DATE = re.compile(
    r"^\d{4}[-/.年]\d{1,2}[-/.月]\d{1,2}日?(\s+\d{1,2}:\d{2}(:\d{2})?)?\s*(作者|author|by)?\s*[:：]?.{0,40}$|"
    r"^(作者|author|posted by|written by|by)\s*[:：]?\s*[\w .\-·]{1,40}(\s+\d+\s*(views|阅读|次阅读))?$|"
    r"^\d+\s*(views|阅读|次阅读|likes|赞)$",
    re.I,
)
_NUMERIC = re.compile(r"^[\d.,\s]+[kKmM万]?$")
# a "project card" of a recommendation list: name + blurb + language + star/fork counts glued together
_CARD = re.compile(r"(暂无简介|(Python|Java|C\+\+|C|Go|Rust|Jinja|Kotlin|Dart|Vue|JavaScript|TypeScript|Less|Shell|Cangjie|Dockerfile|HTML|Swift)\d{1,3})$")
_LANG_ONLY = re.compile(r"^(Python|Java|C\+\+|C|Go|Rust|Jinja|Kotlin|Dart|Vue|JavaScript|TypeScript|Less|Shell|Cangjie|Dockerfile|HTML|Swift)$")

PARTS = {
    "symptoms": re.compile(r"问题现象|现象描述|问题描述|问题背景|现象|背景|symptoms?|the problem|problem( description)?|understanding the problem|what happens|observed", re.I),
    "causes": re.compile(r"根本原因|问题根源|原因分析|根源分析|问题排查|排查过程|技术分析|原因|root cause|causes?|why|analysis|potential causes|investigation", re.I),
    "fixes": re.compile(r"解决方案|解决方法|解决办法|修复|最佳实践|建议|solutions?|fix(es)?|how to fix|resolution|workaround|recommendations?|best practices", re.I),
}


@dataclass
class Section:
    heading: str
    part: str  # symptoms | causes | fixes | other
    text: str


@dataclass
class Article:
    id: str
    title: str
    lang: str
    source: str
    sections: list[Section] = field(default_factory=list)
    path: str = ""

    def card(self) -> dict:
        return {"id": self.id, "title": self.title, "lang": self.lang, "source": self.source, "path": self.path,
                "sections": [s.__dict__ for s in self.sections]}


class _HTMLText(HTMLParser):
    """HTML -> lines, dropping scripts, styles and page chrome (nav/header/footer/aside and their look-alikes)."""

    _DROP_TAGS = {"script", "style", "nav", "header", "footer", "aside", "form", "noscript", "svg", "button", "iframe"}
    _DROP_ATTR = re.compile(r"nav|menu|footer|sidebar|side-bar|related|recommend|comment|login|breadcrumb|share|advert|\bads?\b|cookie|banner|toolbar", re.I)
    _BLOCK = {"p", "div", "li", "pre", "br", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "blockquote", "ul", "ol", "table", "title"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.buf: list[str] = []
        self.skip = 0
        self.stack: list[tuple[str, bool]] = []
        self.title = ""
        self._in_title = False
        self._heading = False

    def _flush(self) -> None:
        text = re.sub(r"\s+", " ", "".join(self.buf)).strip()
        if text:
            self.lines.append(("## " + text) if self._heading else text)
        self.buf = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        drop = tag in self._DROP_TAGS or bool(self._DROP_ATTR.search(f"{a.get('class', '')} {a.get('id', '')} {a.get('role', '')}"))
        if tag in self._BLOCK:
            self._flush()
        if tag in ("br", "img", "hr", "meta", "link", "input"):
            return
        self.stack.append((tag, drop))
        if drop:
            self.skip += 1
        if tag == "title":
            self._in_title = True
        if tag in ("h1", "h2", "h3", "h4"):
            self._heading = True

    def handle_endtag(self, tag):
        if tag in self._BLOCK:
            self._flush()
        if tag in ("h1", "h2", "h3", "h4"):
            self._heading = False
        if tag == "title":
            self._in_title = False
        while self.stack:
            t, drop = self.stack.pop()
            if drop:
                self.skip -= 1
            if t == tag:
                break

    def handle_data(self, data):
        if self._in_title:
            self.title += data
            return
        if self.skip <= 0:
            self.buf.append(data)


def html_to_lines(html: str) -> tuple[str, list[str]]:
    p = _HTMLText()
    p.feed(html)
    p._flush()
    return p.title.strip(), p.lines


def _is_heading(line: str, nxt: str) -> bool:
    s = line.strip()
    if s.startswith("## "):
        return True
    if not s or len(s) > 60 or re.search(r"[。.!！?？:：,，;；]$", s):
        return False
    if any(p.search(s) for p in PARTS.values()) and len(s) <= 40:
        return True
    return bool(nxt) and len(nxt) > 2 * len(s) and len(s) <= 30 and not s.startswith(("-", "•", "*"))


def clean_lines(lines: list[str]) -> list[str]:
    out: list[str] = []
    for raw in lines:
        s = raw.strip()
        if not s:
            continue
        bare = s.lstrip("# ").strip()
        if _END_MARKERS.match(bare) and sum(len(x) for x in out) > 200:
            break
        if _JUNK_LINE.match(bare) or _AUTHOR_DATE.match(bare) or _NUMERIC.match(bare) or _BREADCRUMB.match(bare) or _LANG_ONLY.match(bare):
            continue
        if _CARD.search(bare):
            if sum(len(x) for x in out) > 200:
                break  # a list of project cards: the article is over
            continue
        out.append(s)
    return out


def _part(heading: str) -> str:
    for name, rx in PARTS.items():
        if rx.search(heading):
            return name
    return "other"


def parse_article(text: str, name: str, is_html: bool | None = None) -> Article:
    """Clean a scraped page and split it into sections. Raises ValueError when it is mostly boilerplate."""
    if is_html is None:
        is_html = bool(re.search(r"<(html|body|div|p|h1|article)\b", text[:5000], re.I))
    title = ""
    if is_html:
        title, lines = html_to_lines(text)
    else:
        lines = text.splitlines()
    raw_chars = sum(len(x.strip()) for x in lines)
    lines = clean_lines(lines)
    if not title and lines:
        title = lines[0].lstrip("# ").strip()
        lines = lines[1:]
    title = re.split(r"\s+[-|_]\s+", title)[0].strip() or name
    lines = [ln for ln in lines if ln.lstrip("# ").strip() != title]
    body_chars = sum(len(x) for x in lines)
    if body_chars < MIN_CONTENT_CHARS:
        raise ValueError(f"{name}: mostly boilerplate ({body_chars} characters of content out of {raw_chars}); not ingested")
    sections: list[Section] = []
    cur = Section(heading="", part="symptoms", text="")
    for i, ln in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _is_heading(ln, nxt):
            if cur.text.strip():
                sections.append(cur)
            head = ln.lstrip("# ").strip()
            cur = Section(heading=head, part=_part(head), text="")
        else:
            cur.text += ln.strip() + "\n"
    if cur.text.strip():
        sections.append(cur)
    url = re.search(r"https?://[^\s)\"'<>]+", text[:3000])
    lang = detect_lang(title + " " + " ".join(s.text[:500] for s in sections[:3]))
    aid = "article-" + hashlib.sha256((name + title).encode()).hexdigest()[:12]
    return Article(id=aid, title=title, lang=lang, source=url.group(0) if url else name, sections=sections, path=name)


def load_article_files(path: Path) -> tuple[list[Article], list[Problem]]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix.lower() in ARTICLE_SUFFIXES)
    arts: list[Article] = []
    problems: list[Problem] = []
    for p in files:
        if p.suffix.lower() not in ARTICLE_SUFFIXES:
            continue
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
            arts.append(parse_article(text, p.name, p.suffix.lower() in (".html", ".htm")))
        except ValueError as e:
            problems.append(Problem(p.name, 0, str(e)))
    return arts, problems


def article_units(a: Article) -> list[Unit]:
    meta = {"doc": "article", "article_id": a.id, "category": "article", "source_lang": a.lang}
    units = []
    for i, s in enumerate(a.sections):
        text = f"{a.title}. {s.heading}: {s.text}".strip()[:MAX_CHARS]
        u = Unit.make(a.id, f"sec{i}", a.lang, text, meta)
        u.meta["case_id"] = a.id
        units.append(u)
    return units
