"""No import cycle between any two modules of nmt_cli: each module can be read, tested and
changed after the modules it imports, never together with them.

The graph counts imports made only for type checking (`if TYPE_CHECKING:`), as the import-linter
contracts in pyproject.toml do: a type-only import still ties the two modules' meanings together,
and a cycle through one is a cycle a reader must untangle."""

from __future__ import annotations

import grimp


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative:
    no recursion limit to meet), each sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in order:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            following = next(imported, None)
            if following is not None:
                if following not in order:
                    order[following] = low[following] = len(order)
                    stack.append(following)
                    on_stack.add(following)
                    work.append((following, iter(sorted(graph.find_modules_directly_imported_by(following)))))
                elif following in on_stack:
                    low[module] = min(low[module], order[following])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == order[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def a_cycle(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """The shortest closed path of imports through the first module of `component`, for the
    message: that module, what it imports, and the shortest way back."""
    start = component[0]
    paths = [
        [start, *back]
        for module in sorted(graph.find_modules_directly_imported_by(start))
        if module in component and (back := graph.find_shortest_chain(importer=module, imported=start))
    ]
    return min(paths, key=len, default=component)


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = grimp.build_graph("nmt_cli", exclude_type_checking_imports=False)
    found = cycles(graph)
    described = "\n".join(" -> ".join(a_cycle(graph, component)) for component in found)
    assert not found, f"import cycles:\n{described}"


def test_a_cycle_is_found_and_shown() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    graph.add_import(importer="pkg", imported="pkg.a")
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert a_cycle(graph, ["pkg.a", "pkg.b", "pkg.c"]) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
