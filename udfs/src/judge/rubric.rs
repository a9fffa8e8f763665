//! Rubrics: a judge metric in one file. The front matter says everything the engine and the
//! docs need (name, version, scale, inputs with a line each, conversation support, threshold,
//! description, the evaluator it corresponds to); the body is the judge's system prompt.
//! Format in `udfs/rubrics/README.md`.
//!
//! The built-in metrics are exactly the files under `udfs/rubrics/` (found by `build.rs` and
//! compiled in). Custom metrics come from rubric files (`--rubrics DIR`) or `CREATE FUNCTION
//! ... LANGUAGE judge`; each function holds its own rubrics ([`RubricSet`]), so nothing is
//! looked up by name in a process-wide table.
//!
//! A rubric's `version` and a digest of what the judge is told ([`Rubric::fingerprint`]) are
//! part of every cache key made with it, so an edited rubric never reuses old judgements.
//! Keys that only describe the metric (scale, conversation, description, evaluator, input
//! lines, threshold) are not in the digest: documenting a metric better keeps its cache.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use datafusion::common::{DataFusionError, Result, internal_err, plan_err};

/// The largest rubric accepted (front matter and body): a rubric is a page of instructions,
/// and every judge call sends it.
pub const MAX_RUBRIC_BYTES: usize = 64 * 1024;

/// Default pass threshold: a quality score passes at 3 or more, a severity at 3 or less.
pub const DEFAULT_THRESHOLD: f64 = 3.0;

/// What a metric's score means; it decides the SQL types and how conversation turns combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scale {
    /// A quality score, e.g. 1-5 (Float64); pass = score >= threshold; turns: the mean.
    Score,
    /// A 0-7 harm severity (Int32) with its label; pass = severity <= threshold; turns: the
    /// worst.
    Severity,
    /// A defect flag (Boolean, true = defect), judged as 0 (none) up to `max`; with `kinds`
    /// the score names the kind of defect. Turns: the worst.
    Flag,
    /// Which of two responses is better (1 = the first shown, 2 = the second, 3 = a tie):
    /// `pairwise_preference`, judged in both orders.
    Preference,
}

