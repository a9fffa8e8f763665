"""Every text metric through datafusion-python equals the golden values (the reference
implementations' output) and the command line's values bit for bit; aggregates, window
functions, table functions, the DataFrame API and errors."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess

import pyarrow as pa
import pytest
from datafusion import SessionContext, col

from conftest import ROOT

RATIO, LOG_EXP = 1e-12, 1e-9
CHECKS = [
    ("f1_score", "f1_score(r, g)", RATIO),
    ("bleu_score", "bleu(r, g)", LOG_EXP),
    ("gleu_score", "gleu(r, g)", RATIO),
    ("meteor_score", "meteor(r, g)", LOG_EXP),
    ("rouge1_fmeasure", "rouge_1(r, g)", RATIO),
    ("rougeL_fmeasure", "rouge_l(r, g)", RATIO),
    ("rougeL_precision", "rouge(r, g, 'rougeL')['precision']", RATIO),
    ("rougeLsum_fmeasure", "rouge(r, g, 'rougeLsum')['f1_score']", RATIO),
    ("sacrebleu_sentence_bleu", "sacrebleu(r, g)", LOG_EXP),
    ("sacrebleu_sentence_chrf", "chrf(r, g)", LOG_EXP),
    ("exact_match", "exact_match(r, g)", 0.0),
]


def golden_rows():
    path = ROOT / "tests/golden/text_metrics.jsonl"
    # split("\n"), not splitlines(): the texts hold U+2028 and other line separators.
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def test_text_metrics_equal_the_golden_values(ctx):
    rows = golden_rows()
    table = pa.table(
        {
            "id": [r["id"] for r in rows],
            "r": [r["response"] for r in rows],
            "g": [r["ground_truth"] for r in rows],
        }
    )
    ctx.register_record_batches("golden", [table.to_batches()])
    select = ", ".join(f"{expr} AS \"{key}\"" for key, expr, _ in CHECKS)
    out = ctx.sql(f"SELECT id, {select} FROM golden").to_pydict()
    by_id = {r["id"]: r for r in rows}
    failures = []
    for i, id_ in enumerate(out["id"]):
        for key, _, tol in CHECKS:
            got, want = out[key][i], by_id[id_][key]
            if got is None or abs(got - want) > tol:
                failures.append(f"{id_} {key}: {got} != {want}")
    assert len(out["id"]) == len(rows) == 533
    assert not failures, "\n".join(failures[:20])


def evalsql_binary():
    found = os.environ.get("EVALSQL_BIN") or shutil.which("evalsql")
    return found if found and os.path.exists(found) else None


def test_values_are_the_command_lines_bit_for_bit(ctx):
    binary = evalsql_binary()
    if binary is None:
        pytest.skip("no evalsql binary (EVALSQL_BIN)")
    query = (
        "SELECT id, model, f1_score(response, ground_truth) AS f1, "
        "meteor(response, ground_truth) AS meteor, bleu(response, ground_truth) AS bleu, "
        "rouge_l(response, ground_truth) AS rl, chrf(response, ground_truth) AS chrf "
        "FROM '{src}' ORDER BY id, model"
    )
    cli = subprocess.run(
        [binary, "--format", "json", "-c", query.format(src="data/qa.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cli_rows = json.loads(cli)
    ctx.register_json("qa", str(ROOT / "data/qa.jsonl"), file_extension=".jsonl")
    py = ctx.sql(query.replace("'{src}'", "qa")).to_pylist()
    assert len(py) == len(cli_rows) == 60
    for a, b in zip(py, cli_rows):
        for k in ("f1", "meteor", "bleu", "rl", "chrf"):
            assert a[k] == b[k], (a["id"], a["model"], k, a[k], b[k])


def test_aggregates_windows_and_tables(ctx):
    ctx.register_parquet("qa", str(ROOT / "data/qa.parquet"))
    agg = ctx.sql(
        "SELECT model, corpus_bleu(response, ground_truth) AS bleu, "
        "mean_ci(f1_score(response, ground_truth))['lower'] AS lo "
        "FROM qa GROUP BY model ORDER BY model"
    ).to_pydict()
    assert agg["model"] == ["gpt-4o", "llama-3.1-8b"]
    assert all(0 < b < 100 for b in agg["bleu"])
    assert all(0 < v < 1 for v in agg["lo"])
    fdr = "SELECT p, fdr_bh(p) OVER () AS q FROM (VALUES (0.01), (0.04), (0.03), (0.5)) AS t(p) ORDER BY p"
    q = ctx.sql(fdr).to_pydict()["q"]
    assert all(qi >= pi for qi, pi in zip(q, [0.01, 0.03, 0.04, 0.5]))
    assert q == sorted(q) and q[-1] == 0.5
    binary = evalsql_binary()
    if binary is not None:
        cli = subprocess.run(
            [binary, "--format", "json", "-c", fdr], capture_output=True, text=True, check=True
        ).stdout
        assert q == [row["q"] for row in json.loads(cli)]
    spans = ctx.sql(
        f"SELECT count(*) AS n, count(DISTINCT trace_id) AS t FROM read_otlp('{ROOT}/data/traces')"
    ).to_pydict()
    assert spans == {"n": [314], "t": [60]}
    traj = ctx.sql(
        "SELECT trajectory_agg(n, a ORDER BY t) AS tr FROM (VALUES (2, 'b', NULL), "
        "(1, 'a', '{\"x\": 1}')) AS v(t, n, a)"
    ).to_pydict()["tr"][0]
    assert json.loads(traj) == [
        {"tool_name": "a", "tool_input": {"x": 1}},
        {"tool_name": "b", "tool_input": {}},
    ]


def test_the_dataframe_api(ctx):
    ctx.register_parquet("qa", str(ROOT / "data/qa.parquet"))
    f1 = ctx.udf("f1_score")
    rouge_l = ctx.udf("rouge_l")
    df = ctx.table("qa").select(
        col("model"),
        f1(col("response"), col("ground_truth")).alias("f1"),
        rouge_l(col("response"), col("ground_truth")).alias("rl"),
    )
    out = df.to_pandas()
    sql = ctx.sql(
        "SELECT model, f1_score(response, ground_truth) AS f1, rouge_l(response, ground_truth) AS rl FROM qa"
    ).to_pandas()
    assert len(out) == 60
    assert out["f1"].tolist() == sql["f1"].tolist()
    assert out["rl"].tolist() == sql["rl"].tolist()


def test_errors_carry_our_message(ctx):
    with pytest.raises(Exception, match=r"ndcg_at_k: k must be at least 1, got 0"):
        ctx.sql("SELECT ndcg_at_k('[\"a\"]', '{\"a\": 1}', 0)").collect()
    with pytest.raises(Exception, match=r"trajectory_precision"):
        ctx.sql("SELECT trajectory_precision('not json', '[]')").collect()
    with pytest.raises(Exception, match=r"f1_score"):
        ctx.sql("SELECT f1_score('only one')").collect()


def test_functions_are_listed_with_descriptions():
    import evalsql

    listed = {f["name"]: f for f in evalsql.functions()}
    for name in ("f1_score", "groundedness", "pass_at_k", "fdr_bh", "read_otlp", "ndcg_at_k"):
        assert name in listed, name
        assert listed[name]["description"], name
    assert listed["fdr_bh"]["kind"] == "window"
    assert listed["corpus_bleu"]["kind"] == "aggregate"
    ctx = SessionContext()
    reg = evalsql.register(ctx)
    assert set(reg.names) >= {"groundedness", "groundedness_details", "generate"}
    assert not math.isnan(len(reg.names))
