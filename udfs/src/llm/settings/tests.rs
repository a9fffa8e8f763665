//! The settings' tests: `SET` parsing and access rules, and resolution.

use super::keys::*;
use super::resolve::*;
use super::session::*;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::config::ExtensionOptions;

use crate::llm::request::Endpoint;

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn nothing_configured_names_the_variables() {
    let err = JudgeSettings::resolve("groundedness", None, &env_of(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("groundedness"), "{err}");
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    assert!(err.contains("EVALSQL_JUDGE_MODEL"), "{err}");
    assert!(err.contains("AZURE_OPENAI_ENDPOINT"), "{err}");
}

#[test]
fn openai_from_env_and_session_overrides() {
    let env = env_of(&[
        ("OPENAI_API_KEY", "sk-test-123456789"),
        ("EVALSQL_JUDGE_MODEL", "gpt-4o-mini"),
        ("EVALSQL_JUDGE_CACHE", "off"),
    ]);
    let s = JudgeSettings::resolve("f", None, &env).unwrap();
    assert_eq!(s.model, "gpt-4o-mini");
    assert_eq!(s.limits.max_concurrency, 16);
    assert_eq!(s.limits.seed, Some(42));
    assert_eq!(s.cache, None);
    assert_eq!(
        s.endpoint.url(&s.model),
        "https://api.openai.com/v1/chat/completions"
    );

    let mut opts = JudgeOptions::default();
    opts.set("judge.model", "judge-2").unwrap();
    opts.set("judge.base_url", "http://127.0.0.1:9/v1").unwrap();
    opts.set("judge.max_concurrency", "32").unwrap();
    opts.set("judge.seed", "none").unwrap();
    opts.set("judge.threshold", "4").unwrap();
    opts.set("judge.fluency.threshold", "2").unwrap();
    let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
    assert_eq!(s.model, "judge-2");
    assert_eq!(s.limits.max_concurrency, 32);
    assert_eq!(s.limits.seed, None);
    assert_eq!(
        s.endpoint.url("x"),
        "http://127.0.0.1:9/v1/chat/completions"
    );
    assert_eq!(s.threshold("fluency", 3.0), 2.0);
    assert_eq!(s.threshold("coherence", 3.0), 4.0);

    // Limits shared by N processes: each takes 1/N, rounded down, at least 1.
    opts.set("judge.requests_per_minute", "100").unwrap();
    opts.set("judge.tokens_per_minute", "9").unwrap();
    opts.set("judge.executors", "3").unwrap();
    let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
    assert_eq!(s.limits.max_concurrency, 10);
    assert_eq!(s.limits.requests_per_minute, Some(33));
    assert_eq!(s.limits.tokens_per_minute, Some(3));
    opts.set("judge.executors", "64").unwrap();
    let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
    assert_eq!(s.limits.max_concurrency, 1);
    assert!(opts.set("judge.executors", "0").is_err());
}

#[test]
fn azure_from_env() {
    let env = env_of(&[
        ("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com/"),
        ("AZURE_OPENAI_API_KEY", "0123456789abcdef0123456789abcdef"),
        ("AZURE_OPENAI_DEPLOYMENT", "gpt4o-judge"),
    ]);
    let s = JudgeSettings::resolve("f", None, &env).unwrap();
    assert_eq!(s.model, "gpt4o-judge");
    assert!(
        s.endpoint
            .url(&s.model)
            .starts_with("https://res.openai.azure.com/openai/deployments/gpt4o-judge/")
    );
    // A session base_url switches to an OpenAI-compatible server.
    let mut opts = JudgeOptions::default();
    opts.set("judge.base_url", "http://localhost:1/v1").unwrap();
    opts.set("judge.model", "m").unwrap();
    let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
    assert!(matches!(s.endpoint, Endpoint::OpenAi { .. }));
}

#[test]
fn clients_cannot_set_operator_keys_and_only_lower_limits() {
    let env = env_of(&[
        ("OPENAI_API_KEY", "sk-test-1"),
        ("EVALSQL_JUDGE_MODEL", "m"),
    ]);
    let mut opts = JudgeOptions::default();
    // The operator (CLI, serve --init) sets anything.
    opts.set("judge.max_concurrency", "8").unwrap();
    opts.set("judge.base_url", "http://127.0.0.1:9/v1").unwrap();
    opts.restrict(Restriction::Client);
    for key in [
        "judge.base_url",
        "JUDGE.AZURE_ENDPOINT",
        "judge.cache",
        "target.cache",
        "target.base_url",
        "target.allowed_urls",
        "judge.requests_per_minute",
        "target.tokens_per_minute",
        "judge.executors",
        "judge.max_response_bytes",
    ] {
        let err = opts
            .set(key, "http://attacker.example/v1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not allowed"), "{key}: {err}");
        assert!(operator_only(&format!("evalsql.{key}")), "{key}");
    }
    assert!(!operator_only("evalsql.judge.model"));
    assert!(!operator_only("evalsql.judge.fluency.threshold"));
    assert!(!operator_only("evalsql.judge.max_concurrency"));
    // Limits: only lower, and max_concurrency then binds this session alone.
    let err = opts
        .set("judge.max_concurrency", "9")
        .unwrap_err()
        .to_string();
    assert!(err.contains("only lower") && err.contains('8'), "{err}");
    assert!(opts.set("judge.max_retries", "7").is_err());
    assert!(opts.set("judge.deadline", "601").is_err());
    opts.set("judge.max_concurrency", "2").unwrap();
    opts.set("judge.max_retries", "1").unwrap();
    opts.set("judge.deadline", "2.5").unwrap();
    opts.set("judge.model", "other").unwrap();
    let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
    assert_eq!(
        s.limits.max_concurrency, 8,
        "the process-wide ceiling is the operator's"
    );
    assert_eq!(
        s.limits.session_slots.as_ref().unwrap().available_permits(),
        2
    );
    assert_eq!(s.limits.retry.max_retries, 1);
    assert_eq!(s.limits.deadline, Duration::from_millis(2500));
    assert_eq!(s.model, "other");
    assert_eq!(
        s.endpoint.url("m"),
        "http://127.0.0.1:9/v1/chat/completions"
    );
    // The same ceiling for every query of the session (clones share it).
    let again = JudgeSettings::resolve("f", Some(&opts.clone()), &env).unwrap();
    assert!(Arc::ptr_eq(
        s.limits.session_slots.as_ref().unwrap(),
        again.limits.session_slots.as_ref().unwrap()
    ));
    let shown = opts
        .entries()
        .into_iter()
        .find(|e| e.key == "evalsql.judge.max_concurrency")
        .unwrap();
    assert_eq!(shown.value.as_deref(), Some("2"));
}

