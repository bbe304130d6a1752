#!/usr/bin/env python3
"""check-includes.py - the layering of DESIGN.md and ARCHITECTURE.md, checked.

- lib/ and proto/ include nothing from server/; lib/ nothing from proto/, proto/ nothing
  from lib/.
- cli/ (bloomd-cli) includes cli/, proto/ and lib/, never server/; server/ never cli/.
- server/ is in folders by layer, bottom to top: core, store, persist, exec, repl, then
  net and http (side by side: neither includes the other), then server/'s top level
  (main, lifecycle). A file may include headers of its own folder and of folders below
  it, never of a folder above or beside it.
- No module (x.c and x.h) includes, directly or through others, a module that includes
  it back.
- conn and listen (server/net/) reach no TLS module and no OpenSSL header: a listener's
  transport comes through its accept hook.

`make test` runs it; it prints every arrow that breaks a rule and exits 1 if it finds one.
"""
import os
import re
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
INC = re.compile(r'#include "((?:lib|proto|server|cli)/(?:[a-z_]+/)*[a-z_]+)\.h"')
# What each top folder outside server/ may include (server/ has the layer rules below).
MAY_INCLUDE = {"lib": {"lib"}, "proto": {"proto"}, "cli": {"cli", "proto", "lib"}}

# server/ folders and their rank: a file may include only from lower ranks or its own folder.
RANK = {"core": 0, "store": 1, "persist": 2, "exec": 3, "repl": 4, "net": 5, "http": 5, "": 6}

bad = []
graph = {}


def folder_of(module):
    """'server/net/conn' -> 'net'; 'server/main' -> ''; 'lib/sbf' -> None."""
    parts = module.split("/")
    if parts[0] != "server":
        return None
    return parts[1] if len(parts) == 3 else ""


def sources():
    for top in ("lib", "proto", "server", "cli"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, root), path


for rel, path in sources():
    module = rel[:-2]
    top = rel.split("/")[0]
    folder = folder_of(module)
    if folder is not None and folder not in RANK:
        bad.append("%s is in server/%s/, which is no layer (add it to RANK)" % (rel, folder))
        continue
    text = open(path, encoding="utf-8").read()
    for dep in INC.findall(text):
        dep_top = dep.split("/")[0]
        if top != "server" and dep_top not in MAY_INCLUDE[top]:
            bad.append("%s includes %s.h" % (rel, dep))
            continue
        if top == "server" and dep_top == "cli":
            bad.append("%s includes %s.h: cli/ is the client, not part of the server" % (rel, dep))
            continue
        if top != "server" or dep_top != "server":
            continue
        dep_folder = folder_of(dep)
        if dep_folder not in RANK:
            bad.append("%s includes %s.h, which is in no layer" % (rel, dep))
        elif dep_folder != folder and RANK[dep_folder] >= RANK[folder]:
            where = "beside" if RANK[dep_folder] == RANK[folder] else "above"
            bad.append("%s includes %s.h: server/%s/ is %s server/%s/" %
                       (rel, dep, dep_folder, where, folder or "(top)"))
        if dep != module:
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
    bad.append("include circle: " + " -> ".join(c + (c[0],)))

# Transports are chosen through a listener's accept hook (server/net/conn_io.h): connections
# and listeners reach no TLS module, not even through other modules, and no OpenSSL header.
TLS_MODULES = {"server/net/tls", "server/net/conn_tls"}
for m in ("server/net/conn", "server/net/listen"):
    reach, todo = set(), [m]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in reach:
                reach.add(nxt)
                todo.append(nxt)
    for t in sorted(reach & TLS_MODULES):
        bad.append("%s reaches %s.h: the listener's transport hook chooses TLS" % (m, t))
    for ext in (".c", ".h"):
        if "#include <openssl/" in open(os.path.join(root, m + ext), encoding="utf-8").read():
            bad.append("%s%s includes an OpenSSL header" % (m, ext))
for line in bad:
    print("check-includes: " + line)
sys.exit(1 if bad else 0)
