//! `evalsql report`: the page is self-contained, its numbers are the query's, and it renders
//! in a real browser (headless Chromium, when `EVALSQL_CHROMIUM` names one — `scripts/test.sh`
//! installs Debian's package — or `chromium` is on the PATH).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::skip::skipped;

fn evalsql(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run evalsql")
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("evalsql-report-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `data-value` of the aggregate cell for (metric, group, stat).
fn cell(html: &str, metric: &str, group: &str, stat: &str) -> f64 {
    let key = format!(
        "data-metric=\"{metric}\" data-group=\"{group}\" data-stat=\"{stat}\" data-value=\""
    );
    let start = html.find(&key).unwrap_or_else(|| panic!("no cell {key}")) + key.len();
    let end = start + html[start..].find('"').unwrap();
    html[start..end].parse().unwrap()
}

/// One CSV value per line of `evalsql --format csv -c sql` (header skipped).
fn sql_values(sql: &str) -> Vec<Vec<String>> {
    let out = evalsql(&["--format", "csv", "-c", sql]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

const QUERY: &str = "SELECT model, id, f1_score(response, ground_truth) AS f1, \
    rouge_l(response, ground_truth) AS rouge_l, exact_match(response, ground_truth) = 1.0 AS exact, \
    response FROM 'data/qa.jsonl'";

#[test]
fn report_numbers_are_the_querys_and_the_page_is_self_contained() {
    let dir = temp_dir("numbers");
    let out = dir.join("report.html");
    let run = evalsql(&[
        "report",
        "-c",
        QUERY,
        "--group",
        "model",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains("<script src") && !html.contains("<link"));
    assert!(html.contains("<table id=\"instances\""));
    assert_eq!(html.matches("<svg class=\"histogram\"").count(), 3);
    assert_eq!(html.matches("<svg class=\"comparison\"").count(), 3);

    let expected = sql_values(
        "SELECT model, count(f1), avg(f1), stddev_samp(f1), avg(rouge_l), \
                avg(CASE WHEN exact THEN 1.0 ELSE 0.0 END) \
         FROM (SELECT model, f1_score(response, ground_truth) AS f1, \
                      rouge_l(response, ground_truth) AS rouge_l, \
                      exact_match(response, ground_truth) = 1.0 AS exact FROM 'data/qa.jsonl') \
         GROUP BY model ORDER BY model",
    );
    for row in expected {
        let g = &row[0];
        let num = |i: usize| row[i].parse::<f64>().unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        assert_eq!(cell(&html, "f1", g, "n"), num(1));
        assert!(close(cell(&html, "f1", g, "mean"), num(2)), "{g} f1 mean");
        assert!(
            close(cell(&html, "f1", g, "stddev"), num(3)),
            "{g} f1 stddev"
        );
        assert!(
            close(cell(&html, "rouge_l", g, "mean"), num(4)),
            "{g} rouge_l mean"
        );
        assert!(
            close(cell(&html, "exact", g, "pass_rate"), num(5)),
            "{g} exact pass rate"
        );
        // The interval brackets the mean and matches mean_ci (Student t, 95 %).
        let ci = sql_values(&format!(
            "SELECT m['lower'], m['upper'] FROM (SELECT mean_ci(f1_score(response, ground_truth)) AS m \
             FROM 'data/qa.jsonl' WHERE model = '{g}')"
        ));
        let (lo, hi) = (
            ci[0][0].parse::<f64>().unwrap(),
            ci[0][1].parse::<f64>().unwrap(),
        );
        assert!(
            (cell(&html, "f1", g, "ci_low") - lo).abs() < 1e-7,
            "{g} ci low"
        );
        assert!(
            (cell(&html, "f1", g, "ci_high") - hi).abs() < 1e-7,
            "{g} ci high"
        );
    }

    // A file with a SET before the query; an unknown group column is a clear error.
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        format!("SET datafusion.execution.batch_size = 7;\n{QUERY};\n"),
    )
    .unwrap();
    let out2 = dir.join("job.html");
    let run = evalsql(&[
        "report",
        "-f",
        sql.to_str().unwrap(),
        "-o",
        out2.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let html2 = std::fs::read_to_string(&out2).unwrap();
    assert!(html2.contains("data-group=\"(all)\""));
    assert!(html2.contains("<title>job.sql"));
    let run = evalsql(&[
        "report",
        "-c",
        QUERY,
        "--group",
        "nope",
        "-o",
        out2.to_str().unwrap(),
    ]);
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("group column \"nope\" not found"));

    match chromium() {
        Some(chromium) => render_in_chromium(&chromium, &out, &dir),
        None => skipped(
            "rendering the report in Chromium",
            "no chromium (apt-get install chromium, or EVALSQL_CHROMIUM)",
        ),
    }
}

pub(crate) fn chromium() -> Option<PathBuf> {
    if let Ok(c) = std::env::var("EVALSQL_CHROMIUM") {
        return Some(PathBuf::from(c));
    }
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// The page loads in Chromium (its script runs, the DOM keeps every number) and renders
/// to a non-blank screenshot.
fn render_in_chromium(chromium: &Path, page: &Path, dir: &Path) {
    let url = format!("file://{}", page.display());
    let profile = dir.join("chromium-profile");
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
    ];
    let dom = Command::new(chromium)
        .args(common)
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=2000", "--dump-dom"])
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("id=\"instances\""),
        "chromium did not render the page"
    );
    assert_eq!(dom.matches("<svg class=\"histogram\"").count(), 3);
    let original = std::fs::read_to_string(page).unwrap();
    let mean = cell(&original, "f1", "gpt-4o", "mean");
    assert_eq!(cell(&dom, "f1", "gpt-4o", "mean"), mean);

    let shot = dir.join("report.png");
    let run = Command::new(chromium)
        .args(common)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .args(["--window-size=1280,1800", "--hide-scrollbars"])
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    // A blank 1280x1800 page compresses to a few KB; charts, tables and text do not.
    assert!(
        png.len() > 50_000,
        "the screenshot looks blank ({} bytes)",
        png.len()
    );
}
