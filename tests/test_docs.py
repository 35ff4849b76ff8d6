"""The docs a newcomer follows: a short README that sends people to docs/, generated reference
pages that are never stale, a site mkdocs builds strictly, and findings in plain words."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import GOLDEN, ROOT, need

from streamdump.cli.docs import GENERATED, generated

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_a_short_guide_with_the_two_commands() -> None:
    lines = README.splitlines()
    assert len(lines) <= 300, len(lines)
    assert "    pip install . && streamdump read captures/rabbitmq_stream/session.pcap" in lines
    assert "    pip install -e '.[test]' && python -m pytest" in lines
    assert "## Architecture" in README and "docs/architecture.md" in README
    # .ci/run runs the README's test command.
    assert "pip install -e '.[test]' && python -m pytest" in (ROOT / ".ci" / "run").read_text()


def test_every_link_of_the_readme_and_the_docs_points_at_a_file() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "bench" / "README.md"]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}: {target}"


def test_the_benchmark_history_lives_beside_the_benchmarks() -> None:
    history = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert "vs_tshark.py" in history and "framing-only" in history
    assert "framing-only" not in README


def test_the_generated_pages_are_current() -> None:
    stale = []
    for path, text in generated(ROOT):
        assert text.splitlines()[0].endswith(f"{GENERATED} -->") or GENERATED in text.splitlines()[0], path
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(str(path.relative_to(ROOT)))
    assert not stale, f"stale (run `streamdump docs generate`): {stale}"
    made = {p for p, _ in generated(ROOT)}
    assert set((ROOT / "docs" / "man").glob("*.1")) <= made, "a man page no command makes"


def test_the_field_reference_names_every_filter_name() -> None:
    from streamdump.analysis.fieldnames import field_types
    from streamdump.spec.registry import default_registry

    page = (ROOT / "docs" / "reference" / "fields.md").read_text(encoding="utf-8")
    for protocol in default_registry().protocols.values():
        for name in field_types(protocol):
            assert f"| `{name}` |" in page, (protocol.name, name)


def test_the_check_says_when_a_page_is_stale(tmp_path: Path) -> None:
    for path, text in generated(ROOT):
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    check = [sys.executable, "-m", "streamdump", "docs", "generate", "--check", "--root", str(tmp_path)]
    assert subprocess.run(check, capture_output=True, text=True, cwd=ROOT, check=False).returncode == 0
    (tmp_path / "docs" / "reference" / "fields.md").write_text("old\n", encoding="utf-8")
    stale = subprocess.run(check, capture_output=True, text=True, cwd=ROOT, check=False)
    assert stale.returncode == 1 and "fields.md" in stale.stderr


def test_mkdocs_builds_the_site_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs")
    need(mkdocs is not None, "mkdocs is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "fields" / "index.html").is_file()


def test_the_man_page_of_read_lists_its_options() -> None:
    page = (ROOT / "docs" / "man" / "streamdump-read.1").read_text(encoding="utf-8")
    for option in (r"\-Y,", r"\-x,", r"\-w,", r"\-T,", r"\-e,", r"\-\-fail\-on"):
        assert option in page, option


# ---------------------------------------------------------------------- plain words in findings

# Names of the protocols' own parameters, as their references and servers' configurations spell
# them (RabbitMQ's Tune frame_max, NATS's INFO max_payload): the words users search for.
PROTOCOL_WORDS = {"frame_max", "max_payload"}
# Internal names the findings may still hold (none: a bounded field is named in words).
FROM_THE_TRACKER: set[str] = set()
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_BYTES_REPR = re.compile(r"(?<![A-Za-z0-9_])b['\"]")  # a bytes repr; not the end of "'sub'"


def _golden_findings() -> set[str]:
    found: set[str] = set()
    for path in GOLDEN.rglob("*.jsonl.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            found |= {e["message"] for e in json.loads(line)["expert"]}
    for path in GOLDEN.rglob("*.stats.txt"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for result in doc["protocols"].values() if "protocols" in doc else [doc]:
            found |= {d["message"] for d in result["diagnoses"]}
            found |= {e["summary"] for e in result["expert"]}
    for path in GOLDEN.rglob("*.tree.txt"):
        found |= set(re.findall(r"\[(?:note|warn|error)\] (.*)", path.read_text(encoding="utf-8")))
    return found


def test_findings_are_in_plain_words() -> None:
    findings = _golden_findings()
    assert len(findings) > 100
    reprs = sorted(m for m in findings if _BYTES_REPR.search(m) or "\\x" in m)
    assert reprs == []
    names = set()
    for message in findings:
        names |= set(_SNAKE.findall(_QUOTED.sub("", message))) - PROTOCOL_WORDS
    assert names == FROM_THE_TRACKER, sorted(names)
