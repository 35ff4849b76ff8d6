"""Start-up: what a command loads, and the compiled registry kept between runs (spec/cache.py).

Times live in bench/startup_bench.py; here, what decides them: `--help` and a small capture's
read import only what they use, and a registry read back from the cache decodes as one
compiled from the specs does, whatever happened to the cache.
"""

from __future__ import annotations

import json
import marshal
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamdump.spec import cache
from streamdump.spec.registry import FieldSpec, Registry, load_registry, registry_key, spec_dir

ROOT = Path(__file__).resolve().parent.parent
NATS = ROOT / "captures/nats/pubsub.pcap"
# Captures of every protocol, read with the tree and as JSON by both registries.
EVERY_PROTOCOL = [
    "nats/pubsub.pcap",
    "rabbitmq_stream/compression.pcap",
    "rocketmq/alions.pcap",
    "eventmesh/session.pcap",
    "liftbridge/session.pcap",
]

# Runs a command in a fresh interpreter, then prints (as JSON, on its last line) what AFTER
# finds in the process it leaves.
PROBE = """
import io, contextlib, json, sys
sys.argv = ["streamdump", *json.loads(sys.argv[1])]
from streamdump.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit:
        pass
"""
MODULES = "print(json.dumps(sorted(sys.modules)))"
GENERATED = """
made = []
for name, module in list(sys.modules.items()):
    if not name.startswith("streamdump") or module is None:
        continue
    for value in list(vars(module).values()):
        params = vars(value).get("__dataclass_params__") if isinstance(value, type) else None
        if params is not None and value.__module__ == name:
            if params.init or params.repr or params.eq:
                made.append(f"{name}.{value.__qualname__}")
print(json.dumps(sorted(made)))
"""


def probe(after: str, args: list[str], env: dict[str, str] | None) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", PROBE + after, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    )
    return json.loads(done.stdout.splitlines()[-1])


