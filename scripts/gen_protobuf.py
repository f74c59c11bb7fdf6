#!/usr/bin/env python3
r"""Generate `apiserver/protobuf/messages.py`: the protobuf message tables of the built-in kinds.

kubectl 1.32+ (client-go's typed clients) sends the bodies of built-in kinds as Kubernetes
protobuf. The apiserver decodes them with tables of facts about the upstream messages: for
each message, its fields' numbers, protobuf types and, from the Go struct the message is
generated from, the JSON name (or inline), whether the Go field is a pointer and whether its
JSON tag says `omitempty`. Those tables are generated here, by hand, from the published
sources, and the output is committed; neither the .proto text nor any Go code is copied.

Sources (one tag for all four, e.g. v0.33.13 for Kubernetes 1.33), each either a checkout
or a bare git directory of the repository:

* k8s.io/api                         (github.com/kubernetes/api): the groups' generated.proto and types.go;
* k8s.io/apimachinery                (github.com/kubernetes/apimachinery): meta/v1, runtime, intstr, resource;
* k8s.io/apiextensions-apiserver     (github.com/kubernetes/apiextensions-apiserver): CustomResourceDefinition;
* k8s.io/kube-aggregator             (github.com/kubernetes/kube-aggregator): APIService.

Run:

    .venv/bin/python scripts/gen_protobuf.py --ref v0.33.13 \\
        --api ../api --apimachinery ../apimachinery \\
        --apiextensions ../apiextensions-apiserver --aggregator ../kube-aggregator

The roots are the built-in kinds of `kubemesh.services.model.kinds.KINDS` (custom resources
are never protobuf), the kinds of their subresources (autoscaling/v1 Scale, policy/v1
Eviction, v1 Binding, authentication/v1 TokenRequest) and meta/v1 DeleteOptions; only the
messages reachable from them are written. The script fails loudly on anything it does not
understand (a proto construct, a field without a Go tag), so a new upstream version cannot be
half-read.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubemesh.services.model.kinds import KINDS  # noqa: E402

OUTPUT = REPO / "apiserver" / "protobuf" / "messages.py"

SCALARS = frozenset({"string", "int32", "int64", "bool", "bytes", "double"})

# Go import path prefix -> the source option that holds it.
MODULES = {
    "k8s.io/api/": "api",
    "k8s.io/apimachinery/": "apimachinery",
    "k8s.io/apiextensions-apiserver/": "apiextensions",
    "k8s.io/kube-aggregator/": "aggregator",
}

# Messages whose Go type marshals JSON by hand (a MarshalJSON method): the decoder gives them
# their JSON form itself, so their Go struct tags are not needed (several have none). Their
# fields are written with their proto names, as pointers.
HAND_MARSHALLED = frozenset({
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
    "k8s.io.apimachinery.pkg.api.resource.Quantity",
    "k8s.io.apimachinery.pkg.runtime.RawExtension",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
    # The envelope, read field by field (its `raw` has no JSON form).
    "k8s.io.apimachinery.pkg.runtime.Unknown",
    "k8s.io.apimachinery.pkg.runtime.TypeMeta",
})

# Kinds that are bodies of subresources or of deletes, beside the kinds of KINDS.
EXTRA_ROOTS = (
    ("autoscaling", "v1", "Scale"),
    ("policy", "v1", "Eviction"),
    ("", "v1", "Binding"),
    ("authentication.k8s.io", "v1", "TokenRequest"),
)
DELETE_OPTIONS = "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"
RUNTIME_UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"

# Where a group's proto package lives when it is not `k8s.io.api.<first label>.<version>`.
GROUP_PACKAGES = {
    "": "k8s.io.api.core",
    "apiextensions.k8s.io": "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions",
    "apiregistration.k8s.io": "k8s.io.kube_aggregator.pkg.apis.apiregistration",
}


# ------------------------------------------------------------------------------------ sources


@dataclass(frozen=True)
class Source:
    """A repository: a git directory read at `ref`, or a checkout (ref None)."""

    path: Path
    ref: str | None

    def files(self, under: str) -> list[str]:
        """The paths of the files directly under a folder (none when it does not exist)."""
        if self.ref is None:
            base = self.path / under
            return sorted(str(p.relative_to(self.path)) for p in base.iterdir() if p.is_file()) if base.is_dir() else []
        out = subprocess.run(["git", "--git-dir", str(self.path), "ls-tree", "--name-only", f"{self.ref}:{under}"],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            return []
        return sorted(f"{under}/{name}" for name in out.stdout.split())

    def read(self, rel: str) -> str:
        """One file's text."""
        if self.ref is None:
            return (self.path / rel).read_text()
        return subprocess.run(["git", "--git-dir", str(self.path), "show", f"{self.ref}:{rel}"],
                              capture_output=True, text=True, check=True).stdout

    def commit(self) -> str:
        """The commit the tag names (recorded in the output)."""
        if self.ref is None:
            return "(a checkout)"
        return subprocess.run(["git", "--git-dir", str(self.path), "rev-parse", f"{self.ref}^{{commit}}"],
                              capture_output=True, text=True, check=True).stdout.strip()


