"""Pieces shared by the stages of the Group Theorization evaluation (theorize, classify, metrics,
group splits, human study, the model batch jobs, hypotheses from theories).

- prompt templates: a plain text file with ``{slot}`` placeholders, or a file holding one Python
  f-string literal (as the paper's templates are), read with ``ast`` and never executed;
- evaluation rows: reading the subsampled rows, the demographics' display names and the ways a
  model may name a group;
- theories: the statements of a theory about each group;
- builtin models: a model spec from the command line, the allowed keys of a builtin kind.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from splits.config.templates import FSTRING_START, unknown_slot_error, unknown_slots
from splits.errors import ConfigError
from splits.llm.base import SamplingParams
from splits.sampling.draw import RELEASE_COLUMNS


def one_line(text: str, max_chars: int) -> str:
    """A post cut to ``max_chars`` characters with its line breaks turned into spaces."""
    return " ".join(str(text)[:max_chars].split())


def sampling_params(settings: Any) -> SamplingParams:
    """A TM's or CM's sampling parameters from its settings (``TMSettings``, ``CMSettings``)."""
    return SamplingParams(
        temperature=settings.sampling.temperature,
        max_tokens=settings.sampling.max_tokens,
        seed=settings.seed,
    )


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt as literal pieces and slot names, rendered by concatenation (never ``eval``)."""

    pieces: tuple[tuple[bool, str], ...]  # (is_slot, literal text or slot name)
    path: str
    fstring: bool

    @property
    def slots(self) -> set[str]:
        return {text for is_slot, text in self.pieces if is_slot}

    def render(self, values: Mapping[str, Any]) -> str:
        out = []
        for is_slot, text in self.pieces:
            out.append(str(values[text]) if is_slot else text)
        return "".join(out)


def parse_template(
    text: str, where: str, allowed: Sequence[str], required: Sequence[str] = ()
) -> PromptTemplate:
    """Parse a template text (plain slots, or a Python f-string literal file)."""
    pieces: list[tuple[bool, str]] = []
    fstring = bool(FSTRING_START.match(text))
    if fstring:
        try:
            node = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as err:
            raise ConfigError(f"{where}: not a valid f-string literal ({err.msg})") from err
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts: list[ast.expr] = [node]
        elif isinstance(node, ast.JoinedStr):
            parts = list(node.values)
        else:
            raise ConfigError(f"{where}: the file must hold a single f-string literal")
        for part in parts:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                pieces.append((False, part.value))
            elif (
                isinstance(part, ast.FormattedValue)
                and isinstance(part.value, ast.Name)
                and part.conversion == -1
                and part.format_spec is None
                and part.value.id in allowed
            ):
                pieces.append((True, part.value.id))
            else:
                expr = ast.unparse(part.value) if isinstance(part, ast.FormattedValue) else "?"
                raise ConfigError(
                    f"{where}: unsupported placeholder {{{expr}}} (allowed: {', '.join(allowed)})"
                )
    else:
        unknown = unknown_slots(text, allowed)
        if unknown:
            raise unknown_slot_error(where, unknown[0], allowed)
        pattern = re.compile(r"\{(" + "|".join(re.escape(s) for s in allowed) + r")\}")
        pos = 0
        for match in pattern.finditer(text):
            if match.start() > pos:
                pieces.append((False, text[pos : match.start()]))
            pieces.append((True, match.group(1)))
            pos = match.end()
        if pos < len(text):
            pieces.append((False, text[pos:]))
    template = PromptTemplate(tuple(pieces), where, fstring)
    missing = [s for s in required if s not in template.slots]
    if missing:
        raise ConfigError(
            f"{where}: template lacks the slot(s) {', '.join('{' + m + '}' for m in missing)}"
        )
    return template


def load_template(
    path: str | Path, allowed: Sequence[str], required: Sequence[str] = ()
) -> PromptTemplate:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"prompt template {path} does not exist")
    return parse_template(path.read_text(encoding="utf-8"), str(path), allowed, required)


