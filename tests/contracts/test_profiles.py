"""`POST /mcp/{profile}` with a profile that does not exist says which ones do."""

from __future__ import annotations


def test_an_unknown_profile_url_lists_the_profiles(contract):
    response = contract.rpc("tools/list", path="/mcp/bogus")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == -32600
    assert error["message"] == "Unknown profile; profiles: chat, kb, mindset, proxysql, ragbox"