def loaded(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    """The modules a command has imported by its end."""
    return set(probe(MODULES, args, env))


def generated_classes(args: list[str], env: dict[str, str]) -> list[str]:
    """streamdump's classes a command made through dataclasses with generated methods: each
    compiles its methods' source at every start (about 2.5 million instructions a class, 4.4
    frozen), where a msgspec Struct or a frozen record (spec/frozen.py) compiles nothing."""
    return list(probe(GENERATED, args, env))


def environment(cache_dir: Path | str) -> dict[str, str]:
    return {**os.environ, "STREAMDUMP_CACHE": str(cache_dir)}


def under(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_help_loads_no_decoding_machinery(tmp_path: Path) -> None:
    modules = loaded(["--help"], environment(tmp_path))
    heavy = under(
        modules,
        "streamdump.analysis",
        "streamdump.spec",
        "streamdump.dissectors",
        "streamdump.live",
        "streamdump.spark",
        "streamdump.report",
        "streamdump.wireshark",
        "dpkt",
        "yaml",
        "asyncio",
        "pydantic",
        "rich.markdown",
        "rich.table",
    )
    assert heavy == []


def test_a_small_read_loads_what_it_uses(tmp_path: Path) -> None:
    env = environment(tmp_path)
    loaded(["read", str(NATS)], env)  # fills the cache
    modules = loaded(["read", str(NATS)], env)
    assert "streamdump.analysis.session" in modules  # the probe did read
    unused = under(
        modules,
        "streamdump.live",
        "streamdump.spark",
        "streamdump.report",
        "streamdump.wireshark",
        "dpkt",  # reading needs no dpkt; -w loads it
        "yaml",  # the registry came from the cache
        "asyncio",
        "pydantic",
        "pyspark",
        "matplotlib",
        "crc32c",  # Liftbridge's CRC, when an envelope has one
        "google.protobuf",  # Liftbridge's API messages, when one is decoded
        "rich",  # trees, tables and bars draw with it; one line a frame does not
        "cryptography",  # the first ClientHello loads it with the TLS record layer
        "streamdump.wire.tls.connection",
        # views and counts a one-line read does not show: they load with their options
        "orjson",  # the first JSON line loads it
        "zoneinfo",
        "streamdump.analysis.statistics",
        "streamdump.analysis.hexdump",
        "streamdump.views.fields",
        "streamdump.views.messages",
        "streamdump.views.dump",
        # the registry's compiler: the registry came from the cache
        "streamdump.spec.spec_yaml",
        # the other commands' modules: a command line imports its own command's only
        "streamdump.cli.traffic",
        "streamdump.cli.ui",
        "streamdump.cli.pipeline",
        "streamdump.cli.report",
        "streamdump.cli.plugin",
        "streamdump.cli.docs",
    )
    assert unused == []


def test_commands_names_every_command_in_the_order_help_lists_them() -> None:
    import typer

    from streamdump.cli import COMMANDS, app_for, whole_app

    app_for(["docs", "generate"])  # its module first: the whole app keeps COMMANDS' order all the same
    assert list(typer.main.get_command(whole_app()).commands) == list(COMMANDS)
    for name in COMMANDS:
        # A line naming a command builds that command alone, with the top level's options.
        group = typer.main.get_command(app_for([name, "--help"]))
        assert list(group.commands) == [name]
        assert [p.name for p in group.params] == [p.name for p in typer.main.get_command(whole_app()).params]
    for line in ([], ["--help"], ["--version"], ["raed", "x.pcap"]):
        assert app_for(line) is whole_app()


def run_read(capture: str, env: dict[str, str], *options: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streamdump", "read", str(ROOT / "captures" / capture), *options],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    return f"{done.returncode}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("capture", EVERY_PROTOCOL)
def test_a_kept_registry_decodes_as_the_specs_do(tmp_path: Path, capture: str) -> None:
    off = {**os.environ, "STREAMDUMP_CACHE": cache.OFF}
    kept = environment(tmp_path / "cache")
    run_read(capture, kept, "-q")  # the first run compiles and keeps it
    assert len(list((tmp_path / "cache").glob("registry-*.pickle"))) == 1
    for options in (("-V", "-2"), ("-T", "jsonl")):
        assert run_read(capture, kept, *options) == run_read(capture, off, *options)


def test_a_damaged_copy_is_rebuilt(tmp_path: Path) -> None:
    env = environment(tmp_path)
    expected = run_read("nats/pubsub.pcap", {**os.environ, "STREAMDUMP_CACHE": cache.OFF})
    run_read("nats/pubsub.pcap", env)
    (kept,) = tmp_path.glob("registry-*.pickle")
    for damage in (b"", b"not a pickle", kept.read_bytes()[:1000], pickle.dumps({"a": "registry"})):
        kept.write_bytes(damage)
        assert run_read("nats/pubsub.pcap", env) == expected
        # rebuilt and kept again
        assert pickle.loads(kept.read_bytes()).__class__.__name__ == "Registry"


def test_an_unwritable_folder_costs_nothing_but_time(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    expected = run_read("nats/pubsub.pcap", {**os.environ, "STREAMDUMP_CACHE": cache.OFF})
    assert run_read("nats/pubsub.pcap", environment(blocked / "streamdump")) == expected


def test_the_key_follows_the_specs_and_the_code(tmp_path: Path) -> None:
    specs = tmp_path / "dissectors"
    shutil.copytree(spec_dir(), specs, ignore=shutil.ignore_patterns("__pycache__"))
    first = registry_key(specs)
    assert registry_key(specs) == first
    spec = specs / "nats" / "spec.yaml"
    spec.write_text(spec.read_text() + "\n# a comment changes the content\n")
    second = registry_key(specs)
    assert second != first
    code = specs / "nats" / "replies.py"
    stat = code.stat()
    os.utime(code, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert registry_key(specs) != second


def test_kept_keeps_one_copy_per_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMDUMP_CACHE", str(tmp_path))
    made: list[int] = []

    def make() -> dict[str, int]:
        made.append(1)
        return {"n": len(made)}

    assert cache.kept("thing", "a", make, dict) == {"n": 1}
    assert cache.kept("thing", "a", make, dict) == {"n": 1}  # read back, not made
    assert cache.kept("thing", "b", make, dict) == {"n": 2}
    assert [p.name for p in tmp_path.glob("thing-*.pickle")] == ["thing-b.pickle"]
    monkeypatch.setenv("STREAMDUMP_CACHE", cache.OFF)
    assert cache.kept("thing", "b", make, dict) == {"n": 3}


def test_two_places_keep_their_own_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two checkouts (or installs) on one machine: each start of one must not drop the other's copy.
    monkeypatch.setenv("STREAMDUMP_CACHE", str(tmp_path))
    here, there = (f"registry-{cache.place(tmp_path / name)}" for name in ("here", "there"))
    assert here != there
    cache.kept(here, "a", lambda: {"n": 1}, dict)
    cache.kept(there, "b", lambda: {"n": 2}, dict)
    assert cache.kept(here, "a", lambda: pytest.fail("dropped"), dict) == {"n": 1}
    cache.kept(here, "c", lambda: {"n": 3}, dict)  # here's newer copy replaces here's only
    assert sorted(p.name for p in tmp_path.glob("registry-*.pickle")) == sorted(
        [f"{here}-c.pickle", f"{there}-b.pickle"]
    )


def test_the_registry_kept_equals_the_one_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMDUMP_CACHE", str(tmp_path))
    compiled = load_registry()
    key = registry_key(spec_dir())
    cache.kept("registry", key, lambda: compiled, Registry)
    again = cache.kept("registry", key, lambda: pytest.fail("the kept copy was not read"), Registry)
    assert again is not compiled
    # Equal as values (sets compare by content: their order may differ once read back).
    assert again == compiled
    # And whole: a field kept as its default only (spec/model.py's Compact) is read back as the
    # instance's own value, as the compiled one has it, not looked up on its class.
    for name, protocol in compiled.protocols.items():
        kept_fields = list(again.protocols[name].all_fields())
        assert [vars(spec) for spec in kept_fields] == [vars(spec) for spec in protocol.all_fields()]
        assert len(kept_fields) > 10


def test_a_kept_spec_holds_only_what_differs_from_its_defaults() -> None:
    spec = FieldSpec(name="count", type="uint32")
    # cases is made by a factory, a new dict each time: kept as it is.
    assert spec.__getstate__() == {"name": "count", "type": "uint32", "cases": {}}
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec
    assert vars(again) == vars(spec)


def test_a_read_compiles_no_dataclass_methods(tmp_path: Path) -> None:
    env = environment(tmp_path)
    loaded(["read", str(NATS)], env)  # fills the cache
    # Message stays a dataclass: DataAlone, its lazily expanded subclass, keeps slots of its own.
    assert generated_classes(["read", str(NATS)], env) == ["streamdump.codecs.amqp.Message"]


def _new_start(monkeypatch: pytest.MonkeyPatch, folder: Path | str) -> list[str]:
    """What a new process sees of the generated-code store; the sources it compiles."""
    monkeypatch.setenv("STREAMDUMP_CACHE", str(folder))
    monkeypatch.setattr(cache, "_codes", None)
    compiled: list[str] = []

    def counting(source: str, filename: str, mode: str) -> Any:
        compiled.append(source)
        return compile(source, filename, mode)

    monkeypatch.setattr(cache, "compile", counting, raising=False)
    return compiled


def _value(code: Any) -> Any:
    env: dict[str, Any] = {}
    exec(code, env)
    return env["x"]


def test_generated_code_is_read_back_not_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _new_start(monkeypatch, tmp_path)
    assert _value(cache.compiled("x = 1\n", "<one>")) == 1
    assert _value(cache.compiled("x = 2\n", "<two>")) == 2
    assert first == ["x = 1\n", "x = 2\n"]
    second = _new_start(monkeypatch, tmp_path)
    assert _value(cache.compiled("x = 2\n", "<two>")) == 2
    assert _value(cache.compiled("x = 1\n", "<one>")) == 1
    assert second == []
    # Found by file name and whole source: another source is compiled, never taken for a kept one.
    assert _value(cache.compiled("x = 3\n", "<one>")) == 3
    assert cache.compiled("x = 1\n", "<other>").co_filename == "<other>"
    assert second == ["x = 3\n", "x = 1\n"]


def test_a_damaged_code_store_is_compiled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _new_start(monkeypatch, tmp_path)
    cache.compiled("x = 1\n", "<one>")
    (store,) = tmp_path.glob("code-*.marshal")
    whole = store.read_bytes()
    entry = {k: v[:5] for k, v in marshal.loads(whole).items()}  # an entry cut short
    for damage in (
        b"",
        b"not marshal",
        whole[: len(whole) // 2],
        marshal.dumps([1, 2]),
        marshal.dumps(entry),
    ):
        store.write_bytes(damage)
        again = _new_start(monkeypatch, tmp_path)
        assert _value(cache.compiled("x = 1\n", "<one>")) == 1
        assert again == ["x = 1\n"]
        assert len(marshal.loads(store.read_bytes())) == 1  # rewritten whole, readable


def test_the_code_store_is_bounded_and_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "CODE_KEPT", 2)
    _new_start(monkeypatch, tmp_path)
    for n in range(5):
        cache.compiled(f"x = {n}\n", "<n>")
        (store,) = tmp_path.glob("code-*.marshal")
        assert len(marshal.loads(store.read_bytes())) <= 2
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    compiled = _new_start(monkeypatch, blocked / "streamdump")
    assert _value(cache.compiled("x = 7\n", "<n>")) == 7
    assert compiled == ["x = 7\n"]
    off = _new_start(monkeypatch, cache.OFF)
    cache.compiled("x = 8\n", "<n>")
    assert off == ["x = 8\n"]
    assert not (Path(cache.OFF)).exists()
