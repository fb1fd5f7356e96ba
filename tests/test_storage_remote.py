"""zarrx.storage.remote: zarrx's storage options, per-protocol defaults, redaction (no servers)."""

from __future__ import annotations

import asyncio
import pickle
from types import SimpleNamespace

import aiohttp
import pytest
from fsspec.implementations.http import HTTPFileSystem

from zarrx.errors import ReadOnlyError, StoreError, UsageError
from zarrx.storage import FsspecStore, make_store
from zarrx.storage.remote import (
    DEFAULT_MAX_CONCURRENCY,
    HttpClientFactory,
    RemoteOptions,
    RetryMiddleware,
    backoff,
    configure,
    redact,
    secret_values,
    split_storage_options,
)


#: zarrx's options, their environment variables, defaults and a value to set
OPTION_TABLE = [
    ("max_concurrency", "ZARRX_MAX_CONCURRENCY", DEFAULT_MAX_CONCURRENCY, "128", 128),
    ("retries", "ZARRX_RETRIES", 5, "0", 0),
    ("timeout", "ZARRX_TIMEOUT", 30.0, "2.5", 2.5),
    ("connect_timeout", "ZARRX_CONNECT_TIMEOUT", 10.0, "1.5", 1.5),
    ("request_deadline", "ZARRX_REQUEST_DEADLINE", 60.0, "7", 7.0),
    ("batch_deadline", "ZARRX_BATCH_DEADLINE", 1800.0, "60", 60.0),
    ("max_read_size", "ZARRX_MAX_READ_SIZE", 128 * 2**20, "1024", 1024),
]


@pytest.mark.parametrize("name, variable, default, text, value", OPTION_TABLE)
def test_defaults_and_environment(monkeypatch, name, variable, default, text, value):
    monkeypatch.delenv(variable, raising=False)
    assert getattr(RemoteOptions(), name) == default
    monkeypatch.setenv(variable, text)
    assert getattr(RemoteOptions(), name) == value
    other = 3 if isinstance(value, int) else 0.25
    assert getattr(RemoteOptions(**{name: other}), name) == other  # an option beats the environment
    assert DEFAULT_MAX_CONCURRENCY > 10


def test_every_default_is_finite():
    options = RemoteOptions()
    assert options.request_deadline < 600 and options.batch_deadline < 7200 and options.timeout < 120


def test_unknown_zarrx_options_are_refused():
    with pytest.raises(UsageError, match="zarrx_request_deadline"):
        split_storage_options({"zarrx_request_dedline": 3})


