//! Rubrics: the judge's instructions for one metric, as files under `udfs/rubrics/`
//! (format in `udfs/rubrics/README.md`), compiled into the binary.
//!
//! A rubric's `version` is part of every cache key made with it, so rewording a rubric and
//! bumping its version never serves judgements made under the old wording.

use std::collections::BTreeMap;
use std::sync::{LazyLock, RwLock};

use datafusion::common::{Result, internal_err, plan_err};

/// One input a rubric reads, e.g. `context` (or `query?` when optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RubricInput {
    pub name: String,
    pub optional: bool,
}

/// A parsed rubric file.
#[derive(Debug, Clone, PartialEq)]
pub struct Rubric {
    pub name: String,
    pub version: u32,
    pub min: i64,
    pub max: i64,
    pub inputs: Vec<RubricInput>,
    /// The default pass threshold (optional header `threshold`; else the metric's default).
    pub threshold: Option<f64>,
    /// The system prompt.
    pub body: String,
}

impl Rubric {
    /// Parses a rubric file: `---`, `key: value` lines (name, version, min, max, inputs), `---`,
    /// then the system prompt.
    pub fn parse(text: &str) -> std::result::Result<Rubric, String> {
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
        for line in header.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (k, v) = line
                .split_once(':')
                .ok_or_else(|| format!("header line {line:?} is not 'key: value'"))?;
            fields.insert(k.trim().to_string(), v.trim().to_string());
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
        let inputs: Vec<RubricInput> = get("inputs")?
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match s.strip_suffix('?') {
                Some(n) => RubricInput {
                    name: n.trim().to_string(),
                    optional: true,
                },
                None => RubricInput {
                    name: s.to_string(),
                    optional: false,
                },
            })
            .collect();
        if inputs.is_empty() {
            return Err("the rubric has no inputs".into());
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
        for key in fields.keys() {
            if !["name", "version", "min", "max", "inputs", "threshold"].contains(&key.as_str()) {
                return Err(format!("unknown rubric header key {key:?}"));
            }
        }
        let rubric = Rubric {
            name,
            threshold,
            version: num("version")?
                .try_into()
                .map_err(|_| "the rubric's version must be positive")?,
            min: num("min")?,
            max: num("max")?,
            inputs,
            body,
        };
        if rubric.min >= rubric.max {
            return Err("the rubric's min must be below its max".into());
        }
        Ok(rubric)
    }

    /// `name@version`, the rubric's part of a cache key.
    pub fn version_tag(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// A digest of everything the judge is told (text, scale, inputs): part of the cache key,
    /// so editing a rubric without bumping its version still never reuses old judgements.
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

    /// How many inputs a call must pass: the required ones, or all of them.
    /// The rubric as a file: `Rubric::parse(&r.to_text()) == r`.
    pub fn to_text(&self) -> String {
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|i| format!("{}{}", i.name, if i.optional { "?" } else { "" }))
            .collect();
        let threshold = self
            .threshold
            .map(|t| format!("threshold: {t}\n"))
            .unwrap_or_default();
        format!(
            "---\nname: {}\nversion: {}\nmin: {}\nmax: {}\ninputs: {}\n{threshold}---\n{}\n",
            self.name,
            self.version,
            self.min,
            self.max,
            inputs.join(", "),
            self.body
        )
    }

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

macro_rules! rubric_files {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../rubrics/", $name, ".md")))),*]
    };
}

/// The rubrics compiled in: (file stem, text).
const FILES: &[(&str, &str)] = rubric_files!(
    "groundedness",
    "relevance",
    "coherence",
    "fluency",
    "similarity",
    "retrieval_score",
    "response_completeness",
    "intent_resolution",
    "task_adherence",
    "tool_call_accuracy",
    "hate_unfairness",
    "sexual",
    "violence",
    "self_harm",
    "protected_material",
    "indirect_attack",
    "pairwise_preference",
);

static RUBRICS: LazyLock<BTreeMap<String, std::result::Result<Rubric, String>>> =
    LazyLock::new(|| {
        FILES
            .iter()
            .map(|(stem, text)| {
                let parsed = Rubric::parse(text).and_then(|r| {
                    if r.name == *stem {
                        Ok(r)
                    } else {
                        Err(format!("the rubric in {stem}.md is named {}", r.name))
                    }
                });
                (stem.to_string(), parsed)
            })
            .collect()
    });

/// Custom rubrics (rubric files, `CREATE FUNCTION ... LANGUAGE judge`): name -> version ->
/// rubric. They live as long as the process (a handful of small texts).
static CUSTOM: LazyLock<RwLock<BTreeMap<String, BTreeMap<u32, &'static Rubric>>>> =
    LazyLock::new(Default::default);

