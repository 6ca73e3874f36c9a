"""Regenerate README.md's Performance section from one bench run's markdown report.

    .venv/bin/python bench/readme.py [bench/out/latest.md]

Refuses a quick run (the README shows full runs only). Replaces everything between the "## Performance"
heading and the next "## " heading with a short how-to paragraph plus the report's body (its title
line dropped). Images the report links from bench/out/ (the growth curves) are copied to docs/bench/ and
linked from there, so the README shows the figures of the same run.
"""
from __future__ import annotations

import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
README = os.path.join(ROOT, "README.md")
HEADING = "## Performance"
INTRO = ("`make bench` runs every benchmark side by side with its peers on one machine in one run "
         "(`.venv/bin/python bench/run.py --quick` is a smaller run of a few minutes) and writes "
         "`bench/out/latest.md` and `bench/out/latest.jsonl` (one line per measurement, with machine info); "
         "`.venv/bin/python bench/readme.py` puts a full run's report here. Every client runs in its own "
         "process; rounds are interleaved (A B C A B C); cells are medians with min–max; the last column is "
         "kohort's median over the best other column's median of the same row (> 1: kohort ahead).")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def section_text(report: str, report_dir: str, docs_dir: str) -> str:
    lines = report.splitlines()
    if not lines or not lines[0].startswith("# kohort benchmarks"):
        raise SystemExit("not a bench report (its first line is not '# kohort benchmarks ...')")
    if "Mode `quick`" in report:
        raise SystemExit("a quick run: the README shows full runs (make bench) only")
    body = "\n".join(lines[1:]).strip()
    body = body.replace("\n# ", "\n### ").replace("\n## ", "\n### ")

    def move(m: re.Match) -> str:
        src = os.path.normpath(os.path.join(report_dir, m.group(2)))
        if not os.path.isfile(src):
            raise SystemExit(f"the report links {m.group(2)}, which does not exist")
        os.makedirs(docs_dir, exist_ok=True)
        dst = os.path.join(docs_dir, os.path.basename(src))
        shutil.copyfile(src, dst)
        return f"![{m.group(1)}]({os.path.relpath(dst, ROOT)})"
    body = _IMAGE.sub(move, body)
    when = lines[0].split("—", 1)[-1].strip()
    return f"{HEADING}\n\n{INTRO} Latest full run: {when}.\n\n{body}\n"


def replace_section(readme: str, new: str) -> str:
    start = readme.find(f"\n{HEADING}\n")
    if start < 0:
        raise SystemExit(f"README.md has no '{HEADING}' heading")
    end = readme.find("\n## ", start + len(HEADING) + 2)
    end = len(readme) if end < 0 else end
    return readme[:start + 1] + new + readme[end:]


def main(argv: list[str]) -> int:
    report_path = argv[0] if argv else os.path.join(HERE, "out", "latest.md")
    with open(report_path) as fh:
        report = fh.read()
    new = section_text(report, os.path.dirname(os.path.abspath(report_path)), os.path.join(ROOT, "docs", "bench"))
    with open(README) as fh:
        readme = fh.read()
    with open(README, "w") as fh:
        fh.write(replace_section(readme, new))
    print(f"README.md: Performance section from {os.path.relpath(report_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