def _git_dir(path: Path) -> Path:
    """A checkout's .git, a bare repository as it is."""
    return path / ".git" if (path / ".git").exists() else path


# ------------------------------------------------------------------------------------ proto


@dataclass
class ProtoField:
    """One field of a proto message (type: a scalar or a fully qualified message name)."""

    name: str
    number: int
    type: str  # a scalar, or a fully qualified message name
    label: str  # optional | repeated | map
    map_key: str = ""


@dataclass
class ProtoMessage:
    """A top-level message, with the Go package it is generated into."""

    full_name: str
    go_package: str
    fields: list[ProtoField] = field(default_factory=list)


_FIELD = re.compile(r"^(optional|repeated|required)\s+([.\w]+)\s+(\w+)\s*=\s*(\d+)\s*;$")
_MAP = re.compile(r"^map<\s*(\w+)\s*,\s*([.\w]+)\s*>\s+(\w+)\s*=\s*(\d+)\s*;$")


def parse_proto(text: str) -> list[ProtoMessage]:
    """The messages of one generated.proto (top-level messages of scalars, messages and maps only)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    lines = [re.sub(r"//.*", "", line).strip() for line in text.splitlines()]
    package = go_package = ""
    messages: list[ProtoMessage] = []
    current: ProtoMessage | None = None
    raw: list[tuple[str, str, str, int, str]] = []
    pending: list[tuple[ProtoMessage, list[tuple[str, str, str, int, str]]]] = []
    for line in lines:
        if not line:
            continue
        if current is None:
            if m := re.match(r"^package\s+([\w.]+);$", line):
                package = m.group(1)
            elif m := re.match(r'^option\s+go_package\s*=\s*"([^"]+)";$', line):
                go_package = m.group(1)
            elif m := re.match(r"^message\s+(\w+)\s*\{$", line):
                current = ProtoMessage(full_name=f"{package}.{m.group(1)}", go_package=go_package)
                raw = []
            elif re.match(r'^(syntax|import)\b', line):
                continue
            else:
                raise SystemExit(f"unexpected proto line outside a message: {line!r}")
            continue
        if line == "}":
            pending.append((current, raw))
            messages.append(current)
            current = None
        elif m := _FIELD.match(line):
            if m.group(1) == "required":
                raise SystemExit(f"required field in {current.full_name}: {line!r}")
            raw.append((m.group(1), m.group(2), m.group(3), int(m.group(4)), ""))
        elif m := _MAP.match(line):
            raw.append(("map", m.group(2), m.group(3), int(m.group(4)), m.group(1)))
        else:
            raise SystemExit(f"unexpected proto line in {current.full_name}: {line!r}")
    for message, fields in pending:
        for label, typ, name, number, key in fields:
            if typ in SCALARS:
                full = typ
            elif typ.startswith("."):
                full = typ[1:]
            elif "." in typ:
                raise SystemExit(f"relative qualified type {typ!r} in {message.full_name}")
            else:
                full = f"{package}.{typ}"
            if label == "map" and key != "string":
                raise SystemExit(f"map key {key!r} in {message.full_name}")
            message.fields.append(ProtoField(name=name, number=number, type=full, label=label, map_key=key))
    return messages


# ------------------------------------------------------------------------------------ Go


@dataclass
class GoField:
    """One field of a Go struct, from its tags: JSON name ("" inlined), omitempty, pointer, proto number."""

    json_name: str  # "" for inline
    omitempty: bool
    pointer: bool
    number: int | None
    proto_name: str


@dataclass
class GoStruct:
    """A Go struct's fields in declaration order."""

    name: str
    fields: list[GoField]


_TAG_KEY = re.compile(r'(\w+):"([^"]*)"')