impl Scale {
    fn parse(text: &str) -> std::result::Result<Scale, String> {
        Ok(match text {
            "score" => Scale::Score,
            "severity" => Scale::Severity,
            "flag" => Scale::Flag,
            "preference" => Scale::Preference,
            other => {
                return Err(format!(
                    "the rubric's scale {other:?} is not score, severity, flag or preference"
                ));
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Score => "score",
            Scale::Severity => "severity",
            Scale::Flag => "flag",
            Scale::Preference => "preference",
        }
    }
}

/// One input a rubric reads, e.g. `context` (or `query?` when optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RubricInput {
    pub name: String,
    pub optional: bool,
    /// What to pass (front matter `input.<name>: ...`), for the docs.
    pub about: Option<String>,
}

/// A parsed rubric file.
#[derive(Debug, Clone, PartialEq)]
pub struct Rubric {
    pub name: String,
    pub version: u32,
    pub min: i64,
    pub max: i64,
    pub inputs: Vec<RubricInput>,
    /// The default pass threshold (`threshold`; else [`DEFAULT_THRESHOLD`]).
    pub threshold: Option<f64>,
    pub scale: Scale,
    /// For a flag: the names of the scores 1..=max (the kinds of defect).
    pub kinds: Vec<String>,
    /// Whether one `messages` argument (a conversation) may be judged turn by turn.
    pub conversation: bool,
    /// The evaluator of another product this metric corresponds to.
    pub evaluator: Option<String>,
    /// What the metric measures, one sentence or two.
    pub description: Option<String>,
    /// The system prompt.
    pub body: String,
}

/// The front-matter keys, in the order [`Rubric::to_text`] writes them (`input.<name>` lines
/// follow).
const KEYS: &[&str] = &[
    "name",
    "version",
    "min",
    "max",
    "inputs",
    "scale",
    "kinds",
    "threshold",
    "conversation",
    "evaluator",
    "description",
];

impl Rubric {
    /// Parses a rubric file: `---`, `key: value` lines, `---`, then the system prompt.
    pub fn parse(text: &str) -> std::result::Result<Rubric, String> {
        if text.len() > MAX_RUBRIC_BYTES {
            return Err(format!(
                "the rubric has {} bytes; at most {MAX_RUBRIC_BYTES} are accepted",
                text.len()
            ));
        }
        let text = text.trim_start_matches('\u{feff}');
        let rest = text
            .strip_prefix("---")
            .ok_or("a rubric starts with a '---' line")?;
        let end = rest
            .find("\n---")
            .ok_or("the rubric header has no closing '---' line")?;
        let header = &rest[..end];
        let body = rest[end + 4..].trim_start_matches(['-']).trim().to_string();
        let mut fields = BTreeMap::new();
        let mut about = BTreeMap::new();
        for line in header.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (k, v) = line
                .split_once(':')
                .ok_or_else(|| format!("header line {line:?} is not 'key: value'"))?;
            let (k, v) = (k.trim(), v.trim().to_string());
            let fresh = match k.strip_prefix("input.") {
                Some(input) => about.insert(input.to_string(), v).is_none(),
                None if KEYS.contains(&k) => fields.insert(k.to_string(), v).is_none(),
                None => return Err(format!("unknown rubric header key {k:?}")),
            };
            if !fresh {
                return Err(format!("the rubric header sets {k} twice"));
            }
        }
        let get = |k: &str| {
            fields
                .get(k)
                .cloned()
                .ok_or_else(|| format!("the rubric header has no {k}"))
        };
        let num = |k: &str| -> std::result::Result<i64, String> {
            get(k)?
                .parse()
                .map_err(|_| format!("the rubric's {k} is not an integer"))
        };
        let mut inputs: Vec<RubricInput> = Vec::new();
        for s in get("inputs")?
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (name, optional) = match s.strip_suffix('?') {
                Some(n) => (n.trim().to_string(), true),
                None => (s.to_string(), false),
            };
            if inputs.iter().any(|i| i.name == name) {
                return Err(format!("the rubric names its input {name} twice"));
            }
            let about = about.remove(&name);
            inputs.push(RubricInput {
                name,
                optional,
                about,
            });
        }
        if inputs.is_empty() {
            return Err("the rubric has no inputs".into());
        }
        if let Some(unknown) = about.keys().next() {
            return Err(format!(
                "the rubric describes input.{unknown}, which is not in its inputs"
            ));
        }
        if body.is_empty() {
            return Err("the rubric has no text".into());
        }
        let threshold = match fields.get("threshold") {
            None => None,
            Some(t) => Some(
                t.parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite())
                    .ok_or("the rubric's threshold is not a number")?,
            ),
        };
        let name = get("name")?;
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!(
                "the rubric's name {name:?} is not a SQL function name (letters, digits, _)"
            ));
        }
        let conversation = match fields.get("conversation").map(String::as_str) {
            None | Some("no") => false,
            Some("yes") => true,
            Some(other) => {
                return Err(format!(
                    "the rubric's conversation is {other:?}, not yes or no"
                ));
            }
        };
        let scale = match fields.get("scale") {
            Some(s) => Scale::parse(s)?,
            None => Scale::Score,
        };
        let kinds: Vec<String> = fields
            .get("kinds")
            .map(|k| k.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default();
        let text = |k: &str| fields.get(k).filter(|v| !v.is_empty()).cloned();
        let rubric = Rubric {
            name,
            threshold,
            version: num("version")?
                .try_into()
                .ok()
                .filter(|&v: &u32| v >= 1)
                .ok_or("the rubric's version must be a positive integer")?,
            min: num("min")?,
            max: num("max")?,
            inputs,
            scale,
            kinds,
            conversation,
            evaluator: text("evaluator"),
            description: text("description"),
            body,
        };
        if rubric.min >= rubric.max {
            return Err("the rubric's min must be below its max".into());
        }
        match rubric.scale {
            Scale::Severity if (rubric.min, rubric.max) != (0, 7) => {
                return Err("a severity rubric scores from 0 to 7".into());
            }
            Scale::Flag if rubric.min != 0 => {
                return Err("a flag rubric scores 0 for no defect (min: 0)".into());
            }
            Scale::Preference if (rubric.min, rubric.max) != (1, 3) => {
                return Err("a preference rubric scores 1, 2 or 3 (min: 1, max: 3)".into());
            }
            _ => {}
        }
        if !rubric.kinds.is_empty() {
            if rubric.scale != Scale::Flag {
                return Err("only a flag rubric names kinds".into());
            }
            if rubric.kinds.len() as i64 != rubric.max || rubric.kinds.iter().any(String::is_empty)
            {
                return Err(format!(
                    "the rubric's kinds name the scores 1 to {}: {} names expected",
                    rubric.max, rubric.max
                ));
            }
        }
        Ok(rubric)
    }

    /// `name@version`, the rubric's part of a cache key.
    pub fn version_tag(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// A digest of everything the judge is told (text, scale, inputs): part of the cache key,
    /// so editing a rubric without bumping its version still never reuses old judgements.
    /// Descriptive front matter (description, evaluator, input lines, threshold, scale kind,
    /// conversation) is left out on purpose: it does not change what the judge sees.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.body.as_bytes());
        h.update(format!("|{}|{}|", self.min, self.max).as_bytes());
        for i in &self.inputs {
            h.update(i.name.as_bytes());
            h.update(if i.optional { b"?," } else { b" ," });
        }
        let digest = h.finalize();
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// The rubric as a file: `Rubric::parse(&r.to_text()) == r`.
    pub fn to_text(&self) -> String {
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|i| format!("{}{}", i.name, if i.optional { "?" } else { "" }))
            .collect();
        let mut out = format!(
            "---\nname: {}\nversion: {}\nmin: {}\nmax: {}\ninputs: {}\n",
            self.name,
            self.version,
            self.min,
            self.max,
            inputs.join(", ")
        );
        if self.scale != Scale::Score {
            out.push_str(&format!("scale: {}\n", self.scale.as_str()));
        }
        if !self.kinds.is_empty() {
            out.push_str(&format!("kinds: {}\n", self.kinds.join(", ")));
        }
        if let Some(t) = self.threshold {
            out.push_str(&format!("threshold: {t}\n"));
        }
        if self.conversation {
            out.push_str("conversation: yes\n");
        }
        for (key, value) in [
            ("evaluator", &self.evaluator),
            ("description", &self.description),
        ] {
            if let Some(v) = value {
                out.push_str(&format!("{key}: {v}\n"));
            }
        }
        for i in &self.inputs {
            if let Some(about) = &i.about {
                out.push_str(&format!("input.{}: {about}\n", i.name));
            }
        }
        out.push_str("---\n");
        out.push_str(&self.body);
        out.push('\n');
        out
    }

    /// How many inputs a call must pass: the required ones, and all of them.
    pub fn arities(&self) -> (usize, usize) {
        let required = self.inputs.iter().filter(|i| !i.optional).count();
        (required, self.inputs.len())
    }

    /// The inputs that `n` arguments stand for: all of them, or the required ones when `n`
    /// is the required count (optional inputs are the ones left out).
    pub fn inputs_for(&self, n: usize) -> Option<Vec<&RubricInput>> {
        let (required, all) = self.arities();
        if n == all {
            Some(self.inputs.iter().collect())
        } else if n == required {
            Some(self.inputs.iter().filter(|i| !i.optional).collect())
        } else {
            None
        }
    }

    /// The default pass threshold.
    pub fn default_threshold(&self) -> f64 {
        self.threshold.unwrap_or(DEFAULT_THRESHOLD)
    }

    /// The name of a flag's kind for `score` (`None` for 0, or a flag without kinds).
    pub fn kind_of(&self, score: i64) -> Option<&str> {
        let i = usize::try_from(score).ok()?.checked_sub(1)?;
        self.kinds.get(i).map(String::as_str)
    }

    /// The user message: one `## NAME` section per given input, in rubric order.
    pub fn user_message(&self, inputs: &[(&str, &str)]) -> String {
        let mut out = String::new();
        for (name, value) in inputs {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str("## ");
            out.push_str(&name.to_ascii_uppercase());
            out.push('\n');
            out.push_str(value);
        }
        out
    }
}

