"""gymnasium's own vector-env tests, rewritten against ``pp.make_vec`` (issue 14)."""