@pytest.mark.parametrize(
    "options, message",
    [
        ({"zarrx_max_concurrency": 0}, "zarrx_max_concurrency"),
        ({"zarrx_max_concurrency": "many"}, "zarrx_max_concurrency"),
        ({"zarrx_max_concurrency": 2.5}, "zarrx_max_concurrency"),
        ({"zarrx_retries": -1}, "zarrx_retries"),
        ({"zarrx_timeout": 0}, "zarrx_timeout"),
        ({"zarrx_request_deadline": -1}, "zarrx_request_deadline"),
        ({"zarrx_batch_deadline": "soon"}, "zarrx_batch_deadline"),
        ({"zarrx_connect_timeout": float("nan")}, "zarrx_connect_timeout"),
        ({"zarrx_max_read_size": 0}, "zarrx_max_read_size"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(UsageError, match=message):
        split_storage_options(options)


def test_bad_environment_is_refused(monkeypatch):
    monkeypatch.setenv("ZARRX_MAX_CONCURRENCY", "lots")
    with pytest.raises(UsageError, match="ZARRX_MAX_CONCURRENCY"):
        RemoteOptions()


def test_zarrx_options_never_reach_fsspec():
    remote, rest = split_storage_options({"anon": True, "zarrx_max_concurrency": 3, "zarrx_retries": 1})
    assert rest == {"anon": True} and remote.max_concurrency == 3 and remote.retries == 1
    store = FsspecStore.from_url("memory://zarrx-remote-options", storage_options={"zarrx_max_concurrency": 9})
    assert store.max_concurrency == 9


def test_s3_defaults_fill_only_what_is_unset():
    _, options = configure(
        "s3://bucket/x.zarr", {"anon": True, "zarrx_retries": 2, "zarrx_timeout": 4, "zarrx_connect_timeout": 3}
    )
    assert options["anon"] is True and options["max_concurrency"] == 1
    assert options["config_kwargs"] == {
        "max_pool_connections": 64,
        "retries": {"mode": "standard", "total_max_attempts": 3},
        "connect_timeout": 3.0,
        "read_timeout": 4.0,
    }
    _, options = configure("s3://b", {"config_kwargs": {"read_timeout": 99}, "max_concurrency": 4})
    assert options["config_kwargs"]["read_timeout"] == 99 and options["max_concurrency"] == 4


def test_http_defaults():
    _, options = configure("https://example.org/x.zarr", {"zarrx_max_concurrency": 200, "zarrx_retries": 3})
    client = options["client_kwargs"]
    assert client["timeout"] == aiohttp.ClientTimeout(total=60.0, sock_connect=10.0, sock_read=30.0)
    assert client["middlewares"] == (RetryMiddleware(3),)
    assert options["get_client"] == HttpClientFactory(200)
    _, options = configure("http://h/x", {"zarrx_retries": 0, "client_kwargs": {"timeout": aiohttp.ClientTimeout(5)}})
    assert "middlewares" not in options["client_kwargs"]
    assert options["client_kwargs"]["timeout"] == aiohttp.ClientTimeout(5)


@pytest.mark.parametrize("url", ["gs://bucket/x", "memory://x", "simplecache::memory://x", "/local/path"])
def test_other_file_systems_are_left_alone(url):
    _, options = configure(url, {"token": "anon", "zarrx_max_concurrency": 5})
    assert options == {"token": "anon"}


@pytest.mark.parametrize("chain", ["simplecache", "filecache", "blockcache"])
def test_chained_urls_configure_the_file_system_they_read_from(chain):
    _, options = configure(f"{chain}::s3://bucket/x", {"s3": {"anon": True}, "zarrx_retries": 1})
    assert options["s3"]["anon"] is True
    assert options["s3"]["config_kwargs"]["retries"] == {"mode": "standard", "total_max_attempts": 2}
    _, options = configure(f"{chain}::https://example.org/x.zarr", {"cache_storage": "/tmp/c"})
    assert options["cache_storage"] == "/tmp/c" and options["https"]["get_client"] == HttpClientFactory(100)


def test_http_client_factory_makes_sessions_with_the_limit():
    async def make():
        session = await HttpClientFactory(150)(loop=None, timeout=aiohttp.ClientTimeout(total=3))
        try:
            return session.connector.limit
        finally:
            await session.close()

    assert asyncio.run(make()) == 150
    assert pickle.loads(pickle.dumps(HttpClientFactory(150))) == HttpClientFactory(150)
    assert repr(HttpClientFactory(150)) == "HttpClientFactory(limit=150)"


def test_backoff_grows_and_is_capped():
    assert all(0.05 <= backoff(1) <= 0.1 for _ in range(20))
    assert all(0.2 <= backoff(3) <= 0.4 for _ in range(20))
    assert all(backoff(30) <= 5.0 for _ in range(20))


# -- redaction -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("http://user:pass@host/x", "http://***@host/x"),
        ("s3://AKIA:secret@bucket/x and https://token@h.org/y", "s3://***@bucket/x and https://***@h.org/y"),
        (
            "https://h/x?X-Amz-Signature=abc123&X-Amz-Credential=AKIA%2F&part=1",
            "https://h/x?X-Amz-Signature=***&X-Amz-Credential=***&part=1",
        ),
        ("https://a.blob.core.windows.net/c?sv=2020&sig=Zm9v&se=1", "https://a.blob.core.windows.net/c?sv=2020&sig=***&se=1"),
        ("https://h/x?api_key=k1&token=t2", "https://h/x?api_key=***&token=***"),
        ("no credentials here: https://host/x.zarr/c/0", "no credentials here: https://host/x.zarr/c/0"),
    ],
)
def test_redact_urls(text, expected):
    assert redact(text) == expected


def test_secret_values_at_any_depth():
    options = {
        "key": "AKIAEXAMPLE",
        "secret": "s3cr3t-value",
        "anon": False,
        "endpoint_url": "http://localhost:9000",
        "s3": {"token": "session-token"},
        "client_kwargs": {"headers": {"Authorization": "Bearer abc.def", "X-Api-Key": "k-123"},
                          "auth": SimpleNamespace(login="reader", password="basic-pass")},  # like aiohttp.BasicAuth
        "account_key": "adls-key",
        "connection_string": "AccountKey=xyz;",
        "sas_token": "sv=1&sig=2",
        "x": "ab",  # too short to be worth hiding
    }  # fmt: skip
    found = set(secret_values(options))
    assert found == {
        "AKIAEXAMPLE", "s3cr3t-value", "session-token", "Bearer abc.def", "k-123", "basic-pass",
        "adls-key", "AccountKey=xyz;", "sv=1&sig=2",
    }  # fmt: skip
    assert redact("failed with key AKIAEXAMPLE", found) == "failed with key ***"


def test_store_messages_and_repr_hide_credentials():
    store = make_store(
        "https://reader:hunter2@example.invalid/data.zarr",
        storage_options={"client_kwargs": {"headers": {"Authorization": "Bearer tok-456"}}},
    )
    assert repr(store) == "FsspecStore('https://***@example.invalid/data.zarr', read_only=True)"
    assert store.url("c/0") == "https://***@example.invalid/data.zarr/c/0"
    failure = OSError("GET https://reader:hunter2@example.invalid/data.zarr/c/0 sent Bearer tok-456")
    error = store._error("read", "c/0", failure)
    assert isinstance(error, StoreError)
    assert "hunter2" not in str(error) and "tok-456" not in str(error) and "'c/0'" in str(error)


def test_http_stores_are_read_only_whatever_the_mode():
    store = FsspecStore(HTTPFileSystem(), "https://example.invalid/x.zarr", read_only=False)
    assert store.read_only
    with pytest.raises(ReadOnlyError, match="HTTP"):
        store.set("zarr.json", b"{}")


def test_an_unusable_url_is_a_store_error_without_secrets():
    with pytest.raises(StoreError, match="cannot open") as caught:
        make_store("nosuchprotocol-zarrx://bucket/x", storage_options={"secret": "very-secret-value"})
    assert "very-secret-value" not in str(caught.value)