/// Every version of one metric's rubric, held by its SQL functions: the newest is used
/// unless `SET evalsql.judge.<name>.version` pins another.
#[derive(Debug, Clone, PartialEq)]
pub struct RubricSet {
    versions: BTreeMap<u32, Arc<Rubric>>,
}

impl RubricSet {
    /// The versions of one rubric (same name, distinct versions).
    pub fn new(
        rubrics: impl IntoIterator<Item = Arc<Rubric>>,
    ) -> std::result::Result<Self, String> {
        let mut versions = BTreeMap::new();
        let mut name: Option<String> = None;
        for r in rubrics {
            match &name {
                Some(n) if *n != r.name => {
                    return Err(format!("rubrics {n} and {} in one set", r.name));
                }
                _ => name = Some(r.name.clone()),
            }
            if versions.insert(r.version, Arc::clone(&r)).is_some() {
                return Err(format!(
                    "two rubrics are version {} of {}",
                    r.version, r.name
                ));
            }
        }
        if versions.is_empty() {
            return Err("no rubric".into());
        }
        Ok(Self { versions })
    }

    /// The newest version.
    pub fn newest(&self) -> &Arc<Rubric> {
        self.versions
            .values()
            .next_back()
            .expect("a rubric set is never empty")
    }

    pub fn name(&self) -> &str {
        &self.newest().name
    }

