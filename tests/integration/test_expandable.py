"""The expandable kind (issue 18) through the daemon: CREATE kind=expandable, growth far
past its capacity without false negatives, DELETE of added keys (refused on other kinds),
UNION of two expandable filters, INFO's fields, and DELETE surviving kill -9 through the
journal."""

KEYS = ["k%d" % i for i in range(20000)]


def test_expandable_end_to_end(client):
    assert client.cmd("CREATE e kind=expandable capacity=1000 error=0.01") == "CREATED"
    client.add("e", KEYS)
    assert all(client.check("e", KEYS)), "a false negative after 20x growth"
    others = ["o%d" % i for i in range(20000)]
    fp = sum(client.check("e", others))
    assert fp < 0.02 * len(others), fp  # 1% promised, 2x margin for 20k samples
    info = client.stats("INFO e")
    for field in ("size", "load", "fingerprint_bits", "expansions", "bytes", "items"):
        assert field in info, (field, info)
    assert int(info["items"]) >= 19000
    assert client.cmd("DELETE e k1 k2 k3") == "REMOVED 3"
    assert client.check("e", ["k1", "k2", "k3", "k4"])[3] is True
    assert sum(client.check("e", ["k1", "k2", "k3"])) <= 1  # gone, barring a collision
    assert client.cmd("CREATE b") == "CREATED"
    assert client.cmd("DELETE b x").startswith("CLIENT_ERROR DELETE needs an expandable")
    assert client.cmd("DELETE nosuch x") == "NOT_FOUND"
    # UNION of two expandable filters with the same parameters.
    assert client.cmd("CREATE e2 kind=expandable capacity=1000 error=0.01") == "CREATED"
    client.add("e2", ["u1", "u2"])
    assert client.cmd("UNION e2 e") == "OK"
    assert all(client.check("e2", ["u1", "u2"] + KEYS[10:200]))
    assert client.cmd("UNION b e").startswith("CLIENT_ERROR")
    assert client.cmd("INTERSECT e2 e").startswith("CLIENT_ERROR")
    assert client.cmd("CREATE e kind=expandable capacity=1000") == "EXISTS"
    assert client.cmd("CREATE e kind=blocked").startswith(
        "CLIENT_ERROR kind: exists expandable, asked blocked; filter exists")


def test_delete_survives_kill9(daemon_factory):
    d = daemon_factory(args=["--durability", "always", "--snapshot-interval", "0"])
    with d.client() as c:
        assert c.cmd("CREATE e kind=expandable capacity=1000 seed=0") == "CREATED"  # fixed hash
        c.add("e", KEYS[:3000])
        assert c.cmd("FLUSH e") == "OK"
        assert c.cmd("DELETE e " + " ".join(KEYS[:100])) == "REMOVED 100"
    d.kill()
    d.start()
    with d.client() as c:
        assert sum(c.check("e", KEYS[:100])) <= 3
        assert all(c.check("e", KEYS[100:3000]))


def test_error_range(client):
    """0.01% is the smallest promise the kind takes; below it the error names the range."""
    assert client.cmd("CREATE tight kind=expandable capacity=1000 error=0.0001") == "CREATED"
    keys = ["t%d" % i for i in range(30000)]
    client.add("tight", keys)
    assert all(client.check("tight", keys)), "a false negative after 30x growth"
    info = client.stats("INFO tight")
    assert int(info["fingerprint_bits"]) == 16, info
    assert float(info["estimated_error"]) <= 0.0001, info
    reply = client.cmd("CREATE tighter kind=expandable error=0.00005")
    assert reply == ("CLIENT_ERROR invalid filter parameters: an expandable filter takes "
                     "error 0.0001 to 0.5 and capacity up to 1099511627776"), reply
    assert client.cmd("INFO tighter") == "NOT_FOUND"
