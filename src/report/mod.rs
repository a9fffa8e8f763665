//! Self-contained HTML report of a query result: aggregate statistics per group and
//! metric, histograms and per-group comparison charts (inline SVG), and a sortable
//! table of every instance. No external scripts, styles, fonts or links; the output is
//! deterministic (no timestamps, groups in sorted order) so it can be snapshot-tested.
//!
//! Column roles:
//! * group columns: `group_cols` (exact name, else a unique ASCII case-insensitive match);
//! * metric columns: numeric (ints, floats, decimals) and boolean columns (0/1) that are
//!   not group columns and not id-like (`id`, `*_id`, `*Id`);
//! * everything else is only shown in the instance table (display strings).
//!
//! DOM contract (for tests): every aggregate cell is
//! `<td data-metric="M" data-group="G" data-stat="S" data-value="V">` where S is one of
//! `n`, `mean`, `stddev`, `ci_low`, `ci_high`, `pass_rate`; V is the full-precision
//! value (Rust `f64` Display, shortest round-trip) or empty when undefined; G is the
//! group's values joined by `" | "` (NULL as `NULL`), or `(all)` without group columns.
//! The instance table has `id="instances"`; histograms are
//! `<svg class="histogram" data-metric="M">`, comparison charts
//! `<svg class="comparison" data-metric="M">`.

use datafusion::arrow;

pub mod monitor;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt::Write as _;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::{DataType, Float64Type};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{DataFusionError, Result};
use evalsql_udfs::MeanVar;

/// Instance rows shown at most.
const MAX_INSTANCE_ROWS: usize = 5_000;
/// Groups drawn at most in one comparison chart (the aggregate table lists all).
const MAX_CHART_GROUPS: usize = 100;
/// Histogram bins.
const BINS: usize = 10;
/// `data-group` value when there are no group columns.
pub const ALL_GROUP: &str = "(all)";
/// Separator of the values of several group columns in `data-group` and labels.
pub const GROUP_SEP: &str = " | ";