def parse_go(text: str) -> tuple[dict[str, GoStruct], dict[str, str]]:
    """The structs of one Go file (fields with their tags) and its other named types (name -> underlying)."""
    structs: dict[str, GoStruct] = {}
    others: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    in_group = False
    while i < len(lines):
        line = re.sub(r"//.*", "", lines[i]).rstrip()
        stripped = line.strip()
        if stripped == "type (":
            in_group = True
            i += 1
            continue
        if in_group and stripped == ")":
            in_group = False
            i += 1
            continue
        m = re.match(r"^(?:type\s+)?(\w+)\s+struct\s*\{\s*$", stripped) if (stripped.startswith("type ") or
                                                                          in_group) else None
        if m:
            name = m.group(1)
            fields: list[GoField] = []
            depth = 1
            i += 1
            while i < len(lines):
                body = lines[i].strip()
                i += 1
                if body.startswith("//"):
                    continue
                code = body if body.startswith("`") else re.sub(r"//.*", "", body.split("`", 1)[0]).strip()
                if code.endswith("{"):
                    depth += 1
                if code == "}" or code.startswith("}"):
                    depth -= 1
                    if depth == 0:
                        break
                    continue
                if depth > 1 or "`" not in body:
                    continue
                decl, tag = body.split("`", 1)
                tag = tag.rsplit("`", 1)[0]
                parts = decl.split()
                if len(parts) == 1:
                    typ = parts[0]
                elif len(parts) == 2:
                    typ = parts[1]
                else:
                    raise SystemExit(f"unexpected Go field in {name}: {body!r}")
                tags = dict(_TAG_KEY.findall(tag))
                json_tag = tags.get("json")
                pb = tags.get("protobuf")
                if pb is None or pb == "-":
                    continue
                pb_parts = pb.split(",")
                number = int(pb_parts[1])
                proto_name = next((p[5:] for p in pb_parts if p.startswith("name=")), "")
                if json_tag is None:
                    json_name, omitempty = "", False
                    if len(parts) == 2:  # a named field without a json tag: Go uses the field name
                        json_name = parts[0]
                else:
                    json_parts = json_tag.split(",")
                    json_name, omitempty = json_parts[0], "omitempty" in json_parts[1:]
                    if json_name == "-":
                        json_name = "-"
                    elif not json_name and "inline" not in json_parts[1:] and len(parts) == 2:
                        json_name = parts[0]
                    if "omitzero" in json_parts[1:]:
                        raise SystemExit(f"omitzero in {name}: {body!r}")
                fields.append(GoField(json_name=json_name, omitempty=omitempty, pointer=typ.startswith("*"),
                                      number=number, proto_name=proto_name))
            structs[name] = GoStruct(name=name, fields=fields)
            continue
        m = re.match(r"^(?:type\s+)?(\w+)\s+(\S.*)$", stripped) if (stripped.startswith("type ") or in_group) else None
        if m and m.group(2).replace(" ", "") == "struct{}":
            structs[m.group(1)] = GoStruct(name=m.group(1), fields=[])
        elif m and not m.group(2).startswith(("interface", "func", "=")):
            others[m.group(1)] = m.group(2).strip()
        i += 1
    return structs, others


# ------------------------------------------------------------------------------------ tables


@dataclass
class Entry:
    """One field as written to the tables."""

    number: int
    json_name: str
    type: str
    shape: str  # val | ptr | list | map
    omitempty: bool


def build_fields(message: ProtoMessage, struct: GoStruct | None, notes: list[str]) -> list[Entry]:
    """The decoder's fields of a message, in the Go struct's order (JSON's order)."""
    by_number = {f.number: f for f in message.fields}
    if struct is None:
        return [Entry(f.number, f.name, f.type, "list" if f.label == "repeated" else
                      ("map" if f.label == "map" else "ptr"), True) for f in message.fields]
    out: list[Entry] = []
    seen: set[int] = set()
    for gf in struct.fields:
        if gf.number is None:
            continue
        pf = by_number.get(gf.number)
        if pf is None:
            raise SystemExit(f"{message.full_name}: Go field #{gf.number} ({gf.proto_name}) has no proto field")
        if gf.proto_name and gf.proto_name != pf.name:
            raise SystemExit(f"{message.full_name}: #{gf.number} is {pf.name!r} in proto, {gf.proto_name!r} in Go")
        seen.add(pf.number)
        if gf.json_name == "-":
            notes.append(f"{message.full_name}.{pf.name} (#{pf.number}) has no JSON form (json:\"-\"): ignored")
            continue
        if gf.json_name and gf.json_name != pf.name:
            notes.append(f"{message.full_name}.{pf.name} (#{pf.number}) is {gf.json_name!r} in JSON")
        if not gf.json_name:
            if pf.label != "optional" or pf.type in SCALARS:
                raise SystemExit(f"{message.full_name}: inline field {pf.name} is not a message")
            notes.append(f"{message.full_name}.{pf.name} (#{pf.number}) is inlined in JSON")
        if pf.label == "repeated":
            shape = "list"
        elif pf.label == "map":
            shape = "map"
        else:
            shape = "ptr" if gf.pointer else "val"
        out.append(Entry(pf.number, gf.json_name, pf.type, shape, gf.omitempty))
    missing = [f.name for f in message.fields if f.number not in seen]
    if missing:
        raise SystemExit(f"{message.full_name}: proto fields without a Go field: {missing}")
    return out


