"""A seeded random walk over every filter command, checked against exact Python sets.

A Bloom filter may say "present" for a key it never saw, so the model checks what must
hold exactly: no false negatives (after ADD, CHECKADD, UNION, and for keys in every
source of INTERSECT), CLEAR and DROP forget, counts never exceed the truly new keys,
NOT_FOUND/EXISTS/CREATED follow the set of names, and LIST equals the model's names.
INTERSECT of filters that have grown beyond one stage must be refused (a stage-by-stage
AND would lose keys that sit in different stages) and change nothing.
"""

import random

import pytest

NAMES = ["a", "b", "c", "d-1", "e.x"]


def keyset(rng, n):
    return ["k%d" % rng.randrange(400) for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_walk_against_model(client, seed):
    rng = random.Random(seed)
    model = {}  # name -> set of keys that must be present
    for step in range(1500):
        op = rng.choice(["create", "add", "check", "checkadd", "union", "intersect",
                         "clear", "drop", "list"])
        name = rng.choice(NAMES)
        where = "seed %d step %d %s %s" % (seed, step, op, name)
        if op == "create":
            reply = client.cmd("CREATE %s capacity=50 error=0.01" % name)
            assert reply == ("EXISTS" if name in model else "CREATED"), where
            model.setdefault(name, set())
        elif op in ("add", "check", "checkadd"):
            keys = keyset(rng, rng.randint(1, 30))
            reply = client.cmd("%s %s %s" % (op.upper(), name, " ".join(keys)))
            if name not in model:
                assert reply == "NOT_FOUND", where
                continue
            have = model[name]
            if op == "add":
                n = int(reply.split(" ")[1])
                assert reply.startswith("ADDED ") and n <= len(set(keys) - have), where
                have.update(keys)
            else:
                bits = reply.split(" ")
                assert len(bits) == len(keys), where
                seen = set(have)
                for k, b in zip(keys, bits):
                    if k in seen:
                        assert b == "1", (where, k)
                    if op == "checkadd":
                        seen.add(k)
                if op == "checkadd":
                    have.update(keys)
        elif op in ("union", "intersect"):
            srcs = rng.sample(NAMES, rng.randint(1, 3))
            involved = [n for n in set(srcs + [name]) if n in model]
            one_stage = all(client.stats("INFO " + n)["stages"] == "1" for n in involved)
            reply = client.cmd("%s %s %s" % (op.upper(), name, " ".join(srcs)))
            if any(s not in model for s in srcs):
                assert reply == "NOT_FOUND", where
                continue
            if op == "intersect" and not one_stage:
                assert reply.startswith("CLIENT_ERROR cannot intersect grown"), where
                continue
            assert reply == "OK", where
            if op == "union":
                result = set(model.get(name, set()))
                for s in srcs:
                    result |= model[s]
            else:
                result = set(model[name]) if name in model else set(model[srcs[0]])
                for s in srcs:
                    result &= model[s]
            model[name] = result
        elif op == "clear":
            reply = client.cmd("CLEAR " + name)
            assert reply == ("OK" if name in model else "NOT_FOUND"), where
            if name in model:
                model[name] = set()
        elif op == "drop":
            reply = client.cmd("DROP " + name)
            assert reply == ("DELETED" if name in model else "NOT_FOUND"), where
            model.pop(name, None)
        else:
            names = [line.split(" ")[1] for line in client.block("LIST")]
            assert names == sorted(model), where
        # every key the model holds must still be present
        if name in model and model[name] and step % 10 == 0:
            keys = sorted(model[name])
            assert set(client.cmd("CHECK %s %s" % (name, " ".join(keys))).split(" ")) == {"1"}, \
                where
