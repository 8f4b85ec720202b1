//! `Model::imatrix` collects what llama-imatrix collects: the same matrices, the same row
//! counts, sums of squares within 1% (the two engines' activations differ by rounding, as
//! their logits do). `fixtures/perplexity/smollm2_imatrix_c64.json` summarizes llama-imatrix's
//! file for SmolLM2 over the first 4 windows of 64 tokens of the fixture text (its command is
//! in the file; `-b 64`, one window per batch: llama-imatrix's default of 4 windows per batch
//! skips a few rows). The written file is read back as `kestrel quantize --imatrix` reads it,
//! and a run continued from it as `llama-imatrix --in-file` continues one.

use std::path::Path;

use kestrel::gguf::quantize::{Imatrix, ImatrixSums};
use kestrel::{ImatrixOptions, LoadOptions, Model};
use kestrel_gguf::models::{test_model, SMOLLM2_135M_Q4_1};
use serde_json::Value;

#[test]
fn imatrix_matches_llama_imatrix() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/perplexity");
    let text = std::fs::read_to_string(dir.join("around_the_world_ch1-6.txt")).unwrap();
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("smollm2_imatrix_c64.json")).unwrap(),
    )
    .unwrap();
    let mut model = Model::load_file(
        path,
        LoadOptions {
            threads: 2,
            ctx: 64,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let mut opts = ImatrixOptions::default();
    opts.n_ctx = 64;
    opts.chunks = Some(4);
    let mut seen = 0;
    let mut run = model.imatrix(&text, &opts, |i, _| seen = i).unwrap();
    assert_eq!(seen, 4);
    assert_eq!(
        u64::from(run.sums.chunk_count),
        golden["chunk_count"].as_u64().unwrap()
    );
    assert_eq!(
        u64::from(run.sums.chunk_size),
        golden["chunk_size"].as_u64().unwrap()
    );
    let want = golden["matrices"].as_object().unwrap();
    assert_eq!(run.sums.entries.len(), want.len(), "matrices collected");
    let mut worst = (0.0f64, String::new());
    for (name, g) in want {
        let e = run
            .sums
            .entries
            .get(name)
            .unwrap_or_else(|| panic!("{name} not collected"));
        let counts: Vec<f64> = g["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_f64().unwrap())
            .collect();
        let got: Vec<f64> = e.counts.iter().map(|&c| f64::from(c)).collect();
        assert_eq!(got, counts, "{name} counts");
        assert_eq!(
            e.in_sum2.len() as u64,
            g["width"].as_u64().unwrap() * counts.len() as u64
        );
        let norm = e
            .in_sum2
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        let want_norm = g["norm"].as_f64().unwrap();
        let rel = (norm - want_norm).abs() / want_norm;
        if rel > worst.0 {
            worst = (rel, name.clone());
        }
        for (i, w) in g["head"].as_array().unwrap().iter().enumerate() {
            let (a, b) = (f64::from(e.in_sum2[i]), w.as_f64().unwrap());
            assert!(
                (a - b).abs() <= 0.05 * b.abs() + 1e-3 * want_norm,
                "{name}[{i}]: {a} vs llama-imatrix {b}"
            );
        }
    }
    assert!(
        worst.0 < 0.01,
        "{}: norm differs by {:.3}%",
        worst.1,
        100.0 * worst.0
    );

    // Written and read back as `quantize --imatrix` reads it.
    let out = std::env::temp_dir().join(format!("kestrel-imatrix-{}.gguf", std::process::id()));
    run.sums.datasets = vec!["around_the_world_ch1-6.txt".into()];
    run.sums.write(&out).unwrap();
    let im = Imatrix::load(&out).unwrap();
    let prior = ImatrixSums::load(&out).unwrap();
    std::fs::remove_file(&out).ok();
    assert_eq!(im.chunks, 4);
    assert_eq!(im.datasets, vec!["around_the_world_ch1-6.txt".to_string()]);
    let q = &im.entries["blk.0.attn_q.weight"];
    let e = &run.sums.entries["blk.0.attn_q.weight"];
    assert_eq!(q[3], e.in_sum2[3] / e.counts[0]);

    // Continued from the file (`--in-file`): the same windows again double every count and
    // (up to f32 rounding of the running sums) every sum; chunks counted from the rows.
    let again = model.imatrix_onto(prior, &text, &opts, |_, _| {}).unwrap();
    assert_eq!(again.sums.chunk_count, 8);
    assert_eq!(again.sums.datasets, run.sums.datasets);
    for (name, e) in &run.sums.entries {
        let c = &again.sums.entries[name];
        let twice: Vec<f32> = e.counts.iter().map(|n| 2.0 * n).collect();
        assert_eq!(c.counts, twice, "{name}");
        for (a, b) in c.in_sum2.iter().zip(&e.in_sum2) {
            assert!(
                (a - 2.0 * b).abs() <= 1e-5 * b.abs() + 1e-6,
                "{name}: {a} vs 2 × {b}"
            );
        }
        assert_eq!(c.in_sum.len(), e.in_sum.len());
    }

    // Too little text for two windows is refused, as llama-imatrix refuses it.
    let err = model
        .imatrix("just a few words", &opts, |_, _| {})
        .unwrap_err();
    assert!(err.to_string().contains("two windows"), "{err}");
}
