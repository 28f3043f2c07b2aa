"""``sealbench benchmark init`` writes exactly the test suite's third-party plug-in: the template
cannot drift from the plug-in that tests/integration/test_third_party_plugin*.py install, build
into an image and run end to end."""

from __future__ import annotations

from pathlib import Path

from sealbench.client.scaffold import scaffold_plugin

TEST_PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "tiny2dseg"
_BUILD_LITTER = ("__pycache__", ".egg-info", "build")


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.endswith(_BUILD_LITTER) for part in p.parts)
    }


def test_the_template_is_byte_identical_to_the_test_plugin(tmp_path: Path) -> None:
    made = _files(scaffold_plugin("tiny2dseg", tmp_path))
    kept = _files(TEST_PLUGIN)
    assert sorted(made) == sorted(kept)
    for name, data in made.items():
        assert data == kept[name], f"{name} differs: regenerate tests/plugins/tiny2dseg"


def test_the_comparison_sees_a_one_byte_change(tmp_path: Path) -> None:
    made = _files(scaffold_plugin("tiny2dseg", tmp_path / "a"))
    plugin = tmp_path / "a" / "tiny2dseg" / "src" / "tiny2dseg" / "plugin.py"
    plugin.write_bytes(plugin.read_bytes().replace(b"SIZE: Final = 32", b"SIZE: Final = 31"))
    assert _files(tmp_path / "a" / "tiny2dseg") != made