#[test]
fn restricted_sessions_switch_only_among_the_allowed_models() {
    // The operator sets any model; a cluster job only an allowed one.
    let mut opts = JudgeOptions::remote();
    opts.allow_models(Arc::new(vec!["small".into()]));
    opts.set_as_operator("judge.model", "operator-model")
        .unwrap();
    opts.set("judge.model", "small").unwrap();
    for key in [
        "judge.model",
        "JUDGE.AZURE_DEPLOYMENT",
        "judge.cascade",
        "target.model",
    ] {
        let err = opts.set(key, "expensive").unwrap_err().to_string();
        assert!(err.contains("not among the models"), "{key}: {err}");
    }
    assert_eq!(
        opts.refused(),
        [
            "evalsql.judge.model",
            "evalsql.judge.azure_deployment",
            "evalsql.judge.cascade",
            "evalsql.target.model"
        ]
    );
    assert_eq!(
        Read::new(Some(&opts), "judge")
            .text(&JUDGE_MODEL)
            .as_deref(),
        Some("small")
    );
    // Clearing a model is not choosing one.
    opts.set("target.model", "").unwrap();
    // Without a list (serve checks its clients' SET itself), any model.
    let mut opts = JudgeOptions::remote();
    opts.set("judge.model", "expensive").unwrap();
    assert!(opts.refused().is_empty());
}

#[test]
fn a_client_may_only_make_a_cascade_guarantee_stricter() {
    let mut opts = JudgeOptions::default();
    opts.set("judge.cascade_agreement", "0.92").unwrap();
    opts.restrict(Restriction::Client);
    let err = opts
        .set("judge.cascade_agreement", "0.8")
        .unwrap_err()
        .to_string();
    assert!(err.contains("may only raise it"), "{err}");
    opts.set("judge.cascade_agreement", "0.95").unwrap();
    let err = opts
        .set("judge.cascade_delta", "0.2")
        .unwrap_err()
        .to_string();
    assert!(err.contains("may only lower it"), "{err}");
    opts.set("judge.cascade_delta", "0.01").unwrap();
    let err = opts
        .set("judge.cascade_tolerance", "1")
        .unwrap_err()
        .to_string();
    assert!(err.contains("may only lower it"), "{err}");
    let judge = Read::new(Some(&opts), "judge");
    assert_eq!(judge.number(&CASCADE_AGREEMENT), Some(0.95));
    assert_eq!(judge.number(&CASCADE_DELTA), Some(0.01));
}

