"""The one place secrets are hidden before anything is written or shown: run.json, cells.json,
logs, error messages, build lines and reports all go through it.

Two kinds of secret: the value of an environment-like key that names one (``HF_TOKEN``,
``*_SECRET``, ``*PASSWORD*``, ``*KEY*``: an image's ``env``, the run-time secrets), and the
credentials in a URL (``https://user:TOKEN@host/simple``: an index URL). Both become ``***``.
"""
import re
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

HIDDEN = "***"
SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
MIN_SECRET_CHARS = 4   # shorter values would hide every "a" in a log
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(SECRET_KEY.search(key))


def secrets(env: Mapping[str, Any]) -> list:
    """The values of ``env`` whose keys name secrets (long enough to hide safely)."""
    return [str(value) for key, value in env.items()
            if is_secret_key(key) and value is not None and len(str(value)) >= MIN_SECRET_CHARS]


def redact_urls(value: Any) -> str:
    """``value`` as text with every URL's user and password replaced by ``***``."""
    return _URL.sub(lambda match: _redact_url(match.group(0)), str(value))


def _redact_url(word: str) -> str:
    try:
        parts = urlsplit(word)
    except ValueError:
        return word
    if "@" not in parts.netloc:
        return word
    return urlunsplit(parts._replace(netloc=f"{HIDDEN}@" + parts.netloc.rsplit("@", 1)[1]))


def redact_text(text: str, hide: Iterable[str] = ()) -> str:
    """``text`` with each of ``hide`` (secret values) and every URL's credentials as ``***``."""
    for value in hide:
        if value and len(str(value)) >= MIN_SECRET_CHARS:
            text = text.replace(str(value), HIDDEN)
    return redact_urls(text) if "://" in text else text


def redact_data(data: Any) -> Any:
    """A copy of JSON-like ``data`` to write: values under secret-naming keys become ``***`` and
    credentials in URLs vanish, at any depth."""
    if isinstance(data, Mapping):
        return {key: HIDDEN if is_secret_key(key) and isinstance(value, (str, int, float)) else redact_data(value)
                for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(item) for item in data]
    if isinstance(data, str) and "://" in data:
        return redact_urls(data)
    return data
