"""The command line, run as a user runs it: a subprocess, a store in a temp dir, a readable table."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ksearch(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ksearch_engine.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=600)


def test_eval_prints_a_table_with_correctness_and_time(tmp_path):
    r = ksearch("eval", "examples/tasks/row_softmax.task.toml", "examples/tasks/softmax_candidate.py", "--backend", "mlx-cpu")
    assert r.returncode == 0, r.stderr
    assert "passed" in r.stdout and "mlx-cpu" in r.stdout and "speedup" in r.stdout


def test_eval_json_reports_a_wrong_candidate(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import mlx.core as mx\ndef kernel(x):\n    return mx.exp(x)\n")
    r = ksearch("--json", "eval", "examples/tasks/row_softmax.task.toml", str(bad), "--backend", "mlx-cpu")
    assert r.returncode == 1
    res = json.loads(r.stdout)
    assert res["status"] == "failed" and res["worst"]["output"] == "y"


def test_bad_task_file_gives_a_clear_message_not_a_traceback(tmp_path):
    t = tmp_path / "broken.task.toml"
    t.write_text("name = 'x'\n[[inputs]]\nname = 3\n")
    r = ksearch("eval", str(t), "examples/tasks/softmax_candidate.py")
    assert r.returncode == 2
    assert "broken.task.toml" in r.stderr and "Traceback" not in r.stderr


def test_unknown_run_is_reported(tmp_path):
    r = ksearch("--store", str(tmp_path / "k.db"), "show", "nope")
    assert r.returncode == 2 and "no run 'nope'" in r.stderr


def test_json_and_store_are_accepted_after_the_command_too(tmp_path, capsys):
    """`ksearch runs --json` and `ksearch show RUN --json` (the form the port command prints) work like
    `ksearch --json runs`."""
    from ksearch_engine import cli
    from ksearch_engine.store import Store

    db = tmp_path / "ks.db"
    run_id = Store(db).create_run("optimize", task_name="t", status="done")
    assert cli.main(["runs", "--json", "--store", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == run_id
    assert cli.main(["--store", str(db), "show", run_id[:6], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["id"] == run_id
    assert cli.main(["--json", "--store", str(db), "runs"]) == 0          # the global form still works
    assert json.loads(capsys.readouterr().out)[0]["id"] == run_id


def test_plan_brief_keeps_the_steps_nearest_the_candidate():
    from ksearch_engine.worldmodel import plan_brief
    plan = ("approach (scan.chunked_two_pass): chunked scan in MLX ops: CHUNK steps inside chunks, then L/CHUNK "
            "carries → tune compile: compile False → True → tune chunk: chunk 16 → 8")
    brief = plan_brief(plan, 48)
    assert len(brief) <= 48 and brief.startswith("…") and brief.endswith("chunk 16 → 8")
    assert plan_brief("original", 48) == "original"


def test_messages_are_printed_verbatim_not_as_rich_markup(tmp_path):
    """A file name or message with brackets (`pip install 'ray[client]…'`, `k[bold].cu`) must reach the terminal
    as written: rich would take `[client]` or `[bold]` for markup and swallow it."""
    src = tmp_path / "k[bold].cu"
    src.write_text("int main() { return 0; }\n")
    out = subprocess.run([sys.executable, "-m", "ksearch_engine.cli", "--store", str(tmp_path / "ks.db"), "port",
                          str(src)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**__import__("os").environ, "COLUMNS": "250"})
    assert out.returncode != 0
    assert "k[bold].cu: nothing to port" in out.stdout + out.stderr, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
