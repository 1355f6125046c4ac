"""Hugging Face Hub ids (``hf:ORG/NAME[@REVISION]``): the repository's files fetched once by
``huggingface_hub`` into ``$MLMS_HOME/hub``, then read as a ``save_pretrained`` folder.

``HF_ENDPOINT`` (a mirror, or a local server in tests) and ``HF_HUB_OFFLINE`` (the cache only)
are read at each call, not when ``huggingface_hub`` was first imported.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mlms.config import mlms_home
from mlms.errors import InvalidArgument, Unavailable, UnknownModel

PREFIX = "hf:"
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,99}")
#: What a save_pretrained folder needs: config, weights, tokenizer files.
FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*"]


def is_hub_id(name: str) -> bool:
    return name.startswith(PREFIX)


def parse_hub_id(name: str) -> tuple[str, str | None]:
    repo, _, revision = name.removeprefix(PREFIX).partition("@")
    if (
        not _REPO.fullmatch(repo)
        or ".." in repo
        or (revision and not _REVISION.fullmatch(revision))
    ):
        raise InvalidArgument(f"Hub id {name!r}: expected hf:ORG/NAME or hf:ORG/NAME@REVISION")
    return repo, revision or None


def hub_folder(name: str) -> Path:
    """The local folder holding the files of the Hub id ``name``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, revision = parse_hub_id(name)
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        folder = snapshot_download(
            repo,
            revision=revision,
            cache_dir=mlms_home() / "hub",
            allow_patterns=FILES,
            local_files_only=offline,
            endpoint=os.environ.get("HF_ENDPOINT") or None,
        )
    except RepositoryNotFoundError:
        raise UnknownModel(f"Hub id {name!r}: no such repository at the Hub") from None
    except RevisionNotFoundError:
        raise UnknownModel(
            f"Hub id {name!r}: the repository has no revision {revision!r}"
        ) from None
    except LocalEntryNotFoundError as exc:
        why = "HF_HUB_OFFLINE is set" if offline else "the Hub cannot be reached"
        raise Unavailable(
            f"Hub id {name!r} is not in the cache {mlms_home() / 'hub'} and {why}"
        ) from exc
    except OSError as exc:
        raise Unavailable(f"Hub id {name!r}: cannot fetch it: {exc}") from exc
    return Path(folder)
