"""What the plain-text commands print for a new user: `list` shows every config field of every architecture
and every protocol parameter (wrapped, nothing cut), `inspect` ends with a one-line verdict, and the README's
command list is `recscale --help`'s, in its order."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import architectures
import protocols
from cli.main import COMMANDS, main
from tests.fixtures_data import tiny_log  # noqa: F401  (pytest fixture)


def test_list_prints_every_field_wrapped(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert "..." not in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 110
    joined = re.sub(r"\n {27}", " ", text)  # the wrapped continuation lines back onto their entry's line
    for name in architectures.names():
        cfg = architectures.entry(name).config_cls()
        shown = ", ".join(f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg))
        assert f"  {name:<24} {shown}\n" in joined, name
    for name in protocols.protocol_names():
        shown = ", ".join(f"{k}={v}" for k, v in protocols.protocol_parameters(name).items())
        assert f"  {name:<24} {shown}\n" in joined, name


def test_inspect_ends_with_a_verdict(tiny_log, capsys):  # noqa: F811
    assert main(["inspect", str(tiny_log), "--quiet"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"verdict: valid: {tiny_log} reads as a synthetic log, every file and record passed validation"


def test_readme_lists_every_command_in_help_order():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Typical use", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    listed = list(dict.fromkeys(line.split()[1] for line in block.splitlines() if line.startswith("recscale ")))
    assert listed == [name for name, _, _ in COMMANDS]