#[test]
fn cluster_jobs_record_refused_keys_and_share_their_ceiling() {
    let env = env_of(&[
        ("OPENAI_API_KEY", "sk-test-1"),
        ("EVALSQL_JUDGE_MODEL", "m"),
    ]);
    let mut opts = JudgeOptions::remote();
    assert!(
        opts.set("judge.base_url", "http://attacker.example/v1")
            .is_err()
    );
    assert!(opts.set("judge.cache", "/tmp/x.sqlite").is_err());
    assert_eq!(
        opts.refused(),
        ["evalsql.judge.base_url", "evalsql.judge.cache"]
    );
    // The scheduler's executor count is taken; a job's own ceiling is a cluster total.
    opts.set("judge.max_concurrency", "4").unwrap();
    opts.set_as_operator("judge.executors", "2").unwrap();
    let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
    assert_eq!(s.limits.max_concurrency, 8);
    assert_eq!(s.limits.session_slots.unwrap().available_permits(), 2);
    assert_eq!(
        s.endpoint.url("m"),
        "https://api.openai.com/v1/chat/completions"
    );
}

#[test]
fn a_target_key_goes_only_where_it_was_configured() {
    let key_of = |pairs: &'static [(&'static str, &'static str)]| {
        let s = TargetSettings::resolve(None, &env_of(pairs));
        let (endpoint, _) = s.model.expect("a model under test");
        match endpoint {
            Endpoint::OpenAi { base_url, api_key } => {
                (base_url, api_key.map(|k| k.expose().to_string()))
            }
            Endpoint::Azure { .. } => unreachable!(),
        }
    };
    // The target's URL with only the judge's key: no key is sent there.
    assert_eq!(
        key_of(&[
            ("EVALSQL_TARGET_BASE_URL", "http://model-under-test/v1"),
            ("OPENAI_API_KEY", "sk-judge"),
            ("EVALSQL_TARGET_MODEL", "m"),
        ]),
        (Some("http://model-under-test/v1".into()), None)
    );
    assert_eq!(
        key_of(&[
            ("EVALSQL_TARGET_BASE_URL", "http://model-under-test/v1"),
            ("EVALSQL_TARGET_API_KEY", "sk-target"),
            ("OPENAI_API_KEY", "sk-judge"),
            ("EVALSQL_TARGET_MODEL", "m"),
        ]),
        (
            Some("http://model-under-test/v1".into()),
            Some("sk-target".into())
        )
    );
    // The judge's own endpoint with the judge's key; OpenAI's API with either.
    assert_eq!(
        key_of(&[
            ("OPENAI_BASE_URL", "http://judge/v1"),
            ("OPENAI_API_KEY", "sk-judge"),
            ("EVALSQL_TARGET_API_KEY", "sk-target"),
            ("EVALSQL_TARGET_MODEL", "m"),
        ]),
        (Some("http://judge/v1".into()), Some("sk-judge".into()))
    );
    assert_eq!(
        key_of(&[
            ("OPENAI_API_KEY", "sk-judge"),
            ("EVALSQL_TARGET_MODEL", "m")
        ]),
        (None, Some("sk-judge".into()))
    );
}

#[test]
fn bad_settings_fail_at_set_time() {
    let mut opts = JudgeOptions::default();
    let err = opts
        .set("judge.max_concurrency", "0")
        .unwrap_err()
        .to_string();
    assert!(err.contains("evalsql.judge.max_concurrency"), "{err}");
    assert!(opts.set("judge.timeout", "-1").is_err());
    assert!(opts.set("judge.nonsense", "1").is_err());
    assert!(opts.set("other", "1").is_err());
    assert!(opts.set("judge.groundedness.threshold", "x").is_err());
    assert!(opts.set("judge.deadline", "0").is_err());
    assert!(opts.set("judge.base_url", "localhost:8000/v1").is_err());
    assert!(opts.set("judge.groundedness.version", "0").is_err());
    opts.set("judge.groundedness.threshold", "4").unwrap();
    assert!(
        opts.entries()
            .iter()
            .any(|e| e.key == "evalsql.judge.groundedness.threshold")
    );
}