/// Renders one self-contained HTML page (no external scripts, styles or fonts; charts as inline SVG).
pub fn render_report(
    title: &str,
    source_sql: &str,
    batches: &[RecordBatch],
    group_cols: &[String],
) -> Result<String> {
    // An empty result may come without any batch and hence without a schema: render an
    // empty report rather than failing on the group columns we cannot check.
    let Some(first) = batches.first() else {
        return Ok(render_empty(title, source_sql));
    };
    let schema = first.schema();
    let batch = concat_batches(&schema, batches)?;
    let num_rows = batch.num_rows();

    // ---- column roles ----
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut group_idx = Vec::with_capacity(group_cols.len());
    for g in group_cols {
        let idx = resolve_column(&names, g).ok_or_else(|| {
            DataFusionError::Execution(format!(
                "report: group column \"{g}\" not found in the query result (columns: {})",
                names.join(", ")
            ))
        })?;
        if !group_idx.contains(&idx) {
            group_idx.push(idx);
        }
    }

    let mut metrics: Vec<Metric> = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let dt = field.data_type();
        if group_idx.contains(&i) || is_id_like(field.name()) {
            continue;
        }
        let is_bool = *dt == DataType::Boolean;
        if !(is_bool || dt.is_numeric()) {
            continue;
        }
        let as_f64 = cast(batch.column(i), &DataType::Float64)?;
        let arr = as_f64.as_primitive::<Float64Type>();
        let values: Vec<Option<f64>> = (0..num_rows)
            .map(|r| {
                if arr.is_null(r) {
                    None
                } else {
                    Some(arr.value(r)).filter(|v| v.is_finite())
                }
            })
            .collect();
        let all: Vec<f64> = values.iter().flatten().copied().collect();
        let likert = !is_bool && !all.is_empty() && all.iter().all(|v| (1.0..=5.0).contains(v));
        metrics.push(Metric {
            name: field.name().clone(),
            is_bool,
            likert,
            values,
            all,
        });
    }

    // ---- groups ----
    let groups = build_groups(&batch, &group_idx)?;

    // stats[m][g]
    let stats: Vec<Vec<Stats>> = metrics
        .iter()
        .map(|m| {
            groups
                .iter()
                .map(|g| {
                    let vals: Vec<f64> = g.rows.iter().filter_map(|&r| m.values[r]).collect();
                    Stats::compute(&vals, m)
                })
                .collect()
        })
        .collect();

    // ---- HTML ----
    let mut h = String::with_capacity(64 * 1024 + num_rows.min(MAX_INSTANCE_ROWS) * 256);
    page_head(&mut h, title);
    header(&mut h, title, source_sql, num_rows);
    let _ = writeln!(
        h,
        "<p class=\"note\">columns: {} &middot; metrics: {} &middot; groups: {}</p>",
        schema.fields().len(),
        if metrics.is_empty() {
            "none".to_string()
        } else {
            esc(&metrics
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "))
        },
        if group_idx.is_empty() {
            "none".to_string()
        } else {
            esc(&group_idx
                .iter()
                .map(|&i| names[i])
                .collect::<Vec<_>>()
                .join(", "))
        }
    );

    // Aggregate table.
    h.push_str("<section id=\"aggregates\">\n<h2>Aggregates</h2>\n");
    if metrics.is_empty() {
        h.push_str("<p class=\"note\">No metric columns (numeric or boolean, not id-like, not grouped) in the result.</p>\n");
    } else {
        h.push_str("<div class=\"scroll\"><table class=\"agg\">\n<thead><tr>");
        if group_idx.is_empty() {
            h.push_str("<th>group</th>");
        } else {
            for &i in &group_idx {
                let _ = write!(h, "<th>{}</th>", esc(names[i]));
            }
        }
        h.push_str("<th>metric</th><th>n</th><th>mean</th><th>stddev</th><th>95% CI low</th><th>95% CI high</th><th>pass rate</th></tr></thead>\n<tbody>\n");
        for (mi, m) in metrics.iter().enumerate() {
            for (gi, g) in groups.iter().enumerate() {
                let s = &stats[mi][gi];
                h.push_str(if gi == 0 {
                    "<tr class=\"first\">"
                } else {
                    "<tr>"
                });
                if group_idx.is_empty() {
                    let _ = write!(h, "<td>{}</td>", esc(ALL_GROUP));
                } else {
                    for v in &g.labels {
                        let _ = write!(h, "<td>{}</td>", esc(v));
                    }
                }
                let _ = write!(h, "<th scope=\"row\">{}</th>", esc(&m.name));
                let attrs = |stat: &str| {
                    format!(
                        "data-metric=\"{}\" data-group=\"{}\" data-stat=\"{}\"",
                        esc(&m.name),
                        esc(&g.key),
                        stat
                    )
                };
                let _ = write!(
                    h,
                    "<td class=\"num\" {} data-value=\"{}\">{}</td>",
                    attrs("n"),
                    s.n,
                    s.n
                );
                for (stat, v) in [
                    ("mean", s.mean),
                    ("stddev", s.sd),
                    ("ci_low", s.ci.map(|c| c.0)),
                    ("ci_high", s.ci.map(|c| c.1)),
                    ("pass_rate", s.pass),
                ] {
                    let _ = write!(
                        h,
                        "<td class=\"num\" {} data-value=\"{}\">{}</td>",
                        attrs(stat),
                        v.map(|x| x.to_string()).unwrap_or_default(),
                        v.map(fmt4).unwrap_or_else(|| "\u{2013}".to_string())
                    );
                }
                h.push_str("</tr>\n");
            }
        }
        h.push_str("</tbody></table></div>\n");
        h.push_str("<p class=\"note\">n counts non-NULL (finite) values; stddev is the sample standard deviation (n&minus;1); the 95% CI of the mean uses Student&rsquo;s t. Pass rate: share of true for booleans, share &ge; 3 for metrics whose values all lie in [1, 5], else &ndash;.</p>\n");
    }
    h.push_str("</section>\n");

    // Histograms.
    if !metrics.is_empty() {
        h.push_str("<section id=\"histograms\">\n<h2>Distributions</h2>\n<div class=\"charts\">\n");
        for m in &metrics {
            histogram(&mut h, m);
        }
        h.push_str("</div>\n</section>\n");
    }

    // Per-group comparison.
    if !group_idx.is_empty() && !metrics.is_empty() {
        h.push_str(
            "<section id=\"comparisons\">\n<h2>Comparison by group</h2>\n<div class=\"charts\">\n",
        );
        for (mi, m) in metrics.iter().enumerate() {
            comparison(&mut h, m, &groups, &stats[mi]);
        }
        h.push_str("</div>\n</section>\n");
    }

    // Instances.
    instances(&mut h, &batch, &metrics, &group_idx)?;

    h.push_str(SCRIPT);
    h.push_str("</body>\n</html>\n");
    Ok(h)
}

struct Metric {
    name: String,
    is_bool: bool,
    /// Values all in [1, 5]: pass rate is the share >= 3.
    likert: bool,
    /// Per row; NULL and non-finite values are `None`.
    values: Vec<Option<f64>>,
    /// All non-NULL finite values, in row order.
    all: Vec<f64>,
}

struct Group {
    /// Display value of each group column (NULL as "NULL").
    labels: Vec<String>,
    /// `labels` joined by GROUP_SEP, or ALL_GROUP.
    key: String,
    rows: Vec<usize>,
}

