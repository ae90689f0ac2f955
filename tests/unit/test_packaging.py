"""Guards nobody reviews: the README's example is the shipped one, example configs load."""

import re
from pathlib import Path

from loopwatch.config import parse_config_text
from tests.helpers import ROOT


def test_documented_agent_loop_is_the_shipped_example() -> None:
    page = (ROOT / "docs" / "client.md").read_text()  # moved there from the README
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    shipped = (ROOT / "streams" / "client" / "example_agent.py").read_text()
    loop = next(block for block in blocks if "async def agent_loop" in block)
    assert loop.strip() in shipped


def test_readme_in_process_example_runs_as_written() -> None:
    readme = (ROOT / "README.md").read_text()
    example = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "LoopDetector()" in b)
    names: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), names)  # the import line included
    assert getattr(names["decision"], "action", None) == "allow"


def test_example_openclaw_config_is_valid() -> None:
    path = ROOT / "docker" / "openclaw.example.json"
    config = parse_config_text(path.read_text(), str(path))
    assert config.for_agent("poller").critical_threshold == 30
    assert config.for_agent("anyone").enabled


def test_compose_and_readme_name_real_settings() -> None:
    from msgspec.structs import fields  # StreamSettings is a msgspec Struct

    from loopwatch.config.stream_settings import StreamSettings, env_name

    known = {env_name(f.name) for f in fields(StreamSettings)}
    # variables read by one command only (the gateway, the hook), found as literals in its source
    sources = "\n".join(p.read_text() for p in (ROOT / "streams").rglob("*.py"))
    known |= set(re.findall(r'"(LOOPWATCH_[A-Z_]*[A-Z])"', sources))
    documents = sorted((ROOT / "docs").glob("*.md"))  # the settings' table is in docs/kafka.md
    for path in (ROOT / "docker-compose.yml", ROOT / "README.md", ROOT / "docker" / "Dockerfile", *documents):
        named = set(re.findall(r"LOOPWATCH_[A-Z_]*[A-Z]", Path(path).read_text()))
        build = {"LOOPWATCH_PURE_PYTHON"}  # read by setup.py at install time, not a setting
        unknown = {n for n in named if n not in known | build and not n.startswith("LOOPWATCH_TEST")}
        assert not unknown, f"{path.name} names unknown settings: {sorted(unknown)}"


def test_the_suite_runs_the_compiled_core_unless_asked_not_to() -> None:
    import os

    import loopwatch.detectors.history
    import loopwatch.detectors.step

    if os.environ.get("LOOPWATCH_PURE_PYTHON"):
        assert loopwatch.detectors.step.__file__.endswith(".py")
    else:  # make setup builds it with mypyc; the benchmarks measure what the tests checked
        assert not loopwatch.detectors.step.__file__.endswith(".py"), loopwatch.detectors.step.__file__
        assert not loopwatch.detectors.history.__file__.endswith(".py"), loopwatch.detectors.history.__file__


def test_docker_compose_runs_the_kafka_version_of_the_local_broker() -> None:
    import re

    from tests.helpers import ROOT

    pom = (ROOT / "docker" / "kafka" / "pom.xml").read_text()
    local = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert local is not None
    assert f"image: apache/kafka:{local.group(1)}" in (ROOT / "docker-compose.yml").read_text()


def test_every_kafka_of_docker_compose_keeps_its_data_on_its_volume() -> None:
    """With KAFKA_* variables set, apache/kafka writes only their settings: without
    KAFKA_LOG_DIRS the topics live in the container's /tmp and a recreate loses them (while
    the worker's RocksDB volume stays ahead of its changelogs)."""
    text = (ROOT / "docker-compose.yml").read_text()
    mounts = re.findall(r"^\s*- kafka(?:-\d)?-data:(\S+)", text, re.M)
    assert len(mounts) == 4  # the single node and the cluster's three
    single = text[text.index("\n  kafka:\n") : text.index("\n  redis:\n")]
    anchor = text[text.index("x-kafka-cluster-env:") : text.index("x-kafka-cluster-node:")]
    for block in (single, anchor):
        (log_dirs,) = re.findall(r"^\s*KAFKA_LOG_DIRS: (\S+)", block, re.M)
        assert {log_dirs} == set(mounts)
    assert text.count("<<: *kafka-cluster-env") == 3


