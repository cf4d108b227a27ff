"""``tilewright sweep FILE`` and ``tilewright report DB``: design-space exploration from the CLI.

Registered in :mod:`tilewright.app.cli.main` (``app.command("sweep")(sweep)``,
``app.command("report")(report)``). User errors are :class:`tilewright.app.sweep.SweepError`,
:class:`tilewright.dataflow_sim.energy_area.TechError` and :class:`tilewright.arch.ArchSpecError`
(all ValueErrors with one-line messages); the CLI prints them as ``error: ...`` with exit status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape as rich_escape

from tilewright.app.cli import JSON_HELP, print_json
from tilewright.app.output_folder import output_folder

__all__ = ["sweep", "report"]

console = Console()


def sweep(
    file: Path = typer.Argument(..., help="sweep YAML file (see configs/sweeps/)"),
    db: Optional[Path] = typer.Option(None, "--db", help="SQLite results database "
                                      "(default: <file stem>.db next to the current folder)"),
    resume: bool = typer.Option(False, "--resume", help="continue a sweep stored in --db; "
                                "points already stored are not evaluated again"),
    executor: str = typer.Option("local", "--executor", help="local | dask | ray"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1,
                                          help="worker processes (default: CPU count)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="dask: address of a "
                                            "running scheduler (default: start a LocalCluster)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="ray: address of a "
                                              "running Ray cluster, e.g. 10.0.0.1:6379 or auto "
                                              "(default: start a local Ray)"),
    export: Optional[Path] = typer.Option(None, "--export", help="also write the results to "
                                          "this .csv or .parquet file"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP + " (progress goes to stderr)"),
) -> None:
    """Evaluate a sweep's design points, committing each to SQLite as it finishes."""

    from tilewright.app.sweep import (  # noqa: PLC0415  (lazy: pulls in pandas)
        ResultsStore, load_sweep, pareto_frame, run_sweep)
    from tilewright.app.sweep.store import \
        check_export_path  # noqa: PLC0415  (lazy: pulls in pandas)

    spec = load_sweep(file)
    if export is not None:      # refused before the sweep runs and writes its database
        check_export_path(export)
    dbp = db or Path(f"{Path(file).stem}.db")
    from rich.progress import (  # noqa: PLC0415  (lazy: progress bars only while sweeping)
        BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
        TimeRemainingColumn)
    with Progress(TextColumn(f"[bold]{spec.name}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True) if as_json else console,
                  transient=False) as prog:
        task = prog.add_task("points", total=None)

        def cb(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        res = run_sweep(spec, dbp, resume=resume, executor=executor, workers=workers,
                        dask_address=scheduler, ray_address=ray_address, progress=cb)
    say = Console(stderr=True) if as_json else console
    say.print(f"{res.evaluated} points evaluated, {res.reused} already stored, "
                  f"{res.invalid} invalid, in {res.seconds:.1f} s "
                  f"({res.points_per_s:.1f} points/s) -> {dbp}")
    with ResultsStore(dbp) as store:
        df = store.frame(spec.name)
        bad = df[df["status"].isin(["invalid", "error"])]
        if len(bad):
            say.print(f"[yellow]{len(bad)} points could not be evaluated; first: "
                          f"{rich_escape(str(bad['error'].iloc[0]))}")
        objs = [(o.metric, o.direction) for o in spec.objectives]
        front = pareto_frame(df, objs)
        say.print(f"{int(df['feasible'].sum())} feasible; Pareto front "
                      f"({', '.join(m for m, _ in objs)}): {len(front)} points")
        exported = store.export(export, spec.name) if export is not None else None
        if exported is not None:
            say.print(f"exported {exported}")
        if as_json:
            print_json({"sweep": spec.name, "db": str(dbp), "evaluated": res.evaluated,
                        "reused": res.reused, "invalid": res.invalid, "seconds": res.seconds,
                        "points_per_s": res.points_per_s,
                        "feasible": int(df["feasible"].sum()), "pareto_points": len(front),
                        "objectives": [m for m, _ in objs],
                        "exported": None if exported is None else str(exported)})


def report(
    db: Path = typer.Argument(..., help="SQLite results database written by `tilewright sweep`"),
    out: Path = typer.Option(Path("sweep_report"), "-o", "--out", help="output folder"),
    sweep_name: Optional[str] = typer.Option(None, "--sweep", help="only this sweep of the db"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP + " (the pages written)"),
) -> None:
    """Write an HTML report with PNG Pareto fronts, a roofline view and energy breakdowns, and a
    per-op breakdown and per-op roofline of the best Pareto points of LLM workloads; and
    interactive.html, one self-contained page (Plotly, opens offline) to hover and click."""
    from tilewright.app.sweep.report import \
        write_report  # noqa: PLC0415  (lazy: pulls in pandas)
    with output_folder(out) as work:      # the folder appears whole, or not at all
        page = out / write_report(db, work, sweep_name).name
    if as_json:
        print_json({"out": str(out), "report": str(page),
                    "files": sorted(str(p.relative_to(out)) for p in out.rglob("*")
                                    if p.is_file())})
        return
    console.print(f"wrote {page}")
