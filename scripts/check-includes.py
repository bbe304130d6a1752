#!/usr/bin/env python3
"""check-includes.py - the layering of DESIGN.md, checked: lib/ and proto/ include nothing
from server/, lib/ includes nothing from proto/ and proto/ nothing from lib/, and no
module of server/ (x.c and x.h) includes, directly or through others, a module that
includes it back. `make test` runs it; it prints each circle and exits 1 if it finds one."""
import os
import re
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
INC = re.compile(r'#include "(lib|proto|server)/([a-z_]+)\.h"')
bad = []
graph = {}
for layer in ("lib", "proto", "server"):
    for name in sorted(os.listdir(os.path.join(root, layer))):
        if not name.endswith((".c", ".h")):
            continue
        text = open(os.path.join(root, layer, name), encoding="utf-8").read()
        module = name[:-2]
        for dep_layer, dep in INC.findall(text):
            if layer != "server" and dep_layer != layer:
                bad.append("%s/%s includes %s/%s.h" % (layer, name, dep_layer, dep))
            if layer == "server" and dep_layer == "server" and dep != module:
                graph.setdefault(module, set()).add(dep)

# A module's .c including another module's .h is an arrow between modules.
seen_cycles = set()


def walk(start, node, path):
    for nxt in sorted(graph.get(node, ())):
        if nxt == start:
            i = path.index(min(path))
            seen_cycles.add(tuple(path[i:] + path[:i]))
        elif nxt not in path:
            walk(start, nxt, path + [nxt])


for m in sorted(graph):
    walk(m, m, [m])
for c in sorted(seen_cycles):
    bad.append("include circle: " + " -> ".join("server/%s" % x for x in c + (c[0],)))
for line in bad:
    print("check-includes: " + line)
sys.exit(1 if bad else 0)
