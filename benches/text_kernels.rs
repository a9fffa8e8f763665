//! Day-to-day speed of the text kernels, on the golden texts (real MT output, Bible verses,
//! UI strings and hard edge cases). `cargo bench --bench text_kernels`.
//!
//! These time the kernels alone; whole-query comparisons against the Python references
//! live beside this file as scripts.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use evalsql_udfs::kernels::{chrf, exact_match, f1_score, rouge, sacrebleu};

fn golden_pairs() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/golden/text_metrics.jsonl"
    );
    std::fs::read_to_string(path)
        .expect("golden file")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            (
                v["response"].as_str().unwrap().to_string(),
                v["ground_truth"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let pairs = golden_pairs();
    let mut group = c.benchmark_group("text_kernels");
    group.throughput(Throughput::Elements(pairs.len() as u64));
    let mut run = |name: &str, f: &dyn Fn(&str, &str) -> f64| {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut sum = 0.0;
                for (r, g) in &pairs {
                    sum += f(black_box(r), black_box(g));
                }
                sum
            })
        });
    };
    run("exact_match", &exact_match::exact_match);
    run("f1_score", &f1_score::f1_score);
    run("rouge_1", &|r, g| {
        rouge::rouge(r, g, rouge::RougeType::N(1), false).fmeasure
    });
    run("rouge_l", &|r, g| {
        rouge::rouge(r, g, rouge::RougeType::L, false).fmeasure
    });
    run("rouge_l_sum_stemmed", &|r, g| {
        rouge::rouge(r, g, rouge::RougeType::LSum, true).fmeasure
    });
    run("sacrebleu", &|r, g| sacrebleu::sentence_bleu(r, &[g], true));
    run("chrf", &|r, g| chrf::sentence_chrf(r, &[g]));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
