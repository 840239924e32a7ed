"""Keep benchmarks/RESULTS.md as named sections, each rewritten by its benchmark."""

from __future__ import annotations

import datetime
import re

from _common import HERE

PATH = HERE / "RESULTS.md"
HEADER = "# dkpca benchmark results\n\nEach section is rewritten by the benchmark named in its title.\n"


def update_section(name: str, body: str, command: str | None = None) -> None:
    """Replace (or append) section ``name``; its title quotes ``command`` (default: from the name)."""
    text = PATH.read_text() if PATH.exists() else HEADER
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if command is None:
        script = name.split("-", 1)[0]
        args = f" {name.split('-', 1)[1]}" if "-" in name else ""
        command = f"python benchmarks/{script}.py{args}"
    title = f"`{command}`"
    block = f"<!-- {name}:start -->\n## {name} ({title}, {stamp})\n\n{body}\n<!-- {name}:end -->"
    pattern = re.compile(rf"<!-- {name}:start -->.*?<!-- {name}:end -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    PATH.write_text(text)