    /// Every version, oldest first.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Rubric>> {
        self.versions.values()
    }

    /// The rubric a call uses: the pinned version, else the newest.
    pub fn pick(&self, pinned: Option<u32>) -> Result<&Arc<Rubric>> {
        let Some(v) = pinned else {
            return Ok(self.newest());
        };
        match self.versions.get(&v) {
            Some(r) => Ok(r),
            None => {
                let known: Vec<String> = self.versions.keys().map(|v| v.to_string()).collect();
                plan_err!(
                    "{}: no version {v} of its rubric (versions: {})",
                    self.name(),
                    known.join(", ")
                )
            }
        }
    }
}

/// The built-in rubric files: (file stem, text), one per `udfs/rubrics/*.md` but the README.
const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/rubric_files.rs"));

static BUILTIN: LazyLock<Vec<std::result::Result<Arc<Rubric>, String>>> = LazyLock::new(|| {
    FILES
        .iter()
        .map(|(stem, text)| {
            Rubric::parse(text)
                .and_then(|r| {
                    if r.name == *stem {
                        Ok(Arc::new(r))
                    } else {
                        Err(format!("the rubric in {stem}.md is named {}", r.name))
                    }
                })
                .map_err(|e| format!("udfs/rubrics/{stem}.md: {e}"))
        })
        .collect()
});

/// Every built-in rubric, sorted by name (an unreadable one is our bug: an internal error).
pub fn builtin_rubrics() -> Result<Vec<Arc<Rubric>>> {
    BUILTIN
        .iter()
        .map(|r| match r {
            Ok(r) => Ok(Arc::clone(r)),
            Err(e) => internal_err!("built-in rubric {e}"),
        })
        .collect()
}

/// The built-in rubric called `name`.
pub fn builtin(name: &str) -> Result<Arc<Rubric>> {
    match FILES.iter().position(|(stem, _)| *stem == name) {
        Some(i) => match &BUILTIN[i] {
            Ok(r) => Ok(Arc::clone(r)),
            Err(e) => internal_err!("built-in rubric {e}"),
        },
        None => internal_err!("no built-in rubric named {name}"),
    }
}

/// Whether `name` is a built-in judge metric.
pub fn is_builtin(name: &str) -> bool {
    FILES.iter().any(|(stem, _)| *stem == name)
}