def format_theory(theory: str | None) -> str:
    return "\n".join(line.strip() for line in str(theory or "").splitlines() if line.strip())


def names_pattern(names: Iterable[str]) -> re.Pattern | None:
    cleaned = sorted({n.strip().lower() for n in names if n and n.strip()}, key=len, reverse=True)
    if not cleaned:
        return None
    alternatives = "|".join(re.escape(n) for n in cleaned)
    return re.compile(r"(?<![a-z0-9])(?:" + alternatives + r")(?![a-z0-9])", re.IGNORECASE)


_CLAUSE_SPLIT = re.compile(r";|\bwhile\b|\bwhereas\b|\bbut\b|\bin contrast\b", re.IGNORECASE)


_LETTER_MENTION = {
    letter: re.compile(
        r"(?:\bgroup|\bdemographic)\s*<?"
        + letter
        + r">?(?![A-Za-z0-9])|^\s*<?"
        + letter
        + r">?\s*[:)\-]",
        re.IGNORECASE,
    )
    for letter in "AB"
}


def _mentions(text: str, letter: str, names: re.Pattern | None) -> bool:
    if _LETTER_MENTION[letter].search(text):
        return True
    return bool(names is not None and names.search(text))


def statements_by_group(
    theory: str | None, names_a: Iterable[str] = (), names_b: Iterable[str] = ()
) -> dict[str, list[str]]:
    """The theory's statements about A and about B: lines (or clauses of a line) that name one
    group only (by ``Group A``/``A:`` or by name). Statements naming neither or both are left out."""
    patterns = {"A": names_pattern(names_a), "B": names_pattern(names_b)}
    out: dict[str, list[str]] = {"A": [], "B": []}
    for line in format_theory(theory).split("\n"):
        if not line:
            continue
        pieces = [line]
        hits = {k for k in "AB" if _mentions(line, k, patterns[k])}
        if len(hits) == 2:
            pieces = [p for p in _CLAUSE_SPLIT.split(line) if p.strip()]
        for piece in pieces:
            hits = {k for k in "AB" if _mentions(piece, k, patterns[k])}
            if len(hits) == 1:
                out[hits.pop()].append(piece.strip())
    return out


def check_builtin_keys(name: str, spec: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(spec) - allowed - {"backend", "kind"})
    if unknown:
        raise ConfigError(
            f"models.{name}.{unknown[0]}: unknown key for builtin kind {spec.get('kind')!r}"
        )


REQUIRED_COLUMNS = tuple(RELEASE_COLUMNS)  # the public release's (version 4) columns


def read_rows(path: str | Path) -> pl.DataFrame:
    """The subsampled evaluation rows (written by ``splits theorize subsample``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"evaluation rows {path} do not exist")
    rows = pl.read_parquet(path)
    missing = [c for c in ("quadruplet_id", "eval_row", *REQUIRED_COLUMNS) if c not in rows.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}")
    return rows


def display_names(path: str | Path | None) -> dict[str, str]:
    """Demographic key -> display name from the demographics file (release names as fallback)."""
    from splits.config.definitions import RELEASE_DISPLAY_NAMES, load_demographics

    names = dict(RELEASE_DISPLAY_NAMES)
    if path:
        names.update({d.key: d.display_name for d in load_demographics(path)})
    return names


def group_names(key: str, names: Mapping[str, str]) -> list[str]:
    """Ways a CM may name a group: its label, the label with spaces, its display name."""
    out = [key, key.replace("_", " "), names.get(key, key)]
    display = names.get(key, key)
    if "(" in display:
        out.append(display.split("(")[0].strip())
    return list(dict.fromkeys(o for o in out if o))


def model_registry(name: str, spec_json: str) -> dict[str, Any]:
    try:
        spec = json.loads(spec_json)
    except json.JSONDecodeError as err:
        raise ConfigError(f"models.{name}: --model-spec is not JSON ({err.msg})") from err
    if not isinstance(spec, dict):
        raise ConfigError(f"models.{name}: must be a mapping")
    return {name: spec}
