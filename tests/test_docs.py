"""The documentation stays true to the code: docs/configuration.md is what
docs/make_configuration.py writes from the schema; every relative link of README.md and docs/*.md
(and its #anchor) points to an existing file and heading; the README keeps CI's test command
verbatim; the run-health page names every finding code the stages record; the README's layout
names every subpackage and rule file."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _generator():
    spec = importlib.util.spec_from_file_location(
        "make_configuration", REPO / "docs" / "make_configuration.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where a link is not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    anchors = set()
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    for line in text.splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = "".join(c for c in match.group(1).lower() if c.isalnum() or c in " -_")
        slug = slug.replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_configuration_page_is_generated_from_the_schema():
    generator = _generator()
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    expected = generator.render(schema)
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == expected, (
        "docs/configuration.md is out of date: python docs/make_configuration.py"
    )


def test_configuration_page_lists_every_key_with_its_default():
    """Against the schema walked here: every leaf key with a default has a row holding it."""
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    page = (REPO / "docs" / "configuration.md").read_text()
    rows = {}
    for line in page.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 4:
            rows.setdefault(cells[0][3:-1], []).append(cells[2])

    def walk(node: dict, prefix: str):
        for name, child in node.get("properties", {}).items():
            yield f"{prefix}{name}", child
            yield from walk(child, f"{prefix}{name}.")

    # the top-level sections are headings of the page, not rows
    keys = [
        (k, n)
        for k, n in walk(schema, "")
        if "." in k or not ("properties" in n or isinstance(n.get("additionalProperties"), dict))
    ]
    assert len(keys) > 150
    for key, node in keys:
        assert key in rows, key
        if "default" in node:
            default = json.dumps(node["default"], ensure_ascii=False, separators=(", ", ": "))
            assert f"`{default}`" in rows[key], (key, rows[key])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_points_to_an_existing_file_and_heading(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert not broken, broken


def test_link_checker_finds_a_broken_link(tmp_path):
    """The check above can fail: a missing file and a missing heading are both found."""
    (tmp_path / "a.md").write_text("# Title\n\n[ok](a.md#title) [gone](b.md) [bad](a.md#nope)\n")
    page = tmp_path / "a.md"
    targets = LINK.findall(_prose(page.read_text()))
    assert targets == ["a.md#title", "b.md", "a.md#nope"]
    assert _anchors(page) == {"title"}
    assert not (tmp_path / "b.md").exists()


def test_readme_holds_the_ci_test_command_verbatim_in_its_own_block():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    command = next(line for line in ci if line.startswith("pip install torch=="))
    assert f"```bash\n{command}\n```\n" in (REPO / "README.md").read_text()
    assert (
        "```bash\npip install -e . && snakemake --cores 2\n```\n"
        in (REPO / "README.md").read_text()
    )


def test_run_health_page_names_every_finding_code():
    source = "\n".join(p.read_text() for p in (REPO / "workflow" / "splits").rglob("*.py"))
    codes = set(re.findall(r"Finding\(\s*[^,()]+,\s*\"([a-z_]+)\"", source))
    codes |= set(re.findall(r"\bcode=\"([a-z_]+)\"", source))
    assert len(codes) >= 11, codes
    page = (REPO / "docs" / "run-health.md").read_text()
    assert not [c for c in sorted(codes) if f"`{c}`" not in page]


def test_readme_layout_names_every_subpackage_and_rule_file():
    readme = (REPO / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("```", 2)[1]
    package = REPO / "workflow" / "splits"
    subpackages = [p.parent.name for p in package.glob("*/__init__.py")]
    assert len(subpackages) >= 14
    assert [name for name in subpackages if f"{name}/" not in layout] == []
    modules = [p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "cli.py")]
    assert [name for name in modules if name not in layout] == []
    rules = [p.stem for p in (REPO / "workflow" / "rules").glob("*.smk")]
    assert [name for name in rules if name not in layout] == []
    # the Snakefile reads its config through splits.pipeline.start, not a configfile directive
    snakefile = (REPO / "Snakefile").read_text()
    assert not re.search(r"^configfile:", snakefile, flags=re.M)
    assert "configfile" not in layout.split("\n", 2)[1]
