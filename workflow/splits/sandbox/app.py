"""The sandbox page (Gradio): a query view and a table view over one run.

Offline by construction: analytics and Gradio's version check are switched off before Gradio is
imported, no share link is made, server-side rendering (which needs Node) is off, and the theme
uses the system's fonts instead of Google Fonts, so the page loads nothing but its own server's
files. Every handler catches bad input and shows it as one line in the page; an unexpected error
is logged with its traceback on the server and shown as one line too.
"""

# no ``from __future__ import annotations``: Gradio reads the SelectData hint of a handler at
# run time, from the handler's own scope
import logging

from splits.filecheck import is_data_error, os_errno
from splits.hypotheses.engine import QueryError
from splits.sandbox.guard import request_guard
from splits.sandbox.query import (
    MAX_SESSIONS,
    SESSION_TTL_S,
    SORTS,
    STAGE_ALL,
    Answer,
    Sandbox,
    Session,
)
from splits.sandbox.typed import message_text, sent_choice, sent_text
from splits.sandbox.views import (
    CSS,
    answer_html,
    curve_figure,
    message_html,
    posts_html,
    session_html,
)

log = logging.getLogger(__name__)

ALL = ""  # the table view's "any" choice
QUERY_TAB, TABLE_TAB = "query", "table"


def import_gradio():
    """Gradio. Its analytics (and the version check that comes with them) are off: the `splits`
    command sets ``GRADIO_ANALYTICS_ENABLED=False`` before ``splits sandbox`` runs (environment
    variables are written at entry points only), and the page's ``Blocks`` pass
    ``analytics_enabled=False``."""
    try:
        import gradio as gr
    except ImportError as err:
        from splits.errors import ConfigError

        raise ConfigError(f"the sandbox needs Gradio: pip install -e '.[sandbox]' ({err})") from err
    return gr


def failure_message(sandbox: Sandbox, err: Exception) -> str:
    """The page's one line for a failed request. Bad input (``QueryError``) is said as it is; a
    data or OS error is first traced to a damaged or missing file of the run, said (and logged)
    in one line naming the file and the command that re-creates it; anything else is a bug,
    logged with its traceback. No line quotes more than ``MAX_MESSAGE_CHARS`` characters."""
    if isinstance(err, QueryError):
        return message_html(message_text(str(err)))
    found = sandbox.damaged_file() if is_data_error(err) or os_errno(err) else None
    if found is not None:
        log.error("%s", message_text(str(found)))
        return message_html(message_text(str(found)))
    log.exception("sandbox query failed")
    first = message_text(str(err).splitlines()[0] if str(err) else "")
    return message_html(f"internal error ({type(err).__name__}: {first}); see the server log")