def test_the_documents_code_comments_cite_are_in_the_repository() -> None:
    import re

    from tests.helpers import ROOT

    sources = [p for folder in ("config", "detectors", "streams") for p in (ROOT / folder).rglob("*.py")]
    text = "\n".join(p.read_text() for p in sources)
    for cited in set(re.findall(r"docs/[\w.-]+\.md", text)):
        assert (ROOT / cited).is_file(), cited
    rules = (ROOT / "docs" / "openclaw-rules.md").read_text()
    for section in set(re.findall(r"spec §(\d+(?:\.\d+)?)", text)):
        top = section.split(".")[0]
        assert f"§{section}" in rules or f"## §{top}" in rules, f"spec §{section}"
    for code in ("D1", "D2", "E1", "E2", "E3", "E4", "E5"):
        assert f"**{code}**" in rules
    design = (ROOT / "docs" / "design.md").read_text()
    for section in set(re.findall(r"DESIGN §(\d+)", text)):
        assert f"## §{section}" in design, f"DESIGN §{section}"


def test_the_public_api_imports_beside_an_application_own_config_module(tmp_path: Path) -> None:
    """loopwatch installs one top-level name: an application's own ``config.py``,
    ``detectors/`` or ``streams.py`` shadow nothing of it, nor it of them."""
    import subprocess
    import sys

    (tmp_path / "config.py").write_text("MINE = 'the application config'\n")
    (tmp_path / "streams.py").write_text("MINE = 'the application streams'\n")
    (tmp_path / "detectors").mkdir()
    (tmp_path / "detectors" / "__init__.py").write_text("MINE = 'the application detectors'\n")
    code = (
        "import config, detectors, streams\n"
        "from loopwatch import LoopDetector\n"
        "from loopwatch.config import FleetConfig\n"
        "from loopwatch.streams.client import LoopwatchClient\n"
        "d = LoopDetector(FleetConfig.enabled_default())\n"
        "said = []\n"
        "for _ in range(11):\n"
        "    said.append(d.before_tool_call('r', 'read', {'p': 1}).action)\n"
        "    d.after_tool_call('r', 'read', {'p': 1}, result='same')\n"
        "print(config.MINE, detectors.MINE, streams.MINE, LoopwatchClient.__name__, said[-1], sep='|')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split("|") == [
        "the application config",
        "the application detectors",
        "the application streams",
        "LoopwatchClient",
        "warn",
    ]
    module = subprocess.run(
        [sys.executable, "-m", "loopwatch", "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert module.returncode == 0, module.stderr
    assert "usage: loopwatch" in module.stdout


def test_the_files_and_modules_the_documents_name_exist() -> None:
    import importlib
    import importlib.util

    documents = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "integrations/openclaw/README.md"]
    text = "\n".join(p.read_text() for p in documents)
    paths = set(re.findall(r"\b(?:config|detectors|streams|tests|docker|integrations)/[\w/.-]+\.\w+", text))
    modules = set(re.findall(r"\bloopwatch(?:\.\w+)+", text)) - {"loopwatch.yaml"}
    assert paths, "no paths found: the pattern is wrong"
    assert modules, "no modules found: the pattern is wrong"
    assert [p for p in sorted(paths) if not (ROOT / p).exists()] == []
    topics = {m for m in modules if m.split(".")[1] not in ("config", "detectors", "streams")}

    def exists(name: str) -> bool:  # a module, or a name in one
        if importlib.util.find_spec(name) is not None:
            return True
        parent, _, attribute = name.rpartition(".")
        return hasattr(importlib.import_module(parent), attribute)

    assert [m for m in sorted(modules - topics) if not exists(m.rstrip("."))] == []


def test_the_docker_image_builds_from_every_folder_the_package_installs() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \./\1$", dockerfile, re.M))
    links = {p.name for p in (ROOT / "loopwatch").iterdir() if p.is_symlink()}
    assert links == {"config", "detectors", "streams", "integrations"}
    assert copied >= {*links, "loopwatch"}, copied
