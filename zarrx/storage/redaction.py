"""Credentials never appear in what zarrx shows: messages, ``repr``, chained errors.

:func:`redact` removes them from any text zarrx puts in an error message or a ``repr``:
``user:password@`` in URLs, signature and token query parameters (``X-Amz-Signature``,
``sig``, ``token``, ...), and the values of the secret storage options, which
:func:`secret_values` finds at any depth (``key``, ``secret``, ``token``, ``password``,
``Authorization`` headers, ``aiohttp.BasicAuth`` passwords, ...). :func:`url_passwords`
finds the passwords written in a (chained) URL, :func:`scrub` redacts an exception and the
errors it was raised from, in place (a back end may have put a credential into its message).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping
from urllib.parse import quote, urlsplit

__all__ = ["REDACTED", "redact", "secret_values", "url_passwords", "scrub"]

#: storage options whose values are credentials (s3fs, gcsfs, adlfs, HTTP and common spellings)
SECRET_OPTION = re.compile(
    r"(^|[_-])(key|secret|token|password|passwd|credentials?|auth|authorization|sas|signature|sig|connection_string)"
    r"s?($|[_-])",
    re.IGNORECASE,
)
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s'\"]+@")
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&;](?:[^=&\s'\"]*(?:signature|token|credential|secret|password|key|sig|sas)[^=&\s'\"]*))"
    r"=[^&\s'\"]*",
    re.IGNORECASE,
)
REDACTED = "***"
#: shorter values are not worth hiding (and would redact ordinary words)
MIN_SECRET_LENGTH = 3


def secret_values(storage_options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The string values of secret-looking options, at any depth (``s3={"secret": ...}``).

    Examples
    --------
    >>> secret_values({"key": "AKIA123", "anon": False, "s3": {"token": "t-456"}})
    ('AKIA123', 't-456')
    """
    found: list[str] = []

    def walk(options: Any, depth: int) -> None:
        if depth > 4 or not isinstance(options, Mapping):
            return
        for name, value in options.items():
            if isinstance(value, Mapping):
                walk(value, depth + 1)
            elif isinstance(getattr(value, "password", None), str) and len(value.password) >= MIN_SECRET_LENGTH:
                found.append(value.password)  # aiohttp.BasicAuth in client_kwargs["auth"]
            elif (
                isinstance(name, str) and SECRET_OPTION.search(name)
                and isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH
            ):  # fmt: skip
                found.append(value)

    walk(storage_options, 0)
    return tuple(sorted(set(found), key=len, reverse=True))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with credentials replaced by ``***``.

    Examples
    --------
    >>> redact("https://user:pa55@example.com/x.zarr?X-Amz-Signature=abc&v=1")
    'https://***@example.com/x.zarr?X-Amz-Signature=***&v=1'
    >>> redact("key AKIA123 rejected", secrets=["AKIA123"])
    'key *** rejected'
    """
    text = _URL_USERINFO.sub(lambda m: m["scheme"] + REDACTED + "@", text)
    text = _SECRET_QUERY.sub(lambda m: m["name"] + "=" + REDACTED, text)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def url_passwords(url: str) -> tuple[str, ...]:
    """The passwords of ``user:password@`` in each URL of a (chained) fsspec URL.

    Examples
    --------
    >>> url_passwords("simplecache::https://reader:s3cret@example.org/x.zarr")
    ('s3cret',)
    """
    passwords = []
    for part in url.split("::"):
        try:
            password = urlsplit(part).password
        except ValueError:  # an invalid port or netloc: nothing to find
            continue
        if password and len(password) >= MIN_SECRET_LENGTH:
            passwords.append(password)
            passwords.append(quote(password, safe=""))  # as it may appear percent-encoded
    return tuple(dict.fromkeys(passwords))


def scrub(error: BaseException | None, secrets: tuple[str, ...]) -> None:
    """Redact credentials in ``error`` and the errors it was raised from, in place.

    zarrx chains a back end's error to its StoreError (``raise ... from error``), so a
    traceback or ``logger.exception`` shows it; a back end may have put a key, a secret or a
    URL with its password into it.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen and len(seen) < 16:
        seen.add(id(error))
        if redact(str(error), secrets) != str(error) or any(redact(repr(arg), secrets) != repr(arg) for arg in error.args):
            error.args = tuple(redact(arg, secrets) if isinstance(arg, str) else arg for arg in error.args)
            if isinstance(error, OSError):
                for name in ("strerror", "filename", "filename2"):
                    value = getattr(error, name, None)
                    if isinstance(value, str):
                        setattr(error, name, redact(value, secrets))
        error = error.__cause__ or error.__context__