/// DataFusion's SET lower-cases names with Unicode rules, so `K` (the Kelvin sign,
/// U+212A) reaches the options as an ASCII `k`: every check must fold the same way.
#[test]
fn setting_names_fold_case_as_datafusion_does() {
    let kelvin = |name: &str| name.replace('k', "\u{212A}");
    assert_eq!(
        kelvin("evalsql.judge.tokens_per_minute").to_lowercase(),
        "evalsql.judge.tokens_per_minute"
    );
    let mut spelled = 0;
    for k in KEYS {
        for namespace in k.namespaces {
            let full = format!("evalsql.{namespace}.{}", k.name);
            let protected = matches!(k.access, Access::Operator | Access::Cluster);
            for name in [
                kelvin(&full),
                kelvin(&full.to_uppercase()),
                full.to_uppercase(),
            ] {
                assert_eq!(operator_only(&name), protected, "{name}");
            }
            if protected && full.contains('k') {
                spelled += 1;
                // A client's SET of the Kelvin spelling is refused, not taken as unknown.
                let mut opts = JudgeOptions::default();
                opts.restrict(Restriction::Client);
                let key = kelvin(&full["evalsql.".len()..]);
                let err = opts.set(&key, "1").unwrap_err().to_string();
                assert!(err.contains("not allowed"), "{key}: {err}");
            }
        }
    }
    assert!(spelled >= 2, "no operator-only key has a k to spell");
    assert!(operator_only("evalsql.judge.to\u{212A}ens_per_minute"));
    assert!(operator_only("EVALSQL.TARGET.TO\u{212A}ENS_PER_MINUTE"));
    // The operator's SET of that spelling lands on the key.
    let mut opts = JudgeOptions::default();
    opts.set("judge.to\u{212A}ens_per_minute", "5").unwrap();
    assert!(
        opts.entries()
            .iter()
            .any(|e| e.key == "evalsql.judge.tokens_per_minute" && e.value.as_deref() == Some("5"))
    );
}

/// What SHOW and information_schema.df_settings print (the entries) hides a URL's
/// password and keys; the value the judge calls with keeps them.
#[test]
fn settings_views_mask_url_credentials() {
    let mut opts = JudgeOptions::default();
    let url = "https://user:hunter2@proxy.test/v1?api-key=k3y&Token=t0k&x=1";
    opts.set("judge.base_url", url).unwrap();
    opts.set(
        "target.allowed_urls",
        "http://app/run?sig=s1g, http://u:pw@app/x",
    )
    .unwrap();
    let entries = opts.entries();
    let shown = |key: &str| {
        entries
            .iter()
            .find(|e| e.key == key)
            .and_then(|e| e.value.clone())
            .unwrap()
    };
    assert_eq!(
        shown("evalsql.judge.base_url"),
        "https://user:***@proxy.test/v1?api-key=***&Token=***&x=1"
    );
    assert_eq!(
        shown("evalsql.target.allowed_urls"),
        "http://app/run?sig=***, http://u:***@app/x"
    );
    for e in &entries {
        let v = e.value.clone().unwrap_or_default();
        for secret in ["hunter2", "k3y", "t0k", "s1g", "pw@"] {
            assert!(!v.contains(secret), "{}: {v}", e.key);
        }
    }
    let env = env_of(&[("EVALSQL_JUDGE_MODEL", "m"), ("EVALSQL_JUDGE_CACHE", "off")]);
    let s = JudgeSettings::resolve("f", Some(&opts), &env).unwrap();
    let called = s.endpoint.url("m");
    assert!(called.starts_with(url), "{called}");
    // Error messages that quote a URL setting mask it too.
    let err = opts
        .set("judge.base_url", "ftp://user:hunter2@h/?key=k3y")
        .unwrap_err()
        .to_string();
    assert!(!err.contains("hunter2") && !err.contains("k3y"), "{err}");
    let err = JudgeSettings::resolve(
        "f",
        None,
        &env_of(&[(
            "AZURE_OPENAI_ENDPOINT",
            "https://u:hunter2@res.example/?sig=k3y",
        )]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("https://u:***@res.example/?sig=***"), "{err}");
}

#[test]
fn every_default_in_the_key_table_is_a_value_of_its_key() {
    // A statement reads a key's default from the table; one that did not parse would read as
    // unset.
    for k in KEYS {
        if !k.default.is_empty() {
            assert!(
                k.default_value().is_some(),
                "{}: default {:?} is not {}",
                k.name,
                k.default,
                k.kind.expected()
            );
        }
    }
}