#[derive(Default)]
struct Stats {
    n: usize,
    mean: Option<f64>,
    sd: Option<f64>,
    ci: Option<(f64, f64)>,
    pass: Option<f64>,
}

impl Stats {
    fn compute(vals: &[f64], m: &Metric) -> Stats {
        let n = vals.len();
        if n == 0 {
            return Stats::default();
        }
        let nf = n as f64;
        // Welford moments and the Student-t interval of the mean_ci aggregate, so the
        // report's figures are the SQL function's.
        let moments = MeanVar::from_values(vals);
        let mean = moments.mean;
        let sd = moments.variance().map(f64::sqrt);
        let ci = sd.and(moments.ci(0.95));
        let pass = if m.is_bool {
            Some(vals.iter().filter(|&&v| v != 0.0).count() as f64 / nf)
        } else if m.likert {
            Some(vals.iter().filter(|&&v| v >= 3.0).count() as f64 / nf)
        } else {
            None
        };
        Stats {
            n,
            mean: Some(mean),
            sd,
            ci,
            pass,
        }
    }
}

/// Exact name, else a unique ASCII case-insensitive match.
fn resolve_column(names: &[&str], wanted: &str) -> Option<usize> {
    if let Some(i) = names.iter().position(|n| *n == wanted) {
        return Some(i);
    }
    let mut hits = names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.eq_ignore_ascii_case(wanted))
        .map(|(i, _)| i);
    let first = hits.next()?;
    hits.next().is_none().then_some(first)
}

fn is_id_like(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "id" || lower.ends_with("_id") || (name.len() > 2 && name.ends_with("Id"))
}

/// Sort key of one group value.
#[derive(Clone)]
enum Key {
    Num(f64),
    Str(String),
    Null,
}

fn cmp_key(a: &Key, b: &Key) -> Ordering {
    match (a, b) {
        (Key::Null, Key::Null) => Ordering::Equal,
        (Key::Null, _) => Ordering::Greater,
        (_, Key::Null) => Ordering::Less,
        (Key::Num(x), Key::Num(y)) => x.total_cmp(y),
        (Key::Str(x), Key::Str(y)) => x.cmp(y),
        (Key::Num(_), Key::Str(_)) => Ordering::Less,
        (Key::Str(_), Key::Num(_)) => Ordering::Greater,
    }
}

fn build_groups(batch: &RecordBatch, group_idx: &[usize]) -> Result<Vec<Group>> {
    let num_rows = batch.num_rows();
    if group_idx.is_empty() {
        return Ok(vec![Group {
            labels: vec![],
            key: ALL_GROUP.to_string(),
            rows: (0..num_rows).collect(),
        }]);
    }
    let opts = FormatOptions::new().with_null("NULL");
    let mut formatters = Vec::with_capacity(group_idx.len());
    let mut numeric: Vec<Option<ArrayRef>> = Vec::with_capacity(group_idx.len());
    for &i in group_idx {
        let col = batch.column(i);
        formatters.push(ArrayFormatter::try_new(col.as_ref(), &opts)?);
        let dt = col.data_type();
        numeric.push(if dt.is_numeric() || *dt == DataType::Boolean {
            Some(cast(col, &DataType::Float64)?)
        } else {
            None
        });
    }
    let mut index: HashMap<Vec<String>, usize> = HashMap::new();
    let mut groups: Vec<(Vec<Key>, Group)> = Vec::new();
    for r in 0..num_rows {
        let labels: Vec<String> = formatters.iter().map(|f| f.value(r).to_string()).collect();
        if let Some(&g) = index.get(&labels) {
            groups[g].1.rows.push(r);
            continue;
        }
        let keys: Vec<Key> = group_idx
            .iter()
            .zip(&numeric)
            .zip(&labels)
            .map(|((&i, num), label)| {
                if batch.column(i).is_null(r) {
                    Key::Null
                } else if let Some(num) = num {
                    Key::Num(num.as_primitive::<Float64Type>().value(r))
                } else {
                    Key::Str(label.clone())
                }
            })
            .collect();
        index.insert(labels.clone(), groups.len());
        groups.push((
            keys,
            Group {
                key: labels.join(GROUP_SEP),
                labels,
                rows: vec![r],
            },
        ));
    }
    groups.sort_by(|a, b| {
        a.0.iter()
            .zip(&b.0)
            .map(|(x, y)| cmp_key(x, y))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.1.key.cmp(&b.1.key))
    });
    Ok(groups.into_iter().map(|(_, g)| g).collect())
}

/// HTML-escapes text and attribute values (& < > " ').
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Four decimals; scientific notation for very large or very small magnitudes.
fn fmt4(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e9).contains(&a) {
        format!("{x:.4e}")
    } else {
        format!("{x:.4}")
    }
}

