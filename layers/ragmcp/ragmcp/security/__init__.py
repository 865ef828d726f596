"""API keys, principals, ACL policy, signed links, rate limits, audit chain."""
