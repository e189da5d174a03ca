"""The VS Code extension builds with its one documented command and packages what VS Code needs.

Runs `bash editors/vscode/build.sh OUT.vsix` (npm from the registry; node_modules cached outside the clone in
$TRAINFIX_BUILD_CACHE, default ~/.cache/trainfix, so a warm run skips `npm ci`), then reads the .vsix as VS Code
would: the packaged options.js plans the requests of both modes, which go to a real `trainfix serve` (server-URL
mode) and a real `trainfix lsp` (local mode, over the packaged vscode-jsonrpc) for a real example file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import API_TOKEN

ROOT = Path(__file__).resolve().parent.parent
EXT = ROOT / "editors" / "vscode"
LANGUAGES = {"json", "jsonc", "yaml", "shellscript", "python"}
SETTINGS = {"trainfix.path", "trainfix.pythonPath", "trainfix.language", "trainfix.serverUrl", "trainfix.apiToken"}


def _git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--ignored", "--", "editors/vscode"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> dict:
    for tool in ("node", "npm", "git"):
        assert shutil.which(tool), f"{tool} is not installed: the extension build needs Node.js >= 20 with npm"
    pre = os.environ.get("TRAINFIX_VSCODE_PREBUILD")
    if pre:  # tests/run.sh started the same command in the background while it installed Python packages
        d = Path(pre)
        deadline = time.monotonic() + 900
        while not (d / "rc").exists():
            assert time.monotonic() < deadline, "the background build from tests/run.sh did not finish in 15 min"
            time.sleep(1)
        out, before = d / "trainfix.vsix", (d / "status-before").read_text()
        log = (d / "build.log").read_text(errors="replace")
        stdout, rc, seconds = log, int((d / "rc").read_text().strip() or 1), float((d / "seconds").read_text() or 0)
    else:
        out = tmp_path_factory.mktemp("vsix") / "trainfix.vsix"
        before = _git_status()
        t0 = time.perf_counter()
        p = subprocess.run(["bash", str(EXT / "build.sh"), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
        seconds = time.perf_counter() - t0
        log, stdout, rc = p.stdout + p.stderr, p.stdout, p.returncode
    assert rc == 0, f"build.sh failed ({rc}):\n{log[-4000:]}"
    print(f"\nbuild.sh took {seconds:.1f} s ({'warm' if 'up to date' in log else 'cold'})")
    return {"vsix": out, "log": log, "stdout": stdout, "before": before, "after": _git_status(), "seconds": seconds}


def test_vsix_is_built_where_asked_and_the_clone_stays_clean(build: dict) -> None:
    assert build["vsix"].is_file() and zipfile.is_zipfile(build["vsix"])
    assert build["stdout"].rstrip().endswith(f"vsix: {build['vsix']}"), "the last line names the .vsix"
    assert build["after"] == build["before"], f"the build changed the clone:\n{build['after']}"


def test_unit_tests_ran_and_passed(build: dict) -> None:
    log = build["log"]
    passed = [int(line.split()[-1]) for line in log.splitlines() if line.startswith("# pass ")]
    failed = [int(line.split()[-1]) for line in log.splitlines() if line.startswith("# fail ")]
    assert passed and passed[-1] >= 10, f"node --test did not report its tests:\n{log[-3000:]}"
    assert failed == [0]
    for name in ("local mode starts `trainfix lsp`", "server-URL mode starts no process", "zh: the setting"):
        assert re.search(rf"^\s*ok \d+ - {re.escape(name)}", log, re.M), f"unit test did not pass: {name}"


def test_manifest_contributes_languages_settings_and_commands(build: dict) -> None:
    with zipfile.ZipFile(build["vsix"]) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("extension/package.json"))
        main = z.read("extension/out/extension.js").decode()
    assert {"extension/out/extension.js", "extension/out/options.js", "extension/readme.md"} <= names
    assert "extension/node_modules/vscode-languageclient/package.json" in names, "the runtime dependency is packaged"
    assert not [n for n in names if n.startswith(("extension/src/", "extension/out/test/"))], "sources and tests stay out"
    assert not [n for n in names if "/node_modules/typescript/" in n or "/node_modules/@vscode/vsce/" in n], "no dev dependencies"
    assert manifest["main"] == "./out/extension.js"
    assert {e.split(":", 1)[1] for e in manifest["activationEvents"] if e.startswith("onLanguage:")} == LANGUAGES
    assert manifest["engines"]["vscode"] == "^" + manifest["devDependencies"]["@types/vscode"], "engines.vscode and @types/vscode agree"
    props = manifest["contributes"]["configuration"]["properties"]
    assert SETTINGS <= set(props)
    assert props["trainfix.language"]["enum"] == ["auto", "en", "zh"]
    commands = {c["command"]: c["title"] for c in manifest["contributes"]["commands"]}
    assert commands["trainfix.diagnoseFile"] == "Diagnose this file"
    # the compiled extension reads exactly the settings it contributes, and calls the server's diagnose command
    for key in SETTINGS:
        assert f'"{key.split(".", 1)[1]}"' in (EXT / "src" / "options.ts").read_text(), key
    assert 'createDiagnosticCollection("trainfix")' in main and '"trainfix.diagnose"' in main
    # every dependency is pinned
    for section in ("dependencies", "devDependencies"):
        for name, ver in json.loads((EXT / "package.json").read_text())[section].items():
            assert ver[0].isdigit(), f"{name} is not pinned: {ver}"


HTTP_MODE = """
const o = require(process.argv[1]);
const [url, token, content] = process.argv.slice(2);
(async () => {
  const out = {};
  const p = o.plan(o.readSettings((k) => ({serverUrl: url, apiToken: token, language: "zh"})[k]), "en");
  const lint = await o.postJson(fetch, p.lintUrl, o.lintBody(o.fileNameFor("/home/me/proj/ds_config.json", "json"), content, p.lang), p.headers, 60000);
  out.lint = lint.ok ? o.lintResponseToDiagnostics(lint.json) : lint;
  const noToken = o.plan(o.readSettings((k) => ({serverUrl: url})[k]), "en");
  out.denied = await o.postJson(fetch, noToken.lintUrl, o.lintBody("ds_config.json", content, "en"), noToken.headers, 60000);
  const body = o.diagnoseBody("Qwen-7B full fine-tune: loss goes to 0 after ~10 steps", "ds_config.json", content, p.diagnoseLang);
  const d = await o.postJson(fetch, p.diagnoseUrl, body, p.headers, 120000);
  out.diagnose = d.ok ? o.diagnosisToMarkdown(d.json) : d;
  console.log(JSON.stringify(out));
})();
"""


def test_server_url_mode_against_trainfix_serve(build: dict, api_server, tmp_path: Path) -> None:
    """The packaged HTTP mode's requests are accepted by the real API and its answers map to ranges and Markdown."""
    with zipfile.ZipFile(build["vsix"]) as z:
        z.extract("extension/out/options.js", tmp_path)
    example = ROOT / "examples" / "ds_config.json"
    r = subprocess.run(
        ["node", "-e", HTTP_MODE, str(tmp_path / "extension" / "out" / "options.js"), api_server.url, API_TOKEN, example.read_text()],
        capture_output=True, text=True, timeout=240,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert isinstance(out["lint"], list), out["lint"]
    (d,) = [x for x in out["lint"] if isinstance(x["code"], dict) and x["code"]["value"] == "deepspeed-comm-dtype-fp32-loss-zero"]
    line = example.read_text().splitlines()[d["range"]["start"]["line"]]
    assert line[d["range"]["start"]["character"]:].startswith('"communication_data_type"')
    assert re.search(r"[\u4e00-\u9fff]", d["message"]), "trainfix.language zh gives a Chinese message"
    assert out["denied"]["ok"] is False and out["denied"]["status"] == 401 and out["denied"]["code"] == "unauthorized"
    md = out["diagnose"]
    assert isinstance(md, str), md
    assert "deepspeed-comm-dtype-fp32-loss-zero" in md and "https://github.com/QwenLM/Qwen/issues/967" in md
    assert re.search(r"[\u4e00-\u9fff]", md), "lang zh is sent to /v1/diagnose"


# Local mode without VS Code (which cannot be installed here): the packaged options.js plans the process and the
# initialize parameters, and the packaged vscode-jsonrpc (the JSON-RPC layer of vscode-languageclient) talks to it.
LOCAL_MODE = """const ext = process.argv[1];
const o = require(ext + "/out/options.js");
const { spawn } = require("node:child_process");
const rpc = require(ext + "/node_modules/vscode-jsonrpc/node");
const [trainfix, file, uiLang, language] = process.argv.slice(2);
(async () => {
  const p = o.plan(o.readSettings((k) => ({ path: trainfix, language })[k]), uiLang);
  const child = spawn(p.server.command, p.server.args, { stdio: ["pipe", "pipe", "inherit"] });
  const conn = rpc.createMessageConnection(new rpc.StreamMessageReader(child.stdout), new rpc.StreamMessageWriter(child.stdin));
  const got = new Promise((resolve) => conn.onNotification("textDocument/publishDiagnostics", (x) => { if (x.diagnostics.length) resolve(x); }));
  conn.onRequest(() => null);
  conn.listen();
  const t0 = Date.now();
  const init = await conn.sendRequest("initialize", { processId: process.pid, locale: p.client.locale, initializationOptions: p.client.initializationOptions, rootUri: null, capabilities: {} });
  const initMs = Date.now() - t0;
  conn.sendNotification("initialized", {});
  const uri = "file://" + file;
  conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "json", version: 1, text: require("node:fs").readFileSync(file, "utf8") } });
  const d = await got;
  const hover = await conn.sendRequest("textDocument/hover", { textDocument: { uri }, position: d.diagnostics[0].range.start });
  console.log(JSON.stringify({ plan: p, initMs, caps: Object.keys(init.capabilities), diagnostics: o.lintResponseToDiagnostics(d), hover }));
  await conn.sendRequest("shutdown");
  conn.sendNotification("exit");
  setTimeout(() => { child.kill(); process.exit(0); }, 500);
})();
"""


def test_local_mode_plan_starts_trainfix_lsp_in_the_chosen_language(build: dict, tmp_path: Path) -> None:
    """trainfix.path + trainfix.language=zh under an English UI: the planned `trainfix lsp` answers in Chinese."""
    with zipfile.ZipFile(build["vsix"]) as z:
        z.extractall(tmp_path)
    example = ROOT / "examples" / "ds_config.json"
    trainfix = Path(sys.executable).with_name("trainfix")
    r = subprocess.run(
        ["node", "-e", LOCAL_MODE, str(tmp_path / "extension"), str(trainfix), str(example), "en", "zh"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["plan"]["server"] == {"command": str(trainfix), "args": ["lsp"]}
    assert out["plan"]["client"]["locale"] == "zh"
    assert {"hoverProvider", "codeActionProvider", "executeCommandProvider"} <= set(out["caps"])
    (d,) = [x for x in out["diagnostics"] if isinstance(x["code"], dict) and x["code"]["value"] == "deepspeed-comm-dtype-fp32-loss-zero"]
    assert d["range"]["start"]["line"] == next(i for i, line in enumerate(example.read_text().splitlines()) if "communication_data_type" in line)
    assert re.search(r"[\u4e00-\u9fff]", d["message"]) and re.search(r"[\u4e00-\u9fff]", out["hover"]["contents"]["value"])
