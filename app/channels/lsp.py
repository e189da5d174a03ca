"""The language server (`trainfix lsp`, stdio): the cases' triggers as diagnostics while a config is edited, hover
with cause, fix and citations, quick fixes that apply a case's diff, and a full diagnosis on request.

A thin adapter: diagnostics come from `app.lint.lint` (the facts and scoped triggers `diagnose()` uses), quick fixes
from `app.fixes.apply_fix`, the full answer from `app.diagnose.diagnose`. Start-up imports only pygls; the cases load
in a background thread after `initialized`, and the index (with its embedder) opens only for `trainfix.diagnose`.
Linting runs in worker threads, so a big document never holds up hover or other requests.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer

if TYPE_CHECKING:
    from app.lint import LintResult
    from app.models import Case

log = logging.getLogger("trainfix.lsp")

DEBOUNCE_S = 0.2  # a burst of edits is linted once, this long after the last one; a lone edit is linted at once
DIAGNOSE_COMMAND = "trainfix.diagnose"
# file notes an editor does not need: any text file that is not a config would show them
_QUIET_NOTES = {"trainfix.unknown", "trainfix.empty", "trainfix.binary", "trainfix.python", "trainfix.cmdline", "trainfix.log"}

@dataclass
class DocState:
    """Per document: the last lint (of which version and text) and the debounce bookkeeping."""

    version: int | None = None
    text: str = ""
    results: list[LintResult] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    running: bool = False
    dirty: bool = False
    last_change: float = 0.0


def doc_name(uri: str) -> str:
    """The file name of a document URI: a hint for content detection, as an attachment's name is."""
    p = urlparse(uri)
    return PurePosixPath(unquote(p.path)).name or "untitled"


class TrainfixServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("trainfix", "0.1.0", text_document_sync_kind=T.TextDocumentSyncKind.Incremental)
        self.lang = "en"
        self.docs: dict[str, DocState] = {}
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="trainfix-lint")
        self._cases: Future[list[Case]] | None = None
        self._state: Any = None  # app.runtime.State, made on first use
        self._engine_lock = threading.Lock()

    # ------------------------------------------------------------ the cases, loaded once off the event loop

    def start_loading(self) -> None:
        if self._cases is None:
            self._cases = self.pool.submit(_load_cases)

    def cases(self) -> list[Case]:
        self.start_loading()
        assert self._cases is not None
        return self._cases.result()

    def case(self, case_id: str) -> Case | None:
        return next((c for c in self.cases() if c.id == case_id), None)

    def msg(self, key: str, **kw: Any) -> str:
        from app.messages import t

        return t(f"lsp.{key}", self.lang, **kw)

    # ------------------------------------------------------------ lint

    def lint_text(self, name: str, text: str) -> list[LintResult]:
        """Runs in a worker thread: the document as an attachment through app.lint, within the editor budget."""
        from app.budgets import BUDGETS
        from app.facts import Attachment
        from app.lint import LintResult, lint

        if len(text) > BUDGETS.editor_chars:
            return [LintResult(name, 1, 0, 0, "information", "trainfix.too-large",
                               self.msg("too_large", size=len(text), limit=BUDGETS.editor_chars, name=name), "", "", "", "", self.lang)]
        results = lint([Attachment(name=name, content=text)], self.cases(), self.lang)
        return [r for r in results if r.code not in _QUIET_NOTES]

    def schedule(self, uri: str, immediate: bool) -> None:
        """Lint now after a pause or on open/save; during a burst of edits, once DEBOUNCE_S after the last one."""
        st = self.docs.setdefault(uri, DocState())
        loop = asyncio.get_running_loop()
        now = loop.time()
        if st.timer is not None:
            st.timer.cancel()
            st.timer = None
        quiet = now - st.last_change >= DEBOUNCE_S and not st.running
        st.last_change = now
        if immediate or quiet:
            loop.create_task(self.run_lint(uri))
        else:
            st.timer = loop.call_later(DEBOUNCE_S, lambda: loop.create_task(self.run_lint(uri)))

    async def run_lint(self, uri: str) -> None:
        st = self.docs.setdefault(uri, DocState())
        if st.running:
            st.dirty = True
            return
        st.running = True
        try:
            while True:
                st.dirty = False
                try:
                    doc = self.workspace.get_text_document(uri)
                except KeyError:
                    return
                text, version = doc.source, doc.version
                try:
                    results = await asyncio.get_running_loop().run_in_executor(self.pool, self.lint_text, doc_name(uri), text)
                except Exception as e:  # a bug in a parser must not take the server down: say so, keep serving
                    log.exception("lint failed for %s", uri)
                    self.window_log_message(T.LogMessageParams(type=T.MessageType.Error, message=f"trainfix: lint failed: {e}"))
                    results = []
                if uri not in self.docs:
                    return  # closed meanwhile
                if not st.dirty and self.workspace.get_text_document(uri).version == version:
                    st.version, st.text, st.results = version, text, results
                    self.text_document_publish_diagnostics(
                        T.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=[self.to_diagnostic(r, doc) for r in results]))
                if not st.dirty:
                    return
        finally:
            st.running = False

    def to_range(self, doc: Any, text: str, l1: int, c1: int, l2: int, c2: int) -> T.Range:
        """Character columns (as Python counts them) to the client's position encoding (UTF-16 by default)."""
        lines = text.splitlines(True) or [""]
        codec = doc.position_codec

        def pos(line: int, col: int) -> T.Position:
            if line >= len(lines):
                return T.Position(line=line, character=0)
            return codec.position_to_client_units(lines, T.Position(line=line, character=col))

        return T.Range(start=pos(l1, c1), end=pos(l2, c2))

    def to_diagnostic(self, r: LintResult, doc: Any) -> T.Diagnostic:
        d = r.lsp()
        ln = d["range"]["start"]["line"]
        rng = self.to_range(doc, doc.source, ln, d["range"]["start"]["character"], ln, d["range"]["end"]["character"])
        href = d["codeDescription"]["href"] if d["codeDescription"] else None
        return T.Diagnostic(
            range=rng, message=d["message"], severity=T.DiagnosticSeverity(d["severity"]), code=d["code"], source="trainfix",
            code_description=T.CodeDescription(href=href) if href else None, data=d["data"],
        )

    def results_at(self, uri: str, line: int) -> list[LintResult]:
        st = self.docs.get(uri)
        return [r for r in (st.results if st else []) if max(r.line - 1, 0) == line and not r.code.startswith("trainfix.")]

    # ------------------------------------------------------------ hover, quick fixes, the full diagnosis

    def hover_markdown(self, r: LintResult) -> str:
        from app.render import labels

        case = self.case(r.code)
        if case is None:
            return r.message
        lab = labels(self.lang)
        cause = max(case.causes, key=lambda c: {"high": 2, "medium": 1, "low": 0}[c.likelihood])
        parts = [f"**{case.title.get(self.lang)}**  `{case.id}`", "", r.message.split("\n")[0].split(": ", 1)[-1], "",
                 f"**{self.msg('cause')}** ({lab['likelihood']} {lab['likely'][cause.likelihood]}, "
                 f"{lab['evidence_level']}: {lab['levels'][case.evidence]}): {cause.get(self.lang)}", "",
                 f"**{lab['fixes']}:**"]
        parts += [f"- {f.get(self.lang)}" for f in case.fixes]
        parts += ["", f"**{lab['sources']}:**"]
        parts += [f"{i}. [{s.title}]({s.url}) — {s.url}" for i, s in enumerate(case.sources, 1)]
        return "\n".join(parts)

    def code_actions(self, uri: str, rng: T.Range) -> list[T.CodeAction]:
        from app.fixes import apply_fix, text_edit

        st = self.docs.get(uri)
        try:
            doc = self.workspace.get_text_document(uri)
        except KeyError:
            return []
        if st is None or st.version != doc.version:
            return []  # diagnostics are for an older text: the next lint will offer fresh fixes
        text = doc.source
        out: list[T.CodeAction] = []
        for r in st.results:
            ln = max(r.line - 1, 0)
            if r.code.startswith("trainfix.") or not (rng.start.line <= ln <= rng.end.line):
                continue
            case = self.case(r.code)
            if case is None:
                continue
            diag = self.to_diagnostic(r, doc)
            for f in case.fixes:
                new = apply_fix(f.diff, r.file, text, r.kind) if f.diff else None
                if new is None:
                    continue
                l1, c1, l2, c2, ins = text_edit(text, new)
                edit = T.TextEdit(range=self.to_range(doc, text, l1, c1, l2, c2), new_text=ins)
                title = self.msg("fix_title", fix=_short(f.get(self.lang)))
                out.append(T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix, diagnostics=[diag], is_preferred=not out,
                                        edit=T.WorkspaceEdit(changes={uri: [edit]})))
        return out

    def engine(self) -> Any:
        """The index, opened on first use (the embedder loads only here). On a first start it answers from the KB read
        into memory while the index is written (the server's rules: app.runtime.State)."""
        with self._engine_lock:
            if self._state is None:
                from app.runtime import State

                self._state = State()
            return self._state.engine()

    def diagnose_markdown(self, uri: str, question: str) -> str:
        from app.diagnose import InputError, diagnose
        from app.facts import Attachment
        from app.render import to_markdown
        from app.store import StoreError

        atts = []
        if uri:
            try:
                doc = self.workspace.get_text_document(uri)
            except KeyError:
                return self.msg("no_file", uri=uri)
            atts.append(Attachment(name=doc_name(uri), content=doc.source))
        if not atts and not question.strip():
            return self.msg("no_question")
        try:
            d = diagnose(self.engine(), question, atts, lang="zh" if self.lang == "zh" and not question.strip() else None)
        except InputError as e:
            return str(e)
        except StoreError as e:
            return self.msg("index_error", err=e)
        return to_markdown(d, sources=True)


