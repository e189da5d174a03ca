"""Make editors/vscode/screenshot.png: Monaco (VS Code's editor component) showing what `trainfix lsp` sends.

VS Code itself cannot be installed on the build machine, so this takes the closest honest picture: it starts the
real `trainfix lsp` over stdio, opens an example file, takes the diagnostics it publishes and its hover for the
flagged key, and shows both in Monaco (from npm) in headless Chromium, with the mouse over the underlined key.
Nothing in the picture is written by hand: the underline, the message and the hover text come from the server.

    .venv/bin/python editors/vscode/screenshot/make_screenshot.py [examples/ds_config.json] [OUT.png]

Needs: Debian's chromium (/usr/bin/chromium), playwright (Python) and npm (monaco-editor is installed into
$TRAINFIX_BUILD_CACHE/vscode/monaco, outside the clone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MONACO_VERSION = "0.52.2"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


class Lsp:
    """A minimal JSON-RPC client over the server's stdin/stdout (enough for initialize, didOpen, hover)."""

    def __init__(self, cmd: list[str]) -> None:
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
        self.n = 0
        self.notes: list[dict] = []

    def send(self, msg: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode()
        self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.p.stdin.flush()

    def read(self) -> dict:
        length = 0
        while (line := self.p.stdout.readline().strip()):
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
        if not length:
            raise RuntimeError("trainfix lsp closed its output")
        return json.loads(self.p.stdout.read(length))

    def request(self, method: str, params: dict) -> object:
        self.n += 1
        self.send({"id": self.n, "method": method, "params": params})
        while True:
            m = self.read()
            if m.get("id") == self.n and "method" not in m:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result")
            if "method" in m and "id" in m:  # a request from the server (e.g. workDoneProgress/create): accept it
                self.send({"id": m["id"], "result": None})
            else:
                self.notes.append(m)

    def wait_diagnostics(self, uri: str, timeout: float = 60) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.notes:
                if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri and m["params"]["diagnostics"]:
                    return m["params"]["diagnostics"]
            m = self.read()
            if "method" in m and "id" in m:
                self.send({"id": m["id"], "result": None})
            else:
                self.notes.append(m)
        raise TimeoutError(f"no diagnostics for {uri} within {timeout} s")

    def close(self) -> None:
        try:
            self.request("shutdown", {})
            self.send({"method": "exit"})
            self.p.wait(timeout=10)
        finally:
            if self.p.poll() is None:
                self.p.kill()


def lsp_view(path: Path, locale: str) -> tuple[list[dict], str, list[str]]:
    """The diagnostics `trainfix lsp` publishes for `path`, its hover at the first one and its quick fixes' titles."""
    exe = Path(sys.executable).with_name("trainfix")
    lsp = Lsp([str(exe), "lsp"])
    try:
        lsp.request("initialize", {"processId": os.getpid(), "locale": locale, "rootUri": ROOT.as_uri(), "capabilities": {}})
        lsp.send({"method": "initialized", "params": {}})
        uri = path.resolve().as_uri()
        lang = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".sh": "shellscript", ".py": "python"}.get(path.suffix, "plaintext")
        lsp.send({"method": "textDocument/didOpen",
                  "params": {"textDocument": {"uri": uri, "languageId": lang, "version": 1, "text": path.read_text()}}})
        diags = lsp.wait_diagnostics(uri)
        hover = lsp.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": diags[0]["range"]["start"]})
        value = (hover or {}).get("contents", {}).get("value", "") if isinstance(hover, dict) else ""
        actions = lsp.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": diags[0]["range"],
                                                          "context": {"diagnostics": diags[:1], "only": ["quickfix"]}})
        return diags, value, [a["title"] for a in actions or [] if isinstance(a, dict) and "title" in a]
    finally:
        lsp.close()


def monaco_dir() -> Path:
    cache = Path(os.environ.get("TRAINFIX_BUILD_CACHE") or Path.home() / ".cache" / "trainfix") / "vscode" / "monaco"
    vs = cache / "node_modules" / "monaco-editor" / "min" / "vs"
    if not (vs / "loader.js").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--no-save", "--prefix", str(cache),
                        f"monaco-editor@{MONACO_VERSION}"], check=True)
    return cache


PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
html,body{margin:0;height:100%;background:#1e1e1e} #e{width:100%;height:100%}
/* show the whole hover (Monaco caps its height and scrolls); nothing else is restyled */
.monaco-hover, .monaco-hover .monaco-scrollable-element, .monaco-hover .monaco-hover-content {max-height: none !important}
</style></head><body><div id="e"></div>
<script src="node_modules/monaco-editor/min/vs/loader.js"></script>
<script>
const DATA = __DATA__;
require.config({paths: {vs: 'node_modules/monaco-editor/min/vs'}});
require(['vs/editor/editor.main'], () => {
  const model = monaco.editor.createModel(DATA.text, DATA.language, monaco.Uri.parse('file:///work/' + DATA.name));
  const ed = monaco.editor.create(document.getElementById('e'), {model, theme: 'vs-dark', fontSize: 14,
    minimap: {enabled: false}, scrollBeyondLastLine: false, hover: {delay: 50, sticky: true}, automaticLayout: true});
  // the server's diagnostics as markers (LSP is 0-based, Monaco 1-based; severity 1..4 -> Monaco's 8/4/2/1)
  const sev = {1: 8, 2: 4, 3: 2, 4: 1};
  monaco.editor.setModelMarkers(model, 'trainfix', DATA.diagnostics.map(d => ({
    startLineNumber: d.range.start.line + 1, startColumn: d.range.start.character + 1,
    endLineNumber: d.range.end.line + 1, endColumn: d.range.end.character + 1,
    severity: sev[d.severity] || 4, message: d.message, source: d.source,
    code: d.codeDescription ? {value: String(d.code), target: monaco.Uri.parse(d.codeDescription.href)} : d.code})));
  // the server's hover for those lines
  monaco.languages.registerHoverProvider(DATA.language, {provideHover: (m, pos) => {
    const d = DATA.diagnostics.find(x => x.range.start.line + 1 === pos.lineNumber);
    return d && DATA.hover ? {contents: [{value: DATA.hover}]} : null;
  }});
  // the server's quick fixes, by title (so the hover offers "Quick Fix..." as VS Code would; not applied here)
  monaco.languages.registerCodeActionProvider(DATA.language, {provideCodeActions: (m, range, ctx) => ({
    actions: ctx.markers.length ? DATA.fixes.map(title => ({title, kind: 'quickfix', diagnostics: ctx.markers})) : [],
    dispose() {}})});
  const d = DATA.diagnostics[0];
  const p = ed.getScrolledVisiblePosition({lineNumber: d.range.start.line + 1, column: d.range.start.character + 6});
  const box = ed.getDomNode().getBoundingClientRect();
  window.target = {x: box.left + p.left, y: box.top + p.top + p.height / 2};
});
</script></body></html>"""


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "examples" / "ds_config.json"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "editors" / "vscode" / "screenshot.png"
    diags, hover, fixes = lsp_view(src, "en")
    print(f"trainfix lsp: {len(diags)} diagnostic(s), first {diags[0]['code']} at {diags[0]['range']}; hover {len(hover)} chars; "
          f"quick fixes {fixes}")
    site = monaco_dir()
    data = {"name": src.name, "text": src.read_text(), "language": "json" if src.suffix == ".json" else "yaml",
            "diagnostics": diags, "hover": hover, "fixes": fixes}
    (site / "index.html").write_text(PAGE.replace("__DATA__", json.dumps(data)))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1000, "height": 620}, device_scale_factor=1)
            page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/index.html")
            page.wait_for_function("window.target !== undefined", timeout=30_000)
            t = page.evaluate("window.target")
            page.mouse.move(t["x"] - 30, t["y"])
            page.mouse.move(t["x"], t["y"], steps=5)
            page.wait_for_selector(".monaco-hover .marker", state="visible", timeout=15_000)
            page.wait_for_timeout(500)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
            browser.close()
    finally:
        httpd.shutdown()
    print(f"wrote {out} ({out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