def roots(messages: dict[str, ProtoMessage]) -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> message, for every built-in kind and subresource body."""
    gvks = [(k.group, k.version, k.kind) for k in KINDS if k.custom is None]
    out: dict[tuple[str, str], str] = {}
    for group, version, kind in [*gvks, *EXTRA_ROOTS]:
        base = GROUP_PACKAGES.get(group, f"k8s.io.api.{group.split('.')[0]}")
        name = f"{base}.{version}.{kind}"
        if name not in messages:
            raise SystemExit(f"no message {name} for {group or 'core'}/{version} {kind}")
        out[(f"{group}/{version}" if group else version, kind)] = name
    return dict(sorted(out.items()))


def reachable(start: list[str], messages: dict[str, ProtoMessage]) -> list[str]:
    """Every message reachable from `start` through message fields, sorted."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in messages:
            raise SystemExit(f"message {name} is referenced but not defined")
        seen.add(name)
        todo.extend(f.type for f in messages[name].fields if f.type not in SCALARS)
    return sorted(seen)


def go_package_dir(go_package: str) -> tuple[str, str]:
    """(source key, folder) of a Go package."""
    for prefix, source in MODULES.items():
        if go_package.startswith(prefix):
            return source, go_package[len(prefix):]
    raise SystemExit(f"no source for Go package {go_package}")


def load(sources: dict[str, Source]) -> tuple[dict[str, ProtoMessage], dict[str, dict[str, GoStruct]],
                                               dict[str, dict[str, str]]]:
    """Every message of the four repositories, and the Go types of each message's package."""
    messages: dict[str, ProtoMessage] = {}
    proto_files = {
        "api": None,
        "apimachinery": ["pkg/apis/meta/v1", "pkg/runtime", "pkg/runtime/schema", "pkg/util/intstr",
                         "pkg/api/resource"],
        "apiextensions": ["pkg/apis/apiextensions/v1"],
        "aggregator": ["pkg/apis/apiregistration/v1"],
    }
    for key, listed in proto_files.items():
        src = sources[key]
        dirs = listed if listed is not None else [f"{group}/{version}" for group in _dirs(src, "")
                                                  for version in _dirs(src, group)]
        for d in dirs:
            rel = f"{d}/generated.proto"
            if rel not in src.files(d):
                continue
            for m in parse_proto(src.read(rel)):
                messages[m.full_name] = m
    structs: dict[str, dict[str, GoStruct]] = {}
    others: dict[str, dict[str, str]] = {}
    for go_package in sorted({m.go_package for m in messages.values()}):
        key, d = go_package_dir(go_package)
        src = sources[key]
        structs[go_package], others[go_package] = {}, {}
        for rel in src.files(d):
            base = rel.rsplit("/", 1)[-1]
            if (not base.endswith(".go") or base.endswith("_test.go") or base.startswith("zz_generated")
                    or base == "generated.pb.go"):
                continue
            s, o = parse_go(src.read(rel))
            structs[go_package].update(s)
            others[go_package].update(o)
    return messages, structs, others


