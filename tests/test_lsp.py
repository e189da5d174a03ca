"""`trainfix lsp` driven over stdio by a real LSP client (pytest-lsp): diagnostics, hover, quick fixes applied and
re-checked, parse errors, a 5 MB document, a Chinese client, and agreement with `trainfix lint --json`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
import pytest_asyncio
import yaml
from conftest import FIXTURES, ROOT
from lsprotocol import types as T
from pygls.protocol import default_converter
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

LSP = FIXTURES / "lsp"
SERVER = [sys.executable, "-m", "app.cli", "lsp"]
pytestmark = pytest.mark.asyncio(loop_scope="module")
DS_CASE = "deepspeed-comm-dtype-fp32-loss-zero"


def server_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def make_client() -> LanguageClient:
    """pytest-lsp's test client, recording each document's diagnostics with the version they are for."""
    client = LanguageClient(converter_factory=default_converter)
    client.published = {}  # uri -> (version, diagnostics)
    client.arrived = asyncio.Event()

    def publish(ls: LanguageClient, params: T.PublishDiagnosticsParams) -> None:
        ls.diagnostics[params.uri] = params.diagnostics
        ls.published[params.uri] = (params.version, list(params.diagnostics))
        ls.arrived.set()

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish})
    return client


async def start(locale: str | None) -> LanguageClient:
    client = make_client()
    await client.start_io(*SERVER, env=server_env(), cwd=str(ROOT))
    await client.initialize_session(T.InitializeParams(capabilities=client_capabilities("visual-studio-code"), locale=locale))
    return client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client():
    c = await start("en-US")
    yield c
    await c.shutdown_session()
    await c.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def zh_client():
    c = await start("zh-CN")
    yield c
    await c.shutdown_session()
    await c.stop()


def uri_of(name: str) -> str:
    return (LSP / name).resolve().as_uri()


async def diagnostics(client: LanguageClient, uri: str, version: int, timeout: float = 60) -> list[T.Diagnostic]:
    """Wait for the diagnostics of this version of the document."""
    deadline = time.monotonic() + timeout
    while True:
        got = client.published.get(uri)
        if got is not None and got[0] == version:
            return got[1]
        left = deadline - time.monotonic()
        assert left > 0, f"no diagnostics for {uri} v{version} (last: {got})"
        client.arrived.clear()
        try:
            await asyncio.wait_for(client.arrived.wait(), left)
        except TimeoutError:
            continue


def open_doc(client: LanguageClient, name: str, text: str | None = None, lang_id: str = "json") -> tuple[str, str]:
    uri = uri_of(name)
    text = (LSP / name).read_text(encoding="utf-8") if text is None else text
    client.published.pop(uri, None)
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri=uri, language_id=lang_id, version=1, text=text)))
    return uri, text


def change_doc(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.published.pop(uri, None)
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[T.TextDocumentContentChangeWholeDocument(text=text)]))


def apply_edit(text: str, edit: T.TextEdit) -> str:
    """Apply one TextEdit (ASCII fixtures: UTF-16 units are characters)."""
    lines = text.splitlines(True)

    def off(p: T.Position) -> int:
        return sum(len(x) for x in lines[: p.line]) + p.character

    return text[: off(edit.range.start)] + edit.new_text + text[off(edit.range.end) :]


async def quick_fix(client: LanguageClient, uri: str, diag: T.Diagnostic) -> T.TextEdit:
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), range=diag.range, context=T.CodeActionContext(diagnostics=[diag])))
    assert actions, "a quick fix is offered"
    act = actions[0]
    assert act.kind == T.CodeActionKind.QuickFix and act.is_preferred
    edits = act.edit.changes[uri]
    assert len(edits) == 1
    return edits[0]


async def test_deepspeed_fp32_is_flagged_on_its_exact_range(client):
    uri, text = open_doc(client, "ds_config.json")
    diags = await diagnostics(client, uri, 1)
    assert [d.code for d in diags] == [DS_CASE]
    d = diags[0]
    line = text.splitlines()[d.range.start.line]
    assert d.range.start.line == 4 and d.range.end.line == 4
    assert line[d.range.start.character : d.range.end.character] == '"communication_data_type": "fp32"'
    assert d.code_description.href == "https://github.com/QwenLM/Qwen/issues/967"
    assert d.severity == T.DiagnosticSeverity.Warning and d.source == "trainfix"
    assert "fp32" in d.message and "Fix:" in d.message


async def test_hover_shows_cause_fix_and_numbered_citations(client):
    uri, _ = open_doc(client, "ds_config.json")
    await diagnostics(client, uri, 1)
    h = await client.text_document_hover_async(T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=4, character=8)))
    assert h is not None and h.contents.kind == T.MarkupKind.Markdown
    md = h.contents.value
    assert DS_CASE in md and "Cause" in md and "Fix" in md
    assert "1. [QwenLM/Qwen#967" in md and "https://github.com/QwenLM/Qwen/issues/967" in md
    none = await client.text_document_hover_async(T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=1, character=4)))
    assert none is None, "no hover on a line nothing flags"


async def test_quick_fix_removes_the_key_and_the_json_still_parses(client):
    uri, text = open_doc(client, "ds_config.json")
    d = (await diagnostics(client, uri, 1))[0]
    new = apply_edit(text, await quick_fix(client, uri, d))
    data = json.loads(new)
    assert "communication_data_type" not in data and data["zero_optimization"]["stage"] == 2
    change_doc(client, uri, 2, new)
    assert await diagnostics(client, uri, 2) == []


async def test_quick_fix_in_yaml_and_in_a_launch_script(client, tmp_path):
    uri, text = open_doc(client, "lf_sft.yaml", lang_id="yaml")
    diags = await diagnostics(client, uri, 1)
    packing = next(d for d in diags if d.code == "llamafactory-packing-without-neat-packing")
    new = apply_edit(text, await quick_fix(client, uri, packing))
    cfg = yaml.safe_load(new)
    assert cfg["neat_packing"] is True and cfg["stage"] == "sft"
    change_doc(client, uri, 2, new)
    assert "llamafactory-packing-without-neat-packing" not in [d.code for d in await diagnostics(client, uri, 2)]

    uri, text = open_doc(client, "run_kto.sh", lang_id="shellscript")
    kto = next(d for d in await diagnostics(client, uri, 1) if d.code == "openrlhf-kto-vanilla-loss-nan")
    assert text.splitlines()[kto.range.start.line][kto.range.start.character : kto.range.end.character] == "--vanilla_loss"
    new = apply_edit(text, await quick_fix(client, uri, kto))
    assert "--vanilla_loss" not in new and "--beta 0.1" in new
    script = tmp_path / "run_kto.sh"
    script.write_text(new)
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    change_doc(client, uri, 2, new)
    assert "openrlhf-kto-vanilla-loss-nan" not in [d.code for d in await diagnostics(client, uri, 2)]


async def test_clean_file_has_no_diagnostics(client):
    uri, _ = open_doc(client, "ds_clean.json")
    assert await diagnostics(client, uri, 1) == []


@pytest.mark.parametrize(("name", "lang_id"), [("broken.json", "json"), ("broken.yaml", "yaml")])
async def test_broken_file_gives_one_parse_diagnostic_and_the_server_keeps_serving(client, name, lang_id):
    uri, text = open_doc(client, name, lang_id=lang_id)
    diags = await diagnostics(client, uri, 1)
    assert len(diags) == 1
    d = diags[0]
    if name.endswith(".json"):
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            want = (e.lineno - 1, e.colno - 1)
    else:
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as e:
            want = (e.problem_mark.line, e.problem_mark.column)
    assert (d.range.start.line, d.range.start.character) == want
    assert d.severity == T.DiagnosticSeverity.Error and d.code == f"trainfix.{name.split('.')[1]}"
    # the server still answers: a hover on another document, and this document fixed
    uri2, _ = open_doc(client, "ds_config.json")
    await diagnostics(client, uri2, 1)
    h = await client.text_document_hover_async(T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri2), position=T.Position(line=4, character=5)))
    assert h is not None and DS_CASE in h.contents.value
    fixed = (LSP / "ds_clean.json").read_text() if name.endswith(".json") else text.replace("[2048", "2048")
    change_doc(client, uri, 2, fixed)
    assert [x for x in await diagnostics(client, uri, 2) if x.code.startswith("trainfix.")] == []


async def test_big_documents_do_not_block_other_requests(client):
    # a heavy document within the budget: its lint runs off the event loop, so a hover elsewhere answers first
    # (7,500 keys, near the 200k-character budget: its lint takes ~0.7 s here, so the race is not close; 4,000 keys
    # took 0.13 s and the hover sometimes lost)
    heavy = "stage: sft\nfinetuning_type: full\n" + "".join(f"extra_setting_{i}: {i}\n" for i in range(7500))
    assert 150_000 < len(heavy) < 200_000
    uri_ds, _ = open_doc(client, "ds_config.json")
    await diagnostics(client, uri_ds, 1)
    huge = '{"data": [' + ",".join(["1234567"] * 640_000) + "]}"
    assert len(huge) > 5_000_000
    order: list[str] = []
    uri_heavy, _ = open_doc(client, "heavy.yaml", heavy, "yaml")
    uri_huge, _ = open_doc(client, "huge.json", huge)

    async def heavy_done():
        await diagnostics(client, uri_heavy, 1)
        order.append("heavy diagnostics")

    waiter = asyncio.create_task(heavy_done())
    h = await client.text_document_hover_async(T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri_ds), position=T.Position(line=4, character=5)))
    order.append("hover")
    assert h is not None and DS_CASE in h.contents.value
    await waiter
    assert order == ["hover", "heavy diagnostics"]
    big = await diagnostics(client, uri_huge, 1)
    assert [d.code for d in big] == ["trainfix.too-large"]
    assert "5,120,0" in big[0].message.replace("5,120,01", "5,120,0") and "budget" in big[0].message


async def test_chinese_locale_gives_chinese_messages(zh_client):
    uri, _ = open_doc(zh_client, "ds_config.json")
    d = (await diagnostics(zh_client, uri, 1))[0]
    assert d.code == DS_CASE and "通信" in d.message and "修复：" in d.message
    h = await zh_client.text_document_hover_async(T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=4, character=5)))
    assert "来源" in h.contents.value and "原因" in h.contents.value
    uri2, _ = open_doc(zh_client, "broken.json")
    (p,) = await diagnostics(zh_client, uri2, 1)
    assert "解析失败" in p.message


async def test_editor_and_trainfix_lint_agree(client):
    """The same files through `trainfix lint --json` (one process per file, run side by side) and the editor."""
    names = ["ds_config.json", "lf_sft.yaml", "run_kto.sh"]
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-m", "app.cli", "lint", "--json", str(LSP / n), cwd=ROOT, env=server_env(),
                                                  stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE) for n in names]

    def key(code, sev, rng, msg):
        return (code, sev, rng, msg if not code.startswith("trainfix.") else "")  # parse notes name the file as it was given

    for name, proc in zip(names, procs, strict=True):
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode in (0, 1), err.decode()
        cli = json.loads(out)
        uri, _ = open_doc(client, name, lang_id="plaintext")
        lsp = await diagnostics(client, uri, 1)
        want = {key(c["code"], c["severity"], (c["range"]["start"]["line"], c["range"]["start"]["character"], c["range"]["end"]["character"]), c["message"]) for c in cli}
        got = {key(d.code, int(d.severity), (d.range.start.line, d.range.start.character, d.range.end.character), d.message) for d in lsp}
        assert want and got == want, name


@pytest.mark.filterwarnings("ignore::pytest.PytestWarning")
def test_lsp_help():
    r = subprocess.run([sys.executable, "-m", "app.cli", "lsp", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "stdio" in r.stdout