def _load_cases() -> list[Case]:
    from app.kb import load_cases

    t = time.monotonic()
    cases = load_cases().cases
    log.info("loaded %d cases in %.2fs", len(cases), time.monotonic() - t)
    return cases


def _short(s: str, n: int = 90) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1].rstrip() + "…"


def create_server() -> TrainfixServer:
    server = TrainfixServer()

    @server.feature(T.INITIALIZE)
    def initialize(ls: TrainfixServer, params: T.InitializeParams) -> None:
        ls.lang = "zh" if (params.locale or "").lower().startswith("zh") else "en"

    @server.feature(T.INITIALIZED)
    def initialized(ls: TrainfixServer, params: T.InitializedParams) -> None:
        ls.start_loading()

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TrainfixServer, params: T.DidOpenTextDocumentParams) -> None:
        ls.docs[params.text_document.uri] = DocState()
        ls.schedule(params.text_document.uri, immediate=True)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TrainfixServer, params: T.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, immediate=False)

    @server.feature(T.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TrainfixServer, params: T.DidSaveTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, immediate=True)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TrainfixServer, params: T.DidCloseTextDocumentParams) -> None:
        st = ls.docs.pop(params.text_document.uri, None)
        if st is not None and st.timer is not None:
            st.timer.cancel()
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    def hover(ls: TrainfixServer, params: T.HoverParams) -> T.Hover | None:
        hits = ls.results_at(params.text_document.uri, params.position.line)
        if not hits:
            return None
        md = "\n\n---\n\n".join(ls.hover_markdown(r) for r in hits)
        return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=md))

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix]))
    async def code_action(ls: TrainfixServer, params: T.CodeActionParams) -> list[T.CodeAction]:
        return await asyncio.get_running_loop().run_in_executor(ls.pool, ls.code_actions, params.text_document.uri, params.range)

    @server.command(DIAGNOSE_COMMAND)
    async def diagnose_cmd(ls: TrainfixServer, *args: Any) -> str:
        """Arguments: [uri, question] or [{"uri": ..., "question": ...}]; returns Markdown."""
        if len(args) == 1 and isinstance(args[0], dict):
            uri, question = str(args[0].get("uri") or ""), str(args[0].get("question") or "")
        else:
            uri = str(args[0]) if args else ""
            question = str(args[1]) if len(args) > 1 else ""
        return await asyncio.get_running_loop().run_in_executor(ls.pool, ls.diagnose_markdown, uri, question)

    return server


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    create_server().start_io()
