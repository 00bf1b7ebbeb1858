"""An empty ``rules.paths`` (the default) loads the shipped rule pack, then the site rules; a site file
named like a shipped one replaces it."""

from __future__ import annotations

from pathlib import Path

from tests.support.settings import settings_of
from watchdog.infra.paths import asset_dir
from watchdog.rules.loader import configured_rule_paths, default_rule_paths, load_ruleset, shipped_rule_files


def test_the_default_is_the_shipped_pack_then_site_rules(tmp_path: Path) -> None:
    shipped = shipped_rule_files()
    assert shipped and all(Path(p).parent == asset_dir("rules") for p in shipped)
    (tmp_path / "site.yaml").write_text("groups: []\n")
    (tmp_path / "gpu.yaml").write_text("groups: []\n")
    paths = default_rule_paths(str(tmp_path))
    assert paths[-2:] == [str(tmp_path / "gpu.yaml"), str(tmp_path / "site.yaml")]
    assert [p for p in paths if Path(p).name == "gpu.yaml"] == [str(tmp_path / "gpu.yaml")]
    assert len(paths) == len(shipped) + 1


def test_no_site_dir_is_the_shipped_pack(tmp_path: Path) -> None:
    assert default_rule_paths(str(tmp_path / "absent")) == shipped_rule_files()


def test_an_empty_config_evaluates_the_shipped_alerts() -> None:
    settings = settings_of({})
    assert settings.rules.paths == ()
    names = {rule.name for _, rule in load_ruleset(settings).alerting_rules()}
    assert {"GpuFallenOffBus", "EngineKvCacheNearFull"} <= names


def test_configured_paths_are_used_as_given(tmp_path: Path) -> None:
    settings = settings_of({"rules": {"paths": [str(tmp_path / "*.yaml")]}})
    assert configured_rule_paths(settings) == [str(tmp_path / "*.yaml")]
