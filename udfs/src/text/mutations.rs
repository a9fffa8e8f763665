//! Test inputs for comparing a fast kernel with the code it replaced: the golden texts
//! (both sides of every pair) and copies of them with pieces inserted at random places.

/// Every response and ground truth of `tests/golden/text_metrics.jsonl`, in file order.
pub fn golden_texts() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/golden/text_metrics.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("golden file");
    let mut texts = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let row: serde_json::Value = serde_json::from_str(line).expect("JSON");
        for key in ["response", "ground_truth"] {
            texts.push(row[key].as_str().expect("text").to_string());
        }
    }
    texts
}

/// Copies of texts with pieces inserted at random character boundaries, from a fixed
/// seed (xorshift), so a failure reproduces.
pub struct Mutator {
    state: u64,
}

impl Mutator {
    pub fn new(seed: u64) -> Self {
        Mutator { state: seed | 1 }
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state % n as u64) as usize
    }

    /// `text` with `count` of `pieces` inserted at random character boundaries.
    pub fn mutate(&mut self, text: &str, pieces: &[&str], count: usize) -> String {
        let mut m = text.to_string();
        for _ in 0..count {
            let mut at = self.below(m.len() + 1);
            while !m.is_char_boundary(at) {
                at -= 1;
            }
            m.insert_str(at, pieces[self.below(pieces.len())]);
        }
        m
    }
}
