//! `evalsql serve --otlp` for the benchmarks: this build's binary on loopback, with the
//! OTLP/HTTP port it bound and its memory as the kernel counts it.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Server(pub Child, pub u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// A line of the server's `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`: the peak).
    pub fn rss(&self, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k * 1024)
    }
}

/// Starts `evalsql serve --port 0 --otlp 127.0.0.1:0 ARGS` and waits for its OTLP port.
pub fn start<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(args: I) -> Server {
    start_with_env(args, &[])
}

/// [`start`], with these environment variables besides.
pub fn start_with_env<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(
    args: I,
    env: &[(&str, &str)],
) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .args(["serve", "--port", "0", "--otlp", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied())
        .env("EVALSQL_PG_USER", "bench")
        .env("EVALSQL_PG_PASSWORD", "bench")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start evalsql serve");
    let lines = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if let Some(rest) = line.split("OTLP/HTTP on ").nth(1) {
                let port = rest
                    .split([';', ' '])
                    .next()
                    .and_then(|a| a.rsplit(':').next()?.parse::<u16>().ok());
                let _ = tx.send(port);
            }
        }
    });
    let port = rx
        .recv_timeout(Duration::from_secs(60))
        .ok()
        .flatten()
        .expect("the OTLP listener's address");
    Server(child, port)
}