def build_app(sandbox: Sandbox):
    """The Gradio Blocks of the page (not launched)."""
    gr = import_gradio()
    engine = sandbox.engine
    groups = [(sandbox.names.get(d, d), d) for d in engine.demographics]
    fractions = list(sandbox.settings.lift.k_fractions)
    choices = sandbox.choices()

    k_choices = list(fractions)
    stage_choices = [value for _, value in sandbox.stages()]
    topic_choices = [ALL, *choices["topics"]]
    pair_choices = [ALL, *choices["pairs"]]
    source_choices = [ALL, *choices["sources"]]

    # The events below take the values the page sent as they came (preprocess=False): Gradio's
    # own check of a dropdown's value quotes the value whole in its error, and one holding a lone
    # surrogate cannot be encoded, which drops the client's stream. Each handler checks every
    # value itself (splits.sandbox.typed) before anything is said about it.

    def ask(lexicon, topic, target, other, show_groups, session: Session):
        try:
            # a lexicon over the limit is refused by parse_lexicon, unread
            lexicon = sent_text(lexicon, "lexicon", max_chars=None)
            topic = sent_text(topic, "topic")
            target, other = sent_text(target, "group"), sent_text(other, "group")
            answer = sandbox.ask(lexicon, topic, target, other, session)
        except Exception as err:  # every failure becomes one line in the page
            return (
                failure_message(sandbox, err),
                "",
                None,
                "",
                session_html(session, sandbox.settings),
                session,
                None,
            )
        return (
            "",
            answer_html(answer, sandbox.names, sandbox.settings),
            curve_figure(answer, sandbox.settings),
            posts_html(answer, sandbox.names, show_groups is True),
            session_html(session, sandbox.settings),
            session,
            answer,
        )

    def show_posts(show_groups, answer: Answer | None):
        return posts_html(answer, sandbox.names, show_groups is True)

    def table(k, stage, topic, pair, source, sort):
        try:
            k = sent_choice(k, k_choices, "k")
            stage = sent_choice(stage, stage_choices, "stage")
            topic = sent_choice(topic, topic_choices, "topic")
            pair = sent_choice(pair, pair_choices, "pair")
            source = sent_choice(source, source_choices, "source")
            sort = sent_choice(sort, list(SORTS), "sort")
            frame, total = sandbox.table_view(
                float(k), stage, topic or None, pair or None, source or None, sort
            )
        except Exception as err:  # one line in the page, as above
            return None, failure_message(sandbox, err)
        shown = f"{frame.height:,} of {total:,} hypotheses" if total else "no hypothesis"
        return (
            frame,
            f"<p id='sb-table-count'>{shown} at k = {float(k) * 100:g}%; click a row to open it in the query view.</p>",
        )

    def open_row(event: gr.SelectData):
        try:
            row = event.row_value if isinstance(event.row_value, list) else [None]
            hypothesis_id = sent_text(row[0] if row else None, "hypothesis")
            if not hypothesis_id:
                raise QueryError("the row sent names no hypothesis: click a row of the table")
            lexicon, topic, target, other = sandbox.hypothesis(hypothesis_id)
        except Exception as err:  # one line in the page, as above
            failed = failure_message(sandbox, err)
            return gr.update(), gr.update(), gr.update(), gr.update(), gr.update(), failed
        return lexicon, topic, target, other, gr.Tabs(selected=QUERY_TAB), ""

    with gr.Blocks(analytics_enabled=False, title="Splits sandbox") as app:
        session = gr.State(Session(), time_to_live=SESSION_TTL_S)  # dropped when idle
        last = gr.State(None)
        gr.Markdown(
            "## Splits sandbox: does a group use a lexicon more on a topic?\n"
            "A lexicon is ranked by BM25 over the topic posts of the two groups; lift@k is the "
            "target group's share of the top k of the list over its share of the whole list."
        )
        if sandbox.notes:
            gr.HTML("".join(message_html(n, "note") for n in sandbox.notes), elem_id="sb-notes")
        with gr.Tabs(selected=QUERY_TAB) as tabs:
            with gr.Tab("Query", id=QUERY_TAB):
                lexicon = gr.Textbox(
                    label='Lexicon (words; phrases in "double quotes")',
                    placeholder='finna, "on god", y\'all',
                    lines=2,
                    elem_id="sb-lexicon",
                )
                with gr.Row(equal_height=True):
                    with gr.Column(scale=6):
                        with gr.Row():
                            topic = gr.Dropdown(
                                engine.topics,
                                value=engine.topics[0] if engine.topics else None,
                                label="Topic",
                                elem_id="sb-topic",
                            )
                            target = gr.Dropdown(
                                groups,
                                value=engine.demographics[0] if engine.demographics else None,
                                label="Target group",
                                elem_id="sb-target",
                            )
                            other = gr.Dropdown(
                                groups,
                                value=engine.demographics[1]
                                if len(engine.demographics) > 1
                                else None,
                                label="Compared with",
                                elem_id="sb-other",
                            )
                    with gr.Column(scale=1, min_width=120):
                        go = gr.Button("Ask", variant="primary", elem_id="sb-ask")
                message = gr.HTML(elem_id="sb-message")
                stats = gr.HTML(elem_id="sb-stats")
                curve = gr.Plot(label="lift@k", format="png", elem_id="sb-curve")
                show_groups = gr.Checkbox(
                    False, label="Show each post's group", elem_id="sb-show-groups"
                )
                posts = gr.HTML(elem_id="sb-posts")
                history = gr.HTML(elem_id="sb-session")
            with gr.Tab("Hypotheses table", id=TABLE_TAB):
                with gr.Row():
                    k = gr.Dropdown(
                        [(f"{f * 100:g}%", f) for f in fractions],
                        value=sandbox.settings.report_k
                        if sandbox.settings.report_k in fractions
                        else fractions[0],
                        label="k",
                        elem_id="sb-table-k",
                    )
                    stage = gr.Dropdown(
                        sandbox.stages(), value=STAGE_ALL, label="Stage", elem_id="sb-stage"
                    )
                    table_topic = gr.Dropdown(
                        [("any topic", ALL)] + [(t, t) for t in choices["topics"]],
                        value=ALL,
                        label="Topic",
                        elem_id="sb-table-topic",
                    )
                    pair = gr.Dropdown(
                        [("any pair", ALL)] + [(p, p) for p in choices["pairs"]],
                        value=ALL,
                        label="Pair",
                        elem_id="sb-pair",
                    )
                    source = gr.Dropdown(
                        [("any source", ALL)] + [(s, s) for s in choices["sources"]],
                        value=ALL,
                        label="Source",
                        elem_id="sb-source",
                    )
                    sort = gr.Dropdown(
                        list(SORTS), value=next(iter(SORTS)), label="Sort", elem_id="sb-sort"
                    )
                count = gr.HTML(elem_id="sb-table-count-box")
                grid = gr.Dataframe(
                    interactive=False,
                    wrap=True,
                    max_height=640,
                    elem_id="sb-table",
                    column_widths=["14%", "6%", "9%", "7%", "7%", "25%"] + ["5%"] * 6,
                )

        outputs = [message, stats, curve, posts, history, session, last]
        inputs = [lexicon, topic, target, other, show_groups, session]
        raw = {"preprocess": False}  # values as sent: the handlers check them (above)
        go.click(ask, inputs, outputs, api_name="ask", **raw)
        lexicon.submit(ask, inputs, outputs, api_name=False, **raw)
        show_groups.change(show_posts, [show_groups, last], posts, api_name=False, **raw)
        filters = [k, stage, table_topic, pair, source, sort]
        for control in filters:
            control.change(table, filters, [grid, count], api_name=False, **raw)
        app.load(table, filters, [grid, count], api_name=False, **raw)
        grid.select(
            open_row, None, [lexicon, topic, target, other, tabs, message], api_name=False
        ).then(ask, inputs, outputs, api_name=False, **raw)
    return app


def theme(gr):
    """Gradio's default theme with the system's fonts (its own fonts come from Google Fonts)."""
    return gr.themes.Default(
        font=["system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
        font_mono=["ui-monospace", "Menlo", "Consolas", "monospace"],
    )


def launch(sandbox: Sandbox, host: str, port: int, block: bool = True):
    """Serve the page on host:port (blocking unless ``block`` is False)."""
    gr = import_gradio()
    app = build_app(sandbox)
    app.queue(default_concurrency_limit=1)
    try:
        app.launch(
            server_name=host,
            server_port=port,
            share=False,
            ssr_mode=False,
            prevent_thread_lock=not block,
            state_session_capacity=MAX_SESSIONS,
            quiet=True,
            footer_links=[],
            theme=theme(gr),
            css=CSS,
            # a request Gradio would answer with a traceback or the values quoted back is
            # refused in one line before Gradio reads it (splits.sandbox.guard)
            app_kwargs={"middleware": [request_guard(app)]},
        )
    except OSError as err:
        from splits.errors import ConfigError

        raise ConfigError(f"--port {port}: cannot serve on {host}:{port} ({err})") from err
    return app
