"""`ragmcp.cli` adds the development tools' commands from `ragmcp_bench.cli`; the bench's CLI must not
import the runtime CLI back, directly or through another module (both read their settings with
ragmcp.settings.settings_from_args). grimp (import-linter's graph) reads the imports without running them."""

from __future__ import annotations

import grimp


def cycles_between(graph: grimp.ImportGraph, first: str, second: str) -> list[tuple[str, ...]]:
    """The import chains that close a cycle: `first` reaches `second` and `second` reaches `first` back."""
    forth = graph.find_shortest_chain(importer=first, imported=second)
    back = graph.find_shortest_chain(importer=second, imported=first)
    return [forth, back] if forth and back else []


def test_the_runtime_cli_and_the_bench_cli_import_each_other_in_one_direction_only() -> None:
    graph = grimp.build_graph("ragmcp", "ragmcp_bench", cache_dir=None)
    assert graph.find_shortest_chain(importer="ragmcp.cli", imported="ragmcp_bench.cli")  # what adds the commands
    assert cycles_between(graph, "ragmcp.cli", "ragmcp_bench.cli") == []


def test_the_cycle_check_finds_an_import_back() -> None:
    graph = grimp.ImportGraph()
    for module in ("ragmcp.cli", "ragmcp_bench.cli", "ragmcp_bench.helpers"):
        graph.add_module(module)
    graph.add_import(importer="ragmcp.cli", imported="ragmcp_bench.cli")
    assert cycles_between(graph, "ragmcp.cli", "ragmcp_bench.cli") == []
    graph.add_import(importer="ragmcp_bench.cli", imported="ragmcp_bench.helpers")
    graph.add_import(importer="ragmcp_bench.helpers", imported="ragmcp.cli")
    assert cycles_between(graph, "ragmcp.cli", "ragmcp_bench.cli") == [
        ("ragmcp.cli", "ragmcp_bench.cli"),
        ("ragmcp_bench.cli", "ragmcp_bench.helpers", "ragmcp.cli"),
    ]
