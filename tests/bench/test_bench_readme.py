"""bench/readme.py: README's Performance section is replaced from a full run's report (images copied
next to the docs), and a quick run or a report that is not one is refused."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import readme  # noqa: E402

README = "# kohort\n\n## Two commands\n\nmake demo\n\n## Performance\n\nold figures\n\n## What you get\n\nstuff\n"


def report(mode: str) -> str:
    return (f"# kohort benchmarks — 2026-11-24 04:00:00 UTC\n\nMode `{mode}`, 3 interleaved rounds.\n\n"
            "| t [x] | a | b |\n|---|--:|--:|\n| r | 1 | 2 |\n\n![growth](scale-groups.png)\n\n"
            "## Profiles\n")


def test_the_section_is_replaced_and_images_are_copied(tmp_path):
    (tmp_path / "scale-groups.png").write_bytes(b"\x89PNG fake")
    docs = tmp_path / "docs"
    new = readme.section_text(report("full"), str(tmp_path), str(docs))
    out = readme.replace_section(README, new)
    assert "old figures" not in out
    assert out.index("## Two commands") < out.index("## Performance") < out.index("## What you get")
    assert "| r | 1 | 2 |" in out and "Latest full run: 2026-11-24 04:00:00 UTC." in out
    assert (docs / "scale-groups.png").read_bytes() == b"\x89PNG fake"
    assert "](" + os.path.relpath(docs / "scale-groups.png", readme.ROOT) + ")" in out
    assert "\n## Profiles" not in out and "\n### Profiles" in out      # the report's headings go one level down
    assert out.endswith("## What you get\n\nstuff\n")


def test_a_quick_run_or_a_non_report_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="quick"):
        readme.section_text(report("quick"), str(tmp_path), str(tmp_path / "docs"))
    with pytest.raises(SystemExit, match="not a bench report"):
        readme.section_text("hello\n", str(tmp_path), str(tmp_path / "docs"))
    with pytest.raises(SystemExit, match="does not exist"):
        readme.section_text(report("full"), str(tmp_path), str(tmp_path / "docs"))
