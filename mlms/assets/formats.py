"""Which format a user's model artifact is in, which frameworks load it, and its sha256.

Told from the path alone (suffix, the archive's member names, a folder's marker files), without
loading any framework: ``.onnx``; ``.pt2`` (a ``torch.export`` program); ``.pt``/``.pth``
TorchScript (``torch.jit.save``: its archive holds ``code/``); ``.keras``; a SavedModel folder
(``saved_model.pb``); a Hugging Face ``save_pretrained`` folder (``config.json`` and weights).
A folder's sha256 is that of its listing: one line ``<sha256>  <relative path>`` a file, sorted.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mlms.errors import InvalidArgument

CHUNK = 1 << 20

#: Format -> the frameworks that run it, the one that loads it as it is first.
FRAMEWORKS_OF: dict[str, tuple[str, ...]] = {
    "onnx": ("onnxruntime",),
    "torch_export": ("torch",),
    "torchscript": ("torch",),
    "keras": ("tensorflow",),
    "saved_model": ("tensorflow",),
    # ONNX Runtime runs it once torch.onnx has exported it (``manager.export_file_artifact``).
    "hf_folder": ("torch", "onnxruntime"),
}
EXPECTED = (
    "expected an .onnx file, a torch.export program (.pt2), TorchScript (.pt), a Keras .keras "
    "file, a TensorFlow SavedModel folder or a Hugging Face save_pretrained folder"
)
_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass(frozen=True)
class Artifact:
    path: Path
    format: str
    sha256: str
    size: int  # bytes, all files of a folder together
    #: A folder's files: relative path -> sha256; empty for a single file.
    files: dict[str, str]

    @property
    def frameworks(self) -> tuple[str, ...]:
        return FRAMEWORKS_OF[self.format]


def detect_format(path: Path) -> str:
    """The format of the file or folder at ``path``; one line naming it and what was expected
    when it is none of them (or a known kind that cannot be read)."""
    if path.is_dir():
        if (path / "saved_model.pb").is_file():
            return "saved_model"
        if (path / "config.json").is_file() and any((path / w).is_file() for w in _HF_WEIGHTS):
            return "hf_folder"
        raise InvalidArgument(
            f"model folder {str(path)!r} holds neither saved_model.pb nor config.json with "
            f"model.safetensors: {EXPECTED}"
        )
    if not path.is_file():
        raise InvalidArgument(f"model file {str(path)!r} does not exist: {EXPECTED}")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix in (".pt2", ".pt", ".pth", ".ts"):
        names = _zip_names(path, "a torch archive")
        if any(name.endswith("/archive_format") for name in names):
            return "torch_export"
        if any("/code/" in name for name in names):
            return "torchscript"
        raise InvalidArgument(
            f"model file {str(path)!r} is a torch.save archive (weights, not a program): "
            "save the model with torch.export.save (.pt2) or torch.jit.save (.pt)"
        )
    if suffix == ".keras":
        names = _zip_names(path, "a Keras archive")
        if "config.json" not in names:
            raise InvalidArgument(
                f"model file {str(path)!r} has no config.json: expected a Keras .keras archive "
                "(keras.Model.save)"
            )
        return "keras"
    raise InvalidArgument(f"model file {str(path)!r} has an unknown format {suffix!r}: {EXPECTED}")


def _zip_names(path: Path, what: str) -> set[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InvalidArgument(
            f"model file {str(path)!r} is not a readable zip archive ({exc}): expected {what}; "
            "is it truncated or corrupt?"
        ) from None
    if bad is not None:
        raise InvalidArgument(
            f"model file {str(path)!r}: member {bad!r} fails its CRC check: the archive is "
            "corrupt or truncated"
        )
    return names


def open_artifact(path: Path, sha256: str | None = None) -> Artifact:
    """The artifact at ``path``: its format and checksum (one read of its bytes; none for a
    file whose ``sha256`` the caller has just computed, as an upload's receiver has)."""
    path = Path(path).expanduser().resolve()
    kind = detect_format(path)
    if path.is_dir():
        files = {
            item.relative_to(path).as_posix(): file_sha256(item)
            for item in sorted(path.rglob("*"))
            if item.is_file() and not _hidden(item.relative_to(path))
        }
        size = sum((path / name).stat().st_size for name in files)
        return Artifact(path, kind, listing_sha256(files), size, files)
    return Artifact(path, kind, sha256 or file_sha256(path), path.stat().st_size, {})


def _hidden(relative: Path) -> bool:
    # Caches that huggingface_hub and editors leave beside the files (.cache, .git, ...).
    return any(part.startswith(".") for part in relative.parts)


def listing_sha256(files: dict[str, str]) -> str:
    """The sha256 of a folder: of one line ``<sha256>  <path>`` a file, sorted by path."""
    lines = "".join(f"{digest}  {name}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
