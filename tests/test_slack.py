"""The Slack bot end to end: signed requests POSTed to the running server's /slack/events; the bot's Web API calls go
to a local stand-in for Slack (the WebClient base URL points at it), which records them."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from urllib.parse import urlencode

import httpx
import pytest
from conftest import SLACK_BOT_TOKEN, SlackStandIn, slack_sign

DS_FP32 = '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32",\n  "zero_optimization": {"stage": 2}\n}'
TOP_CASE = "deepspeed-comm-dtype-fp32-loss-zero"
TOP_TITLE = "Full fine-tune loss drops to 0 within a few steps when DeepSpeed forces fp32 communication"
CITATION = "https://github.com/QwenLM/Qwen/issues/967"
BOT = SlackStandIn.BOT_USER


def _ts() -> str:
    return f"{time.time():.6f}"


def event_body(event: dict, event_id: str | None = None) -> bytes:
    return json.dumps({
        "token": "legacy", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}", "event_time": int(time.time()),
        "authorizations": [{"team_id": "T0001", "user_id": BOT, "is_bot": True}], "event": event,
    }).encode()


def post_slack(server, body: bytes, content_type: str = "application/json", **headers: str) -> httpx.Response:
    h = {"Content-Type": content_type, **slack_sign(body), **headers}
    return httpx.post(server.url + "/slack/events", content=body, headers=h, timeout=120)


def mention(channel: str, text: str, ts: str | None = None, thread_ts: str | None = None, files: list | None = None) -> dict:
    ev = {"type": "app_mention", "user": "U0ASKER", "text": f"<@{BOT}> {text}", "ts": ts or _ts(), "channel": channel, "event_ts": ts or _ts()}
    if thread_ts:
        ev["thread_ts"] = thread_ts
    if files:
        ev["files"] = files
    return ev


def posts(standin: SlackStandIn, channel: str, method: str = "chat.postMessage") -> list[dict]:
    return [c["params"] for c in standin.calls_to(method) if c["params"].get("channel") == channel]


def blocks_text(params: dict) -> str:
    blocks = params["blocks"]
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    return json.dumps(blocks, ensure_ascii=False)


def action_body(action_id: str, value: str, channel: str, thread_ts: str, msg_ts: str = "1800000000.000001") -> bytes:
    payload = {
        "type": "block_actions", "team": {"id": "T0001"}, "user": {"id": "U0ASKER"}, "api_app_id": "A0001",
        "token": "legacy", "trigger_id": "trig", "channel": {"id": channel}, "response_url": "https://hooks.slack.invalid/x",
        "container": {"type": "message", "message_ts": msg_ts, "channel_id": channel, "thread_ts": thread_ts},
        "message": {"ts": msg_ts, "thread_ts": thread_ts, "text": "answer"},
        "actions": [{"action_id": action_id, "block_id": "answer-feedback", "value": value, "type": "button", "action_ts": _ts()}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def command_body(text: str, channel: str) -> bytes:
    return urlencode({
        "token": "legacy", "team_id": "T0001", "channel_id": channel, "user_id": "U0ASKER", "command": "/trainfix",
        "text": text, "response_url": "https://hooks.slack.invalid/cmd", "trigger_id": "trig", "api_app_id": "A0001",
    }).encode()


@pytest.fixture()
def channel() -> str:
    return "C" + uuid.uuid4().hex[:8].upper()


def test_app_mention_with_code_block_answered_in_thread(api_server, slack_standin, channel):
    ts = _ts()
    text = "full fine-tune, loss goes to 0 after 10 steps. my config:\n```" + DS_FP32 + "```"
    body = event_body(mention(channel, text, ts=ts), event_id="Ev" + uuid.uuid4().hex[:12].upper())
    r = post_slack(api_server, body)
    assert r.status_code == 200, r.text
    got = posts(slack_standin, channel)
    assert len(got) == 1
    msg = got[0]
    assert msg["thread_ts"] == ts
    blocks = blocks_text(msg)
    assert TOP_TITLE in blocks
    assert CITATION in blocks
    assert msg["text"] == TOP_TITLE  # the notification / fallback text
    first = json.loads(blocks)[1]["text"]["text"]
    assert first.startswith(f"*1. {TOP_TITLE}*")
    assert slack_standin.calls_to("auth.test")[0]["authorization"] == f"Bearer {SLACK_BOT_TOKEN}"

    # Slack retries the same event (e.g. it did not see the 200 in time): not answered twice
    r = post_slack(api_server, body, **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    assert r.status_code == 200
    assert r.headers.get("x-slack-no-retry") == "1"
    assert len(posts(slack_standin, channel)) == 1


def test_bad_signature_is_refused(api_server, slack_standin, channel):
    body = event_body(mention(channel, "loss is nan"))
    headers = {"Content-Type": "application/json", **slack_sign(body, secret="not-the-secret")}
    r = httpx.post(api_server.url + "/slack/events", content=body, headers=headers, timeout=60)
    assert r.status_code == 401
    stale = {"Content-Type": "application/json", **slack_sign(body, ts=int(time.time()) - 3600)}
    assert httpx.post(api_server.url + "/slack/events", content=body, headers=stale, timeout=60).status_code == 401
    assert httpx.post(api_server.url + "/slack/events", content=body, headers={"Content-Type": "application/json"}, timeout=60).status_code == 401
    assert posts(slack_standin, channel) == []


def test_url_verification_challenge(api_server):
    body = json.dumps({"token": "legacy", "challenge": "abc123", "type": "url_verification"}).encode()
    r = post_slack(api_server, body)
    assert r.status_code == 200 and "abc123" in r.text


def test_attached_file_is_downloaded_with_the_bot_token(api_server, slack_standin, channel):
    f = slack_standin.add_file("F0DSCONF1", "ds_config.json", DS_FP32.encode())
    ts = _ts()
    r = post_slack(api_server, event_body(mention(channel, "loss collapses to zero after a few steps, config attached", ts=ts, files=[f])))
    assert r.status_code == 200
    dl = [d for d in slack_standin.downloads if "F0DSCONF1" in d["path"]]
    assert dl and dl[0]["authorization"] == f"Bearer {SLACK_BOT_TOKEN}"
    msg = posts(slack_standin, channel)[0]
    assert msg["thread_ts"] == ts and TOP_TITLE in blocks_text(msg)
    assert "ds_config.json:3" in blocks_text(msg)  # evidence points at the line of the downloaded file


def test_file_needing_files_info_is_looked_up(api_server, slack_standin, channel):
    slack_standin.add_file("F0DSCONF2", "ds.json", DS_FP32.encode())
    stub = {"id": "F0DSCONF2", "file_access": "check_file_info"}
    r = post_slack(api_server, event_body(mention(channel, "loss goes to 0", files=[stub])))
    assert r.status_code == 200
    assert any(c["params"].get("file") == "F0DSCONF2" for c in slack_standin.calls_to("files.info"))
    assert TOP_TITLE in blocks_text(posts(slack_standin, channel)[0])


def test_thread_follow_up_uses_the_conversation(api_server, slack_standin, channel):
    root_ts = _ts()
    slack_standin.replies[(channel, root_ts)] = [
        {"type": "message", "user": "U0ASKER", "ts": root_ts, "text": f"<@{BOT}> my run:\n```" + DS_FP32 + "```"},
        {"type": "message", "bot_id": SlackStandIn.BOT_ID, "user": BOT, "ts": f"{float(root_ts) + 1:.6f}", "text": "Which optimizer?"},
    ]
    follow_ts = f"{float(root_ts) + 2:.6f}"
    r = post_slack(api_server, event_body(mention(channel, "the loss goes to 0 after 10 steps, what should I change?", ts=follow_ts, thread_ts=root_ts)))
    assert r.status_code == 200
    assert any(c["params"].get("ts") == root_ts for c in slack_standin.calls_to("conversations.replies"))
    msg = posts(slack_standin, channel)[-1]
    assert msg["thread_ts"] == root_ts  # in the thread, not under the follow-up
    assert TOP_TITLE in blocks_text(msg)


def test_direct_message_is_answered(api_server, slack_standin):
    dm = "D" + uuid.uuid4().hex[:8].upper()
    ts = _ts()
    ev = {"type": "message", "channel_type": "im", "user": "U0ASKER", "channel": dm, "ts": ts, "text": "loss drops to 0\n```json\n" + DS_FP32 + "\n```"}
    assert post_slack(api_server, event_body(ev)).status_code == 200
    msg = posts(slack_standin, dm)[0]
    assert msg["thread_ts"] == ts and TOP_TITLE in blocks_text(msg)
    # the bot's own messages (and other bots') are not answered
    own = {"type": "message", "channel_type": "im", "user": BOT, "bot_id": SlackStandIn.BOT_ID, "channel": dm, "ts": _ts(), "text": "Likely causes"}
    assert post_slack(api_server, event_body(own)).status_code == 200
    assert len(posts(slack_standin, dm)) == 1


def test_channel_message_without_mention_only_when_mention_only_is_off(api_server, slack_standin, channel):
    ev = {"type": "message", "channel_type": "channel", "user": "U0ASKER", "channel": channel, "ts": _ts(), "text": "loss goes to 0\n```json\n" + DS_FP32 + "\n```"}
    assert post_slack(api_server, event_body(ev)).status_code == 200
    assert posts(slack_standin, channel) == []  # default: answer only when mentioned
    r = post_slack(api_server, command_body("config mention_only off", channel), "application/x-www-form-urlencoded")
    assert r.status_code == 200 and "now off" in r.text
    ev["ts"] = _ts()
    assert post_slack(api_server, event_body(ev)).status_code == 200
    assert TOP_TITLE in blocks_text(posts(slack_standin, channel)[0])


def test_feedback_buttons_land_in_the_feedback_store(api_server, slack_standin, server_home, channel):
    ts = _ts()
    post_slack(api_server, event_body(mention(channel, "loss goes to 0\n```json\n" + DS_FP32 + "\n```", ts=ts)))
    blocks = json.loads(blocks_text(posts(slack_standin, channel)[0]))
    buttons: dict[str, str] = {}
    for b in blocks:
        for e in b.get("elements", []) if b["type"] == "actions" else []:
            buttons.setdefault(e["action_id"], e["value"])  # the first "fixed" belongs to the top cause
    assert {"thumbs_up", "thumbs_down", "more", "fixed"} <= set(buttons)
    for action in ("thumbs_up", "fixed"):
        r = post_slack(api_server, action_body(action, buttons[action], channel, ts), "application/x-www-form-urlencoded")
        assert r.status_code == 200, r.text
    db = sqlite3.connect(str(server_home / "feedback.sqlite"))
    try:
        rows = db.execute("select kind, case_id, question, extra from feedback where channel = 'slack'").fetchall()
    finally:
        db.close()
    mine = [r for r in rows if json.loads(r[3]).get("channel") == channel]
    assert {(k, c) for k, c, _, _ in mine} == {("up", TOP_CASE), ("fixed", TOP_CASE)}
    assert all("loss goes to 0" in q for _, _, q, _ in mine)
    thanks = posts(slack_standin, channel, "chat.postEphemeral")
    assert len(thanks) == 2 and all(t["user"] == "U0ASKER" for t in thanks)


def test_more_button_posts_the_next_causes(api_server, slack_standin, channel):
    ts = _ts()
    post_slack(api_server, event_body(mention(channel, "loss goes to 0\n```json\n" + DS_FP32 + "\n```", ts=ts)))
    first = posts(slack_standin, channel)[0]
    shown = [b["text"]["text"] for b in json.loads(blocks_text(first)) if b["type"] == "section"][1:]
    r = post_slack(api_server, action_body("more", f"{channel}:{ts}", channel, ts), "application/x-www-form-urlencoded")
    assert r.status_code == 200
    more = posts(slack_standin, channel)
    assert len(more) == 2 and more[1]["thread_ts"] == ts
    sections = [b["text"]["text"] for b in json.loads(blocks_text(more[1])) if b["type"] == "section"]
    assert sections[0].startswith("*More")
    assert sections[1].startswith("*4. ")
    assert not set(sections[1:]) & set(shown)


def test_confident_only_quiet_and_ephemeral_options(api_server, slack_standin, channel):
    def cmd(text: str) -> str:
        r = post_slack(api_server, command_body(text, channel), "application/x-www-form-urlencoded")
        assert r.status_code == 200
        return r.text

    assert "mention_only" in cmd("config")
    assert "usage" in cmd("config loudness 11")
    cmd("config confident_only on")
    cmd("config quiet_when_unsure on")
    vague = "hello, anyone around today?"
    post_slack(api_server, event_body(mention(channel, vague)))
    assert posts(slack_standin, channel) == []  # not confident and the channel wants quiet
    cmd("config quiet_when_unsure off")
    post_slack(api_server, event_body(mention(channel, vague)))
    said = posts(slack_standin, channel)
    assert len(said) == 1 and "confidence" in said[0]["text"] and "blocks" not in said[0]
    cmd("config ephemeral on")
    post_slack(api_server, event_body(mention(channel, "loss goes to 0\n```json\n" + DS_FP32 + "\n```")))
    eph = posts(slack_standin, channel, "chat.postEphemeral")
    assert len(eph) == 1 and eph[0]["user"] == "U0ASKER" and TOP_TITLE in blocks_text(eph[0])
    assert len(posts(slack_standin, channel)) == 1
    assert "`ephemeral`: on" in cmd("config")


def test_slash_command_answers_privately(api_server, channel):
    r = post_slack(api_server, command_body("loss goes to 0 after 10 steps with communication_data_type fp32 in my deepspeed config", channel), "application/x-www-form-urlencoded")
    assert r.status_code == 200
    body = r.json()
    assert body["response_type"] == "ephemeral"
    assert TOP_TITLE in json.dumps(body["blocks"], ensure_ascii=False)
    help_ = post_slack(api_server, command_body("", channel), "application/x-www-form-urlencoded")
    assert "/trainfix config" in help_.text


def test_socket_mode_asks_slack_for_a_websocket_with_the_app_token(slack_standin):
    """Socket Mode opens its connection through apps.connections.open with the app-level token; the stand-in refuses
    it, and the error reaches the caller instead of a silent background failure."""
    from types import SimpleNamespace

    from slack_bolt import App
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

    from app.channels.slack import start_socket_mode

    client = WebClient(token=SLACK_BOT_TOKEN, base_url=slack_standin.url + "/api/")
    app = App(client=client, signing_secret="s", token_verification_enabled=False, authorize=lambda **_: None)
    before = len(slack_standin.calls)
    with pytest.raises(SlackApiError):
        start_socket_mode(SimpleNamespace(app=app), "xapp-1-test-token")
    opened = [c for c in slack_standin.calls[before:] if c["method"] == "apps.connections.open"]
    assert opened and opened[0]["authorization"] == "Bearer xapp-1-test-token"


def test_slack_text_cleanup():
    from app.channels.slack import clean_text

    raw = f"<@{BOT}> see <https://x.example/a|this> and <#C1|general>: ```{{&quot;a&quot;: 1, &quot;b&quot;: &lt;2&gt;}}```"
    out = clean_text(raw, BOT)
    assert out.startswith("see this (https://x.example/a) and #general:")
    assert '```\n{"a": 1, "b": <2>}\n```' in out
    assert clean_text("```json\n{}\n```") == "```json\n{}\n```"


def test_garbage_timestamp_is_401_not_500(api_server):
    body = json.dumps({"type": "event_callback", "event": {"type": "app_mention", "text": "hi"}}).encode()
    for ts in ("garbage", "", "12ab"):
        r = httpx.post(api_server.url + "/slack/events", content=body, timeout=30,
                       headers={"Content-Type": "application/json", "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=00"})
        assert r.status_code == 401, (ts, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "unauthorized"


def test_run_chart_uploaded_into_the_thread(api_server, slack_standin, channel):
    """A trainer_state.json attached to a mention: the answer is posted, then the run's chart goes into the same thread
    through Slack's external upload flow (getUploadURLExternal -> POST bytes -> completeUploadExternal)."""
    from ui_helpers import nan_trainer_state

    f = slack_standin.add_file("F0STATE01", "trainer_state.json", nan_trainer_state(nan_from=210).encode())
    ts = _ts()
    before = len(slack_standin.calls)
    r = post_slack(api_server, event_body(mention(channel, "loss became NaN after a grad_norm spike, state attached", ts=ts, files=[f])))
    assert r.status_code == 200
    assert posts(slack_standin, channel)[0]["thread_ts"] == ts  # the answer first
    deadline = time.time() + 60
    while time.time() < deadline and not [s for s in slack_standin.shared if s["channel_id"] == channel]:
        time.sleep(0.2)
    shared = [s for s in slack_standin.shared if s["channel_id"] == channel]
    assert len(shared) == 1, slack_standin.shared
    up = shared[0]
    assert up["thread_ts"] == ts  # in the asker's thread, not the channel
    assert up["data"][:8] == b"\x89PNG\r\n\x1a\n" and len(up["data"]) > 5000
    assert "step 210" in (up["alt_txt"] or "") and "step 210" in (up["initial_comment"] or "")
    flow = [c["method"] for c in slack_standin.calls[before:] if c["method"].startswith("files.") and c["method"].endswith("External")]
    assert flow == ["files.getUploadURLExternal", "files.completeUploadExternal"], flow
    got = [c for c in slack_standin.calls[before:] if c["method"] == "files.getUploadURLExternal"][0]
    assert int(got["params"]["length"]) == len(up["data"]) and got["authorization"] == f"Bearer {SLACK_BOT_TOKEN}"


def test_upload_standin_refuses_a_completion_without_the_bytes(slack_standin):
    """The stand-in holds the protocol: completing an upload whose bytes never reached upload_url fails, as on Slack."""
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

    client = WebClient(token=SLACK_BOT_TOKEN, base_url=slack_standin.url + "/api/")
    got = client.files_getUploadURLExternal(filename="x.png", length=10)
    with pytest.raises(SlackApiError) as e:
        client.files_completeUploadExternal(files=[{"id": got["file_id"], "title": "x"}], channel_id="C1")
    assert e.value.response["error"] == "file_not_found"
    with pytest.raises(SlackApiError):
        WebClient(token="xoxb-wrong", base_url=slack_standin.url + "/api/").files_getUploadURLExternal(filename="x.png", length=10)