/// Reads every `*.md` rubric file of `dir` (but a README) into one set per metric name.
pub fn load_dir(dir: &std::path::Path) -> Result<Vec<RubricSet>> {
    let plan = |what: String| DataFusionError::Plan(what);
    let entries = std::fs::read_dir(dir)
        .map_err(|e| plan(format!("rubric directory {}: {e}", dir.display())))?;
    let mut paths: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.eq_ignore_ascii_case("README.md"))
        })
        .collect();
    paths.sort();
    let mut by_name: BTreeMap<String, Vec<Arc<Rubric>>> = BTreeMap::new();
    for path in paths {
        let bad = |e: String| plan(format!("rubric {}: {e}", path.display()));
        let size = std::fs::metadata(&path)
            .map_err(|e| bad(e.to_string()))?
            .len();
        if size > MAX_RUBRIC_BYTES as u64 {
            return Err(bad(format!(
                "{size} bytes; at most {MAX_RUBRIC_BYTES} are accepted"
            )));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
        let parsed = Rubric::parse(&text).map_err(bad)?;
        if is_builtin(&parsed.name) {
            return Err(bad(format!(
                "{} is a built-in judge metric; give the custom rubric another name",
                parsed.name
            )));
        }
        by_name
            .entry(parsed.name.clone())
            .or_default()
            .push(Arc::new(parsed));
    }
    by_name
        .into_values()
        .map(|versions| {
            let name = versions[0].name.clone();
            RubricSet::new(versions)
                .map_err(|e| plan(format!("rubric directory {}: {name}: {e}", dir.display())))
        })
        .collect()
}

/// The SQL shape of a metric's result, from its rubric's scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A quality score (Float64); pass = score >= threshold; turns: the mean.
    Quality,
    /// A 0-7 harm severity (Int32) with its label; pass = severity <= threshold; turns: the
    /// maximum.
    Severity,
    /// A defect flag (Boolean, true = defect), judged as 0/1; turns: any.
    Label,
    /// A defect flag whose score names a kind (the rubric's `kinds`); turns: the worst.
    Kind,
}

