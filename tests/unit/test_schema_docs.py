"""The checked-in JSON Schemas match the models, and every example in docs/ and packaging/ is a valid input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from netcomp.cli import schema
from netcomp.compiler.compiler import Compiler
from netcomp.intent.source import load_documents
from netcomp.settings import Settings
from tests.lab.checkout import EXAMPLES, ROOT

DOC = ROOT / "docs" / "intents.md"
BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)


@pytest.mark.parametrize("name", ["network", "config"])
def test_checked_in_schema_is_current(name: str) -> None:
    path = ROOT / "schemas" / f"{name}.schema.json"
    assert path.read_text() == schema.dumps(name), f"{path} is stale: run `make schema`"


def test_examples_carry_schema_modeline() -> None:
    for f in sorted((EXAMPLES / "networks.d").glob("*.yaml")):
        text = f.read_text()
        if "kind: Network\n" in text:
            assert text.startswith("# yaml-language-server: $schema=../../../schemas/network.schema.json\n"), f
            assert (f.parent / "../../../schemas/network.schema.json").resolve().is_file()


def _doc_blocks() -> list[str]:
    return [b for b in BLOCK.findall(DOC.read_text()) if "apiVersion:" in b]


def test_docs_have_an_example_per_backend_and_format() -> None:
    blocks = "\n".join(_doc_blocks())
    for needle in (
        "type: macvlan",
        "type: ipvlan",
        "type: sriov",
        "type: static",
        "kind: DanmNet",
        "kind: NetworkAttachmentDefinition",
    ):
        assert needle in blocks, needle


@pytest.mark.parametrize("index", range(len(_doc_blocks())))
def test_docs_example_compiles(index: int, tmp_path: Path, plugin_dir: Path) -> None:
    block = _doc_blocks()[index]
    f = tmp_path / "example.yaml"
    f.write_text(block)
    assert load_documents(str(f), block.encode())
    settings = Settings(staticDirs=[str(EXAMPLES / "static.d")], pluginDirs=[str(plugin_dir)])
    plan = Compiler(settings).compile([f])
    assert plan.errors == [], plan.errors
    assert plan.artifacts


def test_packaged_netcomp_yaml_documents_every_setting_with_its_default(tmp_path: Path) -> None:
    """packaging/netcomp.yaml shows every key commented out with its default: uncommented, it must load and give
    exactly the defaults, and no top-level setting may be missing from it."""
    from netcomp.settings import load_settings

    text = (ROOT / "packaging" / "netcomp.yaml").read_text()
    keys = re.findall(r"^#(\w+):", text, re.M)
    assert set(keys) == set(Settings.model_fields), set(Settings.model_fields) ^ set(keys)
    live = re.sub(r"^#(\w+:|  \w+:)", r"\1", text, flags=re.M)  # settings: `#key:`, nested `#  key:`
    # nodeName's default is this machine's hostname: the file shows an example instead.
    live = re.sub(r"^nodeName: .*$", f"nodeName: {Settings().nodeName}", live, flags=re.M)
    (tmp_path / "netcomp.yaml").write_text(live)
    loaded = load_settings(tmp_path / "netcomp.yaml")
    from netcomp.settings import KubeSettings

    assert loaded == Settings(kubernetes=KubeSettings())