/// Short label for chart axes.
fn fmt_axis(x: f64) -> String {
    let s = fmt4(x);
    if s.contains('.') && !s.contains('e') {
        let t = s.trim_end_matches('0').trim_end_matches('.');
        if t == "-0" {
            "0".to_string()
        } else {
            t.to_string()
        }
    } else {
        s
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('\u{2026}');
        t
    }
}

/// The page's style sheet (`style.css`).
const STYLE: &str = concat!("<style>\n", include_str!("style.css"), "</style>\n");

/// Sorting the instances table by a click on its heading (`sort_table.js`).
const SCRIPT: &str = concat!("<script>\n", include_str!("sort_table.js"), "</script>\n");

fn page_head(h: &mut String, title: &str) {
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"generator\" content=\"evalsql report\">\n<title>{}</title>\n{}</head>\n<body>\n",
        esc(title),
        STYLE
    );
}

fn header(h: &mut String, title: &str, source_sql: &str, num_rows: usize) {
    let _ = write!(
        h,
        "<header>\n<h1>{}</h1>\n<p class=\"note\" id=\"generation\">rows: {}</p>\n<pre class=\"sql\" id=\"sql\">{}</pre>\n</header>\n",
        esc(title),
        num_rows,
        esc(source_sql.trim_end())
    );
}

fn render_empty(title: &str, source_sql: &str) -> String {
    let mut h = String::new();
    page_head(&mut h, title);
    header(&mut h, title, source_sql, 0);
    h.push_str("<p class=\"note\">The query returned no rows.</p>\n");
    h.push_str("<section id=\"instance-section\">\n<h2>Instances</h2>\n<table id=\"instances\"><thead><tr></tr></thead><tbody></tbody></table>\n</section>\n");
    h.push_str("</body>\n</html>\n");
    h
}

