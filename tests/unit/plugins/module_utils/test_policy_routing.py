"""iproute2 readers and the source-rule verdict on tests/fixtures/policy-routing (N16)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError
from ansible_collections.gpucluster.cluster.plugins.module_utils.policy_routing import (
    check_policy_routing,
    parse_ip_rule,
    parse_rule_line,
    read_session,
)

from tests.conftest import fixture_text

N16 = "policy-routing/N16_multi_eni_same_subnet_source_rules_table_10001_present.txt"


def _rules(rules):
    return [(r["priority"], r["from"], r["table"]) for r in rules]


def test_n16_session_reading():
    s = read_session(fixture_text(N16))
    eth1 = s["interfaces"]["eth1"]
    assert (eth1["ifindex"], eth1["state"], eth1["mtu"], eth1["mac"]) == (5, "UP", 9001, "02:00:00:00:00:01")
    assert eth1["inet"] == ["192.0.2.135/24"]
    assert eth1["inet6"] == [{"address": "2001:db8:eeb:2203::6844/128", "scope": "global"},
                             {"address": "fe80::ff:fe00:1/64", "scope": "link"}]
    assert _rules(s["rules"]["4"]) == [(0, "all", "local"), (32764, "192.0.2.48/28", "10001"),
                                       (32765, "192.0.2.135", "10001"), (32766, "all", "main"),
                                       (32767, "all", "default")]
    assert _rules(s["rules"]["6"]) == [(0, "all", "local"), (32764, "2001:db8:eeb:2203:8772::/80", "10001"),
                                       (32765, "2001:db8:eeb:2203::6844", "10001"), (32766, "all", "main")]
    t4 = s["tables"]["10001"]["4"]
    assert [(r["dst"], r["via"], r["dev"], r["src"]) for r in t4] == [
        ("default", "192.0.2.1", "eth1", None), ("192.0.2.0/24", None, "eth1", "192.0.2.135")]
    t6 = s["tables"]["10001"]["6"]
    assert [(r["dst"], r["via"], r["dev"], r["metric"]) for r in t6] == [("default", "fe80::ff:fe00:ff", "eth1", 1024)]
    main = s["tables"]["main"]["4"]
    assert [(r["dst"], r["dev"], r["metric"]) for r in main] == [("default", "eth0", None), ("default", "eth1", 10001),
                                                                 ("192.0.2.0/24", "eth0", None)]


def test_n16_verdict_ok_for_eth1_and_primary_eth0_needs_no_rule():
    v = check_policy_routing(read_session(fixture_text(N16)))
    assert v["class"] == "POLICY_ROUTING_OK" and v["severity"] == "ok"
    assert v["primary"] == "eth0"
    sources = {e["source"]: (e["rule"], e["table"], e["state"]) for e in v["interfaces"]["eth1"]["sources"]}
    assert sources == {"192.0.2.135": (32765, "10001", "OK"), "2001:db8:eeb:2203::6844": (32765, "10001", "OK"),
                       "192.0.2.48/28": (32764, "10001", "OK"), "2001:db8:eeb:2203:8772::/80": (32764, "10001", "OK")}


def test_missing_source_rule_and_wrong_table_device_fail():
    text = fixture_text(N16)
    no_rule = text.replace("32765:  from 192.0.2.135 lookup 10001 \n", "")
    v = check_policy_routing(read_session(no_rule))
    assert v["class"] == "MISSING_SOURCE_RULE" and "192.0.2.135" in v["cause"] and "eth0" in v["cause"]
    wrong = text.replace("default via 192.0.2.1 dev eth1 \n", "default via 192.0.2.1 dev eth0 \n")
    assert check_policy_routing(read_session(wrong))["class"] == "TABLE_WRONG_DEVICE"


def test_rule_grammar_tabs_and_actions():
    assert parse_rule_line("32765:\tfrom 10.0.0.5 iif eth1 lookup 101")["iif"] == "eth1"
    assert parse_rule_line("1000:\tnot from all fwmark 0x1 lookup 5")["not"] is True
    assert parse_rule_line("200: from all to 10.1.0.0/16 unreachable")["action"] == "unreachable"
    assert [r["priority"] for r in parse_ip_rule("32766:\tfrom all lookup main\n0:\tfrom all lookup local\n")] == \
        [0, 32766]
    with pytest.raises(ParseError, match="line 1"):
        parse_rule_line("32765:  from 192.0.2.135 look")
    with pytest.raises(ParseError, match="not an address"):
        parse_rule_line("32765:  from 192.0.2.13x lookup 1")
