"""The one place secrets are hidden before anything is written or shown: run.json, cells.json,
logs, error messages, build lines and reports all go through it.

Three kinds of secret, all become ``***``:

- the value under a key that names one (``HF_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, ``*KEY*``, ``GH_PAT``,
  ``MY_PASS``: ``is_secret_key``) in data written (an image's ``env``);
- **by value**: every value of this process's environment variables whose names look secret (the
  run-time secrets such as HF_TOKEN included) and of any secret ``remember``ed, wherever it appears in
  text written or printed (``--note``, the command, a log tail, an error message), also percent-encoded;
- the credentials of a URL, found by its scheme and parsed with ``urllib.parse`` (not a pattern that
  stops at a quote): the user and password of ``https://user:pa'ss@host/``, and the values of query
  parameters whose names look secret (``?token=``, ``&sig=``).
"""
import os
import re
from typing import Any, Iterable, List, Mapping, Set
from urllib.parse import quote, urlsplit, urlunsplit

HIDDEN = "***"
SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
# whole words of a key (split at _ - . and case): GH_PAT, MY_PASS, DB_PWD; not PATH, not COMPASS
SECRET_WORDS = frozenset({"PAT", "PASS", "PWD", "SIG", "SIGNATURE", "APIKEY", "SESSION", "COOKIE"})
MIN_SECRET_CHARS = 4   # shorter values would hide every "a" in a log
# keys that match the patterns but hold where things are, not secrets: hiding their values would hide the
# working directory (PWD) or a socket's path in every line that names a file under it
NOT_SECRET_KEYS = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK", "XAUTHORITY", "GPG_AGENT_INFO"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_remembered: Set[str] = set()


def is_secret_key(key: Any) -> bool:
    if not isinstance(key, str) or key.upper() in NOT_SECRET_KEYS:
        return False
    return bool(SECRET_KEY.search(key)) or any(word.upper() in SECRET_WORDS for word in re.split(r"[^A-Za-z0-9]+", key))


def remember(values: Iterable[Any]) -> None:
    """Secret values to hide from everything written or printed from now on (an image's env secrets)."""
    _remembered.update(str(value) for value in values if value is not None and len(str(value)) >= MIN_SECRET_CHARS)


def known_secrets() -> List[str]:
    """Every secret value this process knows: its environment's secret-named variables and the remembered
    ones, longest first (a secret holding another is hidden whole)."""
    found = set(_remembered) | set(secrets(os.environ))
    return sorted(found, key=len, reverse=True)


def secrets(env: Mapping[str, Any]) -> list:
    """The values of ``env`` whose keys name secrets (long enough to hide safely)."""
    return [str(value) for key, value in env.items()
            if is_secret_key(key) and value is not None and len(str(value)) >= MIN_SECRET_CHARS]


def redact_urls(value: Any) -> str:
    """``value`` as text with every known secret value (``known_secrets``) and every URL's credentials
    replaced by ``***``: what any line printed goes through."""
    return redact_text(str(value))


def _redact_urls_only(text: str) -> str:
    out, position = [], 0
    for match in _SCHEME.finditer(text):
        if match.start() < position:
            continue
        end = _url_end(text, match.start())
        out.append(text[position:match.start()])
        out.append(_redact_url(text[match.start():end]))
        position = end
    out.append(text[position:])
    return "".join(out)


def _url_end(text: str, start: int) -> int:
    """Where the URL starting at ``start`` ends: at white space; a quote or bracket ends it only after the
    host (a password may hold ``'``), or where the quote closes one that opened right before the URL."""
    end = start
    while end < len(text) and not text[end].isspace():
        end += 1
    opener = text[start - 1] if start > 0 else ""
    closer = {"'": "'", '"': '"', "(": ")", "<": ">", "[": "]"}.get(opener)
    if closer:
        at = text.rfind(closer, start, end)
        if at > text.find("@", start, end) and at != -1:
            end = at
    return end


def _redact_url(word: str) -> str:
    try:
        parts = urlsplit(word)
    except ValueError:
        return _hide_userinfo(word)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{HIDDEN}@" + netloc.rsplit("@", 1)[1]
    query = "&".join(_hide_param(piece) for piece in parts.query.split("&")) if parts.query else parts.query
    fragment = "&".join(_hide_param(piece) for piece in parts.fragment.split("&")) if "=" in parts.fragment \
        else parts.fragment
    return urlunsplit(parts._replace(netloc=netloc, query=query, fragment=fragment))


def _hide_userinfo(word: str) -> str:
    scheme, _, rest = word.partition("://")
    return f"{scheme}://{HIDDEN}@{rest.rsplit('@', 1)[1]}" if "@" in rest else word


def _hide_param(piece: str) -> str:
    name, equals, value = piece.partition("=")
    return f"{name}={HIDDEN}" if equals and value and is_secret_key(name) else piece


def redact_text(text: str, hide: Iterable[str] = ()) -> str:
    """``text`` with each of ``hide`` (secret values), every known secret value (``known_secrets``, also
    percent-encoded) and every URL's credentials as ``***``."""
    text = str(text)
    values = sorted({str(value) for value in hide if value and len(str(value)) >= MIN_SECRET_CHARS}
                    | set(known_secrets()), key=len, reverse=True)
    for value in values:
        for form in {value, quote(value, safe="")}:
            if form in text:
                text = text.replace(form, HIDDEN)
    return _redact_urls_only(text) if "://" in text else text


def redact_data(data: Any) -> Any:
    """A copy of JSON-like ``data`` to write: values under secret-naming keys become ``***`` and
    credentials in URLs vanish, at any depth."""
    if isinstance(data, Mapping):
        return {key: HIDDEN if is_secret_key(key) and isinstance(value, (str, int, float)) else redact_data(value)
                for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(item) for item in data]
    if isinstance(data, str):
        return redact_text(data)
    return data
