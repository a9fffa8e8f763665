//! `evalsql --store DIR report --monitor NAME -o page.html`: a monitor's metrics over time.
//!
//! One chart per metric (the numeric columns of `monitors.<name>` other than the ones every
//! monitor row has): the mean per time bucket of `run_at`, one line per group, with its 95 %
//! confidence band (mean ± 1.96 standard errors), and a red mark where an alert on the
//! monitor started firing. Self-contained like the query report (inline SVG, no scripts).
//!
//! DOM contract (for tests): each chart is `<svg class="timeline" data-metric="M">`; each
//! point `<circle data-group="G" data-bucket="T" data-n="N" data-mean="V">` (T the bucket's
//! start, RFC 3339); each firing `<line class="firing" data-alert="A" data-group="G"
//! data-at="T">`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use evalsql_udfs::MeanVar;

use super::{esc, fmt_axis, fmt4, page_head};

/// Columns every monitor row has, which are not metrics.
const NOT_METRICS: [&str; 3] = ["monitor_version", "sample_weight", "run_at"];

/// A bucket size for `span` microseconds of data: about 24 buckets, at a round length.
fn bucket_for(span: i64) -> i64 {
    const MINUTE: i64 = 60_000_000;
    let lengths = [
        1_000_000,
        5_000_000,
        15_000_000,
        MINUTE,
        5 * MINUTE,
        15 * MINUTE,
        60 * MINUTE,
        6 * 60 * MINUTE,
        24 * 60 * MINUTE,
    ];
    lengths
        .into_iter()
        .find(|&l| span / l <= 24)
        .unwrap_or(7 * 24 * 60 * MINUTE)
}

fn time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

fn column_text(b: &RecordBatch, name: &str) -> Result<Vec<Option<String>>> {
    let c = cast(
        b.column_by_name(name)
            .ok_or_else(|| DataFusionError::Plan(format!("report: no column {name}")))?,
        &DataType::Utf8,
    )?;
    let c = c.as_string::<i32>();
    Ok((0..c.len())
        .map(|i| (!c.is_null(i)).then(|| c.value(i).to_string()))
        .collect())
}

