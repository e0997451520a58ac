"""Write the installed torch's CUDA autocast lists to src/where223/autocast_lists/<release>.json.

For a release whose wheel ships the lists in `ATen/autocast_mode.h` (torch 2.4 and later): each op's policy and
header line, the registering blocks' lines from the binary's dispatcher (`where223.cuda_autocast.
lists_from_binary`). 2.1.2's lists live in autocast_mode.cpp only and were written by hand from that file. The
tests check each committed file against the binary that installs it. Run with the torch to describe:

    PYTHONPATH=src .cache/sweep/envs/today-*/bin/python scripts/cuda_autocast_lists.py
"""

from __future__ import annotations

import sys

from where223.cuda_autocast import LISTS_DIR, drift, lists_from_binary


def main() -> int:
    try:
        lists = lists_from_binary()
    except ValueError as error:
        print(f"cuda_autocast_lists: {error}", file=sys.stderr)
        return 2
    problems = drift(lists)
    if problems:
        print(f"cuda_autocast_lists: the header's lists miss the binary's: {problems[0]} (+{len(problems) - 1})",
              file=sys.stderr)
        return 2
    out = LISTS_DIR / f"{lists.torch}.json"
    out.write_text(lists.to_json())
    print(f"{out}: {len(lists.ops)} ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
