"""The CLI's tables print values as they are: text that looks like rich markup stays text,
whole numbers print without decimals, other numbers with the digits asked for."""

from __future__ import annotations

import io

from rich.console import Console

from mlms.cli.render import rows_table


def _printed(rows: list[dict[str, object]]) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(rows_table(rows, "t"))
    return console.file.getvalue()


def test_values_that_look_like_markup_print_as_they_are() -> None:
    shown = _printed(
        [
            {"name": "[bold]x[/bold]", "options": "shape=[1,3]", "n": 1},
            {"name": "[red]", "options": "a]b[", "n": 2},
        ]
    )
    for value in ("[bold]x[/bold]", "shape=[1,3]", "[red]", "a]b["):
        assert value in shown, shown


def test_whole_numbers_print_without_decimals_and_others_with_the_digits_asked() -> None:
    shown = _printed([{"count": 47.0, "p50": 1.23456}, {"count": 1200.0, "p50": float("nan")}])
    assert "47 " in shown and "47.000" not in shown and "1,200" in shown
    assert "1.235" in shown
