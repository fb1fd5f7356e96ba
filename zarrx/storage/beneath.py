"""Opening a path below a folder in one system call, where Linux offers it.

``openat2(folder, path, {flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS})`` (Linux 5.6+) resolves
``path`` in the kernel and refuses, atomically, any step that would leave ``folder``: a ``..``
above it, an absolute symbolic link, a ``/proc`` magic link (``EXDEV``). Relative links that stay
below are followed. It is the fast path of :class:`~zarrx.storage.containment.RootFolder`, which
walks the path itself (one ``openat`` per component) wherever this says "walk":
:func:`open_beneath` returns None for an absolute link or a way out -- the walk then tells a link
that stays inside from one that leaves and names it -- for a rename racing the resolution
(``EAGAIN``), for too many links, and always where ``openat2`` is missing (other systems, older
kernels, sandboxes that filter it).

Python has no binding for ``openat2``; it is called through ``ctypes`` (``syscall(437, ...)``,
the number every architecture listed in :data:`_ARCHITECTURES` gives it). ``ctypes`` releases
the GIL during the call.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from typing import Callable

__all__ = ["open_beneath", "AVAILABLE"]

_OPENAT2 = 437  # the same on every architecture that joined the unified system call table
_ARCHITECTURES = ("x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x", "loongarch64")
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_AT_FDCWD = -100
#: the errors after which the walk decides (see the module docstring)
_WALK = {errno.EXDEV, errno.EAGAIN, errno.ELOOP}


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


# syscall() reads every argument as a long: declared so, ctypes passes longs (never C ints)
# through the variadic call; glibc's syscall() only moves registers, so the declaration is safe
_ARGUMENTS = [ctypes.c_long, ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_long]
_HOW_SIZE = ctypes.sizeof(_OpenHow)


def _load() -> Callable[..., int] | None:
    """``syscall`` from the C library when ``openat2`` works here, else None."""
    if sys.platform != "linux" or platform.machine() not in _ARCHITECTURES:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = _ARGUMENTS
    how = _OpenHow(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, _RESOLVE_BENEATH)
    descriptor = syscall(_OPENAT2, _AT_FDCWD, b".", ctypes.addressof(how), _HOW_SIZE)
    if descriptor < 0:
        return None  # ENOSYS (an older kernel), EPERM (a seccomp filter), ...
    os.close(descriptor)
    return syscall


_SYSCALL = _load()
#: whether :func:`open_beneath` can open anything here
AVAILABLE = _SYSCALL is not None
#: flags -> (their open_how, its address): read-only for the kernel, so threads share them
_HOWS: dict[int, tuple[_OpenHow, int]] = {}


def open_beneath(folder: int, path: str, flags: int) -> int | None:
    """A descriptor of ``path`` opened below the folder descriptor ``folder`` with ``flags``; None
    when the caller must walk the path itself (see the module docstring).

    Raises
    ------
    OSError
        What ``open`` would raise otherwise (``FileNotFoundError`` for a missing component, ...).

    Examples
    --------
    >>> import tempfile
    >>> folder = os.open(tempfile.gettempdir(), os.O_RDONLY)
    >>> open_beneath(folder, "../etc/passwd", os.O_RDONLY) is None  # a way out: the walk decides
    True
    >>> os.close(folder)
    """
    if _SYSCALL is None:
        return None
    how = _HOWS.get(flags)
    if how is None:
        structure = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        how = _HOWS[flags] = (structure, ctypes.addressof(structure))
    descriptor = _SYSCALL(_OPENAT2, folder, os.fsencode(path), how[1], _HOW_SIZE)
    if descriptor >= 0:
        return descriptor
    code = ctypes.get_errno()
    if code in _WALK:
        return None
    raise OSError(code, os.strerror(code), path)
