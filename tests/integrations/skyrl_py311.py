"""SkyRL 0.4 on this suite's Python 3.11: what its modules need from 3.12, nothing else.

`skyrl` declares Python >= 3.12. Of the modules the SkyRL tests import (skyrl.train.trainer,
skyrl.train.fully_async_trainer, skyrl.train.generators.base, skyrl.train.config), one 3.12
feature is missing on 3.11: pydantic accepts a stdlib `typing.TypedDict` as a field type only
from 3.12 (skyrl/tinker/types.py, `MultiModalKwargs`). `typing_extensions.TypedDict` is that
3.12 TypedDict, backported; importing this module before SkyRL points `typing.TypedDict` at it.
No SkyRL code is changed or replaced. A SkyRL user runs 3.12, where this is a no-op.
"""

from __future__ import annotations

import sys
import typing

import typing_extensions

if sys.version_info < (3, 12):
    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