/// The report page of monitor `name` in `ctx` (a session with `monitors.*` and `alerts`).
pub async fn render(
    ctx: &SessionContext,
    name: &str,
    group_cols: &[String],
    bucket: Option<i64>,
    title: &str,
) -> Result<String> {
    if !crate::monitor::statement::valid_name(name) {
        return Err(DataFusionError::Plan(format!("report: no monitor {name}")));
    }
    let rows = ctx
        .table(format!("monitors.{name}"))
        .await
        .map_err(|e| DataFusionError::Plan(format!("report --monitor {name}: {e}")))?
        .collect()
        .await?;
    let firings = match ctx.table("alerts").await {
        Ok(t) => t.collect().await?,
        Err(_) => Vec::new(),
    };
    let mut h = String::new();
    page_head(&mut h, title);
    let _ = write!(
        h,
        "<header>\n<h1>{}</h1>\n<p class=\"note\">monitor {}: each metric's mean per time \
         bucket, one line per group, with its 95 % confidence band; red marks: an alert \
         started firing.</p>\n</header>\n",
        esc(title),
        esc(name)
    );
    let Some(first) = rows.first() else {
        h.push_str("<p class=\"note\">The monitor has no rows yet.</p>\n</body>\n</html>\n");
        return Ok(h);
    };
    let schema = first.schema();
    for g in group_cols {
        if schema.field_with_name(g).is_err() {
            return Err(DataFusionError::Plan(format!(
                "report --monitor {name}: no column {g} to group by"
            )));
        }
    }
    let metrics: Vec<String> = schema
        .fields()
        .iter()
        .filter(|f| {
            (f.data_type().is_numeric() || *f.data_type() == DataType::Boolean)
                && !NOT_METRICS.contains(&f.name().as_str())
                && !group_cols.contains(f.name())
                && !f.name().ends_with("_id")
        })
        .map(|f| f.name().clone())
        .collect();
    // (group, run_at) of every row, and each metric's values.
    let mut keys: Vec<(String, i64)> = Vec::new();
    let mut values: Vec<Vec<Option<f64>>> = vec![Vec::new(); metrics.len()];
    for b in &rows {
        let at = cast(
            b.column_by_name("run_at").expect("monitor rows"),
            &DataType::Int64,
        )?;
        let at = at.as_primitive::<Int64Type>();
        let groups: Vec<Vec<Option<String>>> = group_cols
            .iter()
            .map(|g| column_text(b, g))
            .collect::<Result<_>>()?;
        for i in 0..b.num_rows() {
            let group = if groups.is_empty() {
                "(all)".to_string()
            } else {
                groups
                    .iter()
                    .map(|g| g[i].clone().unwrap_or_else(|| "NULL".into()))
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            keys.push((group, at.value(i)));
        }
        for (m, name) in metrics.iter().enumerate() {
            let c = cast(
                b.column_by_name(name).expect("a metric"),
                &DataType::Float64,
            )?;
            let c = c.as_primitive::<Float64Type>();
            values[m].extend((0..c.len()).map(|i| {
                (!c.is_null(i))
                    .then(|| c.value(i))
                    .filter(|v| v.is_finite())
            }));
        }
    }
    let (lo, hi) = keys.iter().fold((i64::MAX, i64::MIN), |(lo, hi), (_, t)| {
        (lo.min(*t), hi.max(*t))
    });
    let size = bucket.unwrap_or_else(|| bucket_for(hi - lo)).max(1);
    let start = lo.div_euclid(size) * size;
    let end = hi.div_euclid(size) * size + size;
    // Where alerts started firing (with the group they fired for).
    let mut marks: Vec<(String, String, i64)> = Vec::new();
    for b in &firings {
        let (alert, monitor, group, state) = (
            column_text(b, "alert")?,
            column_text(b, "monitor")?,
            column_text(b, "group_key")?,
            column_text(b, "state")?,
        );
        let at = cast(
            b.column_by_name("at").expect("alerts rows"),
            &DataType::Int64,
        )?;
        let at = at.as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            if monitor[i].as_deref() == Some(name) && state[i].as_deref() == Some("firing") {
                marks.push((
                    alert[i].clone().unwrap_or_default(),
                    group[i].clone().unwrap_or_default(),
                    at.value(i),
                ));
            }
        }
    }
    let _ = write!(
        h,
        "<p class=\"note\">{} rows from {} to {}; buckets of {} s</p>\n",
        keys.len(),
        time(lo),
        time(hi),
        size / 1_000_000
    );
    for (m, metric) in metrics.iter().enumerate() {
        // group -> bucket -> mean and variance.
        let mut cells: BTreeMap<&str, BTreeMap<i64, MeanVar>> = BTreeMap::new();
        for (i, (group, at)) in keys.iter().enumerate() {
            if let Some(v) = values[m][i] {
                let b = (at - start).div_euclid(size) * size + start;
                cells
                    .entry(group.as_str())
                    .or_default()
                    .entry(b)
                    .or_default()
                    .update(v);
            }
        }
        chart(&mut h, metric, &cells, (start, end), &marks);
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}

/// Half the 95 % confidence band of a bucket's mean (none for one value).
fn half_width(s: &MeanVar) -> f64 {
    s.sem().map_or(0.0, |e| 1.96 * e)
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf",
];

fn chart(
    h: &mut String,
    metric: &str,
    cells: &BTreeMap<&str, BTreeMap<i64, MeanVar>>,
    (start, end): (i64, i64),
    marks: &[(String, String, i64)],
) {
    let (w, ht, left, top, bottom) = (900.0, 300.0, 60.0, 20.0, 40.0);
    let bands: Vec<(f64, f64, f64)> = cells
        .values()
        .flat_map(|b| b.values())
        .map(|s| {
            let half = half_width(s);
            (s.mean, s.mean - half, s.mean + half)
        })
        .collect();
    let ymin = bands.iter().map(|b| b.1).fold(f64::INFINITY, f64::min);
    let ymax = bands.iter().map(|b| b.2).fold(f64::NEG_INFINITY, f64::max);
    let (ymin, ymax) = if ymin.is_finite() && ymax > ymin {
        (ymin, ymax)
    } else {
        (ymin - 1.0, ymin + 1.0)
    };
    let x = |t: i64| left + (w - left - 10.0) * (t - start) as f64 / (end - start).max(1) as f64;
    let y = |v: f64| top + (ht - top - bottom) * (1.0 - (v - ymin) / (ymax - ymin));
    let _ = write!(
        h,
        "<section>\n<h2>{}</h2>\n<svg class=\"timeline\" data-metric=\"{}\" width=\"{w}\" \
         height=\"{ht}\" viewBox=\"0 0 {w} {ht}\" role=\"img\">\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>\n\
         <text x=\"4\" y=\"{}\" font-size=\"11\">{}</text>\n\
         <text x=\"4\" y=\"{}\" font-size=\"11\">{}</text>\n\
         <text x=\"{left}\" y=\"{}\" font-size=\"11\">{}</text>\n\
         <text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n",
        esc(metric),
        esc(metric),
        ht - bottom,
        w - 10.0,
        ht - bottom,
        top + 10.0,
        fmt_axis(ymax),
        ht - bottom,
        fmt_axis(ymin),
        ht - bottom + 16.0,
        esc(&time(start)),
        w - 10.0,
        ht - bottom + 16.0,
        esc(&time(end)),
    );
    for (k, (group, buckets)) in cells.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mid = |b: &i64| *b + (end - start).min(i64::MAX) / 1000;
        let mut upper = Vec::new();
        let mut lower = Vec::new();
        let mut line = Vec::new();
        for (b, s) in buckets {
            let half = half_width(s);
            let px = x(mid(b));
            upper.push(format!("{px:.1},{:.1}", y(s.mean + half)));
            lower.push(format!("{px:.1},{:.1}", y(s.mean - half)));
            line.push(format!("{px:.1},{:.1}", y(s.mean)));
        }
        lower.reverse();
        let _ = write!(
            h,
            "<polygon class=\"band\" points=\"{} {}\" fill=\"{color}\" fill-opacity=\"0.15\"/>\n\
             <polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n",
            upper.join(" "),
            lower.join(" "),
            line.join(" ")
        );
        for (b, s) in buckets {
            let _ = write!(
                h,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\" data-group=\"{}\" \
                 data-bucket=\"{}\" data-n=\"{}\" data-mean=\"{}\"><title>{}: {} (n {})</title></circle>\n",
                x(mid(b)),
                y(s.mean),
                esc(group),
                esc(&time(*b)),
                s.count,
                s.mean,
                esc(group),
                fmt4(s.mean),
                s.count
            );
        }
        let _ = write!(
            h,
            "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"{color}\">{}</text>\n",
            left + 8.0 + 150.0 * k as f64,
            top,
            esc(group)
        );
    }
    for (alert, group, at) in marks {
        if *at < start || *at > end {
            continue;
        }
        let _ = write!(
            h,
            "<line class=\"firing\" data-alert=\"{}\" data-group=\"{}\" data-at=\"{}\" x1=\"{:.1}\" \
             y1=\"{top}\" x2=\"{:.1}\" y2=\"{}\" stroke=\"#d62728\" stroke-dasharray=\"4 3\">\
             <title>{} fired {}</title></line>\n",
            esc(alert),
            esc(group),
            esc(&time(*at)),
            x(*at),
            x(*at),
            ht - bottom,
            esc(alert),
            esc(&time(*at))
        );
    }
    h.push_str("</svg>\n</section>\n");
}
