//! evalsql on Ballista: `evalsql scheduler` and two `evalsql executor`s as separate processes
//! on loopback, queried with `evalsql --ballista`; results must equal one process's, with
//! aggregates merging partial state across the executors, and the judge's limits and cache
//! shared by the cluster; and a job gets only what the cluster's flags allow, refused by the
//! scheduler and again by the executors.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::object_store::{free_port, wait_for};
use crate::stub_judge::{StubConfig, StubJudge};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A scheduler and two executors, killed on drop.
pub(crate) struct Cluster {
    children: Vec<Child>,
    pub(crate) scheduler: u16,
    pub(crate) work_dirs: Vec<PathBuf>,
    env: Vec<(String, String)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn evalsql_command(env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("AZURE_") || k.starts_with("EVALSQL_") {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(ROOT).envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// The flags most tests give every process: the repository (the sample data) and the
/// test's directory are the data roots.
fn roots(dir: &Path) -> Vec<String> {
    vec![
        "--data-root".into(),
        ROOT.into(),
        "--data-root".into(),
        dir.display().to_string(),
    ]
}

impl Cluster {
    /// Starts the processes with `env` (the judge's endpoint, its cache) and `flags`, and
    /// waits until both executors have registered.
    fn start(dir: &Path, env: &[(&str, &str)], flags: &[String]) -> Cluster {
        Cluster::start_with(dir, env, flags, flags)
    }

    /// As [`Cluster::start`], with flags of the scheduler's and of the executors'.
    fn start_with(
        dir: &Path,
        env: &[(&str, &str)],
        scheduler_flags: &[String],
        executor_flags: &[String],
    ) -> Cluster {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let scheduler = free_port();
        let mut children = vec![];
        let mut sched = evalsql_command(&env)
            .env(
                "RUST_LOG",
                "ballista_scheduler::scheduler_server::grpc=info",
            )
            .args(["scheduler", "--port", &scheduler.to_string()])
            .args(scheduler_flags)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start evalsql scheduler");
        let registered = Arc::new(Mutex::new(0usize));
        {
            let registered = Arc::clone(&registered);
            let lines = BufReader::new(sched.stderr.take().unwrap());
            std::thread::spawn(move || {
                for line in lines.lines().map_while(Result::ok) {
                    if line.contains("register executor request") {
                        *registered.lock().unwrap() += 1;
                    }
                }
            });
        }
        children.push(sched);
        wait_for(scheduler);
        let mut work_dirs = vec![];
        for n in 0..2 {
            let work_dir = dir.join(format!("executor{n}"));
            std::fs::create_dir_all(&work_dir).unwrap();
            let child = evalsql_command(&env)
                .args(["executor", "--scheduler", &format!("127.0.0.1:{scheduler}")])
                .args(["--port", &free_port().to_string()])
                .args(["--grpc-port", &free_port().to_string()])
                .args(["--concurrent-tasks", "1", "--work-dir"])
                .arg(&work_dir)
                .args(executor_flags)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start evalsql executor");
            children.push(child);
            work_dirs.push(work_dir);
        }
        let started = Instant::now();
        while *registered.lock().unwrap() < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the executors never registered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Cluster {
            children,
            scheduler,
            work_dirs,
            env,
        }
    }

    /// A cluster whose judge is `stub`, with one cache file for every process.
    pub(crate) fn with_judge(dir: &Path, stub: &StubJudge, flags: &[String]) -> Cluster {
        Cluster::with_judge_split(dir, stub, flags, flags)
    }

    fn with_judge_split(
        dir: &Path,
        stub: &StubJudge,
        scheduler_flags: &[String],
        executor_flags: &[String],
    ) -> Cluster {
        Cluster::with_judge_env(dir, stub, scheduler_flags, executor_flags, &[])
    }

    /// [`Cluster::with_judge`] whose processes also have `env`.
    pub(crate) fn with_judge_env(
        dir: &Path,
        stub: &StubJudge,
        scheduler_flags: &[String],
        executor_flags: &[String],
        env: &[(&str, &str)],
    ) -> Cluster {
        let cache = dir.join("cache.sqlite").display().to_string();
        let base_url = stub.base_url();
        let mut all = vec![
            ("OPENAI_BASE_URL", base_url.as_str()),
            ("EVALSQL_JUDGE_MODEL", "stub-judge"),
            ("EVALSQL_JUDGE_CACHE", cache.as_str()),
        ];
        all.extend_from_slice(env);
        Cluster::start_with(dir, &all, scheduler_flags, executor_flags)
    }

    /// `evalsql --ballista URL --format csv -c SQL`, which must fail: its stderr.
    fn refused(&self, sql: &str) -> String {
        let out = evalsql_command(&self.env)
            .args(["--ballista", &format!("df://127.0.0.1:{}", self.scheduler)])
            .args(["--format", "csv", "-c", sql])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "{sql}: the job ran: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// `evalsql [--ballista URL] --format csv ARGS`, which must succeed.
    fn run(&self, distributed: bool, args: &[&str]) -> String {
        let mut cmd = evalsql_command(&self.env);
        if distributed {
            cmd.args(["--ballista", &format!("df://127.0.0.1:{}", self.scheduler)]);
        }
        let out = cmd
            .args(["--format", "csv", "--partitions", "4"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?} (ballista: {distributed}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `sql` in one process with a judge cache of its own (so it judges afresh).
    fn run_alone(&self, dir: &Path, sql: &str) -> String {
        let out = evalsql_command(&self.env)
            .env("EVALSQL_JUDGE_CACHE", dir.join("alone.sqlite"))
            .args(["--format", "csv", "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Whether each executor has written shuffle data (so each ran a share of the work).
    fn every_executor_worked(&self) -> bool {
        self.work_dirs
            .iter()
            .all(|d| std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_some()))
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("evalsql-ballista-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The QA sample as four Parquet files (four partitions, spread over the executors), each
/// row's id, query and response made distinct, so no two rows share a judge call.
fn split_input(dir: &Path) -> PathBuf {
    let input = dir.join("input");
    std::fs::create_dir_all(&input).unwrap();
    for part in 0..4 {
        let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
            .current_dir(ROOT)
            .args(["-c"])
            .arg(format!(
                "COPY (SELECT id || '-{part}' AS id, model, query || ' [{part}]' AS query, context, \
                 response || ' [{part}]' AS response, ground_truth \
                 FROM 'data/qa.parquet') TO '{}' STORED AS PARQUET",
                input.join(format!("part{part}.parquet")).display()
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    input
}

/// CSV outputs equal cell by cell; numbers within 1e-12 relative (a mean is summed in the
/// order partial states merge, which differs between one process and a cluster).
fn assert_same_numbers(got: &str, want: &str) {
    assert_eq!(got.lines().count(), want.lines().count(), "{got}\n{want}");
    for (g, w) in got.lines().zip(want.lines()) {
        let (gs, ws): (Vec<&str>, Vec<&str>) = (g.split(',').collect(), w.split(',').collect());
        assert_eq!(gs.len(), ws.len(), "{g} / {w}");
        for (a, b) in gs.iter().zip(&ws) {
            match (a.parse::<f64>(), b.parse::<f64>()) {
                (Ok(x), Ok(y)) => assert!(
                    (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                    "{a} != {b} in {g} / {w}"
                ),
                _ => assert_eq!(a, b, "{g} / {w}"),
            }
        }
    }
}

#[test]
fn queries_and_merged_aggregates_equal_one_process() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("queries");
    let cluster = Cluster::with_judge(&dir, &stub, &roots(&dir));
    for file in ["queries/quickstart.sql", "queries/agents.sql"] {
        assert_eq!(
            cluster.run(true, &["-f", file]),
            cluster.run(false, &["-f", file]),
            "{file}"
        );
    }
    // UNION is refused (Ballista 55 repeats rows of single-partition branches).
    let mut refused = evalsql_command(&cluster.env);
    let out = refused
        .args([
            "--ballista",
            &format!("df://127.0.0.1:{}", cluster.scheduler),
        ])
        .args(["-f", "queries/formats.sql"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("UNION cannot run on Ballista"),
        "{stderr}"
    );
    // read_otlp is refused with what to do instead; trajectory_agg runs on the cluster.
    let out = evalsql_command(&cluster.env)
        .args([
            "--ballista",
            &format!("df://127.0.0.1:{}", cluster.scheduler),
        ])
        .args(["-c", "SELECT count(*) FROM read_otlp('data/traces')"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("read_otlp() does not run on a Ballista cluster"),
        "{stderr}"
    );
    let agg = "SELECT trajectory_agg(n, a ORDER BY t) AS tr FROM (VALUES (2, 'g', NULL), \
               (1, 'f', '{\"x\": 1}')) AS v(t, n, a)";
    assert_eq!(
        cluster.run(true, &["-c", agg]),
        cluster.run(false, &["-c", agg])
    );

    let input = split_input(&dir);
    let sql = format!(
        "SELECT model, count(*) AS n,
                corpus_bleu(response, ground_truth) AS corpus_bleu,
                corpus_chrf(response, ground_truth) AS corpus_chrf,
                defect_rate(violence(query, response)) AS violence_defects,
                bootstrap_ci(f1_score(response, ground_truth))['lower'] AS f1_lower,
                bootstrap_ci(f1_score(response, ground_truth))['upper'] AS f1_upper,
                mean_ci(rouge_l(response, ground_truth))['lower'] AS rouge_l_lower,
                pass_rate(groundedness(query, context, response) >= 3) AS grounded
         FROM '{}' GROUP BY model ORDER BY model",
        input.display()
    );
    let distributed = cluster.run(true, &["-c", &sql]);
    assert_same_numbers(&distributed, &cluster.run(false, &["-c", &sql]));
    assert!(distributed.contains("gpt-4o,120,"), "{distributed}");
    assert!(
        cluster.every_executor_worked(),
        "one executor did all the work"
    );
}

#[test]
fn the_judge_limits_are_cluster_wide_and_its_cache_is_shared() {
    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(40),
        ..Default::default()
    });
    let dir = temp_dir("judge");
    let cluster = Cluster::with_judge(&dir, &stub, &roots(&dir));
    let input = split_input(&dir);
    let sql = format!(
        "SET evalsql.judge.max_concurrency = 4;
         SELECT id, model, fluency(response) AS fluency, relevance(query, response) AS relevance
         FROM '{}' ORDER BY id, model",
        input.display()
    );
    let first = cluster.run(true, &["-c", &sql]);
    assert_eq!(first.lines().count(), 241, "every row and the header");
    assert!(!first.contains(",,"), "a row without a score: {first}");
    let calls = stub.requests();
    assert_eq!(calls, 480, "one call per distinct row and judge");
    assert!(
        stub.peak_in_flight() <= 4,
        "{} calls in flight at once: the limit is the cluster's",
        stub.peak_in_flight()
    );
    assert!(cluster.every_executor_worked());

    // A rerun pays nothing, wherever its rows land: the executors share the cache.
    stub.reset_counters();
    assert_eq!(cluster.run(true, &["-c", &sql]), first);
    assert_eq!(stub.requests(), 0);

    // One process, its own cache: the same scores.
    assert_eq!(cluster.run_alone(&dir, &sql), first);

    // judge_cache(): a table the client builds in memory, shipped with the plan.
    let cached = "SELECT metric, count(*) AS n, round(avg(score), 9) AS mean \
                  FROM judge_cache() GROUP BY metric ORDER BY metric";
    let distributed = cluster.run(true, &["-c", cached]);
    assert_eq!(distributed, cluster.run(false, &["-c", cached]));
    assert!(distributed.contains("fluency,240,"), "{distributed}");
}

#[test]
fn fused_judge_calls_travel_with_the_plan() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("fused");
    // The operator's rubric metric, loaded by the cluster and the client alike.
    let rubrics = dir.join("rubrics");
    std::fs::create_dir_all(&rubrics).unwrap();
    let politeness = "---\nname: politeness\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\nRate how polite the RESPONSE is.\n";
    std::fs::write(rubrics.join("politeness.md"), politeness).unwrap();
    let rubric_dir = rubrics.to_str().unwrap();
    // No --allow-create-function: a group of built-in judges is the cluster's own.
    let mut flags = roots(&dir);
    flags.extend(["--rubrics".to_string(), rubric_dir.to_string()]);
    let cluster = Cluster::with_judge(&dir, &stub, &flags);
    let input = split_input(&dir);
    let sql = format!(
        "SET evalsql.judge.fuse = true;
         SELECT id, model, fluency(response) AS fluency, relevance(query, response) AS relevance
         FROM '{}' ORDER BY id, model",
        input.display()
    );
    let distributed = cluster.run(true, &["-c", &sql]);
    assert_eq!(distributed.lines().count(), 241, "{distributed}");
    assert!(
        !distributed.contains(",,"),
        "a row without a score: {distributed}"
    );
    assert_eq!(stub.requests(), 240, "one fused call per row");
    assert!(cluster.every_executor_worked());
    // One process plans the same groups: the same scores.
    assert_eq!(cluster.run_alone(&dir, &sql), distributed);
    let explain = cluster.run(
        true,
        &[
            "-c",
            &format!(
                "SET evalsql.judge.fuse = true; EXPLAIN FORMAT INDENT {}",
                sql.split_once(';').unwrap().1
            ),
        ],
    );
    assert!(
        explain.contains("fused_judge[fluency,relevance]"),
        "{explain}"
    );

    // ... and so is a group holding the operator's rubric metric, its rubric the cluster's.
    stub.reset_counters();
    let sql = format!(
        "SET evalsql.judge.fuse = true;
         SELECT id, model, fluency(response) AS fluency, politeness(response) AS politeness
         FROM '{}' ORDER BY id, model",
        input.display()
    );
    let distributed = cluster.run(true, &["--rubrics", rubric_dir, "-c", &sql]);
    assert_eq!(distributed.lines().count(), 241, "{distributed}");
    assert!(!distributed.contains(",,"), "{distributed}");
    assert_eq!(stub.requests(), 240, "one fused call per row");
    // A client's own rubric under the operator's name is the client's: refused.
    let other = dir.join("other-rubrics");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("politeness.md"),
        politeness.replace("how polite", "how rude"),
    )
    .unwrap();
    stub.reset_counters();
    let out = evalsql_command(&cluster.env)
        .args([
            "--ballista",
            &format!("df://127.0.0.1:{}", cluster.scheduler),
        ])
        .args([
            "--format",
            "csv",
            "--rubrics",
            other.to_str().unwrap(),
            "-c",
            &sql,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a client's rubric ran on the cluster"
    );
    // Refused by the scheduler, before anything runs, naming the group.
    assert!(
        stderr.contains("this cluster refuses the job") && stderr.contains("politeness"),
        "{stderr}"
    );
    assert_eq!(stub.requests(), 0, "a refused group called the judge");
}

#[test]
fn custom_judges_travel_with_the_plan() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("custom");
    let mut flags = roots(&dir);
    flags.push("--allow-create-function".into());
    let cluster = Cluster::with_judge(&dir, &stub, &flags);
    let input = split_input(&dir);
    // Defined only in the client's session: the scheduler and executors learn the rubric
    // from the plan. Two versions, the older one pinned, so every version must travel.
    let sql = format!(
        "CREATE FUNCTION brevity(response TEXT) RETURNS DOUBLE LANGUAGE judge \
           AS '---\nname: brevity\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\nRate how brief the RESPONSE is (v1).';
         CREATE FUNCTION brevity(response TEXT) RETURNS DOUBLE LANGUAGE judge \
           AS '---\nname: brevity\nversion: 2\nmin: 1\nmax: 5\ninputs: response\n---\nRate how brief the RESPONSE is (v2).';
         SET evalsql.judge.brevity.version = 1;
         SELECT model, count(*) AS n, avg(brevity(response)) AS brevity
         FROM '{}' GROUP BY model ORDER BY model",
        input.display()
    );
    let distributed = cluster.run(true, &["-c", &sql]);
    assert!(distributed.contains("gpt-4o,120,"), "{distributed}");
    let prompts_with = |needle: &str| {
        stub.log()
            .iter()
            .filter(|r| {
                r.body
                    .as_ref()
                    .is_some_and(|b| b.to_string().contains(needle))
            })
            .count()
    };
    assert_eq!(prompts_with("(v2)"), 0, "the pinned version was not used");
    assert_eq!(prompts_with("(v1)"), 240);
    assert_same_numbers(&distributed, &cluster.run_alone(&dir, &sql));
    assert!(cluster.every_executor_worked());

    // A rubric file loaded by the client alone travels the same way.
    let rubrics = dir.join("rubrics");
    std::fs::create_dir_all(&rubrics).unwrap();
    std::fs::write(
        rubrics.join("politeness.md"),
        "---\nname: politeness\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\nRate how polite the RESPONSE is.\n",
    )
    .unwrap();
    let sql = format!(
        "SELECT model, avg(politeness(response)) AS p FROM '{}' GROUP BY model ORDER BY model",
        input.display()
    );
    let rubric_dir = rubrics.to_str().unwrap();
    assert_same_numbers(
        &cluster.run(true, &["--rubrics", rubric_dir, "-c", &sql]),
        &cluster.run(false, &["--rubrics", rubric_dir, "-c", &sql]),
    );
}

/// A client may not point the executors' judge elsewhere: a job that sets an operator-only
/// key is refused by the scheduler with a clear error, and nothing reaches the address the
/// client named (which would receive the executors' API key and the prompts).
#[test]
fn a_job_cannot_redirect_the_executors_judge() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("redirect");
    let cache = dir.join("cache.sqlite").display().to_string();
    let cluster = Cluster::start(
        &dir,
        &[
            ("OPENAI_BASE_URL", &stub.base_url()),
            ("OPENAI_API_KEY", "sk-executors-key-1234"),
            ("EVALSQL_JUDGE_MODEL", "stub-judge"),
            ("EVALSQL_JUDGE_CACHE", &cache),
        ],
        &roots(&dir),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let attacker = format!("http://{}/v1", listener.local_addr().unwrap());
    for (setting, value) in [
        ("evalsql.judge.base_url", attacker.as_str()),
        ("\"evalsql.judge.base_url\"", attacker.as_str()),
        ("evalsql.judge.azure_endpoint", attacker.as_str()),
        ("evalsql.target.base_url", attacker.as_str()),
        ("evalsql.judge.cache", "/tmp/evalsql-attacker.sqlite"),
        ("evalsql.judge.requests_per_minute", "0"),
    ] {
        let out = evalsql_command(&cluster.env)
            .env_remove("OPENAI_API_KEY")
            .args([
                "--ballista",
                &format!("df://127.0.0.1:{}", cluster.scheduler),
            ])
            .args(["--format", "csv", "-c"])
            .arg(format!(
                "SET {setting} = '{value}'; SELECT fluency('A fine answer.') AS f, \
                 generate('Say hi') IS NOT NULL AS g"
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{setting}: the job ran");
        assert!(
            stderr.contains("is not allowed in a job for this cluster"),
            "{setting}: {stderr}"
        );
        assert!(!stderr.contains("sk-executors-key"), "{stderr}");
    }
    assert!(
        listener.accept().is_err(),
        "the client's address received a connection"
    );
    assert!(!Path::new("/tmp/evalsql-attacker.sqlite").exists());
    assert_eq!(stub.requests(), 0);
    // A job may lower its own ceiling, and then runs.
    let out = cluster.run(
        true,
        &["-c", "SET evalsql.judge.max_concurrency = 2; SELECT fluency('A fine answer.') IS NOT NULL AS f"],
    );
    assert_eq!(out, "f\ntrue\n");
}

/// Three rows (`id`, `response`) as a Parquet file at `path`, written by one process.
fn write_rows(path: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .current_dir(ROOT)
        .arg("-c")
        .arg(format!(
            "COPY (SELECT * FROM (VALUES (1, 'A fine answer.'), (2, 'Another answer.'), \
             (3, 'A third answer.')) AS t(id, response)) TO '{}' STORED AS PARQUET",
            path.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// A listener that must never be called (an app URL the cluster does not allow).
fn silent_listener() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap().to_string();
    (listener, address)
}

const CLIENT_JUDGE: &str = "CREATE FUNCTION brevity(response TEXT) RETURNS DOUBLE LANGUAGE judge \
    AS '---\nname: brevity\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\nRate how brief \
    the RESPONSE is.';";

/// A cluster started with its defaults (only the data root given): a job that calls an app,
/// `generate()` or a judge of its own, reads outside the data root or picks another model is
/// refused by the scheduler, with the reason, and nothing is called.
#[test]
fn a_job_gets_only_what_the_cluster_allows() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("confined");
    let outside = temp_dir("confined-outside");
    let inside = dir.join("rows.parquet");
    write_rows(&inside);
    write_rows(&outside.join("secret.parquet"));
    let flags = ["--data-root".to_string(), dir.display().to_string()];
    let cluster = Cluster::with_judge(&dir, &stub, &flags);
    let (app, app_address) = silent_listener();

    // Under the root, the cluster's own judge runs.
    let judged = format!(
        "SELECT count(*) AS n, avg(fluency(response)) IS NOT NULL AS judged FROM '{}'",
        inside.display()
    );
    assert_eq!(cluster.run(true, &["-c", &judged]), "n,judged\n3,true\n");
    let calls = stub.requests();

    let refusals = [
        // (a) the review's call: an executor POSTing to an internal address.
        (
            format!("SELECT invoke_app('http://{app_address}/internal-admin/reset', '{{}}') AS r"),
            "invoke_app() is disabled",
        ),
        // (b) the executors' key on the client's prompts.
        (
            "SELECT generate('Say hi') AS g".to_string(),
            "generate() is disabled",
        ),
        // (c) a judge of the client's own.
        (
            format!("{CLIENT_JUDGE} SELECT brevity('A fine answer.') AS b"),
            "client-defined judge metric",
        ),
        // (d) files outside the root: an absolute path, and one through `..`.
        (
            format!(
                "SELECT count(*) FROM '{}'",
                outside.join("secret.parquet").display()
            ),
            "outside the data roots of this cluster",
        ),
        (
            format!(
                "SELECT count(*) FROM '{}/../{}/secret.parquet'",
                dir.display(),
                outside.file_name().unwrap().to_string_lossy()
            ),
            "outside the data roots of this cluster",
        ),
        (
            format!(
                "COPY (SELECT 1 AS x) TO '{}' STORED AS PARQUET",
                outside.join("written.parquet").display()
            ),
            "outside the data roots of this cluster",
        ),
        // (e) a model the operator did not allow.
        (
            "SET evalsql.judge.model = 'gpt-5-expensive'; SELECT fluency('A fine answer.') AS f"
                .to_string(),
            "not among the models jobs of this cluster may use",
        ),
    ];
    for (sql, reason) in refusals {
        let stderr = cluster.refused(&sql);
        assert!(stderr.contains(reason), "{sql}: {stderr}");
    }
    // (f) a job submitted as a physical plan, which the scheduler's check would not see.
    let outcome = submit_physical_plan(
        cluster.scheduler,
        &format!(
            "SELECT count(*) FROM '{}'",
            outside.join("secret.parquet").display()
        ),
    );
    assert!(
        outcome.contains("a job submitted as a physical plan is refused"),
        "{outcome}"
    );
    assert!(app.accept().is_err(), "the app URL received a connection");
    assert_eq!(stub.requests(), calls, "a refused job called the judge");
    assert!(!outside.join("written.parquet").exists());

    // Writes under the root are how COPY jobs work.
    let written = dir.join("copied.parquet");
    cluster.run(
        true,
        &[
            "-c",
            &format!(
                "COPY (SELECT id FROM '{}') TO '{}' STORED AS PARQUET",
                inside.display(),
                written.display()
            ),
        ],
    );
    assert!(written.exists());
}

/// Submits `sql`, planned physically here, to the scheduler as Ballista's gRPC API allows
/// (`ExecuteQueryParams.query = PhysicalPlan`); returns the scheduler's answer as text.
fn submit_physical_plan(scheduler: u16, sql: &str) -> String {
    use ballista_core::serde::protobuf::execute_query_params::Query;
    use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
    use ballista_core::serde::protobuf::{ExecuteQueryParams, execute_query_result};
    use datafusion_proto::physical_plan::{AsExecutionPlan, DefaultPhysicalExtensionCodec};
    use datafusion_proto::protobuf::PhysicalPlanNode;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ctx = datafusion::prelude::SessionContext::new().enable_url_table();
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let node =
            PhysicalPlanNode::try_from_physical_plan(plan, &DefaultPhysicalExtensionCodec {})
                .unwrap();
        let mut bytes = Vec::new();
        node.try_encode(&mut bytes).unwrap();
        let mut client = SchedulerGrpcClient::connect(format!("http://127.0.0.1:{scheduler}"))
            .await
            .unwrap();
        let mut request = tonic::Request::new(ExecuteQueryParams {
            query: Some(Query::PhysicalPlan(bytes)),
            ..Default::default()
        });
        ballista_core::version::insert_version_header(request.metadata_mut());
        let answer = client.execute_query(request).await;
        match answer {
            Err(status) => status.message().to_string(),
            Ok(answer) => match answer.into_inner().result {
                Some(execute_query_result::Result::Failure(failure)) => format!("{failure:?}"),
                other => format!("accepted: {other:?}"),
            },
        }
    })
}

/// A task that gets past the scheduler (here: a scheduler with wider flags than its
/// executors) still meets each executor's own flags: `generate()` and client judges fail with
/// the reason, `invoke_app` calls only the executors' app URLs, the job's model is ignored,
/// and files outside the executors' data root are not read.
#[test]
fn the_executors_hold_whatever_the_scheduler_lets_through() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("depth");
    let executor_root = dir.join("executors");
    std::fs::create_dir_all(&executor_root).unwrap();
    let inside = executor_root.join("rows.parquet");
    write_rows(&inside);
    let scheduler_only = dir.join("scheduler-only.parquet");
    write_rows(&scheduler_only);
    let (_allowed_app, allowed_address) = silent_listener();
    let (other_app, other_address) = silent_listener();
    let app_url = format!("http://{allowed_address}/app/");
    let scheduler_flags: Vec<String> = [
        "--data-root",
        &dir.display().to_string(),
        "--app-url",
        &app_url,
        "--allow-generate",
        "--allow-create-function",
        "--allowed-model",
        "gpt-5-expensive",
    ]
    .map(String::from)
    .to_vec();
    let executor_flags: Vec<String> = [
        "--data-root",
        &executor_root.display().to_string(),
        "--app-url",
        &app_url,
    ]
    .map(String::from)
    .to_vec();
    let cluster = Cluster::with_judge_split(&dir, &stub, &scheduler_flags, &executor_flags);

    // The job's model is not the executors' to use: they judge with their own.
    let out = cluster.run(
        true,
        &[
            "-c",
            &format!(
                "SET evalsql.judge.model = 'gpt-5-expensive';
                 SELECT count(*) AS n, avg(fluency(response)) IS NOT NULL AS judged FROM '{}'",
                inside.display()
            ),
        ],
    );
    assert_eq!(out, "n,judged\n3,true\n");
    let models: Vec<String> = stub
        .log()
        .iter()
        .filter_map(|r| Some(r.body.as_ref()?["model"].as_str()?.to_string()))
        .collect();
    assert!(!models.is_empty());
    assert!(models.iter().all(|m| m == "stub-judge"), "{models:?}");

    // invoke_app: the executors' allowed URLs, whatever the job says.
    let out = cluster.run(
        true,
        &[
            "-c",
            &format!(
                "SELECT invoke_app('http://{other_address}/internal-admin/reset', '{{}}')['error'] AS e"
            ),
        ],
    );
    assert!(out.contains("is not among the URLs"), "{out}");
    assert!(
        other_app.accept().is_err(),
        "a URL outside --app-url was called"
    );

    let calls = stub.requests();
    for (sql, reason) in [
        (
            "SELECT generate('Say hi') AS g".to_string(),
            "generate() is disabled on this cluster",
        ),
        (
            format!("{CLIENT_JUDGE} SELECT brevity('A fine answer.') AS b"),
            "client-defined judge metric",
        ),
        (
            format!(
                "SELECT sum(length(response)) AS n FROM '{}'",
                scheduler_only.display()
            ),
            "outside the data roots",
        ),
    ] {
        let stderr = cluster.refused(&sql);
        assert!(stderr.contains(reason), "{sql}: {stderr}");
    }
    assert_eq!(stub.requests(), calls, "a refused task called the judge");
}
