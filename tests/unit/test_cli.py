"""The command line as operators and their scripts use it: version, log levels, help,
options older scripts pass."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from leakproof.cli import build_parser


def test_version_is_printed_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("leakproof ")


def test_a_bad_log_level_exits_2_naming_the_valid_ones(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--log-level", "FOO", "stop", "--config", "c.yml"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--log-level" in err and "DEBUG" in err and "CRITICAL" in err
    args = build_parser().parse_args(["--log-level", "debug", "stop", "--config", "c.yml"])
    assert args.log_level == "DEBUG"


def test_the_help_speaks_to_operators_and_every_option_has_help() -> None:
    parser = build_parser()
    assert "exactly once" in parser.format_help()
    assert "argument parsing" not in parser.format_help()
    lacking = []

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        for action in p._actions:  # argparse's own list of a parser's arguments
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not action.help:
                lacking.append(f"{path} {action.dest}")

    walk(parser, "leakproof")
    assert lacking == []


@pytest.mark.parametrize("action", ["show", "lag", "history"])
def test_offsets_limit_is_accepted_where_older_scripts_pass_it(action: str) -> None:
    args = build_parser().parse_args(["offsets", action, "--config", "c.yml", "--limit", "5"])
    assert args.limit == 5


def test_topic_create_takes_a_replication_factor() -> None:
    args = build_parser().parse_args(["topic", "create", "--config", "c.yml",
                                      "--partitions", "8", "--replication-factor", "3"])
    assert (args.partitions, args.replication_factor) == (8, 3)
    args = build_parser().parse_args(["topic", "create", "--config", "c.yml",
                                      "--partitions", "8"])
    assert args.replication_factor == -1  # the brokers' default.replication.factor


def test_with_log_format_json_every_record_and_the_exit_message_are_one_json_object(
        capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import logging
    import sys

    from leakproof.core.logs import JsonFormatter, configure, fail

    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("leakproof.driver.job", logging.ERROR, __file__, 1,
                                   "batch %d failed", (7,), sys.exc_info())
    obj = json.loads(JsonFormatter().format(record))
    assert (obj["level"], obj["logger"], obj["message"]) == (
        "ERROR", "leakproof.driver.job", "batch 7 failed")
    assert "ValueError: boom" in obj["exception"]
    fail("leakproof: config error: x", "text")
    assert capsys.readouterr().err == "leakproof: config error: x\n"
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure("INFO", "json")
        fail("leakproof: config error: x", "json")
        line = json.loads(capsys.readouterr().err)
    finally:  # pytest's own handlers back
        root.handlers[:] = handlers
        root.setLevel(level)
    assert (line["level"], line["logger"], line["message"]) == (
        "ERROR", "leakproof.cli", "leakproof: config error: x")


# every command and action, with the arguments it requires
EVERY_COMMAND = [
    ["run"], ["stop"], ["produce", "--events", "1", "--sessions", "1", "--seed", "1"],
    ["topic", "create", "--partitions", "1"], ["tables", "create"],
    ["offsets", "show"], ["offsets", "history"], ["offsets", "lag"],
    ["offsets", "rewind", "--to-batch", "1"], ["sessions", "get", "s1"],
    ["sessions", "diff", "--against", "b.yml"], ["deadletters", "list"],
    ["deadletters", "show", "0:1"], ["deadletters", "redrive"], ["model", "check"],
    ["verify"],
]


def test_every_command_lists_each_command_and_action_the_parser_knows() -> None:
    listed = []
    for action in build_parser()._actions:  # argparse's own list of a parser's arguments
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                listed += [[name, act] for a in nested for act in a.choices] or [[name]]
    assert listed == [argv[:2] if argv[0] in ("offsets", "sessions", "deadletters")
                      else argv[:1] for argv in EVERY_COMMAND]


@pytest.mark.parametrize("argv", EVERY_COMMAND, ids=" ".join)
def test_every_command_reaches_its_config_and_exits_2_on_a_missing_one(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from leakproof.cli import main

    monkeypatch.setattr("leakproof.cli.configure", lambda *_: None)  # pytest's log handlers
    missing = f"{tmp_path}/none.yml"
    assert main([*argv, "--config", missing]) == 2
    assert capsys.readouterr().err.startswith(
        f"leakproof: config error: cannot read config file {missing}")


def test_the_parser_imports_no_client_library() -> None:
    """``leakproof --help`` (and every bad argument) answers without kafka, happybase or
    Spark: the commands import those when they run."""
    import subprocess
    import sys

    code = ("import sys; from leakproof.cli import build_parser; build_parser().format_help(); "
            "print(' '.join(sorted({n.split('.')[0] for n in sys.modules})))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert not loaded & {"kafka", "happybase", "thriftpy2", "pyspark", "py4j"}
