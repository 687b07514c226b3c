"""Model weights in pieces (codegen/weights.py): joined in order, every piece and the whole checked."""

import hashlib
import importlib.util
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor.codegen.weights import SPLIT_MODELS, SplitModel, joined


def publish(root, module: str, pieces: list[bytes]) -> None:
    """Packages ``{module}1`` ... on ``root``, each with its piece at data/partKK.bin and a module that
    must never run (it raises on import)."""
    for k, piece in enumerate(pieces, 1):
        package = root / f"{module}{k}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('the publisher's code ran')\n")
        (package / "data" / f"part{k:02d}.bin").write_bytes(piece)


def model_of(module: str, pieces: list[bytes]) -> SplitModel:
    whole = b"".join(pieces)
    return SplitModel(
        "toy", module.replace("_", "-"), module, "1.0", tuple(hashlib.sha256(p).hexdigest() for p in pieces),
        len(whole), hashlib.sha256(whole).hexdigest(),
    )


@settings(max_examples=15, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=5), st.data())
def test_pieces_are_joined_in_order_and_a_changed_piece_or_file_is_named(tmp_path_factory, pieces, data):
    root = tmp_path_factory.mktemp("site")
    module = f"toy_part_{abs(hash((root.name, len(pieces))))}_"
    publish(root, module, pieces)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root))
        model, cache = model_of(module, pieces), root / "cache"
        path = joined(model, cache)
        assert path.read_bytes() == b"".join(pieces) and joined(model, cache) == path  # the second: checked, kept
        flipped = bytearray(path.read_bytes())
        flipped[-1] ^= 1
        path.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match="delete it to join it again"):
            joined(model, cache)
        path.unlink()
        k = data.draw(st.integers(1, len(pieces)), label="the changed piece")
        piece = root / f"{module}{k}" / "data" / f"part{k:02d}.bin"
        piece.write_bytes(piece.read_bytes() + b"x")
        with pytest.raises(ValueError, match=f"package {model.package}{k} 1.0: its piece has sha256"):
            joined(model, cache)
        assert not path.exists() and not list(cache.glob("*.part*"))  # nothing half-written left behind
        piece.unlink()
        with pytest.raises(ValueError, match=f"{model.package}{k} has no part{k:02d}.bin"):
            joined(model, cache)
        assert module + "1" not in sys.modules  # found, never imported


def test_a_missing_package_gives_the_install_line(tmp_path):
    model = model_of("ppoor_no_such_part", [b"a", b"b"])
    with pytest.raises(ValueError, match=r"pip install ppoor-no-such-part\{1..2\}==1.0"):
        joined(model, tmp_path)


@pytest.mark.parametrize("name", sorted(SPLIT_MODELS))
def test_an_installed_split_model_joins_to_its_pinned_file(name, tmp_path):
    model = SPLIT_MODELS[name]
    if importlib.util.find_spec(f"{model.module}1") is None:
        pytest.skip(f"{name} is not installed (its extra is a large download): {model.install}")
    path = joined(model, tmp_path)
    assert path.stat().st_size == model.size and len(model.pieces) in (6, 22)
    assert path.read_bytes()[:4] == b"GGUF"
