//! The command line, through the real `evalsql` binary: every `queries/*.sql` against its
//! snapshot in `tests/snapshots/`, and the command line's promises (formats, -c with several
//! statements, files by path, COPY, CREATE EXTERNAL TABLE, `evalsql functions`, errors).
//!
//! `EVALSQL_UPDATE_SNAPSHOTS=1` rewrites the snapshots; review the diff before committing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::stub_judge::{StubConfig, StubJudge};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn evalsql(args: &[&str]) -> Output {
    evalsql_with(args, &[])
}

/// `evalsql args` with the variables `env` set.
fn evalsql_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .output()
        .expect("run evalsql")
}

fn stdout_ok(args: &[&str]) -> String {
    stdout_ok_with(args, &[])
}

fn stdout_ok_with(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = evalsql_with(args, env);
    assert!(
        out.status.success(),
        "evalsql {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A new, empty cache file for the snapshot run of `name`.
fn cache_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evalsql-snapshot-cache-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("cache dir");
    dir.join("cache.sqlite")
}

#[test]
fn queries_match_snapshots() {
    let mut queries: Vec<PathBuf> = std::fs::read_dir(root().join("queries"))
        .expect("queries/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    queries.sort();
    assert!(queries.iter().any(|q| q.ends_with("quickstart.sql")));
    let update = std::env::var_os("EVALSQL_UPDATE_SNAPSHOTS").is_some();
    // The judge queries run against the stub server: its scores are a hash of the input,
    // so their snapshots are stable.
    let judge = StubJudge::start_in_background(StubConfig::default());
    let mut failures = Vec::new();
    for q in &queries {
        let name = q.file_stem().unwrap().to_string_lossy().to_string();
        let rel = format!("queries/{name}.sql");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
        for (k, _) in std::env::vars() {
            if k.starts_with("OPENAI_")
                || k.starts_with("AZURE_OPENAI")
                || k.starts_with("EVALSQL_")
            {
                cmd.env_remove(k);
            }
        }
        let out = cmd
            .args(["-f", &rel])
            .current_dir(root())
            .env("OPENAI_BASE_URL", judge.base_url())
            .env("EVALSQL_JUDGE_MODEL", "stub-judge")
            // A fresh cache per file: a query over judge_cache() sees only its own run.
            .env("EVALSQL_JUDGE_CACHE", cache_file(&name))
            .output()
            .expect("run evalsql");
        assert!(
            out.status.success(),
            "{rel} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8(out.stdout).expect("UTF-8 output");
        let snap = root().join("tests/snapshots").join(format!("{name}.out"));
        if update {
            std::fs::create_dir_all(snap.parent().unwrap()).unwrap();
            std::fs::write(&snap, &got).unwrap();
            continue;
        }
        match std::fs::read_to_string(&snap) {
            Ok(expected) if expected == got => {}
            Ok(expected) => failures.push(format!(
                "{rel}: output differs from {}\n--- expected\n{expected}\n--- got\n{got}",
                snap.display()
            )),
            Err(_) => failures.push(format!(
                "{rel}: no snapshot {} (run with EVALSQL_UPDATE_SNAPSHOTS=1)",
                snap.display()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

const SCORE: &str = "SELECT id, model, round(f1_score(response, ground_truth), 4) AS f1 \
                     FROM 'data/qa.jsonl' WHERE id IN ('q01', 'q02') ORDER BY id, model";

#[test]
fn csv_output_is_rows_only() {
    let out = stdout_ok(&["--format", "csv", "-c", SCORE]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "id,model,f1");
    assert_eq!(lines.len(), 5, "header + 4 rows and nothing else: {out:?}");
    assert!(lines[1].starts_with("q01,gpt-4o,"));
}

#[test]
fn json_output_is_one_array_of_objects() {
    let out = stdout_ok(&["--format", "json", "-c", SCORE]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    let rows = v.as_array().expect("an array");
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["id"], "q01");
    assert!(rows[0]["f1"].is_number());
}

#[test]
fn ndjson_output_is_one_object_per_line() {
    let out = stdout_ok(&["--format", "ndjson", "-c", SCORE]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[3]["model"], "llama-3.1-8b");
}

#[test]
fn several_statements_in_one_command() {
    let out = stdout_ok(&[
        "--format",
        "csv",
        "-c",
        "SET datafusion.execution.batch_size = 7; SELECT count(*) AS n FROM 'data/qa.csv'",
    ]);
    assert!(out.ends_with("n\n60\n"), "{out:?}");
}

#[test]
fn every_format_by_path_and_external_tables() {
    for path in ["data/qa.jsonl", "data/qa.csv", "data/qa.parquet"] {
        let out = stdout_ok(&[
            "--format",
            "csv",
            "-c",
            &format!("SELECT count(*) AS n FROM '{path}'"),
        ]);
        assert_eq!(out, "n\n60\n", "{path}");
    }
    let out = stdout_ok(&[
        "--format",
        "csv",
        "-c",
        "CREATE EXTERNAL TABLE qa STORED AS JSON LOCATION 'data/qa.jsonl'; \
         SELECT count(DISTINCT model) AS models FROM qa",
    ]);
    assert!(out.ends_with("models\n2\n"), "{out:?}");
}

/// A `.json` file holding one array of objects (what Ragas, DeepEval and notebooks write)
/// is read by path like a newline-delimited one.
#[test]
fn json_array_files_are_read_by_path() {
    let dir = std::env::temp_dir().join(format!("evalsql-cli-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(root().join("data/qa.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // A compact array (pandas' to_json(orient="records")), an array with one object per
    // line, and plain JSON lines under the .json name.
    let compact = dir.join("qa.json");
    std::fs::write(&compact, serde_json::to_string(&rows).unwrap()).unwrap();
    let per_line = dir.join("qa_per_line.json");
    let objects: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    std::fs::write(&per_line, format!("[\n{}\n]\n", objects.join(",\n"))).unwrap();
    let lines = dir.join("qa_lines.json");
    std::fs::copy(root().join("data/qa.jsonl"), &lines).unwrap();
    for path in [&compact, &per_line, &lines] {
        let out = stdout_ok(&[
            "--format",
            "csv",
            "-c",
            &format!(
                "SELECT count(*) AS n, round(avg(f1_score(response, ground_truth)), 6) AS f1 FROM '{}'",
                path.display()
            ),
        ]);
        assert_eq!(out, "n,f1\n60,0.479922\n", "{}", path.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn copy_writes_results_that_read_back() {
    let dir = std::env::temp_dir().join(format!("evalsql-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("scores.parquet");
    let target = target.to_str().unwrap();
    stdout_ok(&[
        "-c",
        &format!(
            "COPY (SELECT id, model, f1_score(response, ground_truth) AS f1 FROM 'data/qa.jsonl') \
             TO '{target}' STORED AS PARQUET"
        ),
    ]);
    let out = stdout_ok(&[
        "--format",
        "csv",
        "-c",
        &format!("SELECT count(*) AS n, count(f1) AS scored FROM '{target}'"),
    ]);
    assert_eq!(out, "n,scored\n60,60\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The first value of the metric `name` in an `EXPLAIN ANALYZE` plan.
fn plan_metric(plan: &str, name: &str) -> u64 {
    let at = plan.find(&format!("{name}=")).expect(name) + name.len() + 1;
    let digits: String = plan[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

/// A Parquet file of one row group, split over two partitions: DataFusion gives the whole
/// group to the first, and scoring would run on one core. The plan lets both partitions
/// share the scan's batches when the query scores, and only then; values do not change.
#[test]
fn scoring_is_spread_over_partitions_a_row_group_leaves_empty() {
    let dir = std::env::temp_dir().join(format!("evalsql-spread-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("skewed")).unwrap();
    let file = dir.join("pairs.parquet");
    let file = file.to_str().unwrap();
    let copy = |rows: u32, to: &str| {
        stdout_ok(&[
            "-c",
            &format!(
                "COPY (SELECT response, ground_truth FROM 'data/qa.jsonl' \
                 CROSS JOIN generate_series(1, {rows})) TO '{to}' STORED AS PARQUET"
            ),
        ])
    };
    copy(200, file);
    // Two files of 12,000 and 60 rows, a partition each.
    let skewed = dir.join("skewed");
    copy(200, skewed.join("a.parquet").to_str().unwrap());
    copy(1, skewed.join("b.parquet").to_str().unwrap());
    let skewed = skewed.to_str().unwrap();
    // Two partitions, the (small) file split into byte ranges as a large one would be, and
    // batches small enough that there are many to share.
    let run_with = |partitions: &str, sql: &str, env: &[(&str, &str)]| {
        let mut all = vec![
            ("DATAFUSION_OPTIMIZER_REPARTITION_FILE_MIN_SIZE", "0"),
            ("DATAFUSION_EXECUTION_BATCH_SIZE", "500"),
            ("DATAFUSION_EXPLAIN_FORMAT", "indent"),
        ];
        all.extend_from_slice(env);
        stdout_ok_with(
            &["--partitions", partitions, "--format", "csv", "-c", sql],
            &all,
        )
    };
    let run = |partitions: &str, sql: &str| run_with(partitions, sql, &[]);
    // How many batches partitions took from others' shares, from EXPLAIN ANALYZE.
    let taken = |plan: &str| plan_metric(plan, "batches_from_others");
    let scoring = |table: &str| {
        format!(
            "SELECT count(*) AS n, round(sum(f1_score(response, ground_truth)), 9) AS f1, \
             round(sum(rouge_l(response, ground_truth)), 9) AS rl FROM '{table}'"
        )
    };
    let plan = run("2", &format!("EXPLAIN {}", scoring(file)));
    let scan = plan.find("DataSourceExec").expect("a scan");
    assert!(plan[scan..].contains(":0.."), "the file is split: {plan}");
    let shared = plan.find("ShareBatchesExec: partitions=2");
    assert!(
        shared.is_some_and(|d| d < scan),
        "shared above the scan: {plan}"
    );
    // The file's one row group is in the first range: the second partition has nothing of
    // its own, and scores batches of the first's.
    let analyzed = run("2", &format!("EXPLAIN ANALYZE {}", scoring(file)));
    assert!(taken(&analyzed) > 0, "{analyzed}");
    assert_eq!(run("2", &scoring(file)), run("1", &scoring(file)));
    assert!(run("2", &scoring(file)).starts_with("n,f1,rl\n12000,"));
    // Whole files of very different sizes, a partition each: the small one's partition
    // goes on with the large one's batches; every row is scored once.
    let per_file = [("DATAFUSION_OPTIMIZER_REPARTITION_FILE_SCANS", "false")];
    let analyzed = run_with(
        "2",
        &format!("EXPLAIN ANALYZE {}", scoring(skewed)),
        &per_file,
    );
    assert!(analyzed.contains("file_groups={2 groups"), "{analyzed}");
    assert!(taken(&analyzed) > 0, "{analyzed}");
    let skewed_scores = run_with("2", &scoring(skewed), &per_file);
    assert!(
        skewed_scores.starts_with("n,f1,rl\n12060,"),
        "{skewed_scores}"
    );
    assert_eq!(skewed_scores, run("1", &scoring(skewed)));
    // A split JSON-lines file shares too, with the same scores.
    let lines = scoring("data/qa.jsonl");
    let plan = run("2", &format!("EXPLAIN {lines}"));
    assert!(plan.contains("qa.jsonl:0.."), "the file is split: {plan}");
    assert!(plan.contains("ShareBatchesExec"), "{plan}");
    assert_eq!(run("2", &lines), run("1", &lines));
    // A query that scores nothing keeps DataFusion's plan, and so does one where the
    // operator turned DataFusion's work stealing between partitions off.
    let plain = run(
        "2",
        &format!("EXPLAIN SELECT sum(length(response)) FROM '{file}'"),
    );
    assert!(!plain.contains("ShareBatchesExec"), "{plain}");
    let apart = run_with(
        "2",
        &format!("EXPLAIN {}", scoring(file)),
        &[(
            "DATAFUSION_EXECUTION_ENABLE_FILE_STREAM_WORK_STEALING",
            "false",
        )],
    );
    assert!(!apart.contains("ShareBatchesExec"), "{apart}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A scoring query reads a file of wide rows in batches of about the bytes 8,192 short rows
/// take, so many more batches; a query that scores nothing and one that calls the judge keep
/// DataFusion's batches, and the scores do not change.
#[test]
fn scoring_reads_wide_rows_in_smaller_batches() {
    let dir = std::env::temp_dir().join(format!("evalsql-wide-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("wide.parquet");
    let file = file.to_str().unwrap();
    // 3,000 rows of about 2.7 KB: the sample's texts twenty times over, each row its own
    // (a column of few distinct texts is stored once per text, and estimated as such).
    stdout_ok(&[
        "-c",
        &format!(
            "COPY (SELECT repeat(response || ' ', 20) || value AS response, \
             repeat(ground_truth || ' ', 20) || value AS ground_truth FROM 'data/qa.jsonl' \
             CROSS JOIN generate_series(1, 50)) TO '{file}' STORED AS PARQUET"
        ),
    ]);
    let cache = dir.join("judge.sqlite");
    let judge = [
        ("OPENAI_API_KEY", "sk-test"),
        ("EVALSQL_JUDGE_MODEL", "gpt-4o"),
        // Nothing listens there; a dry run sends nothing anyway.
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ("EVALSQL_JUDGE_CACHE", cache.to_str().unwrap()),
        ("DATAFUSION_EXPLAIN_FORMAT", "indent"),
    ];
    let scan_batches = |sql: &str, env: &[(&str, &str)]| -> u64 {
        let plan = stdout_ok_with(
            &[
                "--format",
                "csv",
                "-c",
                "SET evalsql.judge.dry_run = true",
                "-c",
                &format!("EXPLAIN ANALYZE {sql}"),
            ],
            env,
        );
        let scan = plan.find("DataSourceExec").expect("a scan");
        plan_metric(&plan[scan..], "output_batches")
    };
    let scoring = format!(
        "SELECT count(*) AS n, round(sum(f1_score(response, ground_truth)), 9) AS f1, \
         round(sum(rouge_l(response, ground_truth)), 9) AS rl FROM '{file}'"
    );
    let batches = scan_batches(&scoring, &judge);
    assert!((5..=6).contains(&batches), "{batches} batches");
    let plain = format!("SELECT sum(length(response)) FROM '{file}'");
    assert_eq!(scan_batches(&plain, &judge), 1);
    let judged =
        format!("SELECT count(groundedness(response, ground_truth, response)) FROM '{file}'");
    assert_eq!(scan_batches(&judged, &judge), 1);
    // The operator's batch size stays the most a batch holds.
    let small = [("DATAFUSION_EXECUTION_BATCH_SIZE", "200")];
    assert_eq!(
        scan_batches(&scoring, &[&judge[..], &small[..]].concat()),
        15
    );
    let scores = stdout_ok(&["--format", "csv", "-c", &scoring]);
    assert!(scores.starts_with("n,f1,rl\n3000,"), "{scores}");
    assert_eq!(
        scores,
        stdout_ok_with(&["--format", "csv", "-c", &scoring], &small)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn functions_lists_every_evaluation_function() {
    let listing = stdout_ok(&["functions"]);
    let csv = stdout_ok(&["functions", "--format", "csv"]);
    for e in evalsql::udfs::catalogue() {
        assert!(
            listing.contains(&e.syntax),
            "{} missing from the listing",
            e.name
        );
        assert!(
            csv.contains(&format!("\n{},", e.name)),
            "{} missing from csv",
            e.name
        );
    }
    let only = stdout_ok(&["functions", "rouge_l", "--format", "csv"]);
    assert_eq!(
        only.lines().count(),
        3,
        "header + rouge_l + rouge_l_sum: {only}"
    );
}

#[test]
fn errors_go_to_stderr_with_a_failing_exit_code() {
    let out = evalsql(&[
        "--format",
        "csv",
        "-c",
        "SELECT f1_score('only one argument')",
    ]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("f1_score(response: String, ground_truth: String)"),
        "{err}"
    );

    // A failing statement in a file stops the job.
    let dir = std::env::temp_dir().join(format!("evalsql-cli-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("job.sql");
    std::fs::write(&file, "SELECT rouge('a', 'b', 'rouge0');\nSELECT 1;\n").unwrap();
    let out = evalsql(&["-f", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown rouge_type"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A URL setting's password and keys never show: `SHOW ALL`, `SHOW <key>` and
/// `information_schema.df_settings` print `https://user:***@host/v1?api-key=***` (what a
/// server's clients would read of an operator's `--init`), in every output format.
#[test]
fn settings_views_mask_url_credentials() {
    let set = "SET evalsql.judge.base_url = \
               'https://judge-user:hunter2-pw@judge.invalid/v1?api-key=k3y-value&Token=t0k-value&deployment=d1';
               SET evalsql.target.allowed_urls = 'http://app.invalid/run?sig=s1g-value, http://u:pw-2@app.invalid/x';";
    for (query, rows) in [
        ("SHOW ALL", 2),
        ("SELECT * FROM information_schema.df_settings", 2),
        ("SHOW evalsql.judge.base_url", 1),
        (
            "SELECT value FROM information_schema.df_settings WHERE name LIKE 'evalsql.%url%'",
            2,
        ),
    ] {
        for format in ["csv", "json", "table"] {
            let out = evalsql_with(
                &["--format", format, "-c", &format!("{set}\n{query}")],
                &[("EVALSQL_JUDGE_CACHE", "off")],
            );
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert!(out.status.success(), "{query}: {stderr}");
            for secret in ["hunter2", "k3y-value", "t0k-value", "s1g-value", "pw-2"] {
                assert!(
                    !stdout.contains(secret) && !stderr.contains(secret),
                    "{query} ({format}) shows {secret}: {stdout}{stderr}"
                );
            }
            let masked = [
                "https://judge-user:***@judge.invalid/v1?api-key=***&Token=***&deployment=d1",
                "http://app.invalid/run?sig=***, http://u:***@app.invalid/x",
            ];
            let shown = masked.iter().filter(|m| stdout.contains(*m)).count();
            assert_eq!(shown, rows, "{query} ({format}): {stdout}");
        }
    }
}

/// One long document must not take the process down: rougeLsum of a 30,000-token pair
/// used to ask for 3.6 GB and abort.
#[test]
fn one_long_document_does_not_abort_the_run() {
    let out = stdout_ok(&[
        "--format",
        "csv",
        "-c",
        "SELECT rouge_l_sum(repeat('a ', 30000), repeat('a ', 30000)) AS l, \
         rouge_l(repeat('a ', 30000), repeat('b a ', 15000)) AS r",
    ]);
    assert_eq!(out, "l,r\n1.0,0.5\n");
}
