"""Splitting a long list of arguments into request lines of bounded size.

ADD/CHECK/CHECKADD keys and UNION/INTERSECT sources all have the shape
"<COMMAND> <name> <arg> <arg> ...": a million keys become a few hundred lines that the
transport pipelines, and replies are matched back by line order.
"""
from typing import List, Sequence, Tuple


def split_lines(head: bytes, args: Sequence[bytes],
                max_line: int) -> Tuple[List[bytes], List[int]]:
    """Returns (lines, counts): each line is head + " arg"... + "\\r\\n", at most max_line
    bytes, with counts[i] args. Every arg must fit alone: len(head) + len(arg) + 3 <=
    max_line (the encoder guarantees it). An empty args gives no lines."""
    budget = max_line - len(head) - 2  # what the " arg" parts may use
    lines: List[bytes] = []
    counts: List[int] = []
    start = 0
    used = 0
    for i, arg in enumerate(args):
        need = len(arg) + 1
        if used + need > budget and i > start:
            lines.append(b" ".join((head, *args[start:i])) + b"\r\n")
            counts.append(i - start)
            start, used = i, 0
        used += need
    if start < len(args):
        lines.append(b" ".join((head, *args[start:])) + b"\r\n")
        counts.append(len(args) - start)
    return lines, counts
