"""SkyRL 0.4 on this suite's Python 3.11: what its modules need from 3.12, nothing else.

`skyrl` declares Python >= 3.12. Of the modules the SkyRL tests import (skyrl.train.trainer,
skyrl.train.fully_async_trainer, skyrl.train.generators.base, skyrl.train.config), one 3.12
feature is missing on 3.11: pydantic accepts a stdlib `typing.TypedDict` as a field type only
from 3.12 (skyrl/tinker/types.py, `MultiModalKwargs`). `typing_extensions.TypedDict` is that
3.12 TypedDict, backported. `load()` imports those modules with it standing in for
`typing.TypedDict`, then puts the stdlib's back, so nothing else in the process sees a change.
No SkyRL code is changed or replaced. A SkyRL user runs 3.12, where `load()` only imports.
"""

from __future__ import annotations

import importlib
import sys
import typing

import typing_extensions

MODULES = (
    "skyrl.train.generators.base",
    "skyrl.train.config",
    "skyrl.train.trainer",
    "skyrl.train.fully_async_trainer",
)


def load() -> None:
    """Import SkyRL's trainer modules (ImportError when SkyRL is not installed)."""
    stdlib = typing.TypedDict
    if sys.version_info < (3, 12):
        typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
    try:
        for name in MODULES:
            importlib.import_module(name)
    finally:
        typing.TypedDict = stdlib  # type: ignore[misc]
