"""Privacy of released artifacts, shared by the stages that write them: salted hashes of usernames
and post ids (the salt from an environment variable, never from a file that is committed), and
what the dataset card says of the post ids."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from splits.errors import ConfigError

if TYPE_CHECKING:  # polars loads where a table is hashed: the Snakefile imports this module
    import polars as pl

DEVELOPMENT_SALT = "splits-development-salt-not-secret"
HASH_HEX_DIGITS = 16
#: the shortest salt a run on real inputs accepts
MIN_SALT_CHARACTERS = 16


def resolve_salt(salt_env: str) -> tuple[str, bool]:
    """(salt, is_development_salt) from the environment variable ``salt_env`` (config
    ``export.salt_env``)."""
    value = os.environ.get(salt_env, "")
    if value:
        return value, False
    return DEVELOPMENT_SALT, True


def config_salt_environment(export: dict, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment entry through which a config ``export.salt`` reaches the jobs:
    ``{export.salt_env: export.salt}`` when the salt is set and that variable is not (the
    variable wins), else nothing. The environment is what Snakemake hands to local and cluster
    jobs alike without writing it anywhere; the Snakefile (an entry point) sets it, nothing else
    writes the environment."""
    salt_env, config_salt = export["salt_env"], export.get("salt")
    if config_salt and not environ.get(salt_env):
        return {salt_env: config_salt}
    return {}


def salt_fingerprint_for_jobs(
    salt_env: str, config_salt: str | None, environ: Mapping[str, str] = os.environ
) -> str:
    """A short hash of the salt the export job will use (the variable's, or else the config's:
    :func:`config_salt_environment`), for that job's params: the export re-runs when the salt
    changes, while the salt stays out of params, logs and command lines."""
    salt = environ.get(salt_env, "") or config_salt or ""
    if not salt:
        return "development-salt"
    return hashlib.sha256(f"splits-export-salt:{salt}".encode()).hexdigest()[:12]


def hash_author(author: str, salt: str) -> str:
    return hmac.new(salt.encode(), author.encode(), hashlib.sha256).hexdigest()[:HASH_HEX_DIGITS]


def hash_authors(frame: pl.DataFrame, salt: str, column: str = "author") -> pl.DataFrame:
    """Replace ``column`` by ``author_hash`` (salted HMAC; null stays null)."""
    import polars as pl

    distinct = frame.get_column(column).drop_nulls().unique().to_list()
    mapping = pl.DataFrame(
        {column: distinct, "author_hash": [hash_author(a, salt) for a in distinct]},
        schema={column: pl.String, "author_hash": pl.String},
    )
    position = frame.columns.index(column)
    joined = frame.join(mapping, on=column, how="left", maintain_order="left").drop(column)
    cols = [c for c in joined.columns if c != "author_hash"]
    cols.insert(position, "author_hash")
    return joined.select(cols)


# --- post ids (issue 26): Reddit's own ids link every row back to its author ----------------

#: export.post_ids: keep Reddit's ids, replace them by salted hashes, or drop them
POST_ID_MODES = ("keep", "hash", "drop")
#: the columns that hold Reddit post ids, per exported file
POST_ID_COLUMNS = {
    "quadruplets": ("example_post_ids", "sample_A_ids", "sample_B_ids"),
    "topic_posts": ("post_id",),
}


def require_salt_for_real_data(config: dict) -> None:
    """With real inputs (``synth.enabled`` false) the run needs a secret salt: the public
    development salt would let anyone recompute the author hashes of known usernames, and so
    would a short one (a dictionary of salts). Raises ``ConfigError`` (one line naming the
    variable or key, never the salt) before any job when neither the variable
    ``export.salt_env`` nor ``export.salt`` is set, or when the salt the jobs will use (the
    variable's, else the key's) is shorter than MIN_SALT_CHARACTERS or only whitespace."""
    if config["synth"]["enabled"]:
        return
    env = config["export"]["salt_env"]
    from_env = os.environ.get(env, "")
    salt = from_env or config["export"].get("salt") or ""
    fix = f"export {env}=$(openssl rand -hex 32), keep it private and the same across runs"
    if not salt:
        raise ConfigError(
            f"export.salt_env: ${env} is not set, and real inputs (synth.enabled: false) need a "
            f"secret salt to hash usernames (the public development salt is reversible by "
            f"dictionary): {fix}"
        )
    if len(salt) < MIN_SALT_CHARACTERS or not salt.strip():
        where = f"export.salt_env: ${env}" if from_env else "export.salt"
        what = "only whitespace" if not salt.strip() else f"{len(salt)} characters"
        raise ConfigError(
            f"{where}: the salt is too weak for real inputs ({what}; at least "
            f"{MIN_SALT_CHARACTERS} characters, not all whitespace: a short salt is found by "
            f"trying them all): {fix}"
        )


def hash_post_id(post_id: str, salt: str) -> str:
    """A post id as salted HMAC-SHA256 (its own namespace: never equal to an author hash)."""
    message = f"post:{post_id}".encode()
    return hmac.new(salt.encode(), message, hashlib.sha256).hexdigest()[:HASH_HEX_DIGITS]


def protect_post_ids(frame: pl.DataFrame, which: str, mode: str, salt: str) -> pl.DataFrame:
    """``frame`` (quadruplets or topic_posts) with its post-id columns kept, hashed (the same id
    gives the same hash in both files, so rows still join) or dropped."""
    if mode not in POST_ID_MODES:
        raise ConfigError(f"export.post_ids: {mode!r} is not one of {', '.join(POST_ID_MODES)}")
    columns = [c for c in POST_ID_COLUMNS[which] if c in frame.columns]
    if mode == "keep" or not columns:
        return frame
    if mode == "drop":
        return frame.drop(columns)

    import polars as pl

    lists = [c for c in columns if isinstance(frame.schema[c], pl.List)]
    distinct = pl.concat(
        [frame.get_column(c).explode() if c in lists else frame.get_column(c) for c in columns]
    )
    old = distinct.drop_nulls().unique().to_list()  # each distinct id hashed once
    new = [hash_post_id(value, salt) for value in old]

    def hashed(expr: pl.Expr) -> pl.Expr:
        return expr.replace_strict(old, new, default=None, return_dtype=pl.String)

    return frame.with_columns(
        pl.col(c).list.eval(hashed(pl.element())) if c in lists else hashed(pl.col(c))
        for c in columns
    )


def post_id_statement(mode: str) -> str:
    """What the dataset card says about post ids, for ``export.post_ids`` = ``mode``."""
    if mode == "keep":
        return (
            "Post ids (`post_id` in topic_posts; `example_post_ids`, `sample_A_ids` and "
            "`sample_B_ids` in quadruplets) are Reddit's own ids: anyone can open a post by its "
            "id and see its author, so **every row links back to its author's Reddit account**, "
            "whatever the hashed usernames. Users of this dataset must not use them to identify, "
            "contact or profile authors. (Export with `export.post_ids: hash` or `drop` to "
            "leave them out.)"
        )
    what = (
        "replaced by salted hashes (HMAC-SHA256, their own namespace; the same post has the "
        "same hash in both files, so rows still join)"
        if mode == "hash"
        else "dropped"
    )
    return (
        f"Reddit's post ids are {what}: rows cannot be opened on Reddit by id, so users cannot "
        "check a post's context, see whether it was deleted since, or re-fetch it. The post "
        "texts are exported as posted, and a text can still be searched for on Reddit or in "
        "archives, which may find its author."
    )
