"""Azurite, Microsoft's Azure Storage emulator, serving Azure Blob Storage on 127.0.0.1 for the tests.

Azurite is a Node.js program from the npm registry (the emulator Azure's own SDKs and obstore's
Rust crate test against). The tests install it once with the machine's ``npm`` into
``~/.cache/zarrx-tests/azurite`` (about 10 s) and start ``azurite-blob`` on a free port, in memory,
quiet. Without Node.js and npm the tests fail, saying so (they never skip).

Usage::

    with serve_azurite() as azure:
        azure.connection_string  # what adlfs and the Azure SDKs take; zarrx translates it for obstore
        azure.container("data")  # made empty, through adlfs
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

from .zarr_next import _CACHE

#: the emulator the tests install (3.x speaks the Blob API versions of adlfs and obstore)
REQUIREMENT = "azurite@3"
#: Azurite's one account and its published key (https://github.com/Azure/Azurite#default-storage-account)
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_blob() -> Path:
    """The ``azurite-blob`` program, installed on first use."""
    target = _CACHE / "azurite"
    program, ready = target / "node_modules" / ".bin" / "azurite-blob", target / "ready"
    if not ready.exists():
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            raise RuntimeError("the Azure tests run Azurite, a Node.js program: install Node.js and npm")
        target.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        result = subprocess.run([npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", REQUIREMENT],
                                capture_output=True, text=True, timeout=600)  # fmt: skip
        if result.returncode or not program.exists():
            raise RuntimeError(f"installing {REQUIREMENT} with npm failed:\n{result.stderr[-3000:]}")
        ready.write_text(json.dumps({"requirement": REQUIREMENT, "seconds": time.monotonic() - started}))
    return program


class Azurite:
    def __init__(self, url: str) -> None:
        self.url = url  # the blob endpoint of the account: http://127.0.0.1:PORT/devstoreaccount1
        self.connection_string = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={url};"
        )

    def filesystem(self):
        """adlfs's file system of the account (what fsspec and engine="zarr" use for ``az://``)."""
        import adlfs

        return adlfs.AzureBlobFileSystem(connection_string=self.connection_string, skip_instance_cache=True)

    def container(self, name: str) -> str:
        """A new, empty container ``name``."""
        fs = self.filesystem()
        if fs.exists(name):
            fs.rm(name, recursive=True)
        fs.mkdir(name)
        return name


@contextlib.contextmanager
def serve_azurite() -> Iterator[Azurite]:
    """Azurite's blob service on a free port of 127.0.0.1, in memory, for the ``with`` block."""
    command = [str(azurite_blob()), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
               "--disableTelemetry", "--silent", "--skipApiVersionCheck", "--loose"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, lines = time.monotonic() + 60, []
        for line in process.stdout:  # type: ignore[union-attr]
            lines.append(line)
            found = re.search(r"listens on (http://127\.0\.0\.1:\d+)", line)
            if found:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("Azurite did not start within 60 s:\n" + "".join(lines))
        else:
            raise RuntimeError("Azurite stopped before listening:\n" + "".join(lines))
        # what it writes later is read and dropped, so a full pipe never stops it
        threading.Thread(target=process.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        yield Azurite(f"{found.group(1)}/{ACCOUNT}")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
