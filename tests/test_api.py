"""The HTTP API against a real `trainfix serve` on loopback (real embedder, real Chroma, small KB)."""

from __future__ import annotations

import json
import sqlite3
import time

import httpx
import pytest
from conftest import API_TOKEN, CORS_ORIGIN

DS_FP32 = '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32",\n  "zero_optimization": {"stage": 2}\n}\n'
DS_CLEAN = '{\n  "bf16": {"enabled": true},\n  "zero_optimization": {"stage": 2}\n}\n'
TOP_CASE = "deepspeed-comm-dtype-fp32-loss-zero"


@pytest.fixture(scope="module")
def client(api_server):
    with httpx.Client(base_url=api_server.url, headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=60) as c:
        yield c


def assert_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == code
    assert err["message"]
    assert err["request_id"] == r.headers["x-request-id"]
    return err


def test_health_and_ready(api_server):
    r = httpx.get(api_server.url + "/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = httpx.get(api_server.url + "/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ready" and body["cases"] == 6 and body["store"] == "embedded"
    api_server.wait_log(f"trainfix ready on http://127.0.0.1:{api_server.port}")


def test_one_process_serves_the_ui_too(api_server):
    """`trainfix serve` mounts the Gradio UI at / next to the API (when app.channels.ui builds)."""
    log = api_server.log()
    if "chat UI mounted at /" not in log:
        pytest.skip("the chat UI did not build in this checkout: " + next((ln for ln in log.splitlines() if "chat UI" in ln), "?"))
    # the server has a token: the UI needs it too (a browser is sent to /login, a script gets 401)
    page = httpx.get(api_server.url + "/", timeout=60, headers={"Accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert httpx.get(api_server.url + "/", timeout=60).status_code == 401
    up = httpx.post(api_server.url + "/gradio_api/upload", files={"files": ("a.txt", b"x" * 1000)}, timeout=60)
    assert up.status_code == 401
    assert httpx.post(api_server.url + "/login", data={"token": "wrong"}, timeout=30).status_code == 401
    with httpx.Client(base_url=api_server.url, timeout=60) as browser:
        signed = browser.post("/login", data={"token": API_TOKEN})
        assert signed.status_code == 303 and "trainfix_token" in signed.headers["set-cookie"] and API_TOKEN not in signed.headers["set-cookie"]
        r = browser.get("/", follow_redirects=True)
        assert r.status_code == 200 and "gradio" in r.text.lower()
        assert browser.get("/v1/cases").status_code == 401  # the cookie is for the UI; the API wants the bearer token
    r = httpx.get(api_server.url + "/", timeout=60, headers={"Authorization": f"Bearer {API_TOKEN}"}, follow_redirects=True)
    assert r.status_code == 200 and "gradio" in r.text.lower()
    assert httpx.get(api_server.url + "/v1/cases", timeout=30).status_code == 401
    assert httpx.get(api_server.url + "/healthz", timeout=30).status_code == 200


def test_diagnose_round_trip_with_attachment(client):
    r = client.post("/v1/diagnose", json={
        "question": "full fine-tune of qwen 7b: loss goes to 0 after 10 steps",
        "attachments": [{"name": "ds_config.json", "content": DS_FP32}],
    })
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["confident"] is True and d["language"] == "en"
    top = d["causes"][0]
    assert top["case_id"] == TOP_CASE
    assert any("ds_config.json:3" in e for e in top["evidence"]), top["evidence"]
    assert top["citations"][0]["url"].startswith("https://github.com/QwenLM/Qwen/issues/967")
    assert any(f["key"] == "deepspeed.communication_data_type" and f["line"] == 3 for f in d["facts"])


def test_diagnose_code_block_in_question_and_chinese(client):
    q = "全量微调几步之后 loss 变成 0\n```json\n" + DS_FP32 + "```"
    r = client.post("/v1/diagnose", json={"question": q, "top": 1})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["language"] == "zh" and len(d["causes"]) == 1
    assert d["causes"][0]["case_id"] == TOP_CASE


def test_diagnose_follow_up_uses_history(client):
    history = [
        {"role": "user", "content": "my loss collapses to zero\n```json\n" + DS_FP32 + "```"},
        {"role": "assistant", "content": "Which DeepSpeed config do you use?"},
    ]
    r = client.post("/v1/diagnose", json={"question": "what should I change first?", "history": history})
    assert r.status_code == 200, r.text
    assert r.json()["causes"][0]["case_id"] == TOP_CASE


def test_lint_reports_the_line(client):
    r = client.post("/v1/lint", json={"name": "ds_config.json", "content": DS_FP32})
    assert r.status_code == 200, r.text
    diags = r.json()["diagnostics"]
    hit = [x for x in diags if x["code"] == TOP_CASE]
    assert len(hit) == 1
    d = hit[0]
    assert d["range"]["start"]["line"] == 2  # 0-based: the third line of the file
    line = DS_FP32.splitlines()[2]
    assert line[d["range"]["start"]["character"] : d["range"]["end"]["character"]].startswith('"communication_data_type"')
    assert d["severity"] == 2 and d["source"] == "trainfix"
    assert d["codeDescription"]["href"].startswith("https://github.com/")
    assert "Fix:" in d["message"]


def test_lint_clean_config_has_no_diagnostics(client):
    r = client.post("/v1/lint", json={"name": "ds_config.json", "content": DS_CLEAN})
    assert r.status_code == 200 and r.json() == {"diagnostics": []}


def test_lint_unknown_file_type_says_so(client):
    r = client.post("/v1/lint", json={"name": "notes.docx", "content": "just some words here"})
    assert r.status_code == 200
    diags = r.json()["diagnostics"]
    assert len(diags) == 1
    assert diags[0]["code"] == "trainfix.unknown"
    assert "unknown format" in diags[0]["message"]


def test_lint_broken_json_points_at_the_error(client):
    r = client.post("/v1/lint", json={"name": "ds_config.json", "content": '{\n  "bf16": {"enabled": true},\n  "stage": \n}\n'})
    diags = r.json()["diagnostics"]
    assert diags and diags[0]["severity"] == 1 and diags[0]["range"]["start"]["line"] >= 2


def test_auth_missing_and_wrong_token(api_server):
    r = httpx.post(api_server.url + "/v1/diagnose", json={"question": "loss is nan"})
    err = assert_error(r, 401, "unauthorized")
    assert "missing" in err["message"]
    assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.get(api_server.url + "/v1/cases", headers={"Authorization": "Bearer nope"})
    assert "wrong" in assert_error(r, 401, "unauthorized")["message"]
    r = httpx.post(api_server.url + "/v1/lint", headers={"Authorization": "Basic dXNlcjpwdw=="}, json={"name": "a", "content": "b"})
    assert_error(r, 401, "unauthorized")
    # auth comes before the body is read: a malformed body from someone without the token is still a 401
    r = httpx.post(api_server.url + "/v1/diagnose", content=b"{not json", headers={"Content-Type": "application/json"})
    err = assert_error(r, 401, "unauthorized")
    assert err["request_id"] and err["request_id"] != "-"
    # health endpoints stay open
    assert httpx.get(api_server.url + "/healthz").status_code == 200


def test_oversized_body_is_413(client):
    big = {"question": "loss is nan", "attachments": [{"name": "train.log", "content": "x" * (1024 * 1024 + 10)}]}
    err = assert_error(client.post("/v1/diagnose", json=big), 413, "payload_too_large")
    assert "MB" in err["message"]

    def chunks():  # no Content-Length: the limit is counted while reading
        yield b'{"question": "'
        for _ in range(20):
            yield b"y" * 65536
        yield b'"}'

    r = client.post("/v1/diagnose", content=chunks(), headers={"Content-Type": "application/json"})
    assert_error(r, 413, "payload_too_large")


def test_validation_errors_name_the_field(client):
    r = client.post("/v1/diagnose", json={"question": "x", "attachments": [{"name": "a.json"}]})
    err = assert_error(r, 422, "invalid_request")
    assert "attachments.0.content" in err["message"]
    assert err["fields"][0]["field"] == "attachments.0.content"
    err = assert_error(client.post("/v1/diagnose", json={"question": "x", "top": "many"}), 422, "invalid_request")
    assert err["fields"][0]["field"] == "top"
    err = assert_error(client.post("/v1/diagnose", json={"question": "x", "lang": "fr"}), 422, "invalid_request")
    assert "lang" in err["message"]
    err = assert_error(client.post("/v1/feedback", json={"kind": "meh", "question": "q"}), 422, "invalid_request")
    assert err["fields"][0]["field"] == "kind"
    err = assert_error(client.post("/v1/diagnose", json={"questoin": "typo"}), 422, "invalid_request")
    assert "questoin" in err["message"]


def test_malformed_json_is_422(client):
    r = client.post("/v1/diagnose", content=b'{"question": "loss', headers={"Content-Type": "application/json"})
    err = assert_error(r, 422, "malformed_json")
    assert "not valid JSON" in err["message"]


def test_empty_question_is_400_bad_input(client):
    err = assert_error(client.post("/v1/diagnose", json={"question": "  "}), 400, "bad_input")
    assert "empty" in err["message"]


def test_unknown_endpoint_and_method_are_json(client):
    assert_error(client.get("/v1/nothing-here"), 404, "not_found")
    assert_error(client.get("/v1/diagnose"), 405, "method_not_allowed")


def test_request_id_in_and_out_and_in_logs(client, api_server):
    rid = "test-rid-42abc"
    r = client.post("/v1/diagnose", json={"question": "NCCL watchdog timeout while tokenizing the dataset"}, headers={"X-Request-ID": rid})
    assert r.status_code == 200
    assert r.headers["x-request-id"] == rid
    deadline = time.time() + 10  # the server writes its log lines from another thread: wait for them
    while True:
        lines = [ln for ln in api_server.log().splitlines() if f"[{rid}]" in ln]
        if any("POST /v1/diagnose 200" in ln for ln in lines) and any("diagnosed in" in ln for ln in lines) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert any("POST /v1/diagnose 200" in ln for ln in lines), lines
    assert any("diagnosed in" in ln for ln in lines), lines
    generated = client.get("/v1/cases").headers["x-request-id"]
    assert generated and generated != rid


def test_cases_get_and_search(client):
    r = client.get(f"/v1/cases/{TOP_CASE}")
    assert r.status_code == 200
    case = r.json()
    assert case["id"] == TOP_CASE and case["sources"][0]["url"].startswith("https://")
    assert case["title"]["en"] and case["title"]["zh"] and "path" not in case
    err = assert_error(client.get("/v1/cases/no-such-case"), 404, "case_not_found")
    assert "no-such-case" in err["message"]

    everything = client.get("/v1/cases").json()
    assert everything["total"] == 6
    only = client.get("/v1/cases", params={"category": "memory_oom"}).json()
    assert [c["id"] for c in only["cases"]] == ["cuda-allocator-fragmentation-oom"]
    assert client.get("/v1/cases", params={"category": "nope"}).json() == {"total": 0, "cases": []}
    sub = client.get("/v1/cases", params={"q": "communication"}).json()
    assert sub["cases"][0]["id"] == TOP_CASE
    bm = client.get("/v1/cases", params={"q": "NCCL timeout during preprocessing"}).json()
    assert bm["cases"][0]["id"] == "nccl-timeout-long-preprocessing"
    zh = client.get("/v1/cases", params={"q": "通信"}).json()
    assert TOP_CASE in [c["id"] for c in zh["cases"]]
    both = client.get("/v1/cases", params={"q": "loss", "category": "loss_zero"}).json()
    assert [c["id"] for c in both["cases"]] == [TOP_CASE]


def test_feedback_lands_in_sqlite(client, server_home):
    r = client.post("/v1/feedback", json={"kind": "fixed", "question": "loss 0 with token hf_abcdefghijklmnopqrstuvwxyz123456", "case_id": TOP_CASE, "comment": "removed the key"})
    assert r.status_code == 201, r.text
    row_id = r.json()["id"]
    db = sqlite3.connect(str(server_home / "feedback.sqlite"))
    try:
        row = db.execute("select channel, kind, case_id, question, extra from feedback where id = ?", (row_id,)).fetchone()
    finally:
        db.close()
    assert row[:3] == ("api", "fixed", TOP_CASE)
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in row[3]  # redacted by the store
    assert json.loads(row[4])["comment"] == "removed the key"


def test_cors_preflight_and_headers(api_server, client):
    r = httpx.options(api_server.url + "/v1/lint", headers={
        "Origin": CORS_ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type",
    })
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == CORS_ORIGIN
    r = client.post("/v1/lint", json={"name": "a.json", "content": DS_CLEAN}, headers={"Origin": CORS_ORIGIN})
    assert r.headers["access-control-allow-origin"] == CORS_ORIGIN
    r = httpx.get(api_server.url + "/healthz", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_openapi_schema_with_examples_and_bearer(api_server):
    spec = httpx.get(api_server.url + "/openapi.json").json()
    paths = spec["paths"]
    for p in ("/v1/diagnose", "/v1/lint", "/v1/cases", "/v1/cases/{case_id}", "/v1/feedback", "/healthz", "/readyz"):
        assert p in paths, p
    schemas = spec["components"]["schemas"]
    assert schemas["DiagnoseRequest"]["examples"][0]["attachments"][0]["name"] == "ds_config.json"
    assert schemas["LintRequest"]["examples"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert "503" in paths["/v1/diagnose"]["post"]["responses"]
    assert "/slack/events" not in paths


def test_no_server_errors_from_generated_requests(api_server):
    """Property-based (schemathesis): valid and invalid requests generated from the OpenAPI schema never get a 500,
    and every response is one the schema documents."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

    schema = schemathesis.openapi.from_url(api_server.url + "/openapi.json")
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    seen: dict[str, set[int]] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=20, deadline=None, phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck), derandomize=True, database=None)
            def run(case):
                resp = case.call(headers=headers, timeout=60)
                seen.setdefault(case.operation.label, set()).add(resp.status_code)
                case.validate_response(resp, checks=[not_a_server_error, status_code_conformance, response_schema_conformance])

            try:
                run()
            except Unsatisfiable:
                assert mode == GenerationMode.NEGATIVE  # e.g. no invalid request exists for GET /healthz
    assert len(seen) >= 7, seen
    assert not any(code >= 500 and code != 503 for codes in seen.values() for code in codes), seen
    assert 200 in seen["POST /v1/diagnose"] and 422 in seen["POST /v1/diagnose"], seen


AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def test_diagnose_with_a_log_returns_a_chart(api_server):
    hist = [{"step": s, "loss": (2.0 - s * 0.01) if s < 25 else float("nan"), "grad_norm": 1.0 if s < 25 else float("nan"), "learning_rate": 1e-5}
            for s in range(1, 40)]
    content = json.dumps({"global_step": 39, "log_history": hist})
    r = httpx.post(api_server.url + "/v1/diagnose", headers=AUTH, timeout=120,
                   json={"question": "loss became nan", "attachments": [{"name": "trainer_state.json", "content": content}]})
    assert r.status_code == 200, r.text[:300]
    d = r.json()
    assert d["plot_url"].startswith("/v1/plots/") and "step 25" in d["plot_alt"]
    img = httpx.get(api_server.url + d["plot_url"], headers=AUTH, timeout=30)
    assert img.status_code == 200 and img.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert httpx.get(api_server.url + "/v1/plots/" + "0" * 32 + ".png", headers=AUTH, timeout=30).status_code == 404