impl Shape {
    /// The shape of a judge function over `rubric` (`None`: a preference, not one score).
    pub fn of(rubric: &Rubric) -> Option<Shape> {
        Some(match rubric.scale {
            Scale::Score => Shape::Quality,
            Scale::Severity => Shape::Severity,
            Scale::Flag if rubric.kinds.is_empty() => Shape::Label,
            Scale::Flag => Shape::Kind,
            Scale::Preference => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_rubric_parses_and_is_complete() {
        let all = builtin_rubrics().unwrap();
        assert_eq!(all.len(), FILES.len());
        for r in &all {
            let name = &r.name;
            let scale = match r.scale {
                Scale::Severity => (0, 7),
                Scale::Flag => (0, r.max),
                Scale::Preference => (1, 3),
                // Quality scores run 1-5; the agent checks are pass/fail, 0 or 1.
                Scale::Score if r.max == 1 => (0, 1),
                Scale::Score => (1, 5),
            };
            assert_eq!((r.min, r.max), scale, "{name}");
            assert!(r.body.len() > 500, "{name} is too short to be a rubric");
            assert!(
                r.body.contains("\"score\""),
                "{name} asks for no JSON score"
            );
            assert!(r.description.is_some(), "{name} has no description");
            assert!(r.evaluator.is_some(), "{name} names no evaluator");
            if matches!(r.scale, Scale::Score | Scale::Severity) {
                assert!(r.threshold.is_some(), "{name} has no threshold");
            }
            for input in &r.inputs {
                let heading = input.name.to_ascii_uppercase();
                assert!(
                    r.body.contains(&heading),
                    "{name} never mentions its input {heading}"
                );
                assert!(
                    input.about.is_some(),
                    "{name} does not describe {}",
                    input.name
                );
            }
        }
    }

    #[test]
    fn rubrics_round_trip_through_text() {
        for r in builtin_rubrics().unwrap() {
            assert_eq!(Rubric::parse(&r.to_text()).unwrap(), *r, "{}", r.name);
        }
        let r = Rubric::parse(
            "---\nname: g\nversion: 3\nmin: 0\nmax: 9\ninputs: query?, response\nthreshold: 6.5\n---\nJudge.",
        )
        .unwrap();
        assert_eq!(Rubric::parse(&r.to_text()).unwrap(), r);
    }

    #[test]
    fn descriptive_keys_stay_out_of_the_fingerprint() {
        let plain = Rubric::parse(
            "---\nname: g\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\nJudge it.",
        )
        .unwrap();
        let described = Rubric::parse(
            "---\nname: g\nversion: 1\nmin: 1\nmax: 5\ninputs: response\nthreshold: 4\n\
             conversation: yes\nevaluator: E\ndescription: D\ninput.response: R\n---\nJudge it.",
        )
        .unwrap();
        assert_eq!(plain.fingerprint(), described.fingerprint());
        let reworded = Rubric::parse(
            "---\nname: g\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\nJudge this.",
        )
        .unwrap();
        assert_ne!(plain.fingerprint(), reworded.fingerprint());
    }

    #[test]
    fn optional_inputs_are_left_out_by_arity() {
        let r = Rubric::parse(
            "---\nname: g\nversion: 2\nmin: 1\nmax: 5\ninputs: query?, context, response\n---\nJudge.",
        )
        .unwrap();
        assert_eq!(r.version_tag(), "g@2");
        assert_eq!(r.arities(), (2, 3));
        let two: Vec<&str> = r
            .inputs_for(2)
            .unwrap()
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(two, ["context", "response"]);
        assert_eq!(r.inputs_for(3).unwrap().len(), 3);
        assert!(r.inputs_for(1).is_none());
        assert_eq!(
            r.user_message(&[("context", "C"), ("response", "R")]),
            "## CONTEXT\nC\n\n## RESPONSE\nR"
        );
    }

    #[test]
    fn bad_rubrics_say_what_is_wrong() {
        let head = "---\nname: g\nversion: 1\nmin: 0\nmax: 3\ninputs: response\n";
        let err = |extra: &str| Rubric::parse(&format!("{head}{extra}---\nJudge.")).unwrap_err();
        assert!(Rubric::parse("no header").is_err());
        assert!(Rubric::parse("---\nname: g\n---\nx").is_err());
        assert!(err("scale: stars\n").contains("stars"));
        assert!(err("scale: severity\n").contains("0 to 7"));
        assert!(err("kinds: a, b, c\n").contains("only a flag"));
        assert!(err("scale: flag\nkinds: a, b\n").contains("3 names"));
        assert!(err("input.query: x\n").contains("input.query"));
        assert!(err("conversation: maybe\n").contains("maybe"));
        assert!(err("colour: red\n").contains("colour"));
        assert!(err("name: h\n").contains("twice"));
        let flag =
            Rubric::parse(&format!("{head}scale: flag\nkinds: a, b, c\n---\nJudge.")).unwrap();
        assert_eq!(flag.kind_of(2), Some("b"));
        assert_eq!(flag.kind_of(0), None);
        let huge = format!("{head}---\n{}", "x".repeat(MAX_RUBRIC_BYTES));
        assert!(Rubric::parse(&huge).unwrap_err().contains("at most"));
    }

    #[test]
    fn a_set_picks_the_newest_or_the_pinned_version() {
        let v = |n: u32| {
            Arc::new(
                Rubric::parse(&format!(
                    "---\nname: p\nversion: {n}\nmin: 1\nmax: 5\ninputs: response\n---\nV{n}."
                ))
                .unwrap(),
            )
        };
        let set = RubricSet::new([v(1), v(3)]).unwrap();
        assert_eq!(set.pick(None).unwrap().version, 3);
        assert_eq!(set.pick(Some(1)).unwrap().version, 1);
        let err = set.pick(Some(2)).unwrap_err().to_string();
        assert!(
            err.contains("no version 2") && err.contains("1, 3"),
            "{err}"
        );
        assert!(RubricSet::new([v(1), v(1)]).is_err());
    }
}