def _dirs(src: Source, under: str) -> Iterator[str]:
    if src.ref is None:
        base = src.path / under if under else src.path
        for p in sorted(base.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                yield p.name
        return
    spec = f"{src.ref}:{under}" if under else f"{src.ref}:"
    out = subprocess.run(["git", "--git-dir", str(src.path), "ls-tree", spec], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        meta, name = line.split("\t", 1)
        if meta.split()[1] == "tree" and not name.startswith("."):
            yield name


# ------------------------------------------------------------------------------------ output


def render(kinds: dict[tuple[str, str], str], tables: dict[str, list[Entry]], lists: set[str],
           sources: dict[str, Source], ref: str | None) -> str:
    """The text of messages.py."""
    origin = "\n".join(f"* {repo}: {src.commit()}" for repo, src in (
        ("k8s.io/api", sources["api"]), ("k8s.io/apimachinery", sources["apimachinery"]),
        ("k8s.io/apiextensions-apiserver", sources["apiextensions"]),
        ("k8s.io/kube-aggregator", sources["aggregator"])))
    out = [
        '"""Generated by scripts/gen_protobuf.py: the protobuf messages of the built-in kinds. Do not edit.',
        "",
        "Facts about the upstream messages, from the `generated.proto` files (field numbers, protobuf",
        "types, message names) and the Go structs they are generated from (JSON names, pointer fields,",
        "`omitempty`) of k8s.io/api, k8s.io/apimachinery, k8s.io/apiextensions-apiserver and",
        f"k8s.io/kube-aggregator at {ref or 'a checkout'}:",
        "",
        origin,
        "",
        "Regenerate with `scripts/gen_protobuf.py` (its docstring says how to fetch the sources).",
        "",
        "`KINDS` maps (apiVersion, kind) to a message. `MESSAGES` maps a message to its fields in JSON",
        "order, each (number, JSON name or '' when inlined, type, shape, omitempty): the type is a",
        "scalar (string, int32, int64, bool, bytes, double) or a message name; the shape is `val`",
        "(a Go value), `ptr` (a Go pointer: present or not), `list` (repeated) or `map` (string",
        "keys). `LISTS` are messages that stand for a Go slice type (their one field, `items`, is the",
        "JSON array).",
        '"""',
        "",
        "# ruff: noqa: E501  (generated: some message names are long)",
        "",
        "from typing import Final",
        "",
        "Field = tuple[int, str, str, str, bool]",
        "",
        "KINDS: Final[dict[tuple[str, str], str]] = {",
    ]
    out += [f"    ({_q(key[0])}, {_q(key[1])}):\n        {_q(name)}," for key, name in kinds.items()]
    out += ["}", "", "LISTS: Final[frozenset[str]] = frozenset({"]
    out += [f"    {_q(name)}," for name in sorted(lists)]
    out += ["})", "", "MESSAGES: Final[dict[str, tuple[Field, ...]]] = {"]
    for name, entries in tables.items():
        out.append(f"    {_q(name)}: (")
        for e in entries:
            out.append(f"        ({e.number}, {_q(e.json_name)}, {_q(e.type)}, {_q(e.shape)}, {e.omitempty}),")
        out.append("    ),")
    out += ["}", ""]
    return "\n".join(out)


def _q(text: str) -> str:
    """A Python string literal in double quotes."""
    return json.dumps(text)


def main(argv: list[str] | None = None) -> int:
    """Read the sources, build the tables and write them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ref", help="the tag to read in each git directory (omit for checkouts)")
    for key in ("api", "apimachinery", "apiextensions", "aggregator"):
        parser.add_argument(f"--{key}", type=Path, required=True)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--notes", action="store_true", help="print where JSON and protobuf names differ")
    args = parser.parse_args(argv)
    sources = {key: Source(_git_dir(getattr(args, key)) if args.ref else getattr(args, key), args.ref)
               for key in ("api", "apimachinery", "apiextensions", "aggregator")}
    messages, structs, others = load(sources)
    kinds = roots(messages)
    names = reachable([*kinds.values(), DELETE_OPTIONS, RUNTIME_UNKNOWN], messages)
    notes: list[str] = []
    tables: dict[str, list[Entry]] = {}
    lists: set[str] = set()
    for name in names:
        message = messages[name]
        short = name.rsplit(".", 1)[1]
        if name in HAND_MARSHALLED:
            tables[name] = build_fields(message, None, notes)
            continue
        underlying = others[message.go_package].get(short)
        if underlying is not None:
            if not underlying.startswith("[]") or [f.name for f in message.fields] != ["items"]:
                raise SystemExit(f"{name}: Go type {underlying!r} is no struct and no slice wrapper")
            lists.add(name)
            tables[name] = build_fields(message, None, notes)
            continue
        struct = structs[message.go_package].get(short)
        if struct is None:
            raise SystemExit(f"{name}: no Go struct {short} in {message.go_package}")
        tables[name] = build_fields(message, struct, notes)
    text = render(kinds, tables, lists, sources, args.ref)
    args.output.write_text(text)
    if args.notes:
        for note in notes:
            print(note)
    print(f"wrote {args.output}: {len(kinds)} kinds, {len(tables)} messages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
