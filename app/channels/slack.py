"""The Slack bot (slack-bolt): app mentions, DMs, thread follow-ups, buttons and the /trainfix command.

HTTP mode at /slack/events on the server (signing-secret verified by Bolt), or Socket Mode when an app token is set.
It only translates: every answer comes from app.diagnose.diagnose and app.render.to_slack_blocks.

Per-channel options live in a small SQLite file in TRAINFIX_HOME (slack.sqlite):
  mention_only       answer only when mentioned (default on); off = answer every message in the channel
  confident_only     answer only when a case matched confidently (default off)
  quiet_when_unsure  with confident_only: stay silent instead of saying "not sure" (default off)
  ephemeral          answer privately to the asker (default off)

The pieces it uses live next to it: slack_options (that SQLite file), slack_dedupe (event ids already taken),
slack_conversations (recent answers by thread), slack_text (Slack mrkdwn to plain text).
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from starlette.requests import Request

from app.channels.errors import ApiError
from app.channels.slack_conversations import SHOW, Conversation, Conversations
from app.channels.slack_dedupe import Seen
from app.channels.slack_options import OPTIONS, ChannelOptions
from app.channels.slack_text import clean_text
from app.models import Diagnosis
from app.runtime import NotReady, State, Warmup
from app.settings import Settings
from app.store import StoreError, StoreUnavailable

if TYPE_CHECKING:
    from fastapi import FastAPI
    from slack_bolt.adapter.socket_mode import SocketModeHandler

log = logging.getLogger("trainfix.slack")

DEFAULT_API = "https://slack.com/api/"
KEEP = 9  # causes kept for the "more" button

HELP = (
    "*trainfix* diagnoses LLM training failures. Mention me (or DM me) with what you see, and paste your config, "
    "launch command or log in a ``` code block, or attach it as a file. I answer in the thread; reply there to refine.\n"
    "• `/trainfix <question>` — answer privately here\n"
    "• `/trainfix config` — show this channel's options\n"
    "• `/trainfix config mention_only|confident_only|quiet_when_unsure|ephemeral on|off` — change one"
)


def api_base(url: str | None) -> str:
    """The WebClient base URL: Slack's, or a stand-in's (http://127.0.0.1:PORT/api/)."""
    if not url:
        return DEFAULT_API
    u = urlparse(url)
    path = u.path if u.path not in ("", "/") else "/api/"
    if not path.endswith("/"):
        path += "/"
    return f"{u.scheme}://{u.netloc}{path}"


# ---------------------------------------------------------------- the bot


class SlackBot:
    def __init__(self, state: State, warm: Warmup, settings: Settings | None = None) -> None:
        from slack_bolt import App
        from slack_sdk import WebClient

        self.state = state
        self.warm = warm
        self.settings = settings or state.settings
        s = self.settings
        self.token = s.slack_bot_token or ""
        self.base_url = api_base(s.slack_api_url)
        self.client = WebClient(token=self.token, base_url=self.base_url, timeout=20)
        self.options = ChannelOptions(s)
        self.seen = Seen()
        self.convs = Conversations()
        self.max_bytes = int(s.max_upload_mb * 1024 * 1024)
        self.app = App(
            signing_secret=s.slack_signing_secret or "",
            client=self.client,
            process_before_response=True,
            token_verification_enabled=False,  # auth.test happens on the first request, not at import
            logger=logging.getLogger("trainfix.slack.bolt"),
        )
        self._register()

    # ------------------------------------------------------------ wiring
    def _register(self) -> None:
        from slack_bolt import BoltResponse

        app = self.app

        @app.middleware
        def dedupe(body, request, next):  # noqa: A002 - Bolt injects by name
            eid = body.get("event_id") if isinstance(body, dict) else None
            if eid:
                if not self.seen.take(eid):
                    retry = (request.headers.get("x-slack-retry-num") or ["0"])[0]
                    log.info("event %s already taken (retry %s, %s): not answered again", eid, retry, (request.headers.get("x-slack-retry-reason") or ["-"])[0])
                    return BoltResponse(status=200, body="", headers={"x-slack-no-retry": "1"})
                try:
                    return next()
                except Exception:
                    self.seen.forget(eid)  # a failed first attempt may be retried by Slack
                    raise
            return next()

        @app.event("app_mention")
        def on_mention(event, context, client, body):
            self.answer(event, context, client, body.get("event_id"))

        @app.event("message")
        def on_message(event, context, client, body):
            sub = event.get("subtype")
            if sub not in (None, "file_share", "thread_broadcast") or event.get("bot_id"):
                return
            bot = context.get("bot_user_id")
            if event.get("channel_type") == "im":
                self.answer(event, context, client, body.get("event_id"))
                return
            if bot and f"<@{bot}" in (event.get("text") or ""):
                return  # the app_mention event answers it
            if self.options.get(event.get("channel", ""))["mention_only"]:
                return
            self.answer(event, context, client, body.get("event_id"))

        for action_id in ("thumbs_up", "thumbs_down", "fixed"):
            app.action(action_id)(self.on_feedback)
        app.action("more")(self.on_more)
        app.command("/trainfix")(self.on_command)

        @app.error
        def on_error(error, body, logger):
            log.error("slack handler failed: %s", error, exc_info=error)

    # ------------------------------------------------------------ answering
    def _diagnose(self, question: str, atts: list, history: list) -> Diagnosis:
        from app.diagnose import diagnose

        eng = self.warm.engine(wait=20)
        try:
            return diagnose(eng, question, atts, history, top=KEEP, max_bytes=self.max_bytes)
        except StoreUnavailable:
            self.state._engine = None
            raise

    def answer(self, event: dict, context, client, event_id: str | None = None) -> None:
        from app.diagnose import InputError, Turn
        from app.render import slack_text, to_slack_blocks

        channel = event.get("channel", "")
        user = event.get("user", "")
        ts = event.get("ts", "")
        thread_ts = event.get("thread_ts") or ts
        bot = context.get("bot_user_id")
        is_dm = event.get("channel_type") == "im"
        opts = self.options.get(channel)
        ephemeral = opts["ephemeral"] and not is_dm
        text = clean_text(event.get("text", ""), bot)
        atts, notes = self.download(event.get("files") or [], client)
        key = f"{channel}:{thread_ts}"
        history: list[Turn] = []
        if event.get("thread_ts") and event.get("thread_ts") != ts:
            history = self.history(client, channel, thread_ts, ts, bot, key)
        if not text and not atts and not history:
            self.post(client, channel, thread_ts, user, ephemeral, text=HELP)
            return
        log.info("slack question in %s (thread %s, %d file(s), %d earlier turn(s))", channel, thread_ts, len(atts), len(history))
        try:
            d = self._diagnose(text, atts, history)
        except InputError as e:
            self.post(client, channel, thread_ts, user, ephemeral, text=str(e))
            return
        except (ApiError, NotReady) as e:
            self.post(client, channel, thread_ts, user, ephemeral, text=f":warning: {e.message}")
            return
        except StoreError as e:
            self.post(client, channel, thread_ts, user, ephemeral, text=f":warning: {e}")
            return
        prev = self.convs.get(key)
        turns = (prev.turns if prev else []) + [("user", text)]
        if not d.confident and opts["confident_only"]:
            if opts["quiet_when_unsure"]:
                log.info("not confident and the channel asks for quiet: no answer")
                return
            msg = (
                "I could not match this to a known case with confidence. Add your config or log (in a ``` block or as a file) and I will look again."
                if d.language == "en"
                else "没有找到可以确信匹配的已知案例。请附上配置或日志（放在 ``` 代码块里或作为文件），我再看一次。"
            )
            self.post(client, channel, thread_ts, user, ephemeral, text=msg)
            return
        self.convs.put(key, Conversation(channel, thread_ts, user, text, d, ephemeral, SHOW, turns + [("assistant", slack_text(d))]))
        blocks = to_slack_blocks(d, top=SHOW, thread_key=key)
        notes = notes + d.notes
        if notes:
            blocks.insert(-1, {"type": "context", "elements": [{"type": "mrkdwn", "text": "\n".join(notes)[:2900]}]})
        self.post(client, channel, thread_ts, user, ephemeral, text=slack_text(d), blocks=blocks)
        if atts and not ephemeral and thread_ts:  # a chart in a public thread would show a private answer's run
            threading.Thread(target=self.upload_chart, args=(client, channel, thread_ts, d, atts), daemon=True,
                             name="trainfix-slack-chart").start()

    def upload_chart(self, client, channel: str, thread_ts: str, d: Diagnosis, atts: list) -> str | None:
        """The run in the attachments, drawn by the shared chart path (app.plots), uploaded into the thread with Slack's external
        upload flow (files.getUploadURLExternal, POST the bytes, files.completeUploadExternal with channel_id and
        thread_ts). Runs after the answer is posted; a failure (e.g. no files:write scope) costs only the chart."""
        from app.plots import draw_now

        try:
            drawn, png = draw_now(self.state.settings.home, d, atts)
            if png is None:
                return None
            data = png.read_bytes()
            resp = client.files_upload_v2(
                channel=channel, thread_ts=thread_ts, file=data, filename="trainfix-run.png",
                title="Your run" if d.language == "en" else "你的训练曲线", alt_txt=drawn.plot_alt[:1000],
                initial_comment=drawn.plot_alt[:3000],
            )
            files = resp.get("files") or [{}]
            fid = files[0].get("id") if isinstance(files, list) and files else None
            log.info("chart uploaded to %s (thread %s): %s, %d bytes", channel, thread_ts, fid, len(data))
            return fid
        except Exception as e:  # noqa: BLE001 - the answer is already posted; the chart is a bonus
            log.warning("chart upload to %s failed: %s", channel, e)
            return None

    def post(self, client, channel: str, thread_ts: str | None, user: str, ephemeral: bool, text: str, blocks: list | None = None) -> None:
        kw: dict[str, Any] = {"channel": channel, "text": text}
        if blocks:
            kw["blocks"] = blocks
        if thread_ts:
            kw["thread_ts"] = thread_ts
        if ephemeral and user:
            client.chat_postEphemeral(user=user, **kw)
        else:
            client.chat_postMessage(**kw)

    def history(self, client, channel: str, thread_ts: str, ts: str, bot: str | None, key: str) -> list:
        """Earlier turns of the thread, oldest first: from conversations.replies, else from what this process remembers."""
        from app.diagnose import Turn

        try:
            resp = client.conversations_replies(channel=channel, ts=thread_ts, limit=100)
            out = []
            for m in resp.get("messages", []):
                if m.get("ts") == ts or float(m.get("ts", 0) or 0) > float(ts or 0):
                    continue
                mine = bool(m.get("bot_id")) or (bot is not None and m.get("user") == bot)
                content = clean_text(m.get("text", ""), bot)
                if content:
                    out.append(Turn(role="assistant" if mine else "user", content=content))
            return out[-20:]
        except Exception as e:  # noqa: BLE001 - e.g. missing channels:history scope
            log.info("conversations.replies failed (%s): using remembered turns", e)
            conv = self.convs.get(key)
            return [Turn(role=r, content=c) for r, c in (conv.turns if conv else [])]

    def _allowed(self, url: str) -> bool:
        """Only send the bot token to Slack (or the configured Web API stand-in)."""
        host = (urlparse(url).hostname or "").lower()
        mine = (urlparse(self.base_url).hostname or "").lower()
        return host == mine or host == "slack.com" or host.endswith((".slack.com", ".slack-edge.com", ".slack-files.com"))

    def download(self, files: list[dict], client) -> tuple[list, list[str]]:
        """Attached files and snippets as Attachments (downloaded with the bot token); notes for those that could not be."""
        import httpx

        from app.facts import Attachment

        atts: list = []
        notes: list[str] = []
        for f in files[:10]:
            name = f.get("name") or f.get("title") or f.get("id", "file")
            try:
                if not (f.get("url_private_download") or f.get("url_private")) or f.get("file_access") == "check_file_info":
                    f = client.files_info(file=f["id"]).get("file", f)
                    name = f.get("name") or name
                size = int(f.get("size") or 0)
                if size > self.max_bytes:
                    notes.append(f"{name}: {size / 2**20:.1f} MB is over the {self.max_bytes / 2**20:.0f} MB limit; it was skipped.")
                    continue
                url = f.get("url_private_download") or f.get("url_private")
                if not url or not self._allowed(url):
                    notes.append(f"{name}: no download link from Slack; it was skipped.")
                    continue
                r = httpx.get(url, headers={"Authorization": f"Bearer {self.token}"}, follow_redirects=True, timeout=20)
                ctype = r.headers.get("content-type", "")
                if r.status_code != 200 or ("text/html" in ctype and "html" not in (f.get("filetype") or "")):
                    notes.append(f"{name}: could not download it (HTTP {r.status_code}; does the app have the files:read scope?).")
                    continue
                if len(r.content) > self.max_bytes:
                    notes.append(f"{name}: over the {self.max_bytes / 2**20:.0f} MB limit; it was skipped.")
                    continue
                atts.append(Attachment(name=name, content=r.content))
            except Exception as e:  # noqa: BLE001 - one bad file never stops the answer
                log.warning("download of %s failed: %s", name, e)
                notes.append(f"{name}: could not download it ({type(e).__name__}).")
        return atts, notes

    # ------------------------------------------------------------ buttons
    def _where(self, body: dict) -> tuple[str, str, str | None]:
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
        user = (body.get("user") or {}).get("id", "")
        msg = body.get("message") or {}
        cont = body.get("container") or {}
        thread = msg.get("thread_ts") or cont.get("thread_ts") or msg.get("ts") or cont.get("message_ts")
        return channel, user, thread

    def on_feedback(self, ack, body, action, client) -> None:
        from app.render import to_json

        ack()
        channel, user, thread = self._where(body)
        kind = {"thumbs_up": "up", "thumbs_down": "down", "fixed": "fixed"}[action["action_id"]]
        value = action.get("value", "")
        key = value if kind != "fixed" else f"{channel}:{thread}"
        conv = self.convs.get(key)
        items = (conv.diagnosis.causes or conv.diagnosis.related) if conv else []
        case_id = value if kind == "fixed" else (items[0].case_id if items else None)
        question = conv.question if conv else (body.get("message") or {}).get("text", "")
        row = self.state.feedback.add(
            kind, question, answer=to_json(conv.diagnosis) if conv else None, case_id=case_id, channel="slack",
            extra={"user": user, "channel": channel, "thread": key}, item=case_id,  # the case or note the button is about
        )
        log.info("slack feedback %s on %s stored (row %d)", kind, case_id, row)
        thanks = {"up": "Thanks for the feedback.", "down": "Thanks — noted, this answer did not help.", "fixed": "Glad it is fixed — recorded."}[kind]
        if channel and user:
            try:
                client.chat_postEphemeral(channel=channel, user=user, text=thanks, **({"thread_ts": conv.thread_ts} if conv and conv.thread_ts else {}))
            except Exception as e:  # noqa: BLE001 - the row is stored either way
                log.info("could not thank %s: %s", user, e)

    def on_more(self, ack, body, action, client) -> None:
        from app.render import labels, to_slack_blocks

        ack()
        channel, user, thread = self._where(body)
        key = action.get("value", "")
        conv = self.convs.get(key)
        if conv is None:
            self.post(client, channel, thread, user, True, text="I no longer have this conversation in memory: ask again and I will answer afresh.")
            return
        d = conv.diagnosis
        items = d.causes if d.confident else d.related
        nxt = items[conv.shown : conv.shown + SHOW]
        if not nxt:
            self.post(client, conv.channel, conv.thread_ts, user, conv.ephemeral, text="No more causes matched." if d.language == "en" else "没有更多匹配的原因了。")
            return
        start = conv.shown
        conv.shown += len(nxt)
        part = d.model_copy(update={"causes": nxt if d.confident else [], "related": [] if d.confident else nxt, "clarify": None})
        blocks = to_slack_blocks(part, top=SHOW, thread_key=key)
        head = "*More possible causes*" if d.language == "en" else f"*更多{labels('zh')['causes']}*"
        blocks[0] = {"type": "section", "text": {"type": "mrkdwn", "text": head}}
        for b in blocks:
            t = b.get("text", {})
            if b["type"] == "section" and isinstance(t, dict):
                t["text"] = re.sub(r"^\*(\d+)\. ", lambda m: f"*{int(m.group(1)) + start}. ", t["text"])
        self.post(client, conv.channel, conv.thread_ts, user or conv.user, conv.ephemeral, text=nxt[0].title[:150], blocks=blocks)

    # ------------------------------------------------------------ the slash command
    def on_command(self, ack, command, client) -> None:
        from app.diagnose import InputError
        from app.render import slack_text, to_slack_blocks

        text = (command.get("text") or "").strip()
        channel = command.get("channel_id", "")
        user = command.get("user_id", "")
        words = text.split()
        if not words or words[0].lower() in ("help", "-h", "--help"):
            ack(text=HELP)
            return
        if words[0].lower() == "config":
            ack(text=self.configure(channel, user, words[1:]))
            return
        try:
            d = self._diagnose(clean_text(text), [], [])
        except InputError as e:
            ack(text=str(e))
            return
        except (ApiError, NotReady, StoreError) as e:
            ack(text=f":warning: {getattr(e, 'message', str(e))}")
            return
        key = f"{channel}:cmd-{uuid.uuid4().hex[:12]}"
        self.convs.put(key, Conversation(channel, None, user, text, d, True, SHOW, [("user", text)]))
        ack(response_type="ephemeral", text=slack_text(d), blocks=to_slack_blocks(d, top=SHOW, thread_key=key))

    def configure(self, channel: str, user: str, args: list[str]) -> str:
        """`/trainfix config [option on|off]` — anyone in the channel may change it for now (no admin check yet)."""
        usage = "usage: `/trainfix config " + "|".join(OPTIONS) + " on|off`"
        if not args:
            cur = self.options.get(channel)
            return "Options for this channel:\n" + "\n".join(f"• `{k}`: {'on' if v else 'off'}" for k, v in cur.items()) + "\n" + usage
        if len(args) != 2 or args[0] not in OPTIONS or args[1].lower() not in ("on", "off", "true", "false", "yes", "no", "1", "0"):
            return usage
        val = args[1].lower() in ("on", "true", "yes", "1")
        self.options.set(channel, args[0], val, user)
        log.info("channel %s: %s set %s=%s", channel, user, args[0], val)
        return f"`{args[0]}` is now {'on' if val else 'off'} in this channel."


# ---------------------------------------------------------------- mounting


def install(app: FastAPI, state: State, warm: Warmup) -> SlackBot | None:
    """POST /slack/events on the FastAPI app. Returns the SlackBot, or None when Slack is not configured."""
    from app.channels.errors import error_response

    s = state.settings
    if not (s.slack_signing_secret and s.slack_bot_token):

        @app.post("/slack/events", include_in_schema=False)
        async def slack_off(request: Request):
            return error_response(503, "slack_not_configured", "Slack is not configured: set TRAINFIX_SLACK_SIGNING_SECRET and TRAINFIX_SLACK_BOT_TOKEN.")

        return None

    from slack_bolt.adapter.fastapi import SlackRequestHandler
    from slack_bolt.adapter.starlette.handler import to_bolt_request, to_starlette_response
    from starlette.concurrency import run_in_threadpool

    bot = SlackBot(state, warm, s)

    class ThreadedHandler(SlackRequestHandler):
        """Bolt's FastAPI handler dispatches synchronously inside the event loop; run the dispatch in the threadpool
        instead, so a diagnosis in progress (process_before_response=True) does not stall every other request."""

        async def handle(self, req: Request, addition_context_properties: dict[str, Any] | None = None):
            if req.method != "POST":
                return await super().handle(req, addition_context_properties)
            ts = req.headers.get("x-slack-request-timestamp", "")
            if not ts.strip().isdigit():  # Bolt's verifier would fail with a 500 on a non-numeric timestamp
                return error_response(401, "unauthorized", "missing or malformed X-Slack-Request-Timestamp: the request is not signed by Slack")
            body = await req.body()
            bolt_req = to_bolt_request(req, body, addition_context_properties)
            return to_starlette_response(await run_in_threadpool(self.app.dispatch, bolt_req))

    handler = ThreadedHandler(bot.app)

    @app.post("/slack/events", include_in_schema=False)
    async def slack_events(request: Request):
        return await handler.handle(request)

    return bot


def start_socket_mode(bot: SlackBot, app_token: str) -> SocketModeHandler:
    """Socket Mode for teams without a public URL: a websocket to Slack instead of /slack/events."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    handler = SocketModeHandler(bot.app, app_token)
    handler.connect()  # background threads; the HTTP server keeps running
    log.info("Slack Socket Mode connected")
    return handler