fn histogram(h: &mut String, m: &Metric) {
    const W: f64 = 360.0;
    const HGT: f64 = 180.0;
    const L: f64 = 40.0;
    const R: f64 = 12.0;
    const T: f64 = 12.0;
    const B: f64 = 30.0;
    let (pw, ph) = (W - L - R, HGT - T - B);
    let _ = write!(
        h,
        "<figure class=\"hist\" data-metric=\"{n}\">\n<figcaption>{n} <span class=\"note\">(n={c})</span></figcaption>\n<svg class=\"histogram\" data-metric=\"{n}\" width=\"{W}\" height=\"{HGT}\" viewBox=\"0 0 {W} {HGT}\" role=\"img\" aria-label=\"Histogram of {n}\">\n",
        n = esc(&m.name),
        c = m.all.len()
    );
    if m.all.is_empty() {
        let _ = write!(
            h,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"muted\">no non-NULL values</text>\n</svg>\n</figure>\n",
            W / 2.0,
            HGT / 2.0
        );
        return;
    }
    let min = m.all.iter().copied().fold(f64::INFINITY, f64::min);
    let max = m.all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if max > min {
        (min, max)
    } else {
        (min - 0.5, min + 0.5)
    };
    let width = (hi - lo) / BINS as f64;
    let mut counts = [0usize; BINS];
    for &v in &m.all {
        let b = (((v - lo) / (hi - lo)) * BINS as f64).floor();
        let b = if b.is_finite() {
            (b.max(0.0) as usize).min(BINS - 1)
        } else {
            0
        };
        counts[b] += 1;
    }
    let cmax = *counts.iter().max().unwrap_or(&1).max(&1);
    let bw = pw / BINS as f64;
    for (i, &c) in counts.iter().enumerate() {
        let bh = c as f64 / cmax as f64 * ph;
        let b_lo = lo + width * i as f64;
        let b_hi = if i + 1 == BINS {
            hi
        } else {
            lo + width * (i + 1) as f64
        };
        let _ = writeln!(
            h,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>[{}, {}{}: {}</title></rect>",
            L + bw * i as f64 + 0.5,
            T + ph - bh,
            (bw - 1.0).max(0.5),
            bh,
            fmt_axis(b_lo),
            fmt_axis(b_hi),
            if i + 1 == BINS { "]" } else { ")" },
            c
        );
    }
    let _ = write!(
        h,
        "<line class=\"axis\" x1=\"{L}\" y1=\"{y0:.1}\" x2=\"{x1:.1}\" y2=\"{y0:.1}\"/>\n<line class=\"axis\" x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{y0:.1}\"/>\n\
<text x=\"{L}\" y=\"{yl:.1}\" text-anchor=\"start\">{min}</text>\n<text x=\"{x1:.1}\" y=\"{yl:.1}\" text-anchor=\"end\">{max}</text>\n\
<text x=\"{yx:.1}\" y=\"{yt:.1}\" text-anchor=\"end\" class=\"muted\">{cmax}</text>\n<text x=\"{yx:.1}\" y=\"{y0:.1}\" text-anchor=\"end\" class=\"muted\">0</text>\n</svg>\n</figure>\n",
        y0 = T + ph,
        x1 = L + pw,
        yl = T + ph + 16.0,
        yx = L - 4.0,
        yt = T + 8.0,
        min = esc(&fmt_axis(min)),
        max = esc(&fmt_axis(max)),
    );
}

fn comparison(h: &mut String, m: &Metric, groups: &[Group], stats: &[Stats]) {
    const LABEL_W: f64 = 170.0;
    const PLOT_W: f64 = 280.0;
    const VALUE_W: f64 = 70.0;
    const ROW_H: f64 = 22.0;
    const TOP: f64 = 8.0;
    const BOTTOM: f64 = 24.0;
    let shown = groups.len().min(MAX_CHART_GROUPS);
    let width = LABEL_W + PLOT_W + VALUE_W;
    let height = TOP + ROW_H * shown as f64 + BOTTOM;
    // Domain: always include 0 (bars start at 0), the means and the CI ends.
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for s in &stats[..shown] {
        for v in [s.mean, s.ci.map(|c| c.0), s.ci.map(|c| c.1)]
            .into_iter()
            .flatten()
        {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if m.is_bool || m.likert {
        // Natural scales: [0, 1] for rates, [0, 5] for 1-5 ratings; whiskers of wide CIs
        // (small n) are clipped to it (the tooltip has the exact interval).
        lo = 0.0;
        hi = if m.is_bool { 1.0 } else { 5.0 };
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    let x = |v: f64| LABEL_W + ((v - lo) / (hi - lo)).clamp(0.0, 1.0) * PLOT_W;
    let _ = write!(
        h,
        "<figure class=\"cmp\" data-metric=\"{n}\">\n<figcaption>{n} <span class=\"note\">(mean and 95% CI by group)</span></figcaption>\n<svg class=\"comparison\" data-metric=\"{n}\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"Mean of {n} by group\">\n",
        n = esc(&m.name),
    );
    for (i, (g, s)) in groups.iter().zip(stats).take(shown).enumerate() {
        let yc = TOP + ROW_H * i as f64 + ROW_H / 2.0;
        let tip = format!(
            "{}: mean={}, 95% CI [{}, {}], n={}",
            g.key,
            s.mean.map(fmt4).unwrap_or_else(|| "\u{2013}".into()),
            s.ci.map(|c| fmt4(c.0)).unwrap_or_else(|| "\u{2013}".into()),
            s.ci.map(|c| fmt4(c.1)).unwrap_or_else(|| "\u{2013}".into()),
            s.n
        );
        let _ = write!(
            h,
            "<g data-group=\"{}\"><title>{}</title>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            esc(&g.key),
            esc(&tip),
            LABEL_W - 6.0,
            yc + 4.0,
            esc(&truncate(&g.key, 26))
        );
        match s.mean {
            Some(mean) => {
                let (a, b) = (x(0.0).min(x(mean)), x(0.0).max(x(mean)));
                let _ = writeln!(
                    h,
                    "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>",
                    a,
                    yc - 7.0,
                    (b - a).max(0.5),
                    14.0
                );
                if let Some((cl, ch)) = s.ci {
                    let (xl, xh) = (x(cl), x(ch));
                    let _ = writeln!(
                        h,
                        "<line class=\"whisker\" x1=\"{xl:.1}\" y1=\"{yc:.1}\" x2=\"{xh:.1}\" y2=\"{yc:.1}\"/><line class=\"whisker\" x1=\"{xl:.1}\" y1=\"{:.1}\" x2=\"{xl:.1}\" y2=\"{:.1}\"/><line class=\"whisker\" x1=\"{xh:.1}\" y1=\"{:.1}\" x2=\"{xh:.1}\" y2=\"{:.1}\"/>",
                        yc - 5.0,
                        yc + 5.0,
                        yc - 5.0,
                        yc + 5.0
                    );
                }
                let _ = writeln!(
                    h,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"start\">{}</text>",
                    LABEL_W + PLOT_W + 6.0,
                    yc + 4.0,
                    esc(&fmt4(mean))
                );
            }
            None => {
                let _ = writeln!(
                    h,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"start\" class=\"muted\">no data</text>",
                    LABEL_W + 4.0,
                    yc + 4.0
                );
            }
        }
        h.push_str("</g>\n");
    }
    let y_axis = TOP + ROW_H * shown as f64;
    let _ = write!(
        h,
        "<line class=\"axis\" x1=\"{x0:.1}\" y1=\"{TOP}\" x2=\"{x0:.1}\" y2=\"{y_axis:.1}\"/>\n<line class=\"axis\" x1=\"{LABEL_W}\" y1=\"{y_axis:.1}\" x2=\"{xe:.1}\" y2=\"{y_axis:.1}\"/>\n\
<text x=\"{LABEL_W}\" y=\"{yl:.1}\" text-anchor=\"start\" class=\"muted\">{lo}</text>\n<text x=\"{xe:.1}\" y=\"{yl:.1}\" text-anchor=\"end\" class=\"muted\">{hi}</text>\n</svg>\n",
        x0 = x(0.0),
        xe = LABEL_W + PLOT_W,
        yl = y_axis + 15.0,
        lo = esc(&fmt_axis(lo)),
        hi = esc(&fmt_axis(hi)),
    );
    if groups.len() > shown {
        let _ = writeln!(
            h,
            "<p class=\"note\">Showing the first {shown} of {} groups; the aggregate table lists all.</p>",
            groups.len()
        );
    }
    h.push_str("</figure>\n");
}

fn instances(
    h: &mut String,
    batch: &RecordBatch,
    metrics: &[Metric],
    group_idx: &[usize],
) -> Result<()> {
    let schema = batch.schema();
    let num_rows = batch.num_rows();
    let shown = num_rows.min(MAX_INSTANCE_ROWS);
    h.push_str("<section id=\"instance-section\">\n<h2>Instances</h2>\n");
    if shown < num_rows {
        let _ = writeln!(
            h,
            "<p class=\"note\" id=\"instances-capped\">Showing the first {shown} of {num_rows} rows.</p>"
        );
    }
    h.push_str("<p class=\"note\">Click a column header to sort (again to reverse).</p>\n");
    h.push_str("<div class=\"scroll\"><table id=\"instances\">\n<thead><tr>");
    let opts = FormatOptions::new().with_null("");
    let mut cols = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        let dt = field.data_type();
        let class = if dt.is_numeric() {
            "num"
        } else if matches!(
            dt,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            "text"
        } else {
            "other"
        };
        let role = if group_idx.contains(&i) {
            "group"
        } else if metrics.iter().any(|m| &m.name == field.name()) {
            "metric"
        } else {
            class
        };
        let _ = write!(
            h,
            "<th scope=\"col\" data-role=\"{role}\" data-type=\"{}\">{}</th>",
            esc(&dt.to_string()),
            esc(field.name())
        );
        let col = batch.column(i);
        cols.push((
            col.clone(),
            ArrayFormatter::try_new(col.as_ref(), &opts)?,
            class,
        ));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for r in 0..shown {
        h.push_str("<tr>");
        for (col, f, class) in &cols {
            if col.is_null(r) {
                h.push_str("<td class=\"null\">NULL</td>");
            } else {
                let _ = write!(
                    h,
                    "<td class=\"{class}\">{}</td>",
                    esc(&f.value(r).to_string())
                );
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n</section>\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use evalsql_udfs::t_quantile;
    use std::sync::Arc;

    fn sample_batches() -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("sample_id", DataType::Int64, false),
            Field::new("model", DataType::Utf8, true),
            Field::new("f1", DataType::Float64, true),
            Field::new("passed", DataType::Boolean, true),
            Field::new("score", DataType::Int64, true),
            Field::new("reason", DataType::Utf8, true),
        ]));
        let b1 = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(StringArray::from(vec!["b", "a", "a", "b"])),
                Arc::new(Float64Array::from(vec![
                    Some(0.2),
                    Some(0.5),
                    None,
                    Some(0.4),
                ])),
                Arc::new(BooleanArray::from(vec![false, true, false, true])),
                Arc::new(Int64Array::from(vec![2, 4, 2, 3])),
                Arc::new(StringArray::from(vec![
                    Some("too short"),
                    Some("fine"),
                    Some("<b>&\"' see https://example.com"),
                    None,
                ])),
            ],
        )
        .unwrap();
        let b2 = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![5, 6, 7])),
                Arc::new(StringArray::from(vec!["a", "a", "a"])),
                Arc::new(Float64Array::from(vec![0.7, 0.9, 0.3])),
                Arc::new(BooleanArray::from(vec![true, true, false])),
                Arc::new(Int64Array::from(vec![5, 3, 1])),
                Arc::new(StringArray::from(vec!["good", "great", "bad"])),
            ],
        )
        .unwrap();
        vec![b1, b2]
    }

    const SQL: &str = "SELECT * FROM results WHERE reason <> '<none>' -- \"q\" & more";

    fn render() -> String {
        render_report(
            "Eval <report>",
            SQL,
            &sample_batches(),
            &["model".to_string()],
        )
        .unwrap()
    }

    /// The data-value of the aggregate cell, parsed.
    fn stat(html: &str, metric: &str, group: &str, stat: &str) -> Option<f64> {
        let needle = format!(
            "data-metric=\"{metric}\" data-group=\"{group}\" data-stat=\"{stat}\" data-value=\""
        );
        assert_eq!(html.matches(&needle).count(), 1, "cell {needle}");
        let start = html.find(&needle).unwrap() + needle.len();
        let v = &html[start..start + html[start..].find('"').unwrap()];
        if v.is_empty() {
            None
        } else {
            Some(v.parse().unwrap())
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn aggregates_match_hand_computed() {
        let html = render();
        if let Ok(path) = std::env::var("EVALSQL_REPORT_SAMPLE") {
            std::fs::write(path, &html).unwrap();
        }
        // f1, group a: [0.5, 0.7, 0.9, 0.3] (one NULL): n=4, mean 0.6,
        // sd = sqrt(0.2/3); CI = mean -/+ t(0.975, 3) * sd / 2, t = 3.182446305284263 (scipy).
        assert_eq!(stat(&html, "f1", "a", "n"), Some(4.0));
        assert!(close(stat(&html, "f1", "a", "mean").unwrap(), 0.6, 1e-12));
        let sd = (0.2f64 / 3.0).sqrt();
        assert!(close(stat(&html, "f1", "a", "stddev").unwrap(), sd, 1e-12));
        assert!(close(
            stat(&html, "f1", "a", "stddev").unwrap(),
            0.2581988897471611,
            1e-12
        ));
        // scipy.stats.t.interval(0.95, 3, loc=0.6, scale=sd/2) = (0.18914794864789586, 1.0108520513521042)
        let half = 3.182446305284263 * sd / 2.0;
        assert!(close(
            stat(&html, "f1", "a", "ci_low").unwrap(),
            0.6 - half,
            1e-9
        ));
        assert!(close(
            stat(&html, "f1", "a", "ci_high").unwrap(),
            0.6 + half,
            1e-9
        ));
        assert!(close(
            stat(&html, "f1", "a", "ci_low").unwrap(),
            0.18914794864789586,
            1e-9
        ));
        assert!(close(
            stat(&html, "f1", "a", "ci_high").unwrap(),
            1.0108520513521042,
            1e-9
        ));
        assert_eq!(stat(&html, "f1", "a", "pass_rate"), None); // 0.3 etc. not in [1, 5]
        // f1, group b: [0.2, 0.4]: mean 0.3, sd sqrt(0.02), t(0.975, 1) = 12.706204736174694.
        assert_eq!(stat(&html, "f1", "b", "n"), Some(2.0));
        assert!(close(stat(&html, "f1", "b", "mean").unwrap(), 0.3, 1e-12));
        assert!(close(
            stat(&html, "f1", "b", "stddev").unwrap(),
            0.02f64.sqrt(),
            1e-12
        ));
        let half_b = 12.706204736174694 * 0.02f64.sqrt() / 2.0f64.sqrt();
        assert!(close(
            stat(&html, "f1", "b", "ci_high").unwrap(),
            0.3 + half_b,
            1e-9
        ));
        // passed (boolean): a = [t, f, t, t, f] -> 0.6; b = [f, t] -> 0.5.
        assert_eq!(stat(&html, "passed", "a", "n"), Some(5.0));
        assert!(close(
            stat(&html, "passed", "a", "mean").unwrap(),
            0.6,
            1e-12
        ));
        assert!(close(
            stat(&html, "passed", "a", "pass_rate").unwrap(),
            0.6,
            1e-12
        ));
        assert!(close(
            stat(&html, "passed", "b", "pass_rate").unwrap(),
            0.5,
            1e-12
        ));
        // passed a: sd of [1,0,1,1,0] = sqrt(0.3); t(0.975, 4) = 2.7764451051977934.
        assert!(close(
            stat(&html, "passed", "a", "stddev").unwrap(),
            0.3f64.sqrt(),
            1e-12
        ));
        let half_p = 2.7764451051977934 * 0.3f64.sqrt() / 5.0f64.sqrt();
        assert!(close(
            stat(&html, "passed", "a", "ci_low").unwrap(),
            0.6 - half_p,
            1e-9
        ));
        // score (all in [1, 5]): a = [4, 2, 5, 3, 1] -> mean 3, sd sqrt(2.5), pass (>= 3) 0.6;
        // b = [2, 3] -> mean 2.5, pass 0.5.
        assert!(close(
            stat(&html, "score", "a", "mean").unwrap(),
            3.0,
            1e-12
        ));
        assert!(close(
            stat(&html, "score", "a", "stddev").unwrap(),
            2.5f64.sqrt(),
            1e-12
        ));
        assert!(close(
            stat(&html, "score", "a", "pass_rate").unwrap(),
            0.6,
            1e-12
        ));
        assert!(close(
            stat(&html, "score", "b", "mean").unwrap(),
            2.5,
            1e-12
        ));
        assert!(close(
            stat(&html, "score", "b", "pass_rate").unwrap(),
            0.5,
            1e-12
        ));
        // Display text: 4 decimals.
        assert!(html.contains("data-stat=\"mean\" data-value=\"0.6\">0.6000</td>"));
        // sample_id is id-like, model is the group: neither is a metric.
        assert!(!html.contains("data-metric=\"sample_id\""));
        assert!(!html.contains("data-metric=\"model\""));
        // Groups sorted: a before b.
        assert!(html.find("data-group=\"a\"").unwrap() < html.find("data-group=\"b\"").unwrap());
        assert!(html.contains("rows: 7"));
    }

    #[test]
    fn escapes_everything_and_is_self_contained() {
        let html = render();
        assert!(html.contains("<title>Eval &lt;report&gt;</title>"));
        assert!(html.contains("&lt;b&gt;&amp;&quot;&#39; see"));
        assert!(!html.contains("<b>&"));
        assert!(
            html.contains(
                "WHERE reason &lt;&gt; &#39;&lt;none&gt;&#39; -- &quot;q&quot; &amp; more"
            )
        );
        // The only URL is the one inside the data.
        assert_eq!(html.matches("http://").count(), 0);
        assert_eq!(html.matches("https://").count(), 1);
        let without = html.replace("see https://example.com", "");
        assert!(!without.contains("https://") && !without.contains("http://"));
        for tag in ["<link", "<img", "<iframe", "src=", "@import", "url("] {
            assert!(!html.contains(tag), "{tag}");
        }
        // Instance table: all 7 rows, NULL cells marked.
        let inst = &html[html.find("id=\"instances\"").unwrap()..];
        assert_eq!(inst.matches("<tr>").count(), 1 + 7);
        assert!(inst.contains("<td class=\"null\">NULL</td>"));
        // Deterministic.
        assert_eq!(html, render());
    }

    #[test]
    fn charts_per_metric() {
        let html = render();
        for m in ["f1", "passed", "score"] {
            assert_eq!(
                html.matches(&format!("<svg class=\"histogram\" data-metric=\"{m}\""))
                    .count(),
                1,
                "{m}"
            );
            assert_eq!(
                html.matches(&format!("<svg class=\"comparison\" data-metric=\"{m}\""))
                    .count(),
                1,
                "{m}"
            );
            assert!(html.contains(&format!("<figcaption>{m} ")), "{m}");
        }
        assert_eq!(html.matches("<svg class=\"histogram\"").count(), 3);
        // 10 bars per histogram; counts in tooltips (f1 has 6 values; max 0.9 in last bin).
        let f1 = &html[html
            .find("<svg class=\"histogram\" data-metric=\"f1\"")
            .unwrap()..];
        let f1 = &f1[..f1.find("</svg>").unwrap()];
        assert_eq!(f1.matches("<rect class=\"bar\"").count(), 10);
        assert!(f1.contains("<title>[0.83, 0.9]: 1</title>"));
        assert!(f1.contains("<title>[0.2, 0.27): 1</title>"));
        // Without group columns: one "(all)" group and no comparison charts.
        let all = render_report("t", "select 1", &sample_batches(), &[]).unwrap();
        assert_eq!(stat(&all, "f1", "(all)", "n"), Some(6.0));
        assert!(close(
            stat(&all, "f1", "(all)", "mean").unwrap(),
            0.5,
            1e-12
        ));
        assert!(!all.contains("<svg class=\"comparison\""));
    }

    #[test]
    fn unknown_group_column_is_an_error() {
        let err =
            render_report("t", "select 1", &sample_batches(), &["modle".to_string()]).unwrap_err();
        assert!(err.to_string().contains("\"modle\""), "{err}");
        // Case-insensitive fallback.
        assert!(render_report("t", "q", &sample_batches(), &["MODEL".to_string()]).is_ok());
        // No batches at all: an empty report, not an error.
        let empty = render_report("t", "q", &[], &["model".to_string()]).unwrap();
        assert!(empty.contains("rows: 0") && empty.contains("id=\"instances\""));
    }

    #[test]
    fn t_quantiles() {
        // scipy.stats.t.ppf(0.975, df)
        for (df, want) in [
            (3u64, 3.182446305284263),
            (30, 2.0422724563012378),
            (31, 2.039513446396408),
            (40, 2.021075390306273),
            (60, 2.0002978220142604),
            (100, 1.9839715185235518),
            (1000, 1.9623390808264083),
        ] {
            assert!(
                (t_quantile(0.975, df as f64) - want).abs() < 1e-6,
                "df {df}: {}",
                t_quantile(0.975, df as f64)
            );
        }
    }
}