/// Registers a custom rubric (replacing one with the same name and version).
pub fn register_custom(rubric: Rubric) -> Result<&'static Rubric> {
    if RUBRICS.contains_key(&rubric.name) {
        return plan_err!(
            "{} is a built-in judge metric; give the custom rubric another name",
            rubric.name
        );
    }
    // The same rubric again (a plan decoded once per task, say): keep the one there is.
    if let Some(same) = CUSTOM
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&rubric.name)
        .and_then(|versions| versions.get(&rubric.version))
        .filter(|r| ***r == rubric)
    {
        return Ok(*same);
    }
    let leaked: &'static Rubric = Box::leak(Box::new(rubric));
    CUSTOM
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .entry(leaked.name.clone())
        .or_default()
        .insert(leaked.version, leaked);
    Ok(leaked)
}

/// The newest version of every custom rubric, by name.
pub fn custom_rubrics() -> Vec<&'static Rubric> {
    CUSTOM
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .filter_map(|v| v.values().next_back().copied())
        .collect()
}

/// The versions of a custom rubric, oldest first (empty for built-in or unknown names).
pub fn custom_versions(name: &str) -> Vec<u32> {
    CUSTOM
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .map(|v| v.keys().copied().collect())
        .unwrap_or_default()
}

/// The rubric of `name`: a custom one (the pinned `version`, else the newest), else the
/// built-in one.
pub fn rubric(name: &str, version: Option<u32>) -> Result<&'static Rubric> {
    if let Some(versions) = CUSTOM.read().unwrap_or_else(|e| e.into_inner()).get(name) {
        return match version {
            Some(v) => match versions.get(&v) {
                Some(r) => Ok(r),
                None => {
                    let known: Vec<String> = versions.keys().map(|v| v.to_string()).collect();
                    plan_err!(
                        "{name}: no version {v} of its rubric (versions: {})",
                        known.join(", ")
                    )
                }
            },
            None => match versions.values().next_back() {
                Some(r) => Ok(r),
                None => internal_err!("rubric {name} has no versions"),
            },
        };
    }
    if let Some(v) = version {
        let r = builtin(name)?;
        if r.version != v {
            return plan_err!(
                "{name}: the built-in rubric is version {}, not {v}",
                r.version
            );
        }
    }
    builtin(name)
}

/// Reads every `*.md` rubric file of `dir` and registers it; returns the rubrics read.
pub fn load_dir(dir: &std::path::Path) -> Result<Vec<&'static Rubric>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        datafusion::common::DataFusionError::Plan(format!(
            "rubric directory {}: {e}",
            dir.display()
        ))
    })?;
    let mut paths: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.eq_ignore_ascii_case("README.md"))
        })
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| {
            datafusion::common::DataFusionError::Plan(format!("rubric {}: {e}", path.display()))
        })?;
        let parsed = Rubric::parse(&text).map_err(|e| {
            datafusion::common::DataFusionError::Plan(format!("rubric {}: {e}", path.display()))
        })?;
        out.push(register_custom(parsed)?);
    }
    Ok(out)
}

/// The built-in rubric called `name`.
pub fn builtin(name: &str) -> Result<&'static Rubric> {
    match RUBRICS.get(name) {
        Some(Ok(r)) => Ok(r),
        Some(Err(e)) => internal_err!("rubric {name}: {e}"),
        None => internal_err!("no rubric named {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_rubric_parses() {
        for (stem, _) in FILES {
            let r = builtin(stem).unwrap();
            let scale = match *stem {
                "hate_unfairness" | "sexual" | "violence" | "self_harm" => (0, 7),
                "protected_material" => (0, 1),
                "indirect_attack" => (0, 3),
                "pairwise_preference" => (1, 3),
                _ => (1, 5),
            };
            assert_eq!((r.min, r.max), scale, "{stem}");
            assert!(r.body.len() > 500, "{stem} is too short to be a rubric");
            assert!(
                r.body.contains("\"score\""),
                "{stem} asks for no JSON score"
            );
            for input in &r.inputs {
                let heading = format!("## {}", input.name.to_ascii_uppercase());
                assert!(
                    r.body.contains(&heading) || r.body.contains(&input.name.to_ascii_uppercase()),
                    "{stem} never mentions its input {heading}"
                );
            }
        }
    }

    #[test]
    fn rubrics_round_trip_through_text() {
        for (stem, _) in FILES {
            let r = builtin(stem).unwrap();
            assert_eq!(&Rubric::parse(&r.to_text()).unwrap(), r, "{stem}");
        }
        let r = Rubric::parse(
            "---\nname: g\nversion: 3\nmin: 0\nmax: 9\ninputs: query?, response\nthreshold: 6.5\n---\nJudge.",
        )
        .unwrap();
        assert_eq!(Rubric::parse(&r.to_text()).unwrap(), r);
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
        assert!(Rubric::parse("no header").is_err());
        assert!(Rubric::parse("---\nname: g\n---\nx").is_err());
    }
}
