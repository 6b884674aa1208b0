"""What a name in a Python source refers to after the file's own imports: `T.prim_func` is
'tilelang.language.prim_func' after `import tilelang.language as T`. Read with `ast`; nothing is imported."""

from __future__ import annotations

import ast


def qualname(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`tc.Stream` -> 'torch.cuda.Stream' after `import torch.cuda as tc`; None unless rooted in an import."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = qualname(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Each name the module binds by an import (anywhere in it), or by a top-level `x = imported.thing`, to the
    dotted name it stands for."""
    aliases = {"__builtins__": "builtins"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    for node in tree.body:  # `li = load_inline`, `cuda = torch.cuda`
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = qualname(node.value, aliases)
            if target:
                aliases[node.targets[0].id] = target
    return aliases


def undecorate(node: ast.expr) -> ast.expr:
    """`@deco(...)` -> `deco`."""
    return node.func if isinstance(node, ast.Call) else node
