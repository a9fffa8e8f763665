//! Rubrics: the judge's instructions for one metric, as files under `udfs/rubrics/`
//! (format in `udfs/rubrics/README.md`), compiled into the binary.
//!
//! A rubric's `version` is part of every cache key made with it, so rewording a rubric and
//! bumping its version never serves judgements made under the old wording.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use datafusion::common::{Result, internal_err};

/// One input a rubric reads, e.g. `context` (or `query?` when optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RubricInput {
    pub name: String,
    pub optional: bool,
}

/// A parsed rubric file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rubric {
    pub name: String,
    pub version: u32,
    pub min: i64,
    pub max: i64,
    pub inputs: Vec<RubricInput>,
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
        let rubric = Rubric {
            name: get("name")?,
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

    /// How many inputs a call must pass: the required ones, or all of them.
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
