"""Reads `cargo metadata` on stdin; fails if a package the library depends on (normal
dependencies, all features, transitively) declares a `rust-version` newer than ours."""
import json
import sys

meta = json.load(sys.stdin)
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(p for p in meta["packages"] if p["name"] == "zk-recipes")


def version(v):
    """`1.85` and `1.85.0` are the same version: padded to three parts before comparing."""
    parts = [int(x) for x in v.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


assert version("1.85.0") == version("1.85") < version("1.85.1") < version("1.86")
ours = version(root["rust_version"])


seen, todo, newer = set(), [root["id"]], []
while todo:
    pid = todo.pop()
    if pid in seen:
        continue
    seen.add(pid)
    for dep in nodes[pid]["deps"]:
        # Only what a user's build compiles: normal and build dependencies, not dev ones.
        if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
            todo.append(dep["pkg"])
            wanted = packages[dep["pkg"]].get("rust_version")
            if wanted and version(wanted) > ours:
                newer.append(f'{packages[dep["pkg"]]["name"]} {packages[dep["pkg"]]["version"]} needs Rust {wanted}')

if newer:
    print(f"declared rust-version {root['rust_version']}, but:")
    print("\n".join(sorted(set(newer))))
    sys.exit(1)
print(f"{len(seen) - 1} dependencies, none needs a Rust newer than {root['rust_version']}")
